//! Settings of the embedded file log.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use siphon_core::units::{ByteSize, HumanDuration};

/// When appended records are fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum FsyncPolicy {
    /// After every append batch (group commit): nothing a source confirmed is ever lost,
    /// even on power loss. The default.
    #[default]
    Batch,
    /// At most `fsync_interval` after an append: fewer fsyncs, records visible later.
    Interval,
    /// Never explicitly: records survive a crash of siphon but not of the machine.
    Never,
}

impl TryFrom<String> for FsyncPolicy {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        match value.as_str() {
            "batch" => Ok(FsyncPolicy::Batch),
            "interval" => Ok(FsyncPolicy::Interval),
            "never" => Ok(FsyncPolicy::Never),
            other => Err(format!(
                "unknown fsync policy {other:?}; allowed: \"batch\", \"interval\", \"never\""
            )),
        }
    }
}

/// Settings of the embedded file log (`[pipelines.NAME.log]` with `kind = "file"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileLogConfig {
    /// Size at which a segment file is closed and a new one started.
    pub segment_size: ByteSize,
    /// When appends are fsynced: "batch" (every append batch), "interval", "never".
    pub fsync: FsyncPolicy,
    /// With `fsync = "interval"`, the longest a record waits for its fsync.
    pub fsync_interval: HumanDuration,
    /// Delete segments older than this once every sink has read them. Unset: keep.
    pub retention: Option<HumanDuration>,
    /// Delete the oldest segments, once every sink has read them, while the log is larger
    /// than this. Unset: no limit.
    pub retention_size: Option<ByteSize>,
    /// Hard cap: past this size the oldest segments go even if a sink has not read them; that
    /// sink is marked as needing a replay. Unset: no cap (the disk is the limit).
    pub max_size: Option<ByteSize>,
    /// Keep only the newest record of each key in closed segments, so that a replay from
    /// offset 0 rebuilds current state in bounded space.
    pub compaction: bool,
    /// How long a delete stays in the log (after every sink has read it) before compaction
    /// may drop the key entirely.
    pub delete_retention: HumanDuration,
    /// Memory a compaction pass may use for its map of keys (each key's bytes and about 64
    /// more). A pass over more distinct keys than fit stops where the map is full; the next
    /// pass goes on from there.
    pub compaction_memory: ByteSize,
    /// The share of the log (its closed segments) written since the last compaction, from 0
    /// to 1, at which a compaction pass is worth its rewrite.
    pub compaction_dirty_ratio: f64,
    /// Bytes between two entries of a segment's sparse offset index.
    pub index_interval: ByteSize,
    /// How often retention and compaction run.
    pub maintenance_interval: HumanDuration,
}

impl Default for FileLogConfig {
    fn default() -> Self {
        FileLogConfig {
            segment_size: ByteSize(128 << 20),
            fsync: FsyncPolicy::Batch,
            fsync_interval: HumanDuration(Duration::from_millis(100)),
            retention: None,
            retention_size: None,
            max_size: None,
            compaction: true,
            delete_retention: HumanDuration(Duration::from_secs(86_400)),
            compaction_memory: ByteSize(64 << 20),
            compaction_dirty_ratio: 0.5,
            index_interval: ByteSize(4096),
            maintenance_interval: HumanDuration(Duration::from_secs(60)),
        }
    }
}

impl FileLogConfig {
    /// Checks the settings against each other; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.segment_size.0 < 4096 {
            return Err(format!(
                "segment_size = \"{}\" is too small; use at least 4KiB",
                self.segment_size
            ));
        }
        if self.compaction_memory.0 < 256 {
            return Err(format!(
                "compaction_memory = \"{}\" is too small; use at least 256B (a few MiB serve)",
                self.compaction_memory
            ));
        }
        if !(0.0..=1.0).contains(&self.compaction_dirty_ratio) {
            return Err(format!(
                "compaction_dirty_ratio = {} is out of range; allowed: 0 to 1",
                self.compaction_dirty_ratio
            ));
        }
        if self.index_interval.0 == 0 {
            return Err("index_interval must be more than 0 bytes".into());
        }
        if let Some(max) = self.max_size
            && max.0 < 2 * self.segment_size.0
        {
            return Err(format!(
                "max_size = \"{max}\" must be at least twice segment_size (\"{}\"), since the \
                 segment being written is never deleted",
                self.segment_size
            ));
        }
        Ok(())
    }
}
