//! `[pipelines.NAME.sinks.SINK]` with `kind = "rabbitmq"`: the keys every message sink has
//! (`siphon_sink_message::message_config!`), and the server, exchange and TLS.

use std::path::PathBuf;

use serde::Deserialize;
use siphon_core::units::HumanDuration;
use siphon_core::{ConnectionUrl, Secret};

siphon_sink_message::message_config! {
    /// Settings of a RabbitMQ sink.
    pub struct RabbitmqSinkConfig {
        /// `amqp://user[:password]@host[:port]/vhost` (`amqps://` for TLS; the default vhost
        /// `/` is written `%2f`). The password is better given as `password` or
        /// `SIPHON__PIPELINES__P__SINKS__S__PASSWORD`.
        #[serde(default = "default_url")]
        pub url: ConnectionUrl,
        /// The password (overrides one in the URL).
        #[serde(default)]
        pub password: Option<Secret>,
        /// The exchange every message is published to, its routing key the destination.
        /// Unset: the prefix.
        #[serde(default)]
        pub exchange: Option<String>,
        /// The exchange's type, when the sink declares it: "topic", "direct", "fanout" or
        /// "headers".
        #[serde(default)]
        pub exchange_type: ExchangeType,
        /// Declare the exchange (durable) when the sink opens; `false`: it must exist.
        #[serde(default = "siphon_sink_message::yes")]
        pub declare_exchange: bool,
        /// How long to wait for the broker (a connection, a publisher confirm).
        #[serde(default = "default_timeout")]
        pub timeout: HumanDuration,
        /// CA certificates (PEM) to trust with an `amqps://` URL, instead of the system's.
        #[serde(default)]
        pub tls_ca_file: Option<PathBuf>,
    }
}

/// An exchange's type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExchangeType {
    /// Routed by pattern on the routing key (`shop.public.*`).
    #[default]
    Topic,
    /// Routed by the whole routing key.
    Direct,
    /// To every bound queue.
    Fanout,
    /// Routed by header values.
    Headers,
}

fn default_url() -> ConnectionUrl {
    ConnectionUrl::new("amqp://guest:guest@127.0.0.1:5672/%2f")
}

fn default_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(30))
}

impl RabbitmqSinkConfig {
    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        self.message().validate()?;
        let url = self.url.expose();
        if !(url.starts_with("amqp://") || url.starts_with("amqps://")) {
            return Err(format!(
                "url: {:?} must start with amqp:// or amqps://",
                &self.url
            ));
        }
        url.parse::<lapin::uri::AMQPUri>()
            .map_err(|e| format!("url: {:?}: {e}", &self.url))?;
        if self.exchange.as_deref() == Some("") {
            return Err("exchange: the default exchange (\"\") cannot be declared and routes by queue name; name an exchange, or leave it unset for the prefix".into());
        }
        if self.timeout.0.is_zero() {
            return Err("timeout: more than 0 (\"30s\", say)".into());
        }
        Ok(())
    }
}
