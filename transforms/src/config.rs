//! The transforms as written in TOML: `[[pipelines.<p>.transforms]]` (every sink's, first) and
//! `[[pipelines.<p>.sinks.<s>.transforms]]`, each with its `kind`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One transform, by its `kind`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TransformConfig {
    /// Keeps the events a CEL expression holds for, drops the others.
    Filter(FilterConfig),
    /// Keeps the rows a CEL expression holds for, as a store of current rows needs: an
    /// update of a row that does not match becomes a delete of it.
    FilterRows(FilterRowsConfig),
    /// Removes columns from rows and schemas (never a key column).
    DropColumns(DropColumnsConfig),
    /// Keeps only these columns (and the key) of the tables named.
    KeepColumns(KeepColumnsConfig),
    /// Renames a table.
    RenameTable(RenameTableConfig),
    /// Renames columns.
    RenameColumns(RenameColumnsConfig),
    /// Replaces columns' values by a fixed text or their keyed hash.
    Mask(MaskConfig),
    /// Cuts long values short.
    Truncate(TruncateConfig),
    /// Sets a column (a new one, or one the table has) to a CEL expression's value.
    Set(SetConfig),
}

impl TransformConfig {
    /// Its `kind`, as written.
    pub fn kind(&self) -> &'static str {
        match self {
            TransformConfig::Filter(_) => "filter",
            TransformConfig::FilterRows(_) => "filter_rows",
            TransformConfig::DropColumns(_) => "drop_columns",
            TransformConfig::KeepColumns(_) => "keep_columns",
            TransformConfig::RenameTable(_) => "rename_table",
            TransformConfig::RenameColumns(_) => "rename_columns",
            TransformConfig::Mask(_) => "mask",
            TransformConfig::Truncate(_) => "truncate",
            TransformConfig::Set(_) => "set",
        }
    }
}

/// `kind = "filter"`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FilterConfig {
    /// A CEL expression over the event that gives a boolean: `op` ("c", "u", "d", "r", "t"),
    /// `before`, `after` and `key` (maps of column to value, or null), `table`
    /// ("schema.table") and `source` (`connector`, `name`, `db`, `schema`, `table`, `ts_ms`,
    /// `snapshot`, `tx_id`). Events it is false for are dropped.
    pub when: String,
}

/// `kind = "filter_rows"`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FilterRowsConfig {
    /// A CEL expression over one row (`row`, a map of column to value; `table`; `source`)
    /// that gives a boolean. Inserts of rows it is false for are dropped; an update whose new
    /// row it is false for becomes a delete of the row; deletes pass.
    pub when: String,
    /// The tables it applies to ("schema.table", `*` allowed); empty: every table. Events of
    /// other tables pass.
    #[serde(default)]
    pub tables: Vec<String>,
}

/// `kind = "drop_columns"`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DropColumnsConfig {
    /// "column" (in every table) or "schema.table.column" (`*` allowed in the table part).
    pub columns: Vec<String>,
}

/// `kind = "keep_columns"`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KeepColumnsConfig {
    /// The tables it applies to ("schema.table", `*` allowed); empty: every table.
    #[serde(default)]
    pub tables: Vec<String>,
    /// The columns kept, besides the key's.
    pub columns: Vec<String>,
}

/// `kind = "rename_table"`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RenameTableConfig {
    /// The table as the source names it: "schema.table" (MySQL: "database.table").
    pub from: String,
    /// The name the sink sees: "schema.table".
    pub to: String,
}

/// `kind = "rename_columns"`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RenameColumnsConfig {
    /// The tables it applies to ("schema.table", `*` allowed); empty: every table.
    #[serde(default)]
    pub tables: Vec<String>,
    /// Old name = new name.
    pub columns: BTreeMap<String, String>,
}

/// `kind = "mask"`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MaskConfig {
    /// "column" (in every table) or "schema.table.column" (`*` allowed in the table part);
    /// key columns included (the key then holds the masked value too).
    pub columns: Vec<String>,
    /// `fixed` (every non-null value becomes `value`) or `hmac_sha256` (the lowercase hex of
    /// HMAC-SHA-256 of the value's text, keyed: equal values mask equal, so joins on them
    /// still work).
    #[serde(default)]
    pub with: MaskWith,
    /// The text of `with = "fixed"`; `"****"` unless set.
    pub value: Option<String>,
    /// A file holding the key of `with = "hmac_sha256"` (its bytes, a trailing newline
    /// dropped).
    pub key_file: Option<PathBuf>,
    /// An environment variable holding the key of `with = "hmac_sha256"`.
    pub key_env: Option<String>,
}

/// How `mask` replaces a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MaskWith {
    /// A fixed text.
    #[default]
    Fixed,
    /// The hex of HMAC-SHA-256 of the value, keyed.
    HmacSha256,
}

/// `kind = "truncate"`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TruncateConfig {
    /// "column" (in every table) or "schema.table.column" (`*` allowed in the table part).
    pub columns: Vec<String>,
    /// Most characters of a text (bytes of a binary value) kept.
    pub length: usize,
}

/// `kind = "set"`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SetConfig {
    /// The tables it applies to ("schema.table", `*` allowed); empty: every table.
    #[serde(default)]
    pub tables: Vec<String>,
    /// The column set: added to each row (after the others) where the table has none of that
    /// name, replaced where it has.
    pub column: String,
    /// A CEL expression over the row (`row`, `table`, `source`) giving the column's value, of
    /// the column's `type` (null: NULL).
    pub value: String,
    /// The column's type: `bigint`, `double`, `text` or `boolean`.
    #[serde(rename = "type")]
    pub column_type: SetType,
}

/// The type of a column `set` makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SetType {
    /// A 64-bit integer.
    Bigint,
    /// A double.
    Double,
    /// Text.
    Text,
    /// A boolean.
    Boolean,
}
