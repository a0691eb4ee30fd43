//! siphon's Elasticsearch/OpenSearch sink (`kind = "elasticsearch"`): one document per row,
//! `_id` from the primary key, written through `_bulk` with `version` = log offset and
//! `version_type = external`, so the cluster itself refuses a stale write (409, which means
//! "already applied"). Works with Elasticsearch 7–9 and OpenSearch 1–3: only `_bulk`, `_mget`,
//! `_delete_by_query` and index deletion are used.
//!
//! A column the source left unchanged (PostgreSQL TOAST) takes its value from the stored
//! document (`_mget`), since an externally versioned write replaces the whole document.

mod config;
mod sink;

pub use config::ElasticsearchSinkConfig;
pub use sink::ElasticsearchSink;

use siphon_core::Result;
use siphon_core::kind::{Kind, SinkKind};
use siphon_core::sink::Sink;

/// `kind = "elasticsearch"`.
#[derive(Debug)]
pub struct ElasticsearchKind;

impl Kind for ElasticsearchKind {
    const NAME: &'static str = "elasticsearch";
    type Config = ElasticsearchSinkConfig;
    fn validate(config: &ElasticsearchSinkConfig) -> std::result::Result<(), String> {
        config.validate()
    }
}

impl SinkKind for ElasticsearchKind {
    fn build(
        config: &ElasticsearchSinkConfig,
        pipeline: &str,
        sink: &str,
    ) -> Result<Box<dyn Sink>> {
        Ok(Box::new(ElasticsearchSink::new(
            config.clone(),
            pipeline,
            sink,
        )?))
    }
}
