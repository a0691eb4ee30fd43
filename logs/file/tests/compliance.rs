//! The file log keeps every promise of the log compliance suite, and all it adds.

use std::sync::Arc;

use siphon_core::kind::{LogContext, LogKind};
use siphon_core::log::ChangeLog;
use siphon_core::position::NoDecoder;
use siphon_core::testing::log::{LogUnderTest, assert_log_compliance};
use siphon_core::units::ByteSize;
use siphon_log_file::{FileLogConfig, FileLogKind};

/// A log in a directory of its own, with small segments and a small key map, so that the
/// suite's appends roll segments and its maintenance compacts in several passes.
struct FileUnderTest {
    dir: tempfile::TempDir,
}

impl FileUnderTest {
    fn context(&self) -> LogContext {
        LogContext {
            pipeline: "compliance".into(),
            dir: self.dir.path().to_owned(),
            positions: Arc::new(NoDecoder),
        }
    }

    fn config() -> FileLogConfig {
        FileLogConfig {
            segment_size: ByteSize(4096),
            compaction_memory: ByteSize(2048),
            compaction_dirty_ratio: 0.0,
            ..FileLogConfig::default()
        }
    }
}

#[async_trait::async_trait]
impl LogUnderTest for FileUnderTest {
    async fn open(&self) -> siphon_core::Result<Arc<dyn ChangeLog>> {
        FileLogKind::open(&Self::config(), &self.context())
    }

    async fn open_read_only(&self) -> siphon_core::Result<Option<Arc<dyn ChangeLog>>> {
        FileLogKind::open_existing(&Self::config(), &self.context())
    }
}

#[tokio::test]
async fn the_file_log_keeps_every_promise() {
    assert_log_compliance(async || FileUnderTest {
        dir: tempfile::tempdir().unwrap(),
    })
    .await;
}
