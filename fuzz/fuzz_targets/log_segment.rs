//! The file log's segment reader and recovery (logs/file): segment files written into a
//! fresh directory, the log opened (read-only, then for writing, which cuts a torn or
//! damaged tail) and read from its start to its end. Two kinds of input (the first byte):
//!
//! - even: the bytes are the segment files themselves (one, or two with the first's index:
//!   fuzz/src/segments.rs has the layout) — real segments in the seeds. Every record read
//!   must be one whose frame, checksum and all, is in the files: nothing is made up.
//! - odd: records the input describes are appended through the log, its files are then
//!   damaged as the input says (bytes flipped, cut short), and the log opened again. Every
//!   record read must be the one appended at its offset.
//!
//! Both: offsets only grow, and an append after recovery reads back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use siphon_fuzz::segments;

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((mode, rest)) if mode & 1 == 0 => segments::raw(*mode, rest),
        Some((_, rest)) => segments::damaged(rest),
        None => {}
    }
});
