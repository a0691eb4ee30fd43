//! siphon's records next to the real Debezium's, record by record: the same workload (every
//! type the PostgreSQL source supports; a snapshot, then inserts, an update leaving a TOASTed
//! column unchanged, a primary-key change, a delete and a truncate) through Debezium 3.6.3's
//! embedded PostgreSQL connector (`scripts/debezium/dump`, with the handling modes siphon's
//! default equals) and through the daemon (`siphon log tail --format records`).
//!
//! In Avro as well: Debezium with Confluent's AvroConverter (the converter's 7.0.16 jars ship
//! with Debezium's) against one schema registry stand-in, siphon's Kafka sink (`format =
//! "avro"`, into a noida-db broker) against another. Each subject's registered schemas must be
//! the same text, and the records, read back with `apache-avro`, the same values; siphon's Avro
//! must also read back as exactly the JSON siphon writes in the same modes (every type class
//! round-trips through the registry).
//!
//! They must agree on the number of records, topics, keys, tombstones, every envelope and
//! `source` field, and every value, except: Debezium's version, timestamps, LSNs and
//! `sequence`, the snapshot's `txId` (each snapshot is a transaction of its own: both give a
//! number) and the values the README's table "siphon vs Debezium encodings" lists, each named
//! in [`allowed`]. Debezium's snapshot and its stream are two runs: its embedded engine ends
//! after an `initial` snapshot here, so the stream comes from a second connector with
//! `snapshot.mode = no_data`.

#![cfg(feature = "kafka")]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::debezium::{self, End, Run, records, slot_active};
use rdkafka::Message as _;
use rdkafka::message::Headers as _;
use serde_json::Value as Json;
use siphon_test_support::{Daemon, KafkaBroker, PgDatabase, RegistryStandIn, free_port, postgres};

const WORKLOAD: &str = r#"
create type mood as enum ('sad', 'ok', 'happy');
create table everything (
    id int8 primary key,
    b bool, i2 int2, i4 int4, i8 int8, f4 float4, f8 float8,
    n numeric, n10_2 numeric(10,2), t text, v20 varchar(20), c3 char(3),
    by bytea, d date, tm time, tm3 time(3), ttz timetz, ts timestamp, ts3 timestamp(3),
    tstz timestamptz, iv interval,
    u uuid, j json, jb jsonb, m mood,
    ai int4[], at text[], an numeric[],
    ip inet, net cidr, mac macaddr, money money, bit1 bit(1), bits bit(12), vbits varbit, o oid,
    big text, pt point
);
alter table everything alter column big set storage external;
insert into everything values
 (1, true, 1, 2, 9007199254740993, 1.5, 0.1, 12.3400, 12.34, 'hello', 'v', 'ab',
  '\x00ff10', '2024-02-29', '10:11:12.123456', '10:11:12.123', '10:11:12.5+05:30',
  '2024-02-29 10:11:12.5', '2024-02-29 10:11:12.123', '2024-02-29 10:11:12.123456+00',
  '1 year 2 mons 3 days 04:05:06.789', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": 1}',
  '{"b": [1, 2]}', 'ok', '{1,NULL,3}', '{"a \"q\"",b}', '{1.5,2.25}',
  '192.168.0.1', '10.0.0.0/8', '08:00:2b:01:02:03', 1234.56, B'1', B'101000000001', B'10101',
  4000000000, repeat('x', 10000), '(1.5,-2)'),
 (2, null, null, null, null, null, null, null, null, null, null, null, null, null, null, null,
  null, null, null, null, null, null, null, null, null, null, null, null, null, null, null,
  null, null, null, null, null, null, null),
 (3, false, -32768, -2147483648, -9223372036854775808, 'NaN', '-Infinity', 'NaN', -0.01, '',
  'x', 'x', '', '-infinity', '24:00:00', '00:00:00', '00:00:00-12', 'infinity',
  '1900-01-01 00:00:00', '-infinity', '-1 year -2 days -00:00:00.000001',
  '00000000-0000-0000-0000-000000000000', '[]', 'null', 'sad', '{}', '{}', '{1.5,NaN}',
  '::1', '::/0', '00:00:00:00:00:00', -0.5, B'0', B'100000000000', B'', 0, 'small', '(0,-0.25)');
-- Fractions whose last digits are zeros, and none.
insert into everything (id, tm, tm3, ttz, ts, ts3, tstz) values
 (4, '10:11:12.511560', '10:11:12.510', '10:11:12.511560+01', '2024-02-29 10:11:12.511560',
  '2024-02-29 10:11:12.510', '2024-02-29 10:11:42.511560+00'),
 (5, '10:11:12', '10:11:12', '10:11:12+01', '2024-02-29 10:11:12', '2024-02-29 10:11:12',
  '2024-02-29 10:11:42+00'),
 (6, '10:11:12.100000', '10:11:12.100', '10:11:12.1-03', '2024-02-29 10:11:12.1',
  '2024-02-29 10:11:12.1', '2024-02-29 10:11:42.1+00');
-- NOT NULL columns that a delete's old row lacks (the default replica identity sends the key).
create table other (id int4 primary key, note text, must text not null, n int4 not null,
    amount numeric(10,2) not null, at timestamptz not null, d date not null, tm time not null,
    u uuid not null, b bytea not null, tags text[] not null, f float8 not null,
    ts timestamp not null, ttz timetz not null, iv interval not null, j jsonb not null,
    e mood not null, cash money not null, flag bool not null, big numeric not null,
    pt point not null);
insert into other values
 (1, 'one', 'm1', 1, 1.50, '2024-01-01 10:00:00+00', '2024-01-01', '10:00:00',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\x01', '{a}', 1.5, '2024-01-01 10:00:00',
  '10:00:00+01', '1 day', '{}', 'ok', 1.25, true, 1.5, '(1,1)'),
 (2, 'two', 'm2', 2, 2.50, '2024-01-02 10:00:00+00', '2024-01-02', '11:00:00',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12', '\x02', '{b}', 2.5, '2024-01-02 10:00:00',
  '11:00:00+01', '2 days', '[]', 'sad', 2.25, false, 2.5, '(2,2)');
"#;

const STREAM: &str = r#"
insert into everything (id, t, d, ts, n, by, at, big)
    values (10, 'streamed', '1999-12-31', '1999-12-31 23:59:59.999999', '1e-5', '\x01', '{a}',
            repeat('y', 9000));
update everything set t = 'updated' where id = 1;
update everything set id = 11 where id = 10;
delete from everything where id = 3;
truncate everything;
insert into everything (id, money, bits) values (20, 0.01, B'000000000001');
insert into other values (3, 'three', 'm3', 3, 3.50, '2024-01-03 10:00:00+00', '2024-01-03',
    '12:00:00', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a13', '\x03', '{c}', 3.5, '2024-01-03 10:00:00',
    '12:00:00+01', '3 days', '{"a": 3}', 'happy', 3.25, true, 3.5, '(3,3)');
delete from other where id = 2;
"#;

/// The records Debezium emits for [`STREAM`] in every mode: an insert, an update, a key
/// change (a delete, its tombstone, a create), a delete and its tombstone, two inserts, a
/// delete and its tombstone (the truncate is skipped). Its stream runs end at that many, not
/// after an idle time, which a loaded machine can exceed between two records.
const STREAM_RECORDS: usize = 11;

/// Debezium's handling modes, each set compared: siphon's default (first), Debezium's own
/// defaults, and the other alternatives. siphon takes the same properties
/// (`log tail --debezium`, a sink's `debezium` table).
const MODES: [&[&str]; 5] = [
    &[
        "decimal.handling.mode=string",
        "time.precision.mode=isostring",
        "interval.handling.mode=string",
        "binary.handling.mode=base64",
        SCHEMAS,
    ],
    &[
        "decimal.handling.mode=precise",
        "time.precision.mode=adaptive",
        "interval.handling.mode=numeric",
        "binary.handling.mode=bytes",
    ],
    &[
        "decimal.handling.mode=double",
        "time.precision.mode=connect",
        "interval.handling.mode=string",
        "binary.handling.mode=hex",
    ],
    &[
        "decimal.handling.mode=string",
        "time.precision.mode=adaptive_time_microseconds",
        "interval.handling.mode=numeric",
        "binary.handling.mode=base64-url-safe",
    ],
    // Kafka Connect's JSON converter with schemas: each key and value as {schema, payload}.
    &[
        "decimal.handling.mode=precise",
        "time.precision.mode=adaptive",
        "interval.handling.mode=numeric",
        "binary.handling.mode=bytes",
        SCHEMAS,
    ],
];

/// The Debezium property that turns schemas on; siphon's `log tail --schemas`.
const SCHEMAS: &str = "converter.schemas.enable=true";

/// The NOT NULL columns of `other` but its key: a delete's old row lacks them.
const NOT_NULL: &[&str] = &[
    "must", "n", "amount", "at", "d", "tm", "u", "b", "tags", "f", "ts", "ttz", "iv", "j", "e",
    "cash", "flag", "big", "pt",
];

/// The modes compared in Avro: Debezium's own defaults, so that decimals, dates, times and
/// bytes take Kafka Connect's and Debezium's named types.
const AVRO_MODES: &[&str] = &[
    "decimal.handling.mode=precise",
    "time.precision.mode=adaptive",
    "interval.handling.mode=numeric",
    "binary.handling.mode=bytes",
];

/// With schemas: each topic's key and value schemas must be equal on both sides (they
/// depend on the table only); every record is then reduced to its payloads, in place.
fn unwrap_schemas(what: &str, theirs: &mut [Json], ours: &mut [Json], out: &mut Vec<String>) {
    let schemas = |records: &[Json]| {
        let mut by_topic: BTreeMap<(String, &str), Vec<Json>> = BTreeMap::new();
        for r in records {
            for part in ["key", "value"] {
                if !r[part].is_null() {
                    let found = by_topic.entry((r["topic"].to_string(), part)).or_default();
                    if !found.contains(&r[part]["schema"]) {
                        found.push(r[part]["schema"].clone());
                    }
                }
            }
        }
        by_topic
    };
    let (t, o) = (schemas(theirs), schemas(ours));
    if t != o {
        for (k, ts) in &t {
            let os = o.get(k).cloned().unwrap_or_default();
            if *ts != os {
                out.push(format!(
                    "{what} {k:?} schema: Debezium {ts:?}, siphon {os:?}"
                ));
            }
        }
    }
    for r in theirs.iter_mut().chain(ours.iter_mut()) {
        for part in ["key", "value"] {
            if !r[part].is_null() {
                r[part] = r[part]["payload"].clone();
            }
        }
    }
}

/// Debezium's run; with `avro`, through Confluent's AvroConverter into that registry.
fn dump(
    db: &PgDatabase,
    slot: &str,
    mode: &str,
    out: &Path,
    modes: &[&str],
    end: End,
    avro: Option<&RegistryStandIn>,
) -> Command {
    let mut cmd = debezium::dump(db, "public.everything,public.other", slot, mode, out, end);
    cmd.args(modes).arg("hstore.handling.mode=json");
    if let Some(registry) = avro {
        cmd.env("DBZ_FORMAT", "avro")
            .arg(format!("converter.schema.registry.url={}", registry.url));
    }
    cmd
}

/// Why siphon may print `ours` where Debezium printed `theirs` for `column`, if it may:
/// the rows of the README's table "siphon vs Debezium encodings".
fn allowed(column: &str, theirs: &Json, ours: &Json) -> Option<&'static str> {
    let (t, o) = (theirs.as_str().unwrap_or(""), ours.as_str().unwrap_or(""));
    let far_year = |s: &str| {
        s.strip_prefix(['+', '-'])
            .is_some_and(|rest| rest.chars().take_while(char::is_ascii_digit).count() > 4)
    };
    if (o == "infinity" || o == "-infinity") && far_year(t) {
        return Some("an infinite date or timestamp (Debezium: a date 292 million years away)");
    }
    let extreme = [
        i64::from(i32::MIN),
        i64::from(i32::MAX),
        i64::MIN,
        i64::MAX,
        i64::MIN.div_euclid(1000),
        i64::MAX / 1000,
    ];
    if theirs.is_number() && ours.as_i64().is_some_and(|v| extreme.contains(&v)) {
        return Some("an infinite date or timestamp as a number: the type's extreme value");
    }
    if o == "24:00:00Z" && t == "00:00:00Z" {
        return Some("24:00:00 (Debezium: midnight)");
    }
    if theirs.is_null()
        && column == "an"
        && ours.as_array().is_some_and(|a| {
            a.iter()
                .any(|v| v.is_null() || v.as_str() == Some("NAN") || v.as_str() == Some("NaN"))
        })
    {
        return Some("a numeric array holding NaN (Debezium: null)");
    }
    None
}

/// Differences between Debezium's record and siphon's that are not allowed.
fn differences(what: &str, theirs: &Json, ours: &Json, out: &mut Vec<String>) {
    let mut differ = |path: &str, t: &Json, o: &Json| {
        out.push(format!("{what} {path}: Debezium {t}, siphon {o}"));
    };
    for field in ["topic", "key"] {
        if theirs[field] != ours[field] {
            differ(field, &theirs[field], &ours[field]);
        }
    }
    let (t, o) = (&theirs["value"], &ours["value"]);
    if t.is_null() || o.is_null() {
        if t.is_null() != o.is_null() {
            differ("value (tombstone)", t, o);
        }
        return;
    }
    for field in ["op", "transaction"] {
        if t[field] != o[field] {
            differ(field, &t[field], &o[field]);
        }
    }
    for field in ["ts_ms", "ts_us", "ts_ns"] {
        if !o[field].is_number() {
            differ(field, &t[field], &o[field]);
        }
    }
    let snapshot = t["op"] == "r";
    let (ts, os) = (&t["source"], &o["source"]);
    for (field, tv) in ts.as_object().unwrap() {
        let ov = &os[field];
        let free = match field.as_str() {
            "version" | "lsn" | "sequence" | "ts_ms" | "ts_us" | "ts_ns" => true,
            // Each snapshot is a transaction of its own: any number.
            "txId" => snapshot && ov.is_number(),
            // Debezium reads tables one after the other, siphon several at once: which
            // table holds the snapshot's first and last row may differ (checked apart, in
            // `markers`), the per-table marker may not.
            "snapshot" => table_marker(tv) == table_marker(ov),
            _ => false,
        };
        if os.get(field).is_none() || (!free && tv != ov) {
            differ(&format!("source.{field}"), tv, ov);
        }
    }
    for row in ["before", "after"] {
        let (tr, or) = (&t[row], &o[row]);
        let (Some(tm), Some(om)) = (tr.as_object(), or.as_object()) else {
            if tr != or {
                differ(row, tr, or);
            }
            continue;
        };
        let (tk, ok): (Vec<&String>, Vec<&String>) = (tm.keys().collect(), om.keys().collect());
        if tk != ok {
            differ(&format!("{row} columns"), &json_keys(tk), &json_keys(ok));
        }
        // A NOT NULL column a delete's old row lacks (PostgreSQL sent the key only):
        // Debezium invents a value (a zero, the epoch), siphon's JSON says null; its Avro,
        // whose schema holds no null there, writes Debezium's value (compared: not null).
        let missing = |column: &str, ov: &Json| {
            row == "before" && t["op"] == "d" && ov.is_null() && NOT_NULL.contains(&column)
        };
        for (column, tv) in tm {
            let ov = om.get(column).unwrap_or(&Json::Null);
            if tv != ov && !missing(column, ov) && allowed(column, tv, ov).is_none() {
                differ(&format!("{row}.{column}"), tv, ov);
            }
        }
    }
}

/// A snapshot marker with the snapshot's first and last taken as their table's.
fn table_marker(marker: &Json) -> Json {
    match marker.as_str() {
        Some("first") => Json::from("first_in_data_collection"),
        Some("last") => Json::from("last_in_data_collection"),
        _ => marker.clone(),
    }
}

/// The snapshot markers of records in log order: exactly one `first`, on the first record,
/// and one `last`, on the last; `what` names the side.
fn markers(what: &str, snapshot: &[&Json]) {
    let marks: Vec<&str> = snapshot
        .iter()
        .map(|r| r["value"]["source"]["snapshot"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        marks.iter().filter(|m| **m == "first").count(),
        1,
        "{what}: {marks:?}"
    );
    assert_eq!(
        marks.iter().filter(|m| **m == "last").count(),
        1,
        "{what}: {marks:?}"
    );
    assert_eq!(marks.first(), Some(&"first"), "{what}: {marks:?}");
    assert_eq!(marks.last(), Some(&"last"), "{what}: {marks:?}");
}

fn json_keys(keys: Vec<&String>) -> Json {
    Json::from(keys.into_iter().cloned().collect::<Vec<_>>())
}

/// Debezium's records of one mode set against siphon's: the snapshot's by key, the stream's
/// in order; what differs beyond the allowed goes to `found`.
fn compare(
    modes: &[&str],
    theirs_snapshot: &[Json],
    theirs_stream: &[Json],
    ours: &[Json],
    found: &mut Vec<String>,
) {
    let is_snapshot = |r: &&Json| r["value"]["op"] == "r";
    let (ours_snapshot, ours_stream): (Vec<&Json>, Vec<&Json>) = ours.iter().partition(is_snapshot);
    assert_eq!(
        theirs_snapshot.len(),
        8,
        "Debezium's snapshot records in {modes:?}"
    );
    assert_eq!(
        (ours_snapshot.len(), ours_stream.len()),
        (theirs_snapshot.len(), theirs_stream.len()),
        "records (snapshot, stream) in {modes:?}: siphon's against Debezium's\nDebezium's stream: {theirs_stream:#?}\nsiphon's: {ours:#?}"
    );
    markers("Debezium", &theirs_snapshot.iter().collect::<Vec<_>>());
    markers("siphon", &ours_snapshot);
    let ours_by_key: BTreeMap<String, &Json> = ours_snapshot
        .into_iter()
        .map(|r| (format!("{} {}", r["topic"], r["key"]), r))
        .collect();
    for theirs in theirs_snapshot {
        let key = format!("{} {}", theirs["topic"], theirs["key"]);
        let ours = ours_by_key.get(&key).copied().unwrap_or(&Json::Null);
        differences(
            &format!("{modes:?} snapshot record {key}:"),
            theirs,
            ours,
            found,
        );
    }
    for (n, (theirs, ours)) in theirs_stream.iter().zip(ours_stream).enumerate() {
        differences(
            &format!("{modes:?} stream record {n}:"),
            theirs,
            ours,
            found,
        );
    }
}

/// Debezium's Avro records (keys and values in hex) read back through its registry.
fn decode_hex(records: Vec<Json>, registry: &RegistryStandIn) -> Vec<Json> {
    let hex = |v: &Json| -> Option<Vec<u8>> {
        let s = v.as_str()?;
        Some(
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect(),
        )
    };
    records
        .into_iter()
        .map(|r| {
            let read = |part: &str| match hex(&r[part]) {
                Some(bytes) => registry.decode(&bytes, None).unwrap().1,
                None => Json::Null,
            };
            serde_json::json!({"topic": r["topic"], "key": read("key"), "value": read("value")})
        })
        .collect()
}

/// Every record of `topics` (read_committed), in log order (their `siphon.offset` headers),
/// read back through `registry`, as `{"topic", "key", "value"}`; waits for `at_least`, as
/// long as records come (`daemon` says why they do not).
fn consume_avro(
    broker: &KafkaBroker,
    topics: &[&str],
    registry: &RegistryStandIn,
    at_least: usize,
    daemon: &Daemon,
) -> Vec<Json> {
    let consumer = debezium::committed_reader(&broker.brokers(), "debezium-test", topics);
    let mut read: Vec<(u64, Json)> = Vec::new();
    let mut last_progress = Instant::now();
    while read.len() < at_least {
        assert!(
            last_progress.elapsed() < Duration::from_secs(60),
            "siphon's Kafka sink wrote {} records of {at_least} and no more for 60s\n{}",
            read.len(),
            daemon.log()
        );
        // Until the sink made the topics, reading them fails.
        let Some(Ok(message)) = consumer.poll(Duration::from_millis(500)) else {
            continue;
        };
        let offset = message
            .headers()
            .and_then(|h| h.iter().find(|h| h.key == "siphon.offset"))
            .and_then(|h| h.value)
            .map(|v| u64::from_be_bytes(v.try_into().unwrap()))
            .expect("siphon's records carry siphon.offset");
        let part = |bytes: Option<&[u8]>| match bytes {
            Some(b) => registry.decode(b, None).unwrap().1,
            None => Json::Null,
        };
        read.push((
            offset,
            serde_json::json!({"topic": message.topic(), "key": part(message.key()), "value": part(message.payload())}),
        ));
        last_progress = Instant::now();
    }
    // A delete and its tombstone share an offset; the sort keeps their order.
    read.sort_by_key(|(offset, _)| *offset);
    read.into_iter().map(|(_, r)| r).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn siphon_emits_what_debezium_emits_in_every_mode() {
    let db = postgres().await.unwrap();
    db.execute(WORKLOAD).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = |what: &str, i: usize| dir.path().join(format!("{what}-{i}.jsonl"));
    let broker = KafkaBroker::start().unwrap();
    let (their_registry, our_registry) = (
        RegistryStandIn::start().unwrap(),
        RegistryStandIn::start().unwrap(),
    );
    // Every mode set in JSON, then Debezium's defaults in Avro (the last run).
    let runs: Vec<(&[&str], Option<&RegistryStandIn>)> = MODES
        .iter()
        .map(|modes| (*modes, None))
        .chain([(AVRO_MODES, Some(&their_registry))])
        .collect();

    // Debezium's snapshots, one per run, each to its end.
    for (i, (modes, avro)) in runs.iter().enumerate() {
        let slot = format!("{}_dbz_snap_{i}", db.name);
        let status = Run::spawn(dump(
            &db,
            &slot,
            "initial",
            &out("snapshot", i),
            modes,
            End::Snapshot,
            *avro,
        ))
        .wait();
        assert!(status.success(), "Debezium's snapshot run failed: {status}");
        // Its slot is left behind; slots are few (max_replication_slots).
        db.drop_slot(&slot).await.unwrap();
    }

    // Debezium's streams (one per run) and siphon side by side, then the changes.
    let stream_slots: Vec<String> = (0..runs.len())
        .map(|i| format!("{}_dbz_stream_{i}", db.name))
        .collect();
    // One after the other, each waited for: JVMs starting together on two cores are slow.
    let mut streams: Vec<Run> = Vec::new();
    for (i, (modes, avro)) in runs.iter().enumerate() {
        streams.push(Run::spawn(dump(
            &db,
            &stream_slots[i],
            "no_data",
            &out("stream", i),
            modes,
            End::After(STREAM_RECORDS),
            *avro,
        )));
        let deadline = Instant::now() + Duration::from_secs(120);
        while !slot_active(&db, &stream_slots[i]).await {
            assert!(
                Instant::now() < deadline,
                "Debezium's stream connector {i} never made its slot active"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let admin_port = free_port();
    let siphon_slot = format!("{}_siphon", db.name);
    let config = dir.path().join("siphon.toml");
    std::fs::write(
        &config,
        format!(
            r#"data_dir = "{data}"
[admin]
listen = "127.0.0.1:{admin_port}"
[pipelines.dbz.source]
kind = "postgres"
url = "{url}"
tables = ["public.everything", "public.other"]
slot = "{siphon_slot}"
status_interval = "200ms"
[pipelines.dbz.sinks.out]
kind = "file"
path = "{out}"
[pipelines.dbz.sinks.avro]
kind = "kafka"
brokers = "{brokers}"
format = "avro"
registry = {{ url = "{registry}" }}
debezium = {{ decimal = "precise", time = "adaptive", interval = "numeric", binary = "bytes" }}
"#,
            data = dir.path().join("data").display(),
            url = db.url,
            out = dir.path().join("out").display(),
            brokers = broker.brokers(),
            registry = our_registry.url,
        ),
    )
    .unwrap();
    let mut daemon = Daemon::start(
        common::bin(),
        &config,
        admin_port,
        &dir.path().join("daemon.log"),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let mut ready = slot_active(&db, &siphon_slot).await;
        for slot in &stream_slots {
            ready = ready && slot_active(&db, slot).await;
        }
        if ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Debezium's and siphon's slots never became active\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Each statement a transaction of its own.
    let client = db.client().await.unwrap();
    for statement in STREAM.split(";\n").filter(|s| !s.trim().is_empty()) {
        client.execute(statement, &[]).await.unwrap();
    }
    for stream in streams {
        let status = stream.wait();
        assert!(status.success(), "Debezium's stream run failed: {status}");
    }

    let tail = |modes: &[&str]| {
        let mut cmd = Command::new(common::bin());
        cmd.args([
            "log", "tail", "dbz", "--from", "0", "--format", "records", "--config",
        ])
        .arg(&config);
        for property in modes {
            if *property == SCHEMAS {
                cmd.arg("--schemas");
            } else {
                cmd.args(["--debezium", property]);
            }
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Json>(l).unwrap())
            .collect::<Vec<_>>()
    };
    let expected = records(&out("snapshot", 0)).len() + records(&out("stream", 0)).len();
    // Until siphon's log holds as many, or a minute passes with no new record in it.
    let (mut seen, mut deadline) = (0, Instant::now() + Duration::from_secs(60));
    while seen < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = tail(MODES[0]).len();
        if now > seen {
            (seen, deadline) = (now, Instant::now() + Duration::from_secs(60));
        }
    }

    let mut found = Vec::new();
    for (i, (modes, avro)) in runs.iter().enumerate() {
        let mut theirs_snapshot = records(&out("snapshot", i));
        let mut theirs_stream = records(&out("stream", i));
        let mut ours = tail(modes);
        if let Some(registry) = avro {
            theirs_snapshot = decode_hex(theirs_snapshot, registry);
            theirs_stream = decode_hex(theirs_stream, registry);
            // The sink's topics hold the truncate too (`op: "t"`), which Debezium skips by
            // default, as `log tail` does.
            let from_kafka: Vec<Json> = consume_avro(
                &broker,
                &["dbz.public.everything", "dbz.public.other"],
                &our_registry,
                expected + 1,
                &daemon,
            )
            .into_iter()
            .filter(|r| r["value"]["op"] != "t")
            .collect();
            // siphon's Avro reads back as exactly the JSON siphon writes in the same modes,
            // but for the NOT NULL columns a delete's old row lacks: null in JSON, the type's
            // zero in Avro (whose schema holds no null there).
            assert_eq!(from_kafka.len(), ours.len(), "{modes:?}");
            for (avro, json) in from_kafka.iter().zip(&ours) {
                let mut json = json.clone();
                common::zeros_of_a_delete(&avro["value"], &mut json["value"], NOT_NULL);
                assert_eq!(avro, &json, "siphon's Avro read back, against its JSON");
            }
            ours = from_kafka;
            let (theirs, ours) = (their_registry.subjects(), our_registry.subjects());
            assert_eq!(
                theirs.len(),
                4,
                "two tables' key and value subjects: {theirs:#?}"
            );
            assert_eq!(
                theirs.keys().collect::<Vec<_>>(),
                ours.keys().collect::<Vec<_>>(),
                "subjects"
            );
            for (subject, versions) in &theirs {
                if ours[subject] != *versions {
                    found.push(format!(
                        "Avro schemas of {subject}: Debezium {versions:?}, siphon {:?}",
                        ours[subject]
                    ));
                }
            }
        } else if modes.contains(&SCHEMAS) {
            let mut theirs: Vec<Json> = theirs_snapshot
                .iter()
                .chain(&theirs_stream)
                .cloned()
                .collect();
            unwrap_schemas(&format!("{modes:?}"), &mut theirs, &mut ours, &mut found);
            theirs_stream = theirs.split_off(theirs_snapshot.len());
            theirs_snapshot = theirs;
        }
        compare(modes, &theirs_snapshot, &theirs_stream, &ours, &mut found);
    }
    daemon.signal("TERM").unwrap();
    daemon.wait(Duration::from_secs(15)).unwrap();
    assert!(
        found.is_empty(),
        "siphon differs from Debezium beyond the allowed differences:\n{}",
        found.join("\n")
    );
}
