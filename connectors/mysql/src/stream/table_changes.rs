//! Statements that change captured tables (TRUNCATE, DROP, RENAME, partition DDL…): the
//! truncate events they put in the stream and the snapshots they ask for.

use super::*;

impl Stream<'_> {
    /// A statement changed tables (`changes`; none readable: any may have). The table maps
    /// that follow describe the tables as they now are. A chunk being read of one of them is
    /// read again, in its new shape (its high watermark then matches nothing); the patterns
    /// may name tables they did not (looked at between transactions). A captured table whose
    /// rows the statement removed gets a truncate event in the statement's transaction — one
    /// renamed in over it brings rows no binlog event carries, so it is snapshotted again.
    pub(super) async fn tables_changed(
        &self,
        state: &mut State,
        changes: &[TableChange],
        start: u64,
        server_id: u32,
    ) -> Result<()> {
        let snapshot = &mut state.snapshot;
        snapshot.tables_changed = true;
        let touched =
            |table: &TableName| changes.is_empty() || changes.iter().any(|c| c.touches(table));
        if snapshot.progress.tables.front().is_some_and(&touched) {
            snapshot.chunk = None;
        }
        if snapshot.reader.as_ref().is_some_and(|r| touched(&r.name)) {
            snapshot.reader = None;
        }
        // The tables the log holds rows of, by their latest schema.
        let schemas = self.ctx.log.schemas().all();
        let logged = |db: &str, table: Option<&str>| -> Vec<Arc<TableSchema>> {
            schemas
                .iter()
                .filter(|s| {
                    &*s.connector == "mysql"
                        && &*s.database == db
                        && table.is_none_or(|t| &*s.table == t)
                })
                .cloned()
                .collect()
        };
        let mut emptied = Vec::new();
        let mut read_again = Vec::new();
        for change in changes {
            match change {
                TableChange::Created(t) => {
                    snapshot.created.insert(t.clone());
                }
                TableChange::Replaced(t) => {
                    snapshot.created.insert(t.clone());
                    emptied.push(t.clone());
                }
                TableChange::Truncated(t)
                | TableChange::Dropped(t)
                | TableChange::RenamedFrom(t) => {
                    emptied.push(t.clone());
                }
                TableChange::RenamedTo(t) | TableChange::Refreshed(t) => {
                    emptied.push(t.clone());
                    read_again.push(t.clone());
                }
                // Every table of it the log holds, whether or not the catalog still showed
                // it at the last look (dropped while siphon was down or behind).
                TableChange::DatabaseDropped(d) => emptied.extend(
                    logged(d, None)
                        .iter()
                        .map(|s| s.name())
                        .collect::<BTreeSet<_>>(),
                ),
                TableChange::Altered(_) => {}
            }
        }
        let captured = |t: &TableName| self.config.captures(t.namespace(), t.table());
        let read_again: Vec<TableName> = read_again.into_iter().filter(captured).collect();
        if !read_again.is_empty() {
            tracing::info!(tables = ?read_again, "tables whose rows changed without row events: snapshotting them incrementally");
            // From their first key, also one being read now: its rows are other rows.
            snapshot.progress.restart(read_again);
            self.save(state)?;
        }
        let mut truncated = Vec::new();
        for t in emptied.iter().filter(|t| captured(t)) {
            let (db, table) = (t.namespace(), t.table());
            let schema = logged(db, Some(table)).into_iter().max_by_key(|s| s.id);
            let schema = match schema {
                Some(schema) => schema,
                // Replaced while new to the log: its shape registered now, so that reading
                // this statement again after a restart makes the same events.
                None if changes.contains(&TableChange::Replaced(t.clone())) => {
                    let conn = query_conn(&mut state.snapshot.conn, &self.opts).await?;
                    match crate::catalog::columns(conn, db, table).await {
                        Ok((columns, key)) if !columns.is_empty() => {
                            Shape::new((db, table), columns, key, &self.factory.name, |s| {
                                self.ctx.register_schema(s)
                            })?
                            .schema
                        }
                        _ => continue,
                    }
                }
                // Nothing of it is in the log: nothing to truncate in any store.
                None => continue,
            };
            truncated.push(schema);
        }
        if truncated.is_empty() {
            return Ok(());
        }
        if state.transaction.is_none() {
            self.begin(state, start, None, server_id, true);
        }
        let place = state.transaction.as_ref().expect("begun").place.clone();
        let events = truncated
            .iter()
            .map(|schema| self.factory.truncate(schema, &place))
            .collect();
        self.push(state, events).await
    }
}
