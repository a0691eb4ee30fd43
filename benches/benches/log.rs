//! Criterion benches of the file change log: append (fsync per batch, and none) and
//! sequential replay. `siphon-bench log` gives the same figures next to the raw reference.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use siphon_core::log::{LogReader, NewRecord};
use siphon_log_file::{FileLog, FileLogConfig, FsyncPolicy};

const BATCH: usize = 1000;

fn records(size: usize) -> Vec<NewRecord> {
    (0..BATCH as u64)
        .map(|i| NewRecord {
            key: i.to_le_bytes().to_vec(),
            value: vec![b'x'; size],
            ..Default::default()
        })
        .collect()
}

fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("log_append");
    for size in [200usize, 2048] {
        for (name, fsync) in [
            ("fsync_batch", FsyncPolicy::Batch),
            ("no_fsync", FsyncPolicy::Never),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let log = FileLog::open(
                dir.path(),
                FileLogConfig {
                    fsync,
                    ..FileLogConfig::default()
                },
            )
            .unwrap();
            let batch = records(size);
            group.throughput(Throughput::Elements(BATCH as u64));
            group.bench_with_input(BenchmarkId::new(name, size), &batch, |b, batch| {
                b.iter(|| log.append_blocking(batch).unwrap());
            });
        }
    }
    group.finish();
}

fn replay(c: &mut Criterion) {
    let mut group = c.benchmark_group("log_replay");
    for size in [200usize, 2048] {
        let dir = tempfile::tempdir().unwrap();
        let log = FileLog::open(
            dir.path(),
            FileLogConfig {
                fsync: FsyncPolicy::Never,
                ..FileLogConfig::default()
            },
        )
        .unwrap();
        let batch = records(size);
        for _ in 0..100 {
            log.append_blocking(&batch).unwrap();
        }
        group.throughput(Throughput::Elements(100 * BATCH as u64));
        group.bench_function(BenchmarkId::new("sequential", size), |b| {
            b.iter(|| {
                let mut reader = log.file_reader(0).unwrap();
                let mut n = 0;
                loop {
                    let got = reader.read_available(10_000).unwrap().len();
                    if got == 0 {
                        break;
                    }
                    n += got;
                }
                assert_eq!(n, 100 * BATCH);
            });
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = append, replay
}
criterion_main!(benches);
