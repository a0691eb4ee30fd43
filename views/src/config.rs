//! `[pipelines.NAME.views.VIEW]`: a root table and its joins, as TOML declares them.

use std::collections::BTreeMap;

use serde::Deserialize;

/// A joined document per row of `root`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ViewConfig {
    /// The root table, `schema.table` (`db.table` on MySQL/MariaDB): one document per row.
    pub root: String,
    /// The root's columns in the document; empty: all of them.
    #[serde(default)]
    pub columns: Vec<String>,
    /// To-one joins by field name: the row of another table a column of this one points to.
    #[serde(default)]
    pub one: BTreeMap<String, OneConfig>,
    /// To-many joins by field name: the rows of another table that point to this one.
    #[serde(default)]
    pub many: BTreeMap<String, ManyConfig>,
}

/// `customer_id → shop.customers`: the row whose primary key a column of the parent holds.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OneConfig {
    /// The table joined, its primary key one column.
    pub table: String,
    /// The parent's column holding the joined row's primary key.
    pub foreign_key: String,
    /// The joined row's columns in the document; empty: all of them.
    #[serde(default)]
    pub columns: Vec<String>,
    /// Put the joined columns in the parent's object, each name after this prefix
    /// (`customer_`), instead of nesting them as an object under the field's name.
    #[serde(default)]
    pub flatten: Option<String>,
    /// Joins of the joined row (one level more at most).
    #[serde(default)]
    pub one: BTreeMap<String, OneConfig>,
    /// To-many joins of the joined row.
    #[serde(default)]
    pub many: BTreeMap<String, ManyConfig>,
}

/// `shop.line_items.order_id → orders`: the rows of a table whose column holds the parent's
/// primary key, as an array.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManyConfig {
    /// The table joined.
    pub table: String,
    /// Its column holding the parent's primary key (one column).
    pub foreign_key: String,
    /// The column the array is ordered by (then by primary key); unset: the primary key.
    #[serde(default)]
    pub order_by: Option<String>,
    /// The joined rows' columns in the document; empty: all of them.
    #[serde(default)]
    pub columns: Vec<String>,
    /// Joins of each joined row (one level more at most).
    #[serde(default)]
    pub one: BTreeMap<String, OneConfig>,
    /// To-many joins of each joined row.
    #[serde(default)]
    pub many: BTreeMap<String, ManyConfig>,
}
