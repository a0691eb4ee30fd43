//! The file log against its compliance suite, crashes and the source context: one test
//! binary, each file a module (the compaction memory test, with its counting allocator, is a
//! binary of its own).

mod compliance;
mod crash;
mod source_context;
