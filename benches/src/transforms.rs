//! Events through a chain of three transforms vs none (issue 23): what the runtime's prefetch
//! does for each record of a sink — decode it from the log, pass it through the stages —
//! over a warm log, both sides in the same run (none, three, three, none).

use std::time::{Duration, Instant};

use siphon_core::event::Event;
use siphon_core::sink::routing::Routing;
use siphon_core::sink::stage::Stages;
use siphon_source_postgres::PostgresKind;
use siphon_transform::TransformConfig;

use crate::figure::{Figure, Measure, Rates, Target, thousands};
use crate::sinks::{WarmLog, events};

/// The chain: a row filter every row passes, a keyed mask of `note` (HMAC-SHA-256, the key in
/// `key_file`) and a rename of `city`; with `only`, that kind of the three alone.
fn chain(key_file: &std::path::Path, only: Option<&str>) -> anyhow::Result<Vec<TransformConfig>> {
    let all = [
        serde_json::json!({"kind": "filter_rows", "when": "row.status == 'paid' && row.amount >= 0.0"}),
        serde_json::json!({"kind": "mask", "columns": ["public.orders.note"], "with": "hmac_sha256",
         "key_file": key_file}),
        serde_json::json!({"kind": "rename_columns", "columns": {"city": "town"}}),
    ];
    let chosen: Vec<serde_json::Value> = all
        .into_iter()
        .filter(|t| only.is_none_or(|kind| t["kind"] == kind))
        .collect();
    anyhow::ensure!(
        !chosen.is_empty(),
        "--only: one of filter_rows, mask, rename_columns"
    );
    Ok(serde_json::from_value(serde_json::Value::Array(chosen))?)
}

/// Decodes every record of `log` and passes it through `stages`; every event must pass.
fn pass(log: &WarmLog, stages: &Stages) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut kept = 0usize;
    for bytes in log.iter() {
        let mut event = Event::decode(bytes, &log.schemas, &PostgresKind)?;
        if stages.apply(&mut event).map_err(anyhow::Error::msg)? {
            kept += 1;
        }
        std::hint::black_box(&event);
    }
    anyhow::ensure!(kept == log.len(), "{kept} of {} events passed", log.len());
    Ok(started.elapsed())
}

/// The figure: `rows` events through three transforms (or the one kind `only` names) vs
/// through none.
pub fn measure(rows: u64, only: Option<&str>) -> anyhow::Result<Vec<Figure>> {
    let log = events(rows)?;
    let dir = tempfile::tempdir()?;
    let key = dir.path().join("mask.key");
    std::fs::write(&key, "bench-key\n")?;
    let none = Routing::default().stages();
    let three = none
        .clone()
        .then(siphon_transform::build(&chain(&key, only)?, "transforms")?);
    let first = pass(&log, &none)?;
    let with = [pass(&log, &three)?, pass(&log, &three)?];
    let last = pass(&log, &none)?;
    Ok(vec![Figure {
        what: match only {
            None => "three transforms (filter_rows, keyed mask, rename_columns)".into(),
            Some(kind) => format!("one transform ({kind}) of the three"),
        },
        workload: format!("{} events decoded from the log", thousands(rows)),
        measure: Measure::Rates(Rates::timed(
            "events",
            "the same events through no transforms",
            rows,
            &with,
            &[first, last],
        )),
        target: Target::new(0.7, 23),
    }])
}
