//! What librdkafka reports, in siphon's log: a broker out of reach (which every client of it
//! reports, and retries by itself) as a warning, the end of a partition (a consumer asked for
//! it, and reads it as such) not at all, anything else as an error.

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// The context of siphon's consumers and admin clients.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl ClientContext for Quiet {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_line(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        log_error(&error, reason);
    }
}

impl ConsumerContext for Quiet {}

/// One of librdkafka's log lines.
pub(crate) fn log_line(level: RDKafkaLogLevel, fac: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical => {
            tracing::error!(target: "librdkafka", "{fac} {message}");
        }
        RDKafkaLogLevel::Error | RDKafkaLogLevel::Warning => {
            tracing::warn!(target: "librdkafka", "{fac} {message}");
        }
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(target: "librdkafka", "{fac} {message}");
        }
        RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", "{fac} {message}"),
    }
}

/// One of librdkafka's client errors (those it also hands to the call that met them are
/// reported there).
pub(crate) fn log_error(error: &KafkaError, reason: &str) {
    use RDKafkaErrorCode as C;
    let code = error.rdkafka_error_code();
    match code {
        Some(C::PartitionEOF) => {}
        Some(
            C::AllBrokersDown
            | C::BrokerTransportFailure
            | C::Resolve
            | C::MessageTimedOut
            | C::RequestTimedOut
            | C::OperationTimedOut
            | C::NetworkException,
        ) => tracing::warn!(target: "librdkafka", "{error}: {reason}"),
        _ if matches!(error, KafkaError::PartitionEOF(_)) => {}
        _ => tracing::error!(target: "librdkafka", "{error}: {reason}"),
    }
}
