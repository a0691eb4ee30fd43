//! What the stores hold, read back the same way from each, to compare with the source tables
//! row by row: (table, id) → the compared columns' values as text.

use std::collections::BTreeMap;

/// (table, id) → the values of the table's compared columns, as text (`None`: null).
pub type Rows = BTreeMap<(String, i64), Vec<Option<String>>>;

/// Tables and the columns compared, besides the key `id`.
pub type Tables<'a> = &'a [(&'a str, &'a [&'a str])];

/// The rows of `tables` in schema `schema` of a PostgreSQL database (a source, or a mirror).
pub async fn pg_rows(client: &tokio_postgres::Client, schema: &str, tables: Tables<'_>) -> Rows {
    let mut rows = Rows::new();
    for (table, columns) in tables {
        let list: Vec<String> = columns.iter().map(|c| format!("{c}::text")).collect();
        let sql = format!(
            "select id::int8{}{} from {schema}.{table}",
            if list.is_empty() { "" } else { ", " },
            list.join(", ")
        );
        for r in client.query(&sql, &[]).await.unwrap() {
            rows.insert(
                ((*table).to_owned(), r.get(0)),
                (1..=columns.len())
                    .map(|i| r.get::<_, Option<String>>(i))
                    .collect(),
            );
        }
    }
    rows
}

/// The rows a Redis sink keeps as hashes under `<prefix><table>:<id>` (its default key).
pub async fn redis_rows(url: &str, prefix: &str, tables: Tables<'_>) -> Rows {
    let mut conn = siphon_test_support::redis_conn(url).await.unwrap();
    let mut rows = Rows::new();
    for (table, columns) in tables {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}{table}:*"))
            .query_async(&mut conn)
            .await
            .unwrap();
        for key in keys {
            let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            let id: i64 = key.rsplit(':').next().unwrap().parse().unwrap();
            rows.insert(
                ((*table).to_owned(), id),
                columns.iter().map(|c| fields.get(*c).cloned()).collect(),
            );
        }
    }
    rows
}

/// The rows a DuckDB sink keeps in the database file `path` (tables `<schema>_<table>`).
#[cfg(feature = "duckdb")]
pub async fn duckdb_rows(path: &std::path::Path, schema: &str, tables: Tables<'_>) -> Rows {
    use siphon_core::sink::Sink as _;
    let mut inspect = siphon_sink_duckdb::DuckdbSink::new(
        siphon_sink_duckdb::DuckdbSinkConfig::new(path),
        "inspect",
        "inspect",
    )
    .unwrap();
    inspect.check().await.unwrap();
    let duck = inspect.dialect().connection().unwrap();
    let mut rows = Rows::new();
    for (table, columns) in tables {
        let list: Vec<String> = columns
            .iter()
            .map(|c| format!(", CAST({c} AS VARCHAR)"))
            .collect();
        let mut stmt = duck
            .prepare(&format!(
                "SELECT CAST(id AS BIGINT){} FROM {schema}_{table}",
                list.concat()
            ))
            .unwrap();
        let found: Vec<(i64, Vec<Option<String>>)> = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    (1..=columns.len())
                        .map(|i| r.get::<_, Option<String>>(i).unwrap())
                        .collect(),
                ))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        for (id, values) in found {
            rows.insert(((*table).to_owned(), id), values);
        }
    }
    rows
}
