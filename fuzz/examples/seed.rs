//! Writes the fuzz targets' seed corpora from bytes `fuzz/seed.sh` captured (pgoutput
//! messages, a MariaDB binlog) and the fixture's logs of an earlier build: each target's
//! inputs in its format (fuzz/src), and the registry of the real tables' schemas the event
//! decoder's target looks ids up in.
//!
//! Usage: seed <capture dir> <fixture data dir>  (run from fuzz/, as seed.sh does)

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use mysql_async::binlog::events::{
    Event as BinlogEvent, EventData, FormatDescriptionEvent, TableMapEvent,
};
use mysql_async::binlog::{BinlogVersion, EventType};
use siphon_core::Event;
use siphon_core::log::{ChangeLog, LogReader, NewRecord, RecordFlags};
use siphon_core::schema::{SchemaStore, TableSchema};
use siphon_core::testing::MemorySchemas;
use siphon_core::units::ByteSize;
use siphon_format::json::{value_json, value_schema};
use siphon_fuzz::rows::Spec;
use siphon_fuzz::{Positions, binlog, frame};
use siphon_log_file::{FileLog, FileLogConfig};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// One target's corpus directory.
struct Corpus {
    dir: PathBuf,
    files: usize,
}

impl Corpus {
    fn new(target: &str) -> Result<Corpus> {
        let dir = Path::new("corpus-seed").join(target);
        fs::create_dir_all(&dir)?;
        Ok(Corpus { dir, files: 0 })
    }

    fn add(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        fs::write(self.dir.join(name), bytes)?;
        self.files += 1;
        Ok(())
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, capture, fixture] = &args[..] else {
        return Err("usage: seed <capture dir> <fixture data dir>".into());
    };
    let (capture, fixture) = (Path::new(capture), Path::new(fixture));
    // One registry for every table: the event decoder's target embeds it. The fixture's
    // PostgreSQL log's schemas go first, so that their ids stay theirs and that log's
    // records of earlier formats find their schemas.
    let registry = MemorySchemas::default();
    let mut events = fixture_events(fixture, &registry)?;
    events.extend(pgoutput(capture, &registry)?);
    events.extend(mariadb(capture, &registry)?);
    mysql()?;
    log_segments(fixture, &events)?;
    encoded_events(&events)?;
    json_values(&events)?;
    let all: Vec<TableSchema> = registry.all().iter().map(|s| (**s).clone()).collect();
    fs::create_dir_all("data")?;
    fs::write("data/schemas.postcard", postcard::to_stdvec(&all)?)?;
    eprintln!("{} schemas in data/schemas.postcard", all.len());
    Ok(())
}

/// The fixture's events (PostgreSQL, MariaDB, generator pipelines of an earlier build), their
/// schemas registered in `registry`; each pipeline's raw records of earlier formats are
/// event_decode seeds as they are.
fn fixture_events(fixture: &Path, registry: &MemorySchemas) -> Result<Vec<Event>> {
    let mut corpus = Corpus::new("event_decode")?;
    let mut out = Vec::new();
    for pipeline in ["pg", "my", "gen"] {
        let scratch = tempfile::tempdir()?;
        for entry in fs::read_dir(fixture.join("pipelines").join(pipeline).join("log"))? {
            let entry = entry?;
            fs::copy(entry.path(), scratch.path().join(entry.file_name()))?;
        }
        let log = FileLog::open_read_only(scratch.path(), FileLogConfig::default())?;
        for schema in log.schemas().all() {
            registry.register(&schema)?;
        }
        let mut reader = log.file_reader(log.start_offset())?;
        let mut formats = BTreeMap::new();
        loop {
            let records = reader.read_available(1000)?;
            if records.is_empty() {
                break;
            }
            for record in records {
                let format = record.value.first().copied().unwrap_or(0);
                let n = formats.entry(format).or_insert(0);
                if *n < 8 {
                    corpus.add(&format!("{pipeline}-format{format}-{n}"), &record.value)?;
                    *n += 1;
                }
                let mut event = Event::decode(&record.value, log.schemas(), &Positions)?;
                if let Some(schema) = &event.schema {
                    event.schema = Some(registry.register(schema)?);
                }
                out.push(event);
            }
        }
        eprintln!("fixture {pipeline}: formats {formats:?}");
    }
    Ok(out)
}

/// The pgoutput seeds: each transaction with the Relation messages before it, framed; the
/// events they make.
fn pgoutput(capture: &Path, registry: &MemorySchemas) -> Result<Vec<Event>> {
    let mut corpus = Corpus::new("pgoutput")?;
    let mut events = Vec::new();
    for mode in ["text", "binary"] {
        let text = fs::read_to_string(capture.join(format!("pg-{mode}.hex")))?;
        let messages: Vec<Vec<u8>> = text
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(_, hex)| unhex(hex))
            .collect();
        let mut stream = siphon_source_postgres::fuzzing::Stream::default();
        for (i, m) in messages.iter().enumerate() {
            match stream.message(registry, i as u64, Bytes::copy_from_slice(m)) {
                Ok(made) => events.extend(made),
                Err(e) => eprintln!("pgoutput {mode} message {i}: {e}"),
            }
        }
        let (mut relations, mut tx, mut n) = (Vec::new(), Vec::new(), 0);
        for m in messages {
            match m.first() {
                Some(b'R' | b'Y') => relations.push(m),
                Some(b'B') => tx = vec![m],
                Some(b'C') => {
                    tx.push(m);
                    let mut seed = relations.clone();
                    seed.append(&mut tx);
                    corpus.add(&format!("{mode}-tx{n}"), &frame(&seed))?;
                    n += 1;
                }
                Some(_) if !tx.is_empty() => tx.push(m),
                _ => {
                    corpus.add(&format!("{mode}-alone{n}"), &frame(&[m]))?;
                    n += 1;
                }
            }
        }
    }
    eprintln!("pgoutput: {} seeds, {} events", corpus.files, events.len());
    Ok(events)
}

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// The MariaDB binlog's seeds: each transaction after the binlog's first events (its format
/// description), for binlog_event; each table map with a rows event of its table, in
/// MariaDB's form and MySQL's, for binlog_rows. The events they make.
fn mariadb(capture: &Path, registry: &MemorySchemas) -> Result<Vec<Event>> {
    let bytes = fs::read(capture.join("mariadb.binlog"))?;
    let all = binlog::events(&bytes);
    let mut made = Vec::new();
    let mut stream = siphon_source_mysql::fuzzing::Binlog::default();
    for (i, e) in all.iter().enumerate() {
        match stream.event(registry, e) {
            Ok(events) => made.extend(events),
            Err(err) => eprintln!("binlog event {i} (type {}): {err}", e[4]),
        }
    }
    for d in &stream.disagreements {
        eprintln!("the row-image decoders disagree:\n{d}");
    }

    let mut corpus = Corpus::new("binlog_event")?;
    let first_gtid = all.iter().position(|e| e[4] == 162).unwrap_or(all.len());
    let head: Vec<u8> = all[..first_gtid].concat();
    let mut start = first_gtid;
    for end in (first_gtid + 1..=all.len()).filter(|&i| i == all.len() || all[i][4] == 162) {
        let mut seed = binlog::MAGIC.to_vec();
        seed.extend_from_slice(&head);
        seed.extend(all[start..end].concat());
        corpus.add(&format!("mariadb-tx{start}"), &seed)?;
        start = end;
    }
    eprintln!("binlog_event: {} MariaDB seeds", corpus.files);

    let mut corpus = Corpus::new("binlog_rows")?;
    let mut fde = FormatDescriptionEvent::new(BinlogVersion::Version4);
    let mut maps: BTreeMap<u64, TableMapEvent<'static>> = BTreeMap::new();
    let mut seen = HashSet::new();
    for bytes in &all {
        let event = BinlogEvent::read(&fde, &bytes[..])?;
        let kind = event.header().event_type_raw();
        if kind == EventType::FORMAT_DESCRIPTION_EVENT as u8 {
            fde = event
                .read_event::<FormatDescriptionEvent<'_>>()?
                .into_owned()
                .with_footer(event.footer());
            continue;
        }
        match event.read_data() {
            Ok(Some(EventData::TableMapEvent(tme))) => {
                maps.insert(tme.table_id(), tme.into_owned());
            }
            Ok(Some(EventData::RowsEvent(rows))) => {
                let Some(tme) = maps.get(&rows.table_id()) else {
                    continue;
                };
                // MariaDB's v1 rows event, and MySQL's v2 of the same rows.
                for kind in [kind, kind + 7] {
                    let Some(spec) = Spec::of(tme, kind, rows.rows_data()) else {
                        continue;
                    };
                    let seed = spec.write();
                    if seen.insert(seed.clone()) {
                        corpus.add(
                            &format!("{}-{kind}-{}", tme.table_name(), seen.len()),
                            &seed,
                        )?;
                    }
                }
            }
            _ => {}
        }
    }
    eprintln!(
        "binlog_rows: {} seeds; MariaDB: {} events",
        corpus.files,
        made.len()
    );
    Ok(made)
}

/// A query event (post-header: thread, time, schema length, error, no status variables).
fn query(schema: &str, sql: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&7u32.to_le_bytes());
    body.extend_from_slice(&0u32.to_le_bytes());
    body.push(schema.len() as u8);
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(schema.as_bytes());
    body.push(0);
    body.extend_from_slice(sql.as_bytes());
    body
}

/// MySQL 8's GTID event: flags, source uuid, number, logical clock, commit timestamp,
/// transaction length, server version.
fn gtid(gno: u64) -> Vec<u8> {
    let mut body = vec![1];
    body.extend_from_slice(&[
        0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42, 0x95,
        0x62,
    ]);
    body.extend_from_slice(&gno.to_le_bytes());
    body.push(2);
    body.extend_from_slice(&(gno - 1).to_le_bytes());
    body.extend_from_slice(&gno.to_le_bytes());
    body.extend_from_slice(&1_700_000_000_000_000u64.to_le_bytes()[..7]);
    body.push(200);
    body.extend_from_slice(&80036u32.to_le_bytes());
    body
}

/// MySQL's forms of the events no local server writes, without a format description (the
/// reader's default: v2 rows events, no checksums): a transaction under a GTID, one under an
/// anonymous GTID, an XA transaction prepared then committed, a DDL; the table map and rows
/// from binlog_rows' first MariaDB seeds, in v2.
fn mysql() -> Result<()> {
    let mut corpus = Corpus::new("binlog_event")?;
    let mut specs: Vec<Spec> = fs::read_dir("corpus-seed/binlog_rows")?
        .filter_map(|e| fs::read(e.ok()?.path()).ok())
        .filter_map(|b| Spec::read(&b))
        .filter(|s| s.kind >= 30 && !s.rows.is_empty())
        .collect();
    specs.sort_by_key(|s| std::cmp::Reverse(s.columns.len()));
    for (i, spec) in specs.iter().take(6).enumerate() {
        let [map, rows] = spec.events();
        let (map_body, rows_body) = (&map[binlog::HEADER..], &rows[binlog::HEADER..]);
        let gno = 10 + i as u64;
        let xid = format!("X'66757a7a{i:02x}',X'62',1");
        let mut pos = 4u32;
        let mut seed = Vec::new();
        let mut push = |kind: u8, body: &[u8]| {
            let e = binlog::event(kind, 1, pos, body);
            pos += e.len() as u32;
            seed.extend(e);
        };
        push(33, &gtid(gno));
        push(2, &query("db", "BEGIN"));
        push(19, map_body);
        push(rows[4], rows_body);
        push(16, &gno.to_le_bytes());
        push(34, &gtid(gno + 100));
        push(2, &query("db", "BEGIN"));
        push(19, map_body);
        push(rows[4], rows_body);
        push(2, &query("db", "COMMIT"));
        push(33, &gtid(gno + 200));
        push(2, &query("db", &format!("XA START {xid}")));
        push(19, map_body);
        push(rows[4], rows_body);
        push(2, &query("db", &format!("XA END {xid}")));
        let mut prepare = vec![0];
        prepare.extend_from_slice(&1u32.to_le_bytes());
        prepare.extend_from_slice(&5u32.to_le_bytes());
        prepare.extend_from_slice(&1u32.to_le_bytes());
        prepare.extend_from_slice(&[b'f', b'u', b'z', b'z', i as u8, b'b']);
        push(38, &prepare);
        push(33, &gtid(gno + 300));
        push(2, &query("db", &format!("XA COMMIT {xid}")));
        push(33, &gtid(gno + 400));
        push(2, &query("db", "ALTER TABLE t ADD COLUMN z INT"));
        let mut check = siphon_source_mysql::fuzzing::Binlog::default();
        let registry = MemorySchemas::default();
        let made: usize = binlog::events(&seed)
            .iter()
            .filter_map(|e| check.event(&registry, e).ok())
            .map(|events| events.len())
            .sum();
        eprintln!("MySQL seed {i}: {made} events");
        corpus.add(&format!("mysql-{i}"), &seed)?;
    }
    Ok(())
}

/// Segment files: the fixture's (an earlier build's), and a log of this build's written with
/// `events`; and damaged logs described for the target to write.
fn log_segments(fixture: &Path, events: &[Event]) -> Result<()> {
    let mut corpus = Corpus::new("log_segment")?;
    let logs = fixture.join("pipelines");
    for pipeline in ["pg", "my"] {
        let segment = fs::read(logs.join(pipeline).join("log/00000000000000000000.log"))?;
        corpus.add(
            &format!("{pipeline}-fixture"),
            &[&[0u8][..], &segment].concat(),
        )?;
    }
    let gen_log = logs.join("gen/log");
    corpus.add("gen-fixture-two", &two_segments(&gen_log, 0, 22)?)?;
    corpus.add("gen-fixture-last", &two_segments(&gen_log, 109, 130)?)?;

    let scratch = tempfile::tempdir()?;
    let config = FileLogConfig {
        segment_size: ByteSize(4096),
        index_interval: ByteSize(512),
        ..FileLogConfig::default()
    };
    let log = FileLog::open(scratch.path(), config)?;
    for event in events
        .iter()
        .filter(|e| e.source.table.as_ref() != "every_type")
        .take(60)
    {
        let flags = if event.key.is_none() {
            RecordFlags::TXN_END
        } else {
            RecordFlags::default()
        };
        log.append_blocking(&[NewRecord {
            key: event.log_key(),
            value: event.encode()?,
            flags,
        }])?;
    }
    let mut bases: Vec<u64> = fs::read_dir(scratch.path())?
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    bases.sort_unstable();
    drop(log);
    for pair in bases.windows(2).take(3) {
        corpus.add(
            &format!("this-build-{}", pair[0]),
            &two_segments(scratch.path(), pair[0], pair[1])?,
        )?;
    }
    if let Some(last) = bases.last() {
        let segment = fs::read(scratch.path().join(format!("{last:020}.log")))?;
        corpus.add("this-build-last", &[&[0u8][..], &segment].concat())?;
    }

    // Damaged: 1 (the mode), index interval 4 (× 16 bytes), records (key length, value
    // length in 8s, flags with bit 7 ending a batch), then damages.
    let mut records = Vec::new();
    for i in 0..20u8 {
        records.extend_from_slice(&[
            i % 8,
            i.wrapping_mul(37) % 64,
            (u8::from(i % 3 == 2) << 7) | (i % 16),
        ]);
    }
    let damages: [&[u8]; 5] = [
        &[],
        // The last segment's byte 100 flipped.
        &[255, 100, 0, 0x10],
        // The last segment cut inside a record.
        &[255, 0x30, 0x02, 0x01],
        // The first segment's index damaged, the second segment cut.
        &[1, 4, 0, 0xff, 4, 0x10, 0x00, 0x01],
        // The ID file damaged.
        &[0, 3, 0, 0x20],
    ];
    for (i, damage) in damages.iter().enumerate() {
        let seed = [&[1u8, 4, 20][..], &records, damage].concat();
        corpus.add(&format!("damaged-{i}"), &seed)?;
    }
    eprintln!("log_segment: {} seeds", corpus.files);
    Ok(())
}

/// The raw mode's two segments with the first's index (mode 6).
fn two_segments(dir: &Path, first: u64, second: u64) -> Result<Vec<u8>> {
    let index = fs::read(dir.join(format!("{first:020}.idx")))?;
    let one = fs::read(dir.join(format!("{first:020}.log")))?;
    let two = fs::read(dir.join(format!("{second:020}.log")))?;
    let mut out = vec![6];
    out.extend_from_slice(&(index.len() as u16).to_le_bytes());
    out.extend_from_slice(&index);
    out.extend_from_slice(&(one.len() as u16).to_le_bytes());
    out.extend_from_slice(&one);
    out.extend_from_slice(&((second - first) as u16).to_le_bytes());
    out.extend_from_slice(&two);
    Ok(out)
}

/// Each event as the log stores it (one of each table and operation, at most 4), with its
/// registered schema (format 5) and a few with column names (format 4).
fn encoded_events(events: &[Event]) -> Result<()> {
    let mut corpus = Corpus::new("event_decode")?;
    let mut count: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (i, event) in events.iter().enumerate() {
        let n = count
            .entry((event.source.table.to_string(), format!("{:?}", event.op)))
            .or_default();
        if *n >= 4 {
            continue;
        }
        *n += 1;
        corpus.add(&format!("{}-{i}", event.source.connector), &event.encode()?)?;
        if *n == 1 {
            let named = Event {
                schema: None,
                ..event.clone()
            };
            corpus.add(
                &format!("{}-{i}-named", event.source.connector),
                &named.encode()?,
            )?;
        }
    }
    eprintln!("event_decode: {} seeds", corpus.files);
    Ok(())
}

/// The events' distinct values (400 at most), as `[json, schema]`.
fn json_values(events: &[Event]) -> Result<()> {
    let mut corpus = Corpus::new("json_value")?;
    let mut seen = HashSet::new();
    let rows = events
        .iter()
        .flat_map(|e| [&e.before, &e.after, &e.key])
        .flatten();
    for (_, value) in rows.flat_map(|row| &row.0) {
        let text = serde_json::json!([value_json(value), value_schema(value)]).to_string();
        if seen.len() < 400 && seen.insert(text.clone()) {
            corpus.add(&format!("v{}", seen.len()), text.as_bytes())?;
        }
    }
    eprintln!("json_value: {} seeds", corpus.files);
    Ok(())
}
