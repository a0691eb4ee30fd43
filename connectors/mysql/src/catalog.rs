//! The server: its settings checked before capture, its tables and their columns.

use std::collections::{BTreeSet, HashMap};

use mysql_async::prelude::Queryable;
use siphon_core::{Error, Result, TableName};

use crate::gtid::GtidState;

use crate::MysqlConfig;
use crate::charset::{Charset, unsupported};
use crate::columns::{ColumnInfo, from_catalog};
use crate::errors::my_error;

/// Whether the server is MariaDB (else MySQL).
pub async fn is_mariadb(conn: &mut mysql_async::Conn) -> Result<bool> {
    let version: Option<String> = conn
        .query_first("SELECT VERSION()")
        .await
        .map_err(|e| my_error("reading the server version", &e))?;
    Ok(version.is_some_and(|v| v.contains("MariaDB")))
}

/// Checks that the server writes the binlog change data capture needs; each problem is named
/// with the setting that fixes it.
pub async fn preflight(conn: &mut mysql_async::Conn) -> Result<()> {
    let rows: Vec<(String, String)> = conn
        .query(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', \
             'binlog_row_image', 'binlog_row_metadata', 'log_bin_compress', \
             'binlog_row_value_options')",
        )
        .await
        .map_err(|e| my_error("reading the server's binlog settings", &e))?;
    let vars: HashMap<String, String> = rows
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_ascii_uppercase()))
        .collect();
    let problems = unprepared(&vars);
    if problems.is_empty() {
        return privileges(conn).await;
    }
    Err(Error::permanent(format!(
        "the server is not prepared for change data capture: {}. In its configuration ([mysqld]): \
         log_bin, server_id = 1, binlog_format = ROW, binlog_row_image = FULL, \
         binlog_row_metadata = FULL; then restart it (scripts/services does this here)",
        problems.join(", ")
    )))
}

/// What of the server's binlog settings (`SHOW GLOBAL VARIABLES`, names in lower case,
/// values in upper) keeps siphon from reading every change exactly.
fn unprepared(vars: &HashMap<String, String>) -> Vec<String> {
    let want = |name: &str, value: &str| -> Option<String> {
        let have = vars.get(name).map_or("(unset)", String::as_str);
        (have != value).then(|| format!("{name} = {have} (needs {value})"))
    };
    [
        want("log_bin", "ON"),
        want("binlog_format", "ROW"),
        want("binlog_row_image", "FULL"),
        want("binlog_row_metadata", "FULL"),
        vars.get("log_bin_compress")
            .filter(|v| *v == "ON")
            .map(|_| {
                "log_bin_compress = ON (needs OFF: compressed row events are not read)".into()
            }),
        // MySQL 8: a partial JSON update logs only the diff, which siphon does not apply.
        vars.get("binlog_row_value_options")
            .filter(|v| v.contains("PARTIAL_JSON"))
            .map(|_| {
                "binlog_row_value_options = PARTIAL_JSON (needs '': partial JSON updates are \
                 logged as diffs, which siphon does not apply)"
                    .into()
            }),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Where the server's binlog is now: file, position, and the GTID set MySQL reports there
/// (`Executed_Gtid_Set`). MySQL 8.4 removed `SHOW MASTER STATUS` for `SHOW BINARY LOG
/// STATUS`, which MariaDB (and MySQL before 8.2) does not know: each is tried.
pub async fn binlog_position(
    conn: &mut mysql_async::Conn,
) -> Result<(String, u64, Option<String>)> {
    let mut status: Option<mysql_async::Row> = None;
    for statement in ["SHOW MASTER STATUS", "SHOW BINARY LOG STATUS"] {
        match conn.query_first(statement).await {
            Ok(row) => {
                status = row;
                break;
            }
            // A syntax error: the other spelling.
            Err(mysql_async::Error::Server(e)) if e.code == 1064 => continue,
            Err(e) => return Err(my_error("reading the binlog position", &e)),
        }
    }
    let mut status =
        status.ok_or_else(|| Error::permanent("the binlog position is empty: is log_bin on?"))?;
    let file: String = status.take(0).unwrap_or_default();
    let pos: u64 = status.take(1).unwrap_or_default();
    let gtids: Option<String> = status.take::<Option<String>, _>(4).flatten();
    Ok((file, pos, gtids.filter(|g| !g.is_empty())))
}

/// Checks that the user may read the binlog: REPLICATION SLAVE, and REPLICATION CLIENT
/// (MariaDB: BINLOG MONITOR) for the binlog's position and files. Privileges that come through
/// a role are not followed: with a role granted, the server decides.
async fn privileges(conn: &mut mysql_async::Conn) -> Result<()> {
    let grants: Vec<String> = conn
        .query("SHOW GRANTS")
        .await
        .map_err(|e| my_error("reading the user's privileges", &e))?;
    let missing = missing_privileges(&grants);
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::permanent(format!(
        "the user lacks {} for change data capture: GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* \
         TO the user (and SELECT on the captured tables)",
        missing.join(" and ")
    )))
}

/// The binlog privileges `SHOW GRANTS` lines do not give.
fn missing_privileges(grants: &[String]) -> Vec<&'static str> {
    let global: Vec<String> = grants
        .iter()
        .map(|g| g.to_ascii_uppercase())
        .filter(|g| g.contains(" ON *.* "))
        .collect();
    // A role's privileges are not listed here.
    let role = grants
        .iter()
        .any(|g| !g.to_ascii_uppercase().contains(" ON ") && g.starts_with("GRANT "));
    if role || global.iter().any(|g| g.contains("ALL PRIVILEGES")) {
        return Vec::new();
    }
    let has = |p: &str| global.iter().any(|g| g.contains(p));
    let mut missing = Vec::new();
    if !has("REPLICATION SLAVE") && !has("REPLICATION REPLICA") {
        missing.push("REPLICATION SLAVE");
    }
    if !has("REPLICATION CLIENT") && !has("BINLOG MONITOR") {
        missing.push("REPLICATION CLIENT");
    }
    missing
}

/// The captured tables (`database`, `table`), in name order; an error if none matches.
pub async fn tables(conn: &mut mysql_async::Conn, config: &MysqlConfig) -> Result<Vec<TableName>> {
    let found = matching_tables(conn, config).await?;
    if found.is_empty() {
        let patterns: Vec<String> = config.tables.iter().map(ToString::to_string).collect();
        return Err(Error::permanent(format!(
            "no table matches tables = {patterns:?} (or the user may not see it: grant SELECT on it)"
        )));
    }
    Ok(found)
}

/// The tables the patterns name now, in name order; maybe none.
pub async fn matching_tables(
    conn: &mut mysql_async::Conn,
    config: &MysqlConfig,
) -> Result<Vec<TableName>> {
    let all: Vec<(String, String)> = conn
        .query(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES \
             WHERE TABLE_TYPE = 'BASE TABLE' \
             AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys') \
             ORDER BY TABLE_SCHEMA, TABLE_NAME",
        )
        .await
        .map_err(|e| my_error("listing the tables", &e))?;
    Ok(all
        .into_iter()
        .filter(|(d, t)| config.captures(d, t))
        .map(|(d, t)| TableName::new(d, t))
        .collect())
}

/// The tables the patterns name now, and those of them not in `known`.
pub async fn tables_since(
    conn: &mut mysql_async::Conn,
    config: &MysqlConfig,
    known: &BTreeSet<TableName>,
) -> Result<(BTreeSet<TableName>, Vec<TableName>)> {
    let now: BTreeSet<TableName> = matching_tables(conn, config).await?.into_iter().collect();
    let added = now.difference(known).cloned().collect();
    Ok((now, added))
}

/// A table's columns in order, and the positions of its primary-key columns.
pub async fn columns(
    conn: &mut mysql_async::Conn,
    database: &str,
    table: &str,
) -> Result<(Vec<ColumnInfo>, Vec<usize>)> {
    type ColumnRow = (
        String,
        String,
        String,
        String,
        Option<u64>,
        Option<u64>,
        Option<String>,
    );
    let rows: Vec<ColumnRow> = conn
        .exec(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, NUMERIC_PRECISION, \
             NUMERIC_SCALE, CHARACTER_SET_NAME FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        .await
        .map_err(|e| my_error("reading a table's columns", &e))?;
    let columns: Vec<ColumnInfo> = rows
        .into_iter()
        .map(
            |(name, data_type, column_type, nullable, precision, scale, charset)| {
                // The stream reads the column's bytes in its own set: one it cannot decode is
                // refused now, not at its first row.
                if let Some(set) = charset.as_deref()
                    && set != "binary"
                    && Charset::by_name(set).is_none()
                {
                    return Err(unsupported(&format!("{database}.{table}.{name}"), set));
                }
                Ok(from_catalog(
                    &name,
                    &data_type.to_ascii_lowercase(),
                    &column_type.to_ascii_lowercase(),
                    nullable == "YES",
                    (
                        precision.and_then(|p| u32::try_from(p).ok()),
                        scale.and_then(|s| u32::try_from(s).ok()),
                    ),
                    charset.as_deref() == Some("binary"),
                ))
            },
        )
        .collect::<Result<_>>()?;
    let key_names: Vec<String> = conn
        .exec(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' \
             ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        .await
        .map_err(|e| my_error("reading a table's primary key", &e))?;
    let key = key_names
        .iter()
        .filter_map(|k| columns.iter().position(|c| &*c.name == k))
        .collect();
    Ok((columns, key))
}

/// The binlog files the server holds, oldest first.
pub async fn binlog_files(conn: &mut mysql_async::Conn) -> Result<Vec<String>> {
    let rows: Vec<mysql_async::Row> = conn
        .query("SHOW BINARY LOGS")
        .await
        .map_err(|e| my_error("listing the binlog files", &e))?;
    Ok(rows
        .into_iter()
        .filter_map(|mut r| r.take::<String, _>(0))
        .collect())
}

/// MariaDB: the GTID state at the start of binlog file `file` (its GTID_LIST event): every
/// transaction at or before it is in earlier files. `None` if the file has no such event.
pub async fn gtid_state_at_start(
    conn: &mut mysql_async::Conn,
    file: &str,
) -> Result<Option<GtidState>> {
    let rows: Vec<mysql_async::Row> = conn
        .query(format!(
            "SHOW BINLOG EVENTS IN '{}' LIMIT 4",
            file.replace('\'', "''")
        ))
        .await
        .map_err(|e| my_error("reading the first events of the oldest binlog file", &e))?;
    Ok(rows.into_iter().find_map(|mut r| {
        let kind: String = r.take(2)?;
        let info: String = r.take(5)?;
        (kind == "Gtid_list")
            .then(|| GtidState::parse(info.trim_start_matches('[').trim_end_matches(']')))
            .flatten()
    }))
}

/// Quotes an identifier: `a``b`.
pub fn quote(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

#[cfg(test)]
mod tests {
    use super::{HashMap, missing_privileges, unprepared};

    fn grants(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|l| (*l).to_owned()).collect()
    }

    #[test]
    fn binlog_privileges_are_read_from_show_grants() {
        assert!(
            missing_privileges(&grants(&[
                "GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"
            ]))
            .is_empty()
        );
        assert!(
            missing_privileges(&grants(&[
                "GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `s`@`%`"
            ]))
            .is_empty()
        );
        assert!(
            missing_privileges(&grants(&[
                "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 's'@'%'"
            ]))
            .is_empty()
        );
        assert_eq!(
            missing_privileges(&grants(&[
                "GRANT USAGE ON *.* TO `s`@`%`",
                "GRANT SELECT ON `shop`.* TO `s`@`%`"
            ])),
            ["REPLICATION SLAVE", "REPLICATION CLIENT"]
        );
        assert!(
            missing_privileges(&grants(&[
                "GRANT USAGE ON *.* TO `s`@`%`",
                "GRANT `cdc` TO `s`@`%`"
            ]))
            .is_empty(),
            "a role may hold them"
        );
    }

    #[test]
    fn partial_json_updates_are_refused() {
        let vars: HashMap<String, String> = [
            ("log_bin", "ON"),
            ("binlog_format", "ROW"),
            ("binlog_row_image", "FULL"),
            ("binlog_row_metadata", "FULL"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert!(unprepared(&vars).is_empty());
        let mut mysql8 = vars;
        mysql8.insert("binlog_row_value_options".into(), "PARTIAL_JSON".into());
        let problems = unprepared(&mysql8);
        assert!(
            problems.len() == 1 && problems[0].contains("PARTIAL_JSON"),
            "{problems:?}"
        );
        mysql8.insert("binlog_row_value_options".into(), String::new());
        assert!(unprepared(&mysql8).is_empty());
    }
}
