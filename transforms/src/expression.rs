//! CEL expressions over events: compiled once, with the names they may use checked then, and
//! evaluated per event on only the variables they read.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use cel::common::ast::{EntryExpr, Expr};
use cel::common::types::{
    CelBool, CelBytes, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString,
    CelTimestamp, CelUInt,
};
use cel::{Context, Env, IdedExpr, Program};
use siphon_core::event::{Event, Row, Value};

use crate::native::{Facts, Native};

/// The variables that hold a row, of those any expression may read.
const ROW_VARIABLES: &[&str] = &["row", "before", "after", "key"];

/// A compiled boolean expression.
pub struct Expression {
    /// As written.
    source: String,
    program: Program,
    env: Arc<Env>,
    /// The variables it reads, of those offered.
    reads: Vec<&'static str>,
    /// Per variable holding a row, the columns it reads, where it reads only `row.column`
    /// fields (then the rest of the row need not be built); absent: every column.
    columns: HashMap<&'static str, Vec<String>>,
    /// Its native form, where it is comparisons only.
    native: Option<Native>,
}

impl Expression {
    /// Compiles `source`, which may read the variables `offered`; the error gives the line and
    /// column of what is wrong.
    pub fn compile(source: &str, offered: &[&'static str]) -> Result<Expression, String> {
        let env = Arc::new(Env::stdlib());
        let program = env.compile(source).map_err(|e| e.to_string())?;
        let references = program.references();
        let mut reads = Vec::new();
        for variable in references.variables() {
            match offered.iter().find(|o| **o == variable) {
                Some(o) => reads.push(*o),
                None => {
                    return Err(format!(
                        "{}: unknown name `{variable}`; the expression may read {}",
                        position(source, variable),
                        offered.join(", ")
                    ));
                }
            }
        }
        let columns = reads
            .iter()
            .filter_map(|&variable| {
                let mut fields = BTreeSet::new();
                only_fields(program.expression(), variable, &mut fields)
                    .then(|| (variable, fields.into_iter().collect()))
            })
            .collect();
        let native = Native::compile(program.expression(), ROW_VARIABLES);
        Ok(Expression {
            source: source.to_owned(),
            program,
            env,
            reads,
            columns,
            native,
        })
    }

    /// Its native form, where it is comparisons only.
    pub fn native(&self) -> Option<&Native> {
        self.native.as_ref()
    }

    /// Whether it holds: natively where `facts` decide it, else by the interpreter on the
    /// variables `bind` gives.
    pub fn holds_for<'a>(
        &self,
        facts: &Facts<'_>,
        bind: impl Fn(&str) -> Val<'a>,
    ) -> Result<bool, String> {
        match self.native.as_ref().and_then(|n| n.holds(facts)) {
            Some(answer) => Ok(answer),
            None => self.holds(bind),
        }
    }

    /// The columns of `variable` (a row) it reads, where it reads only named ones; `None`:
    /// it may read any.
    pub fn columns(&self, variable: &str) -> Option<&[String]> {
        self.columns.get(variable).map(Vec::as_slice)
    }

    /// Whether it reads `variable`.
    pub fn reads(&self, variable: &str) -> bool {
        self.reads.contains(&variable)
    }

    /// Its value for these variables (`bind` gives each one it reads, borrowing from the
    /// event).
    pub fn value<'a>(&self, bind: impl Fn(&str) -> Val<'a>) -> Result<cel::Value, String> {
        let mut context = Context::with_env(self.env.clone());
        for variable in &self.reads {
            context.add_variable_as_val(*variable, bind(variable));
        }
        self.program.execute(&context).map_err(|e| e.to_string())
    }

    /// Its value, which must be a boolean.
    pub fn holds<'a>(&self, bind: impl Fn(&str) -> Val<'a>) -> Result<bool, String> {
        match self.value(bind)? {
            cel::Value::Bool(b) => Ok(b),
            other => Err(format!("gave {other:?}, not a boolean")),
        }
    }
}

/// Whether `expr` uses `variable` only as `variable.field` (each field then added to
/// `fields`): no use of the whole value (`size(row)`, `row[name]`), no comprehension that
/// could shadow it.
fn only_fields(expr: &IdedExpr, variable: &str, fields: &mut BTreeSet<String>) -> bool {
    match &expr.expr {
        Expr::Select(select) => match &select.operand.expr {
            Expr::Ident(name) if name == variable => {
                fields.insert(select.field.clone());
                true
            }
            _ => only_fields(&select.operand, variable, fields),
        },
        Expr::Ident(name) => name != variable,
        Expr::Call(call) => all_only(
            call.target.iter().map(|t| &**t).chain(&call.args),
            variable,
            fields,
        ),
        Expr::List(list) => all_only(&list.elements, variable, fields),
        Expr::Map(map) => all_only(map.entries.iter().map(entry), variable, fields),
        Expr::Struct(st) => all_only(st.entries.iter().map(entry), variable, fields),
        Expr::Comprehension(_) => false,
        Expr::Literal(_) | Expr::Unspecified => true,
    }
}

/// [`only_fields`] of each of `exprs`.
fn all_only<'e>(
    exprs: impl IntoIterator<Item = &'e IdedExpr>,
    variable: &str,
    fields: &mut BTreeSet<String>,
) -> bool {
    exprs.into_iter().all(|e| only_fields(e, variable, fields))
}

fn entry(e: &cel::common::ast::IdedEntryExpr) -> &IdedExpr {
    match &e.expr {
        EntryExpr::StructField(field) => &field.value,
        EntryExpr::MapEntry(entry) => &entry.value,
    }
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Expression").field(&self.source).finish()
    }
}

/// `line:column` of `name`'s first use in `source` (1-based), as CEL's own errors give it.
fn position(source: &str, name: &str) -> String {
    let at = source
        .match_indices(name)
        .map(|(i, _)| i)
        .find(|&i| {
            // Not part of a longer name, nor a field (`x.name`).
            let before = source[..i].chars().next_back();
            let after = source[i + name.len()..].chars().next();
            !before.is_some_and(|c| is_ident(c) || c == '.') && !after.is_some_and(is_ident)
        })
        .unwrap_or(0);
    let line = source[..at].matches('\n').count() + 1;
    let column = at - source[..at].rfind('\n').map_or(0, |n| n + 1) + 1;
    format!("ERROR: <input>:{line}:{column}")
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// A value as the interpreter holds it, built straight from the event's values (borrowing
/// its text) rather than through `cel::Value`, whose conversion copies every map again.
pub type Val<'a> = Box<dyn cel::common::value::Val + 'a>;

/// An event's variables: `op`, `before`, `after`, `key`, `table`, `source`; of a row, only
/// the columns `only` where given.
pub fn event_variable<'a>(event: &'a Event, variable: &str, only: Option<&[String]>) -> Val<'a> {
    let image = |image: &'a Option<Row>| image.as_ref().map_or_else(null, |r| row(r, only));
    match variable {
        "op" => Box::new(CelString::from(event.op.code())),
        "before" => image(&event.before),
        "after" => image(&event.after),
        "key" => image(&event.key),
        _ => source_variable(event, variable),
    }
}

/// The variables every expression may read: `table` and `source`.
pub fn source_variable<'a>(event: &'a Event, variable: &str) -> Val<'a> {
    let s = &event.source;
    let text = |t: &'a str| -> Val<'a> { Box::new(CelString::from(t)) };
    match variable {
        "table" => Box::new(CelString::from(s.table_name().to_string())),
        "source" => {
            let fields: [(&str, Val<'a>); 8] = [
                ("connector", text(&s.connector)),
                ("name", text(&s.name)),
                ("db", text(&s.db)),
                ("schema", s.schema.as_deref().map_or_else(null, text)),
                ("table", text(&s.table)),
                ("ts_ms", Box::new(CelInt::from(s.ts_ms))),
                ("snapshot", text(s.snapshot.as_str())),
                (
                    "tx_id",
                    s.tx_id.map_or_else(null, |t| Box::new(CelUInt::from(t))),
                ),
            ];
            let map: HashMap<CelMapKey<'a>, Val<'a>> = fields
                .into_iter()
                .map(|(k, v)| (CelMapKey::from(k), v))
                .collect();
            Box::new(CelMap::from(map))
        }
        _ => null(),
    }
}

fn null<'a>() -> Val<'a> {
    Box::new(CelNull)
}

/// A row as a map of column to value, of the columns `only` where given (those an
/// expression reads); a column PostgreSQL did not send (an unchanged TOAST value) is absent,
/// so that `has(row.c)` is false for it.
pub fn row<'a>(row: &'a Row, only: Option<&[String]>) -> Val<'a> {
    let map: HashMap<CelMapKey<'a>, Val<'a>> = row
        .iter()
        .filter(|(c, v)| {
            !matches!(v, Value::Unchanged) && only.is_none_or(|o| o.iter().any(|n| n == c))
        })
        .map(|(c, v)| (CelMapKey::from(c), value(v)))
        .collect();
    Box::new(CelMap::from(map))
}

/// A value as CEL sees it: numbers as numbers (an exact decimal as a double), instants as
/// timestamps, arrays as lists, bytes as bytes, everything else as its text.
fn value(v: &Value) -> Val<'_> {
    match v {
        Value::Null | Value::Unchanged => null(),
        Value::Bool(b) => Box::new(CelBool::from(*b)),
        Value::Int(i) => Box::new(CelInt::from(*i)),
        Value::UInt(u) => Box::new(CelUInt::from(*u)),
        Value::Float32(f) => Box::new(CelDouble::from(f64::from(*f))),
        Value::Float64(f) => Box::new(CelDouble::from(*f)),
        Value::Decimal(d) => match d.parse::<f64>() {
            Ok(f) => Box::new(CelDouble::from(f)),
            Err(_) => Box::new(CelString::from(d.as_str())),
        },
        Value::Text(t) | Value::Enum(t) | Value::Json(t) => Box::new(CelString::from(t.as_str())),
        Value::Bytes(b) => Box::new(CelBytes::from(b.as_slice())),
        Value::Array(items) => Box::new(CelList::from(items.iter().map(value).collect::<Vec<_>>())),
        Value::Timestamp(us) | Value::TimestampTz(us) => {
            match chrono::DateTime::from_timestamp_micros(*us) {
                Some(at) => Box::new(CelTimestamp::from(at.fixed_offset())),
                None => Box::new(CelString::from(
                    siphon_format::json::value_text(v).into_owned(),
                )),
            }
        }
        other => Box::new(CelString::from(siphon_format::json::value_text(other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_expression_names_its_position() {
        let e = Expression::compile("after.status == ", &["after"]).unwrap_err();
        assert!(e.contains("<input>:1:"), "{e}");
        let e =
            Expression::compile("op == 'c' &&\n  aftr.total > 3", &["op", "after"]).unwrap_err();
        assert!(e.contains("<input>:2:3") && e.contains("`aftr`"), "{e}");
    }

    #[test]
    fn only_what_the_expression_reads_is_bound() {
        let e = Expression::compile(
            "after.total > 100.0 && op != 'd'",
            &["op", "after", "source"],
        )
        .unwrap();
        assert!(e.reads("after") && e.reads("op") && !e.reads("source"));
        assert_eq!(e.columns("after"), Some(&["total".to_owned()][..]));
        let whole =
            Expression::compile("size(after) > 2 && after.total > 1.0", &["after"]).unwrap();
        assert_eq!(whole.columns("after"), None);
        let after = Row(vec![("total".into(), Value::Decimal("120.50".into()))]);
        let holds = e
            .holds(|v| match v {
                "op" => Box::new(CelString::from("c")),
                _ => row(&after, None),
            })
            .unwrap();
        assert!(holds);
        let not_bool = Expression::compile("after", &["after"]).unwrap();
        assert!(
            not_bool
                .holds(|_| Box::new(CelInt::from(1)))
                .unwrap_err()
                .contains("boolean")
        );
    }
}
