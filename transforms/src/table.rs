//! `rename_table`: one table under another name, in its events, its schema and what the
//! sink prepares.

use siphon_core::TableName;
use siphon_core::event::Event;
use siphon_core::schema::TableSchema;
use siphon_core::sink::stage::{SchemaRewrites, Stage};
use siphon_core::source::TableInfo;

/// Gives table `from` the name `to`.
#[derive(Debug)]
pub struct RenameTable {
    from: TableName,
    to: TableName,
    schemas: SchemaRewrites,
}

impl RenameTable {
    /// From "schema.table" to "schema.table".
    pub fn new(from: &str, to: &str) -> Result<RenameTable, String> {
        Ok(RenameTable {
            from: TableName::parse(from).map_err(|e| format!("from: {e}"))?,
            to: TableName::parse(to).map_err(|e| format!("to: {e}"))?,
            schemas: SchemaRewrites::default(),
        })
    }
}

impl Stage for RenameTable {
    fn apply(&self, event: &mut Event) -> Result<bool, String> {
        let s = &mut event.source;
        if s.namespace() != self.from.namespace() || *s.table != *self.from.table() {
            return Ok(true);
        }
        // The namespace is the schema where the source has schemas, the database otherwise.
        match &mut s.schema {
            Some(schema) => *schema = self.to.namespace_name().clone(),
            None => s.db = self.to.namespace_name().clone(),
        }
        s.table = self.to.table().into();
        if let Some(schema) = &mut event.schema {
            *schema = self.schemas.get(schema, |schema| {
                let mut renamed = TableSchema {
                    table: self.to.table().into(),
                    ..schema.clone()
                };
                match &mut renamed.schema {
                    Some(ns) => *ns = self.to.namespace_name().clone(),
                    None => renamed.database = self.to.namespace_name().clone(),
                }
                renamed
            });
        }
        Ok(true)
    }

    fn table(&self, mut table: TableInfo) -> Option<TableInfo> {
        if table.name == self.from {
            table.name = self.to.clone();
        }
        Some(table)
    }
}

#[cfg(test)]
mod tests {
    use siphon_core::event::{Op, Value};
    use siphon_core::testing::{event, row};

    use super::*;

    #[test]
    fn a_renamed_table_is_renamed_in_events_and_tables() {
        let r = RenameTable::new("public.t", "shop.orders").unwrap();
        let mut e = event("t", Op::Create, 1, None, Some(row(1, "a", Value::Null)));
        r.apply(&mut e).unwrap();
        assert_eq!(e.source.table_name().to_string(), "shop.orders");
        let mut other = event("u", Op::Create, 1, None, Some(row(1, "a", Value::Null)));
        r.apply(&mut other).unwrap();
        assert_eq!(other.source.table_name().to_string(), "public.u");
        let info = TableInfo {
            name: TableName::new("public", "t"),
            key_columns: vec!["id".into()],
        };
        assert_eq!(r.table(info).unwrap().name.to_string(), "shop.orders");
    }
}
