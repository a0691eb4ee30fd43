//! librdkafka's errors as siphon's, with a kind that says whether retrying helps.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use siphon_core::Error;

/// Codes that no retry can mend: credentials, rights, settings, a record the broker refuses
/// for its size, a producer another one fenced.
fn permanent(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        code,
        C::Authentication
            | C::SaslAuthenticationFailed
            | C::TopicAuthorizationFailed
            | C::GroupAuthorizationFailed
            | C::ClusterAuthorizationFailed
            | C::TransactionalIdAuthorizationFailed
            | C::InvalidConfig
            | C::InvalidReplicationFactor
            | C::InvalidPartitions
            | C::PolicyViolation
            | C::MessageSizeTooLarge
            | C::InvalidRecord
            | C::InvalidTopic
            | C::ProducerFenced
            | C::InvalidProducerEpoch
            | C::Fenced
            | C::Fatal
            | C::UnsupportedVersion
            | C::UnsupportedFeature
            | C::UnsupportedForMessageFormat
            | C::InvalidArgument
            | C::Conflict
    )
}

/// Whether `code` says another producer took over this one's `transactional.id`.
pub fn is_fence(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        code,
        C::ProducerFenced | C::InvalidProducerEpoch | C::Fenced
    )
}

/// Whether a producer error means another process took over this producer's
/// `transactional.id` (a second siphon for the same pipeline started).
pub fn is_fenced(e: &KafkaError) -> bool {
    match e {
        KafkaError::Transaction(t) => {
            is_fence(t.code()) || t.is_fatal() && t.string().contains("fenced")
        }
        other => other.rdkafka_error_code().is_some_and(is_fence),
    }
}

/// `e`, met while doing `what`, as siphon's error.
pub fn kafka_error(what: &str, e: &KafkaError) -> Error {
    let message = format!("kafka: {what}: {e}");
    let code_is_permanent = e.rdkafka_error_code().is_some_and(permanent);
    let transaction_is_permanent = matches!(e, KafkaError::Transaction(t) if t.is_fatal());
    let settings = matches!(
        e,
        KafkaError::ClientConfig(..) | KafkaError::ClientCreation(_) | KafkaError::Nul(_)
    );
    if code_is_permanent || transaction_is_permanent || settings {
        Error::permanent(message)
    } else {
        Error::transient(message)
    }
}
