//! `siphon-bench log`: appends to the file change log vs a raw sequential buffered write with
//! the same fsync cadence; replay of the log vs reading the same bytes raw.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use siphon_core::log::{LogReader, NewRecord};
use siphon_core::units::ByteSize;
use siphon_log_file::{FileLog, FileLogConfig, FsyncPolicy};

use crate::figure::{Figure, Measure, Rates, Target, thousands};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Fsync {
    /// fsync after every batch.
    Batch,
    /// never fsync.
    Never,
}

impl std::fmt::Display for Fsync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Fsync::Batch => "batch",
            Fsync::Never => "never",
        })
    }
}

/// A figure of this bench with the record size and fsync cadence it was measured at (`None`:
/// a replay).
#[derive(Debug)]
pub struct LogFigure {
    pub size: usize,
    pub fsync: Option<Fsync>,
    pub figure: Figure,
}

/// Bytes a record of `size` takes framed in the log (a 16-byte key, 29 bytes of framing).
fn framed(size: usize) -> f64 {
    (size + 16 + 29) as f64
}

/// Appends and replays of `records` records of each size (each figure the median of `runs`);
/// the files go under `dir`.
pub fn measure(
    dir: &Path,
    records: u64,
    sizes: &[usize],
    batch: usize,
    fsync: &[Fsync],
    runs: usize,
) -> anyhow::Result<Vec<LogFigure>> {
    let mut appends = Vec::new();
    let mut replays = Vec::new();
    for &size in sizes {
        for &policy in fsync {
            let raw = median(runs, || raw_write(dir, records, size, batch, policy))?;
            let log = median(runs, || log_append(dir, records, size, batch, policy))?;
            let cadence = match policy {
                Fsync::Batch => format!("fsync per batch of {}", thousands(batch as u64)),
                Fsync::Never => "no fsync".to_owned(),
            };
            appends.push(LogFigure {
                size,
                fsync: Some(policy),
                figure: Figure {
                    what: "log append".into(),
                    workload: format!("{} records of {size} B, {cadence}", thousands(records)),
                    measure: Measure::Rates(Rates::timed(
                        "records",
                        "raw buffered write, same fsync cadence",
                        records,
                        &[log],
                        &[raw],
                    )),
                    target: Target::new(0.7, 2),
                },
            });
        }
        let raw = median(runs, || raw_read(dir))?;
        let checked = median(runs, || checked_read(&dir.join("log"), records))?;
        let replay = median(runs, || log_replay(dir, records))?;
        let replay_beside = |reference: &str, reference_time, target| LogFigure {
            size,
            fsync: None,
            figure: Figure {
                what: "log replay".into(),
                workload: format!("{} records of {size} B", thousands(records)),
                measure: Measure::Rates(Rates::timed(
                    "records",
                    reference,
                    records,
                    &[replay],
                    &[reference_time],
                )),
                target,
            },
        };
        let target = if size == 200 {
            Target::new(0.5, 22)
        } else {
            None
        };
        replays.push(replay_beside(
            "raw sequential read (1 MiB reads)",
            raw,
            target,
        ));
        replays.push(replay_beside(
            "the segment read raw, each frame's CRC32C checked",
            checked,
            None,
        ));
    }
    appends.extend(replays);
    Ok(appends)
}

/// Prints the append table, then the replay table.
pub fn print(figures: &[LogFigure]) {
    println!(
        "| record | fsync | raw write rec/s | raw MB/s | log append rec/s | log MB/s | append ratio |"
    );
    println!("|---|---|---|---|---|---|---|");
    for f in figures {
        let (Some(policy), Measure::Rates(r)) = (f.fsync, &f.figure.measure) else {
            continue;
        };
        let bytes = framed(f.size);
        println!(
            "| {} B | {policy} | {:.0} | {:.1} | {:.0} | {:.1} | {:.2}x |",
            f.size,
            r.reference_rate(),
            r.reference_rate() * bytes / 1e6,
            r.siphon_rate(),
            r.siphon_rate() * bytes / 1e6,
            r.ratio(),
        );
    }
    println!(
        "\n| record | reference | reference rec/s | log replay rec/s | replay MB/s | replay ratio |"
    );
    println!("|---|---|---|---|---|---|");
    for f in figures {
        let (None, Measure::Rates(r)) = (f.fsync, &f.figure.measure) else {
            continue;
        };
        println!(
            "| {} B | {} | {:.0} | {:.0} | {:.1} | {:.2}x |",
            f.size,
            r.reference,
            r.reference_rate(),
            r.siphon_rate(),
            r.siphon_rate() * framed(f.size) / 1e6,
            r.ratio(),
        );
    }
}

fn median(
    runs: usize,
    mut f: impl FnMut() -> anyhow::Result<Duration>,
) -> anyhow::Result<Duration> {
    let mut times = (0..runs.max(1))
        .map(|_| f())
        .collect::<anyhow::Result<Vec<_>>>()?;
    times.sort();
    Ok(times[times.len() / 2])
}

fn value(size: usize, i: u64) -> Vec<u8> {
    let mut v = vec![b'x'; size];
    v[..8].copy_from_slice(&i.to_le_bytes());
    v
}

/// The reference: the same bytes (framed records are `size + key + 29` bytes) written
/// sequentially through a buffer, fsynced with the same cadence.
fn raw_write(
    dir: &Path,
    records: u64,
    size: usize,
    batch: usize,
    policy: Fsync,
) -> anyhow::Result<Duration> {
    let path = dir.join("raw.bin");
    let _ = std::fs::remove_file(&path);
    let mut file = File::create(&path)?;
    let frame = size + 16 + 29;
    let mut buf = Vec::with_capacity(frame * batch);
    let started = Instant::now();
    let mut i = 0;
    while i < records {
        buf.clear();
        let n = (batch as u64).min(records - i);
        for j in 0..n {
            buf.extend_from_slice(&(i + j).to_le_bytes());
            buf.resize(buf.len() + frame - 8, b'x');
        }
        file.write_all(&buf)?;
        if let Fsync::Batch = policy {
            file.sync_data()?;
        }
        i += n;
    }
    Ok(started.elapsed())
}

fn raw_read(dir: &Path) -> anyhow::Result<Duration> {
    let mut file = File::open(dir.join("raw.bin"))?;
    let mut buf = vec![0u8; 1 << 20];
    let started = Instant::now();
    let mut sum = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        sum = sum.wrapping_add(u64::from(buf[n - 1]));
    }
    std::hint::black_box(sum);
    Ok(started.elapsed())
}

/// The floor of a verified read: the log's segment files read in 1 MiB chunks, each frame's
/// checksum computed and compared, nothing decoded or handed out.
fn checked_read(log_dir: &Path, records: u64) -> anyhow::Result<Duration> {
    let mut segments: Vec<_> = std::fs::read_dir(log_dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    segments.retain(|p| p.extension().is_some_and(|e| e == "log"));
    segments.sort();
    let mut buf = vec![0u8; 1 << 20];
    let started = Instant::now();
    let mut seen = 0u64;
    for path in segments {
        let mut file = File::open(path)?;
        let mut end = 0;
        loop {
            let n = file.read(&mut buf[end..])?;
            if n == 0 {
                break;
            }
            end += n;
            let mut at = 0;
            while end - at >= 8 {
                let len = u32::from_le_bytes(buf[at..at + 4].try_into()?) as usize;
                let crc = u32::from_le_bytes(buf[at + 4..at + 8].try_into()?);
                if end - at < 8 + len {
                    break;
                }
                anyhow::ensure!(
                    crc32c::crc32c(&buf[at + 8..at + 8 + len]) == crc,
                    "bad frame"
                );
                (at, seen) = (at + 8 + len, seen + 1);
            }
            buf.copy_within(at..end, 0);
            end -= at;
            if end == buf.len() {
                buf.resize(buf.len() * 2, 0);
            }
        }
    }
    anyhow::ensure!(seen == records, "checked {seen} of {records} frames");
    Ok(started.elapsed())
}

fn log_append(
    dir: &Path,
    records: u64,
    size: usize,
    batch: usize,
    policy: Fsync,
) -> anyhow::Result<Duration> {
    let path = dir.join("log");
    let _ = std::fs::remove_dir_all(&path);
    let config = FileLogConfig {
        fsync: match policy {
            Fsync::Batch => FsyncPolicy::Batch,
            Fsync::Never => FsyncPolicy::Never,
        },
        segment_size: ByteSize(256 << 20),
        ..FileLogConfig::default()
    };
    let log = FileLog::open(&path, config)?;
    let mut batch_records = Vec::with_capacity(batch);
    // Only the appends are timed: building the records is the caller's work.
    let mut elapsed = Duration::ZERO;
    let mut i = 0;
    while i < records {
        batch_records.clear();
        let n = (batch as u64).min(records - i);
        for j in 0..n {
            batch_records.push(NewRecord {
                key: (i + j).to_le_bytes().repeat(2),
                value: value(size, i + j),
                ..Default::default()
            });
        }
        let started = Instant::now();
        log.append_blocking(&batch_records)?;
        elapsed += started.elapsed();
        i += n;
    }
    Ok(elapsed)
}

fn log_replay(dir: &Path, records: u64) -> anyhow::Result<Duration> {
    let log = FileLog::open_read_only(dir.join("log"), FileLogConfig::default())?;
    let mut reader = log.file_reader(0)?;
    let started = Instant::now();
    let mut seen = 0u64;
    loop {
        let batch = reader.read_available(10_000)?;
        if batch.is_empty() {
            break;
        }
        seen += batch.len() as u64;
    }
    anyhow::ensure!(seen == records, "replayed {seen} of {records} records");
    Ok(started.elapsed())
}
