//! Transforms: the stages a sink's events pass after its routing — filters in CEL (on the
//! event, or on the row state a store keeps), column drops and keeps, renames of tables and
//! columns, masks (a fixed text or a keyed HMAC-SHA-256), truncation and columns computed in
//! CEL. The log keeps what the source saw; transforms are views of it, applied again on every
//! replay, and a dropped event still moves the sink's cursor. An event a transform fails on goes to the dead-letter
//! file with the reason, or stops the sink, as its `on_error` says.

mod columns;
mod config;
mod expression;
mod filter;
mod native;
mod set;
mod table;

use std::sync::Arc;

use siphon_core::name::TablePattern;
use siphon_core::sink::routing::ColumnFilter;
use siphon_core::sink::stage::Stage;

pub use columns::{Change, ColumnChange, Masker};
pub use config::{
    DropColumnsConfig, FilterConfig, FilterRowsConfig, KeepColumnsConfig, MaskConfig, MaskWith,
    RenameColumnsConfig, RenameTableConfig, SetConfig, SetType, TransformConfig, TruncateConfig,
};
pub use expression::Expression;
pub use filter::{Filter, FilterRows};
pub use set::SetColumn;
pub use table::RenameTable;

/// Whether a transform limited to `tables` (none: every table) applies to `event`.
fn applies_to(tables: &[TablePattern], event: &siphon_core::Event) -> bool {
    let s = &event.source;
    tables.is_empty()
        || tables
            .iter()
            .any(|t| t.matches_parts(s.namespace(), &s.table))
}

/// A transform that cannot be built: which one, which of its settings, and why.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {message}")]
pub struct TransformError {
    /// The setting, as `<at>[index].field` (`transforms[1].when`).
    pub key: String,
    /// What is wrong, and what is allowed.
    pub message: String,
}

/// The stages of `transforms`, in order; `at` names them in errors (`transforms`, or the
/// full key of the list).
pub fn build(
    transforms: &[TransformConfig],
    at: &str,
) -> Result<Vec<Arc<dyn Stage>>, TransformError> {
    transforms
        .iter()
        .enumerate()
        .map(|(i, t)| stage(t, &format!("{at}[{i}]")))
        .collect()
}

fn stage(t: &TransformConfig, at: &str) -> Result<Arc<dyn Stage>, TransformError> {
    let error = |field: &str, message: String| TransformError {
        key: format!("{at}.{field}"),
        message,
    };
    let label = format!("{at} ({})", t.kind());
    let tables = |tables: &[String]| {
        tables
            .iter()
            .map(|p| TablePattern::parse(p))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| error("tables", e))
    };
    Ok(match t {
        TransformConfig::Filter(c) => {
            let when =
                Expression::compile(&c.when, Filter::VARIABLES).map_err(|e| error("when", e))?;
            Arc::new(Filter::new(label, when))
        }
        TransformConfig::FilterRows(c) => {
            let when = Expression::compile(&c.when, FilterRows::VARIABLES)
                .map_err(|e| error("when", e))?;
            Arc::new(FilterRows::new(label, when, tables(&c.tables)?))
        }
        TransformConfig::DropColumns(c) => {
            Arc::new(ColumnFilter::excluding(&c.columns).map_err(|e| error("columns", e))?)
        }
        TransformConfig::KeepColumns(c) => {
            tables(&c.tables)?;
            Arc::new(ColumnFilter::keeping(&c.tables, &c.columns).map_err(|e| error("columns", e))?)
        }
        TransformConfig::RenameTable(c) => {
            Arc::new(RenameTable::new(&c.from, &c.to).map_err(|e| {
                let field = if e.starts_with("to:") { "to" } else { "from" };
                error(field, e)
            })?)
        }
        TransformConfig::RenameColumns(c) => {
            tables(&c.tables)?;
            Arc::new(ColumnChange::rename(&c.tables, &c.columns).map_err(|e| error("columns", e))?)
        }
        TransformConfig::Mask(c) => {
            let masker = match c.with {
                MaskWith::Fixed => Masker::Fixed(c.value.clone().unwrap_or_else(|| "****".into())),
                MaskWith::HmacSha256 => masker(c).map_err(|(field, e)| error(field, e))?,
            };
            Arc::new(
                ColumnChange::new(&c.columns, Change::Mask(masker))
                    .map_err(|e| error("columns", e))?,
            )
        }
        TransformConfig::Truncate(c) => Arc::new(
            ColumnChange::new(&c.columns, Change::Truncate(c.length))
                .map_err(|e| error("columns", e))?,
        ),
        TransformConfig::Set(c) => {
            let value = Expression::compile(&c.value, SetColumn::VARIABLES)
                .map_err(|e| error("value", e))?;
            Arc::new(SetColumn::new(
                label,
                tables(&c.tables)?,
                &c.column,
                value,
                c.column_type,
            ))
        }
    })
}

/// The keyed masker of `with = "hmac_sha256"`, its key read now (so that `siphon check` finds
/// a missing one); the error names the setting.
fn masker(c: &MaskConfig) -> Result<Masker, (&'static str, String)> {
    let key = match (&c.key_file, &c.key_env) {
        (Some(path), None) => {
            let mut key = std::fs::read(path)
                .map_err(|e| ("key_file", format!("reading {}: {e}", path.display())))?;
            if key.last() == Some(&b'\n') {
                key.pop();
            }
            (key, "key_file")
        }
        (None, Some(var)) => (
            std::env::var(var)
                .map_err(|_| {
                    (
                        "key_env",
                        format!("the environment variable {var} is not set"),
                    )
                })?
                .into_bytes(),
            "key_env",
        ),
        _ => {
            return Err((
                "with",
                "hmac_sha256 needs its key from exactly one of key_file and key_env".into(),
            ));
        }
    };
    Masker::hmac(&key.0).ok_or((key.1, "the key is empty".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transforms(json: &str) -> Result<Vec<TransformConfig>, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn each_kind_reads_and_builds() {
        let t = transforms(
            r#"[{"kind": "filter", "when": "op != 'd'"},
                {"kind": "filter_rows", "when": "row.total > 10", "tables": ["shop.*"]},
                {"kind": "drop_columns", "columns": ["secret"]},
                {"kind": "keep_columns", "tables": ["shop.orders"], "columns": ["total"]},
                {"kind": "rename_table", "from": "shop.orders", "to": "sales.orders"},
                {"kind": "rename_columns", "columns": {"total": "amount"}},
                {"kind": "mask", "columns": ["shop.customers.email"]},
                {"kind": "truncate", "columns": ["note"], "length": 100},
                {"kind": "set", "column": "cents", "value": "int(row.total * 100.0)", "type": "bigint"}]"#,
        )
        .unwrap();
        assert_eq!(build(&t, "transforms").unwrap().len(), 9);
    }

    #[test]
    fn bad_transforms_name_the_setting() {
        let e = transforms(r#"[{"kind": "fliter", "when": "true"}]"#).unwrap_err();
        assert!(e.contains("filter_rows"), "{e}");
        let e = transforms(r#"[{"kind": "filter", "when": "true", "tables": []}]"#).unwrap_err();
        assert!(e.contains("tables"), "{e}");
        let t = transforms(r#"[{"kind": "truncate", "columns": ["n"], "length": 1}, {"kind": "filter", "when": "after.total >"}]"#).unwrap();
        let e = build(&t, "pipelines.p.sinks.s.transforms").unwrap_err();
        assert_eq!(e.key, "pipelines.p.sinks.s.transforms[1].when");
        assert!(e.message.contains("<input>:1:"), "{e}");
        let t = transforms(r#"[{"kind": "mask", "columns": ["email"], "with": "hmac_sha256"}]"#)
            .unwrap();
        let e = build(&t, "transforms").unwrap_err();
        assert!(
            e.key.ends_with(".with") && e.message.contains("key_env"),
            "{e}"
        );
        let t = transforms(
            r#"[{"kind": "mask", "columns": ["email"], "with": "hmac_sha256", "key_env": "SIPHON_TEST_NO_SUCH_KEY"}]"#,
        )
        .unwrap();
        let e = build(&t, "transforms").unwrap_err();
        assert!(
            e.key.ends_with(".key_env") && e.message.contains("SIPHON_TEST_NO_SUCH_KEY"),
            "{e}"
        );
    }
}
