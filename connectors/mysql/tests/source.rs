//! The MySQL/MariaDB source against the real server: a snapshot, then the binlog through
//! inserts, updates (a primary-key change among them), deletes, a transaction larger than an
//! append part, an ALTER TABLE mid-stream, a stop and restart with changes in between, and the
//! binlog connection killed by the server. Afterwards the log, folded, equals what a fresh
//! snapshot of the same table reads (the binary protocol decoded independently of the binlog),
//! row by row, and no change is in the log twice.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use siphon_core::event::{Op, SnapshotMarker};
use siphon_core::log::ChangeLog;
use siphon_core::source::Source;
use siphon_core::{Event, Row, Value};
use siphon_source_mysql::MysqlPosition;
use siphon_source_mysql::MysqlSource;
use siphon_test_support::mysql;

use crate::harness;
use harness::{Harness, fold};

const TABLE: &str = "create table items (
    id bigint primary key,
    name varchar(50),
    amount decimal(12,2),
    n int unsigned,
    big bigint unsigned,
    small tinyint,
    f double,
    r float,
    d date,
    dt datetime(6),
    ts timestamp(6) null,
    e enum('a','b','c'),
    s set('x','y','z'),
    flag bit(1),
    bits bit(12),
    bin varbinary(16),
    j json,
    t text,
    y year,
    tm time(3)
)";

/// Inserts rows `from..to` in one transaction.
fn insert(from: i64, to: i64) -> String {
    let values: Vec<String> = (from..to)
        .map(|k| {
            format!(
                "({k}, 'name {k}', {k}.25, {n}, 18446744073709551615 - {k}, {small}, {k} / 7, {k} / 3, \
                 date '2024-02-29' + interval {k} day, timestamp '2024-02-29 10:11:12.123456' + interval {k} hour, \
                 timestamp '2024-03-01 00:00:00.5' + interval {k} minute, '{e}', '{s}', {flag}, {k} % 4096, \
                 unhex(lpad(hex({k}), 8, '0')), json_object('k', {k}, 'a', json_array(1, 'x')), repeat('t', {k} % 50), \
                 2000 + {k} % 100, '-{h}:01:02.5')",
                n = 4_000_000_000_i64 + k,
                small = k % 128 - 64,
                e = ["a", "b", "c"][(k % 3) as usize],
                s = ["", "x", "x,z", "y,z"][(k % 4) as usize],
                flag = k % 2,
                h = k % 800,
            )
        })
        .collect();
    format!(
        "insert into items (id, name, amount, n, big, small, f, r, d, dt, ts, e, s, flag, bits, bin, j, t, y, tm) values {}",
        values.join(", ")
    )
}

async fn ids(conn: &mut mysql_async::Conn) -> BTreeSet<i64> {
    conn.query::<i64, _>("select id from items")
        .await
        .unwrap()
        .into_iter()
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_binlog_folds_into_what_a_fresh_snapshot_reads() {
    let db = mysql().await.unwrap();
    let mut conn = db.conn().await.unwrap();
    conn.query_drop(TABLE).await.unwrap();
    conn.query_drop(insert(1, 101)).await.unwrap();

    let a = Harness::new(&db, "a");
    let (run, cancel) = a.start();
    a.wait_for_ids("after the snapshot", &ids(&mut conn).await)
        .await;
    let snapshot = a.events();
    assert_eq!(snapshot.len(), 100);
    assert!(snapshot.iter().all(|e| e.op == Op::Read));
    assert_eq!(snapshot[0].source.snapshot, SnapshotMarker::First);
    assert!(
        snapshot[1..99]
            .iter()
            .all(|e| e.source.snapshot == SnapshotMarker::True)
    );
    assert_eq!(snapshot[99].source.snapshot, SnapshotMarker::Last);

    // Streaming: single rows, a large transaction, updates, a key change, deletes.
    conn.query_drop(insert(101, 151)).await.unwrap();
    conn.query_drop(format!("start transaction; {}; commit", insert(1000, 6000)))
        .await
        .unwrap();
    conn.query_drop(
        "update items set name = concat(name, ' updated'), amount = -amount, e = 'c', ts = null where id % 5 = 0;
         update items set id = 100000 where id = 7;
         delete from items where id % 11 = 0;",
    )
    .await
    .unwrap();
    a.wait_for_ids("after streaming", &ids(&mut conn).await)
        .await;

    // The server kills the binlog connection: the source reconnects and goes on.
    let dumps: Vec<u64> = conn
        .query("select id from information_schema.processlist where command like 'Binlog Dump%'")
        .await
        .unwrap();
    assert!(!dumps.is_empty(), "no binlog dump thread to kill");
    for id in dumps {
        let _ = conn.query_drop(format!("kill {id}")).await;
    }
    conn.query_drop(insert(151, 171)).await.unwrap();
    a.wait_for_ids(
        "after the binlog connection was killed",
        &ids(&mut conn).await,
    )
    .await;

    // Stopped; changes meanwhile, and the table's shape changes.
    cancel.cancel();
    run.await.unwrap().unwrap();
    conn.query_drop(
        "insert into items (id, name) values (200000, 'while stopped');
         alter table items add column extra varchar(10) default 'x';
         update items set extra = concat('e', id % 100);
         delete from items where id between 1000 and 1100;",
    )
    .await
    .unwrap();
    let (run, cancel) = a.start();
    conn.query_drop(insert(171, 181)).await.unwrap();
    a.wait_for_ids("after the restart", &ids(&mut conn).await)
        .await;
    cancel.cancel();
    run.await.unwrap().unwrap();

    assert_eq!(
        a.ctx.metrics.values().get("binlog_generic_decodes"),
        None,
        "siphon's own decoder read every rows event"
    );

    // Nothing twice: each streamed change has a place of its own.
    let events = a.events();
    let mut places = BTreeSet::new();
    for e in events
        .iter()
        .filter(|e| e.source.snapshot == SnapshotMarker::False)
    {
        let Some(MysqlPosition { file, pos, row, .. }) = e.source.position.get::<MysqlPosition>()
        else {
            panic!("not a binlog position: {:?}", e.source.position);
        };
        assert!(
            places.insert((file.clone(), *pos, *row)),
            "a change is in the log twice: {:?}",
            e.source.position
        );
    }

    // A fresh snapshot reads what the binlog said, value by value.
    let b = Harness::new(&db, "b");
    let (run, cancel) = b.start();
    b.wait_for_ids("the fresh snapshot", &ids(&mut conn).await)
        .await;
    cancel.cancel();
    run.await.unwrap().unwrap();
    let (streamed, read) = (fold(&events), fold(&b.events()));
    let differences: Vec<String> = read
        .iter()
        .filter(|(id, row)| streamed.get(id) != Some(row))
        .take(5)
        .map(|(id, row)| format!("{id}: snapshot {row:?}\n  binlog {:?}", streamed.get(id)))
        .collect();
    assert!(differences.is_empty(), "{}", differences.join("\n"));

    // Some values exactly.
    let row = &read[&5];
    let get = |c: &str| row.get(c).cloned().unwrap();
    assert_eq!(get("amount"), Value::Decimal("-5.25".into()));
    assert_eq!(get("n"), Value::Int(4_000_000_005));
    assert_eq!(get("big"), Value::Decimal("18446744073709551610".into()));
    assert_eq!(get("e"), Value::Enum("c".into()));
    assert_eq!(get("s"), Value::Text("x".into()));
    assert_eq!(get("flag"), Value::Bool(true));
    assert_eq!(get("bits"), Value::Bytes(vec![0, 5]));
    assert_eq!(get("ts"), Value::Null);
    assert_eq!(
        get("tm"),
        Value::Time(-(5 * 3600 + 62) * 1_000_000 - 500_000)
    );
    assert_eq!(get("extra"), Value::Text("e5".into()));
    assert_eq!(get("y"), Value::Int(2005));
    // MariaDB's JSON is text (a LONGTEXT with a check); MySQL's is binary JSON.
    assert!(matches!(get("j"), Value::Text(j) | Value::Json(j) if j.contains("\"k\"")));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_user_without_binlog_privileges_is_told_what_to_grant() {
    let db = mysql().await.unwrap();
    let mut conn = db.conn().await.unwrap();
    conn.query_drop("create table items (id int primary key)")
        .await
        .unwrap();
    let user = format!("{}_u", db.name);
    conn.query_drop(format!(
        "create user '{user}'@'%' identified by 'pw-{user}'; grant select on {}.* to '{user}'@'%'",
        db.name
    ))
    .await
    .unwrap();
    let mut h = Harness::new(&db, "p");
    h.config.url = siphon_core::ConnectionUrl::new(format!("mysql://{user}@127.0.0.1:3306"));
    h.config.password = Some(siphon_core::Secret::new(format!("pw-{user}")));
    let mut source = MysqlSource::new("p", h.config.clone());
    let result = source.check().await;
    conn.query_drop(format!("drop user '{user}'@'%'"))
        .await
        .unwrap();
    let e = result.unwrap_err().to_string();
    assert!(
        e.contains("REPLICATION SLAVE") && e.contains("GRANT"),
        "{e}"
    );
    assert!(
        !e.contains(&format!("pw-{user}")),
        "the password is not in the error: {e}"
    );
}

/// One row image as `mariadb-binlog -v` prints it: `@1`, `@2`, … in order, as printed bytes
/// (it prints some bytes of binary strings as they are).
type Image = Vec<Vec<u8>>;

/// The row images of `database.oracle` in `mariadb-binlog --base64-output=decode-rows -v`
/// output, in order (an update: its before image, then its after image).
fn images(out: &[u8], database: &str) -> Vec<Image> {
    let table = format!("`{database}`.`oracle`");
    let mut images = Vec::new();
    let mut ours = false;
    for line in out
        .split(|b| *b == b'\n')
        .filter_map(|l| l.strip_prefix(b"### "))
    {
        let text = String::from_utf8_lossy(line);
        if text.starts_with("INSERT INTO ")
            || text.starts_with("UPDATE ")
            || text.starts_with("DELETE FROM ")
        {
            ours = text.ends_with(&table);
        } else if ours && (text == "SET" || text == "WHERE") {
            images.push(Vec::new());
        } else if ours && line.starts_with(b"  @") {
            let at = line.iter().position(|b| *b == b'=').expect("@n=value");
            let value = &line[at + 1..];
            let end = value.iter().rposition(|b| *b != b' ').map_or(0, |i| i + 1);
            images
                .last_mut()
                .expect("a SET or WHERE first")
                .push(value[..end].to_vec());
        }
    }
    images
}

/// The bytes of a quoted string as mariadb-binlog prints it: `\xNN` for some bytes, the others
/// as they are.
fn printed_bytes(v: &[u8]) -> Vec<u8> {
    let inner = v
        .strip_prefix(b"'")
        .and_then(|v| v.strip_suffix(b"'"))
        .unwrap_or(v);
    let mut out = Vec::new();
    let mut i = 0;
    while i < inner.len() {
        if inner[i] == b'\\'
            && inner.get(i + 1) == Some(&b'x')
            && let Some(b) = inner
                .get(i + 2..i + 4)
                .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok())
        {
            out.push(b);
            i += 4;
            continue;
        }
        out.push(inner[i]);
        i += 1;
    }
    out
}

/// Whether siphon's value of oracle column `column` is what mariadb-binlog printed.
fn agrees(column: &str, ours: &Value, printed: &[u8]) -> bool {
    use chrono::{NaiveDate, NaiveDateTime};
    let theirs = String::from_utf8_lossy(printed);
    let theirs = theirs.as_ref();
    if theirs == "NULL" {
        return *ours == Value::Null;
    }
    // A negative stored number is followed by its unsigned reading: `-2 (18446744073709551614)`.
    let (signed, unsigned) = match theirs.split_once(" (") {
        Some((s, u)) => (s, u.trim_end_matches(')')),
        None => (theirs, theirs),
    };
    let micros = |text: &str| -> i64 {
        let (secs, frac) = text.split_once('.').unwrap_or((text, ""));
        let frac: i64 = format!("{frac:0<6}")[..6].parse().unwrap();
        secs.parse::<i64>().unwrap() * 1_000_000 + if secs.starts_with('-') { -frac } else { frac }
    };
    match (column, ours) {
        ("id" | "small" | "y", Value::Int(i)) => signed == i.to_string(),
        ("n", Value::Int(i)) => unsigned == i.to_string(),
        ("big", Value::Decimal(d)) => unsigned == d,
        ("amount", Value::Decimal(d)) => signed == d,
        ("f", Value::Float64(f)) => signed.parse::<f64>().unwrap() == *f,
        // It prints a FLOAT with six significant digits.
        ("r", Value::Float32(f)) => {
            let f = f64::from(*f);
            (signed.parse::<f64>().unwrap() - f).abs() <= 1e-5 * f.abs().max(1.0)
        }
        ("d", Value::Date(days)) => {
            let date = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap()
                + chrono::TimeDelta::days(i64::from(*days));
            theirs == format!("'{}'", date.format("%Y:%m:%d"))
        }
        ("dt", Value::Timestamp(us)) => {
            let at =
                NaiveDateTime::parse_from_str(theirs.trim_matches('\''), "%Y-%m-%d %H:%M:%S%.f")
                    .unwrap();
            at.and_utc().timestamp_micros() == *us
        }
        ("ts", Value::TimestampTz(us)) => micros(signed) == *us,
        ("tm", Value::Time(us)) => {
            let t = theirs.trim_matches('\'');
            let (negative, t) = t.strip_prefix('-').map_or((false, t), |t| (true, t));
            let mut parts = t.splitn(3, ':');
            let (h, m, s) = (
                parts.next().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap(),
            );
            let total = (h.parse::<i64>().unwrap() * 3600 + m.parse::<i64>().unwrap() * 60)
                * 1_000_000
                + micros(s);
            (if negative { -total } else { total }) == *us
        }
        ("e", Value::Enum(label)) => {
            let index = ["", "a", "b", "c"].iter().position(|l| l == label).unwrap();
            signed == index.to_string()
        }
        ("s", Value::Text(labels)) => {
            let bits = labels
                .split(',')
                .filter(|l| !l.is_empty())
                .map(|l| 1u32 << ["x", "y", "z"].iter().position(|x| *x == l).unwrap())
                .sum::<u32>();
            theirs == format!("b'{bits:08b}'")
        }
        ("flag", Value::Bool(b)) => theirs == if *b { "b'1'" } else { "b'0'" },
        ("bits", Value::Bytes(b)) => {
            let v = b.iter().fold(0u64, |v, x| v << 8 | u64::from(*x));
            theirs == format!("b'{v:012b}'")
        }
        ("bin", Value::Bytes(b)) => printed_bytes(printed) == *b,
        ("name" | "t" | "j", Value::Text(s)) => printed_bytes(printed) == s.as_bytes(),
        _ => false,
    }
}

/// The server's own decoder as the oracle: every row image siphon streamed is, value by value,
/// what `mariadb-binlog --base64-output=decode-rows -v` prints for the same binlog events.
#[tokio::test(flavor = "multi_thread")]
async fn row_images_agree_with_mariadb_binlog() {
    let db = mysql().await.unwrap();
    let mut conn = db.conn().await.unwrap();
    conn.query_drop(
        "create table oracle (
            id bigint primary key, n int unsigned, big bigint unsigned, small tinyint,
            amount decimal(30,10), f double, r float, d date, dt datetime(6), ts timestamp(6) null,
            e enum('a','b','c'), s set('x','y','z'), flag bit(1), bits bit(12), bin varbinary(16),
            t text, y year, tm time(6), name varchar(40), j json
        )",
    )
    .await
    .unwrap();
    let mut h = Harness::new(&db, "oracle");
    h.config.tables = vec![format!("{}.oracle", db.name).parse().unwrap()];
    let (run, cancel) = h.start();
    // The source streams from here on (its snapshot of the empty table is done).
    h.wait_for_streaming().await;
    let start: mysql_async::Row = conn
        .query_first("show master status")
        .await
        .unwrap()
        .unwrap();
    let (file, pos): (String, u64) = (start.get(0).unwrap(), start.get(1).unwrap());

    let texts = [
        "",
        "it's",
        "back\\slash",
        "é 日本",
        "tab\there",
        "\"quoted\"",
    ];
    let mut values = Vec::new();
    for k in 0..200_i64 {
        let null = k % 17 == 0;
        let or_null = |v: String| if null { "null".to_owned() } else { v };
        values.push(format!(
            "({k}, {n}, {big}, {small}, {amount}, {f}, {r}, {d}, {dt}, {ts}, {e}, {s}, {flag}, {bits}, {bin}, {t}, {y}, {tm}, {name}, {j})",
            n = or_null(format!("{}", [0, 1, 4_294_967_295, 4_000_000_000 + k][(k % 4) as usize])),
            big = or_null(["0", "9223372036854775807", "18446744073709551615", "9223372036854775808"][(k % 4) as usize].to_string()),
            small = or_null(format!("{}", [-128, 127, 0, -1][(k % 4) as usize])),
            amount = or_null(format!("{}{k}.{:010}", if k % 2 == 0 { "-" } else { "" }, k * 7919)),
            f = or_null(format!("{k} / 7e3")),
            r = or_null(format!("{k} / 3")),
            d = or_null(format!("'{}'", ["1000-01-01", "9999-12-31", "2024-02-29", "1970-01-01"][(k % 4) as usize])),
            dt = or_null(format!("'2024-02-29 10:11:12.{:06}' + interval {k} hour", k * 31)),
            ts = or_null(format!("'1970-01-01 00:00:01' + interval {k} day + interval {} microsecond", k * 999)),
            e = or_null(format!("'{}'", ["a", "b", "c"][(k % 3) as usize])),
            s = or_null(format!("'{}'", ["", "x", "y,z", "x,y,z"][(k % 4) as usize])),
            flag = or_null(format!("{}", k % 2)),
            bits = or_null(format!("{}", (k * 37) % 4096)),
            bin = or_null(format!("unhex('{:02x}00ff{:02x}')", k % 256, (k * 3) % 256)),
            t = or_null(format!("'{}'", texts[(k % 6) as usize].replace('\\', "\\\\").replace('\'', "''"))),
            y = or_null(format!("{}", 1901 + k % 254)),
            tm = or_null(format!("'{}'", ["-838:59:59", "838:59:59", "00:00:00.000001", "-00:01:02.5"][(k % 4) as usize])),
            name = or_null(format!("'name {k}'")),
            j = or_null(format!("json_object('k', {k}, 's', 'x y')")),
        ));
    }
    conn.query_drop(format!("insert into oracle values {}", values.join(", ")))
        .await
        .unwrap();
    conn.query_drop(
        "update oracle set name = concat('renamed ', id), amount = -amount, tm = '12:00:00' where id % 3 = 0;
         delete from oracle where id % 5 = 0;",
    )
    .await
    .unwrap();
    let expected_images = 200 + 2 * 67 + 40;
    let deadline = Instant::now() + Duration::from_secs(60);
    let ours: Vec<Row> = loop {
        let rows: Vec<Row> = h
            .events()
            .into_iter()
            .filter(|e| e.source.snapshot == SnapshotMarker::False)
            .flat_map(|e| e.before.into_iter().chain(e.after))
            .collect();
        if rows.len() >= expected_images {
            break rows;
        }
        assert!(
            Instant::now() < deadline,
            "the log holds {} row images",
            rows.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    cancel.cancel();
    run.await.unwrap().unwrap();
    assert_eq!(
        h.ctx.metrics.values().get("binlog_generic_decodes"),
        None,
        "siphon's own decoder read every rows event"
    );

    let server = mysql_async::Opts::from_url(&db.url).unwrap();
    let out = std::process::Command::new("mariadb-binlog")
        .env("MYSQL_PWD", server.pass().unwrap_or_default())
        .args([
            "--read-from-remote-server",
            &format!("--host={}", server.ip_or_hostname()),
            &format!("--port={}", server.tcp_port()),
            &format!("--user={}", server.user().unwrap_or("root")),
            "--base64-output=decode-rows",
            "-v",
            &format!("--start-position={pos}"),
            &file,
        ])
        .output()
        .expect("mariadb-binlog runs (package mariadb-client; scripts/services installs it)");
    assert!(
        out.status.success(),
        "mariadb-binlog: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = images(&out.stdout, &db.name);
    assert_eq!(
        theirs.len(),
        ours.len(),
        "row images: mariadb-binlog against siphon"
    );
    let mut differences = Vec::new();
    for (image, row) in theirs.iter().zip(&ours) {
        assert_eq!(image.len(), row.len(), "columns of {row:?}");
        for ((column, value), printed) in row.iter().zip(image) {
            if !agrees(column, value, printed) {
                differences.push(format!(
                    "{column}: siphon {value:?}, mariadb-binlog {}",
                    String::from_utf8_lossy(printed)
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "{} values differ, e.g.:\n{}",
        differences.len(),
        differences
            .iter()
            .take(15)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// DDL while streaming: a column dropped, a table renamed (into another captured name), a
/// column added, each followed by rows; the rows decode by the table as it was when they were
/// written, and each shape is a schema version in the log.
#[tokio::test(flavor = "multi_thread")]
async fn ddl_while_streaming_decodes_each_row_by_its_own_shape() {
    let db = mysql().await.unwrap();
    let mut conn = db.conn().await.unwrap();
    conn.query_drop("create table t1 (id int primary key, a varchar(10), b int, c date)")
        .await
        .unwrap();
    let mut h = Harness::new(&db, "ddl");
    h.config.tables = vec![format!("{}.t*", db.name).parse().unwrap()];
    let (run, cancel) = h.start();
    h.wait_for_streaming().await;
    conn.query_drop(
        "insert into t1 values (1, 'one', 10, '2024-01-01');
         alter table t1 drop column b;
         insert into t1 values (2, 'two', '2024-01-02');
         rename table t1 to t2;
         insert into t2 values (3, 'three', '2024-01-03');
         alter table t2 add column d decimal(6,2) after a;
         insert into t2 values (4, 'four', 4.5, '2024-01-04');
         update t2 set a = 'ONE' where id = 1;",
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let events = loop {
        let events: Vec<Event> = h
            .events()
            .into_iter()
            .filter(|e| e.source.snapshot == SnapshotMarker::False)
            .collect();
        if events.iter().filter(|e| e.op != Op::Truncate).count() >= 5 {
            break events;
        }
        assert!(
            Instant::now() < deadline,
            "the log holds {} changes: {:?}",
            events.len(),
            events
                .iter()
                .map(|e| (e.op, e.source.table.to_string()))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    cancel.cancel();
    run.await.unwrap().unwrap();
    let shape = |e: &Event| {
        (
            e.source.table.to_string(),
            e.after
                .as_ref()
                .unwrap()
                .iter()
                .map(|(c, _)| c.to_owned())
                .collect::<Vec<_>>()
                .join(","),
        )
    };
    // The rename empties t1 (and t2, where the log held it already: when the stream read the
    // rename after the table poll had found t2 and begun reading it again), after t1's rows
    // and before t2's.
    let truncated: Vec<(usize, String)> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.op == Op::Truncate)
        .map(|(i, e)| (i, e.source.table.to_string()))
        .collect();
    assert!(
        truncated == [(2, "t1".into())] || truncated == [(2, "t1".into()), (3, "t2".into())],
        "{truncated:?}"
    );
    let events: Vec<Event> = events
        .into_iter()
        .filter(|e| e.op != Op::Truncate)
        .collect();
    let shapes: Vec<(String, String)> = events.iter().map(shape).collect();
    assert_eq!(
        shapes,
        [
            ("t1".into(), "id,a,b,c".into()),
            ("t1".into(), "id,a,c".into()),
            ("t2".into(), "id,a,c".into()),
            ("t2".into(), "id,a,d,c".into()),
            ("t2".into(), "id,a,d,c".into()),
        ]
    );
    let row = events[3].after.as_ref().unwrap();
    assert_eq!(row.get("d"), Some(&Value::Decimal("4.50".into())));
    assert_eq!(row.get("c"), Some(&Value::Date(19_726)));
    let versions: Vec<_> = events
        .iter()
        .map(|e| e.schema.as_ref().unwrap().id)
        .collect();
    assert!(
        versions[0] != versions[1] && versions[1] != versions[2] && versions[2] != versions[3],
        "each shape is a schema version of its own: {versions:?}"
    );
}

/// A source stopped in the middle of a large transaction, after appending its start without an
/// fsync, and run again in the same process (as the runtime does after a dropped connection)
/// appends each row once.
#[tokio::test(flavor = "multi_thread")]
async fn a_source_run_again_mid_transaction_appends_each_row_once() {
    let db = mysql().await.unwrap();
    let mut conn = db.conn().await.unwrap();
    conn.query_drop("create table big (id int primary key, note varchar(20))")
        .await
        .unwrap();
    let mut h = Harness::new(&db, "again");
    h.config.tables = vec![format!("{}.big", db.name).parse().unwrap()];
    let (run, cancel) = h.start();
    h.wait_for_streaming().await;
    let durable = h.log.durable_end();
    let size = h.log.stats().size_bytes;
    conn.query_drop("insert into big select seq, concat('row ', seq) from seq_1_to_300000")
        .await
        .unwrap();
    // Stop it once part of the transaction is written but none of it is durable yet.
    let deadline = Instant::now() + Duration::from_secs(30);
    while h.log.stats().size_bytes == size {
        assert!(
            Instant::now() < deadline,
            "the transaction never reached the log"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    cancel.cancel();
    run.await.unwrap().unwrap();
    assert_eq!(
        h.log.durable_end(),
        durable,
        "the whole transaction was durable before the stop: the test missed its moment"
    );
    let (run, cancel) = h.start();
    let deadline = Instant::now() + Duration::from_secs(60);
    while h.log.durable_end() < durable + 300_000 {
        assert!(
            Instant::now() < deadline,
            "the log holds {} records",
            h.log.durable_end()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cancel.cancel();
    run.await.unwrap().unwrap();
    let ids: Vec<i64> = h
        .events()
        .iter()
        .filter(|e| e.source.snapshot == SnapshotMarker::False)
        .map(|e| match e.after.as_ref().and_then(|r| r.get("id")) {
            Some(Value::Int(i)) => *i,
            other => panic!("no id: {other:?}"),
        })
        .collect();
    assert_eq!(ids.len(), 300_000, "each row of the transaction once");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "in order, none twice");
}

/// A transaction whose rows fill append parts exactly (4,096) ends with a record marked as
/// its end. Before, its last part took every row and the commit appended nothing to mark, so
/// sinks held the transaction back until the next one and merged the two.
#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_of_whole_parts_is_marked_at_its_end() {
    let db = mysql().await.unwrap();
    let mut conn = db.conn().await.unwrap();
    conn.query_drop("create table parts (id int primary key)")
        .await
        .unwrap();
    let mut h = Harness::new(&db, "parts");
    h.config.tables = vec![format!("{}.parts", db.name).parse().unwrap()];
    let (run, cancel) = h.start();
    h.wait_for_streaming().await;
    let start = h.log.durable_end();
    conn.query_drop("insert into parts select seq from seq_1_to_8192")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while h.log.durable_end() < start + 8192 {
        assert!(
            Instant::now() < deadline,
            "the log holds {} of the rows",
            h.log.durable_end() - start
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cancel.cancel();
    run.await.unwrap().unwrap();
    let last = h.log.last_record().await.unwrap().unwrap();
    assert_eq!(last.offset, start + 8191);
    assert!(
        last.flags.contains(siphon_core::log::RecordFlags::TXN_END),
        "the transaction's last record is not marked as its end"
    );
}
