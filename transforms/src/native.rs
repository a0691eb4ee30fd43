//! A native path for what most filters are — comparisons of a row's columns (and `op`) with
//! literals, joined by `&&`, `||` and `!`: `row.status == 'paid' && row.total >= 10` — read
//! straight off the event's values, where building CEL's values and walking its interpreter
//! costs more than the comparison. It decides only where the answer is plainly CEL's: both
//! sides of a comparison of one type (a string, an int, a uint, a double, a bool for `==` and
//! `!=`, or both null). Anything else — another operator or a function, a column the row
//! lacks, a value of another type than the literal's — gives no answer, and the expression
//! goes to CEL's interpreter, which then answers (or errs) as it always does.

use std::cmp::Ordering;

use cel::IdedExpr;
use cel::common::ast::{Expr, LiteralValue, operators};
use siphon_core::event::{Row, Value};

/// A compiled comparison tree.
#[derive(Debug)]
pub struct Native(Node);

#[derive(Debug)]
enum Node {
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Not(Box<Node>),
    Compare(Comparison, Term, Term),
}

#[derive(Debug, Clone, Copy)]
enum Comparison {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug)]
enum Term {
    /// `variable.column`, the variable a row.
    Column {
        variable: String,
        column: String,
    },
    /// `op`.
    Op,
    Literal(Literal),
}

#[derive(Debug)]
enum Literal {
    Str(String),
    Int(i64),
    UInt(u64),
    Double(f64),
    Bool(bool),
    Null,
}

/// One value as a comparison sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scalar<'a> {
    Str(&'a str),
    Int(i64),
    UInt(u64),
    Double(f64),
    Bool(bool),
    Null,
}

/// What an expression's variables hold for one event: the rows, and `op`.
#[derive(Debug)]
pub struct Facts<'a> {
    /// Each row variable with its row (`None`: the variable is null).
    pub rows: &'a [(&'a str, Option<&'a Row>)],
    /// Debezium's operation code, where the expression may read `op`.
    pub op: Option<&'a str>,
}

impl Native {
    /// The native form of `expr`, where it is all comparisons of the columns of `rows` (the
    /// variables that hold a row) and of `op` with literals; `None` otherwise.
    pub fn compile(expr: &IdedExpr, rows: &[&str]) -> Option<Native> {
        node(expr, rows).map(Native)
    }

    /// Its answer for `facts`; `None` where it cannot be sure of CEL's.
    pub fn holds(&self, facts: &Facts<'_>) -> Option<bool> {
        self.0.eval(facts)
    }
}

fn node(expr: &IdedExpr, rows: &[&str]) -> Option<Node> {
    let Expr::Call(call) = &expr.expr else {
        return None;
    };
    if call.target.is_some() {
        return None;
    }
    let args = &call.args;
    let two = |f: fn(Box<Node>, Box<Node>) -> Node| match args.as_slice() {
        [a, b] => Some(f(Box::new(node(a, rows)?), Box::new(node(b, rows)?))),
        _ => None,
    };
    let comparison = match call.func_name.as_str() {
        operators::LOGICAL_AND => return two(Node::And),
        operators::LOGICAL_OR => return two(Node::Or),
        operators::LOGICAL_NOT => {
            return match args.as_slice() {
                [a] => Some(Node::Not(Box::new(node(a, rows)?))),
                _ => None,
            };
        }
        operators::EQUALS => Comparison::Eq,
        operators::NOT_EQUALS => Comparison::Ne,
        operators::LESS => Comparison::Lt,
        operators::LESS_EQUALS => Comparison::Le,
        operators::GREATER => Comparison::Gt,
        operators::GREATER_EQUALS => Comparison::Ge,
        _ => return None,
    };
    match args.as_slice() {
        [a, b] => Some(Node::Compare(comparison, term(a, rows)?, term(b, rows)?)),
        _ => None,
    }
}

fn term(expr: &IdedExpr, rows: &[&str]) -> Option<Term> {
    match &expr.expr {
        // `has(row.c)` is a select that tests: the interpreter's.
        Expr::Select(select) if !select.test => match &select.operand.expr {
            Expr::Ident(variable) if rows.contains(&variable.as_str()) => Some(Term::Column {
                variable: variable.clone(),
                column: select.field.clone(),
            }),
            _ => None,
        },
        Expr::Ident(name) if name == "op" => Some(Term::Op),
        Expr::Literal(literal) => Some(Term::Literal(match literal {
            LiteralValue::String(s) => Literal::Str(s.inner().to_owned()),
            LiteralValue::Int(i) => Literal::Int(*i.inner()),
            LiteralValue::UInt(u) => Literal::UInt(*u.inner()),
            LiteralValue::Double(d) => Literal::Double(*d.inner()),
            LiteralValue::Boolean(b) => Literal::Bool(*b.inner()),
            LiteralValue::Null => Literal::Null,
            LiteralValue::Bytes(_) => return None,
        })),
        _ => None,
    }
}

impl Node {
    fn eval(&self, facts: &Facts<'_>) -> Option<bool> {
        match self {
            Node::And(a, b) => either(a, b, false, facts),
            Node::Or(a, b) => either(a, b, true, facts),
            Node::Not(a) => a.eval(facts).map(|b| !b),
            Node::Compare(comparison, a, b) => compare(*comparison, a.eval(facts)?, b.eval(facts)?),
        }
    }
}

/// `a && b` (`decides` false) or `a || b` (`decides` true). CEL's `&&` and `||` are
/// commutative over errors (`error && false` is false): a side that decides, decides;
/// otherwise both must be known.
fn either(a: &Node, b: &Node, decides: bool, facts: &Facts<'_>) -> Option<bool> {
    let left = a.eval(facts);
    if left == Some(decides) {
        return Some(decides);
    }
    match (left, b.eval(facts)) {
        (_, Some(right)) if right == decides => Some(decides),
        (Some(_), Some(_)) => Some(!decides),
        _ => None,
    }
}

impl Term {
    fn eval<'a>(&'a self, facts: &Facts<'a>) -> Option<Scalar<'a>> {
        match self {
            Term::Column { variable, column } => {
                let (_, row) = facts.rows.iter().find(|(v, _)| v == variable)?;
                scalar(row.as_ref()?.get(column)?)
            }
            Term::Op => facts.op.map(Scalar::Str),
            Term::Literal(literal) => Some(match literal {
                Literal::Str(s) => Scalar::Str(s),
                Literal::Int(i) => Scalar::Int(*i),
                Literal::UInt(u) => Scalar::UInt(*u),
                Literal::Double(d) => Scalar::Double(*d),
                Literal::Bool(b) => Scalar::Bool(*b),
                Literal::Null => Scalar::Null,
            }),
        }
    }
}

/// A value as the interpreter's variables hold it (see `expression::value`), where it is a
/// scalar; `None` for any other (and for a column the source did not send, which the
/// interpreter's row lacks).
fn scalar(value: &Value) -> Option<Scalar<'_>> {
    Some(match value {
        Value::Null => Scalar::Null,
        Value::Bool(b) => Scalar::Bool(*b),
        Value::Int(i) => Scalar::Int(*i),
        Value::UInt(u) => Scalar::UInt(*u),
        Value::Float32(f) => Scalar::Double(f64::from(*f)),
        Value::Float64(f) => Scalar::Double(*f),
        Value::Decimal(d) => match d.parse::<f64>() {
            Ok(f) => Scalar::Double(f),
            Err(_) => Scalar::Str(d),
        },
        Value::Text(t) | Value::Enum(t) | Value::Json(t) => Scalar::Str(t),
        _ => return None,
    })
}

fn compare(comparison: Comparison, a: Scalar<'_>, b: Scalar<'_>) -> Option<bool> {
    let ordering = match (a, b) {
        (Scalar::Str(a), Scalar::Str(b)) => Some(a.cmp(b)),
        (Scalar::Int(a), Scalar::Int(b)) => Some(a.cmp(&b)),
        (Scalar::UInt(a), Scalar::UInt(b)) => Some(a.cmp(&b)),
        // A NaN is the interpreter's (it refuses to order one).
        (Scalar::Double(a), Scalar::Double(b)) => Some(a.partial_cmp(&b)?),
        (Scalar::Bool(a), Scalar::Bool(b))
            if matches!(comparison, Comparison::Eq | Comparison::Ne) =>
        {
            Some(a.cmp(&b))
        }
        (Scalar::Null, Scalar::Null) if matches!(comparison, Comparison::Eq | Comparison::Ne) => {
            Some(Ordering::Equal)
        }
        _ => return None,
    };
    Some(match comparison {
        Comparison::Eq => ordering == Some(Ordering::Equal),
        Comparison::Ne => ordering != Some(Ordering::Equal),
        Comparison::Lt => ordering == Some(Ordering::Less),
        Comparison::Le => matches!(ordering, Some(Ordering::Less | Ordering::Equal)),
        Comparison::Gt => ordering == Some(Ordering::Greater),
        Comparison::Ge => matches!(ordering, Some(Ordering::Greater | Ordering::Equal)),
    })
}

#[cfg(test)]
mod tests {
    use cel::common::types::CelString;

    use super::*;
    use crate::expression::{Expression, row};

    /// Every answer the native path gives is the interpreter's, on rows of every kind of
    /// value, missing and null columns included.
    #[test]
    fn the_native_answer_is_always_the_interpreters() {
        let rows: Vec<Row> = [
            vec![
                ("status", Value::Text("paid".into())),
                ("total", Value::Int(12)),
                ("amount", Value::Decimal("12.50".into())),
            ],
            vec![
                ("status", Value::Text("open".into())),
                ("total", Value::Int(3)),
                ("amount", Value::Float64(f64::NAN)),
            ],
            vec![
                ("status", Value::Null),
                ("total", Value::UInt(7)),
                ("amount", Value::Decimal("NaN".into())),
            ],
            vec![
                ("status", Value::Enum("paid".into())),
                ("total", Value::Float64(12.0)),
                ("flag", Value::Bool(true)),
            ],
            vec![
                ("total", Value::Int(10)),
                ("status", Value::Unchanged),
                ("amount", Value::Decimal("x1".into())),
            ],
            vec![
                ("status", Value::Text("Zoë".into())),
                ("total", Value::Int(-1)),
                ("flag", Value::Bool(false)),
            ],
        ]
        .into_iter()
        .map(|columns| columns.into_iter().collect())
        .collect();
        let expressions = [
            "row.status == 'paid' && row.total >= 10",
            "row.status == 'paid' || row.total < 0",
            "!(row.status != 'open') || row.amount >= 0.0",
            "row.total > 5 && row.amount <= 12.5",
            "row.status == null",
            "row.status != null && row.status >= 'p'",
            "row.flag == true || row.flag != false",
            "row.total == 7u || op == 'u'",
            "row.missing == 1 || row.total >= 10",
            "row.missing == 1 && row.total >= 1000",
            "row.amount == row.amount",
            "row.total >= 10.0",
            "op == 'c' && row.status < 'q'",
        ];
        let mut decided = 0;
        for source in expressions {
            let expression = Expression::compile(source, &["row", "op"]).unwrap();
            let native = expression
                .native()
                .unwrap_or_else(|| panic!("{source} has a native form"));
            for (i, r) in rows.iter().enumerate() {
                for op in ["c", "u"] {
                    let facts = Facts {
                        rows: &[("row", Some(r))],
                        op: Some(op),
                    };
                    let interpreted = expression.holds(|v| match v {
                        "op" => Box::new(CelString::from(op)),
                        _ => row(r, None),
                    });
                    if let Some(answer) = native.holds(&facts) {
                        decided += 1;
                        assert_eq!(Ok(answer), interpreted, "{source} on row {i}, op {op}");
                    }
                }
            }
        }
        assert!(decided > 60, "the native path decided {decided} times");
    }

    #[test]
    fn anything_but_comparisons_is_the_interpreters() {
        for source in [
            "has(row.status)",
            "row.status.startsWith('p')",
            "row.total + 1 > 2",
            "size(row) > 1",
            "row.flag",
        ] {
            let expression = Expression::compile(source, &["row"]).unwrap();
            assert!(expression.native().is_none(), "{source}");
        }
    }
}
