//! librdkafka's client settings from siphon's: brokers, TLS, SASL and the user's properties.
//! A `ClientConfig` holds the SASL password in the clear, so it is never logged or put in an
//! error.

use rdkafka::ClientConfig;
use siphon_core::tls::TlsMode;
use siphon_core::{Error, Result};

use crate::config::Connection;

impl Connection {
    /// librdkafka's settings for a client of this cluster, `client.id` set to `client_id`.
    pub fn client_config(&self, client_id: &str) -> Result<ClientConfig> {
        let mut config = ClientConfig::new();
        for (key, value) in &self.client {
            config.set(key, value);
        }
        config
            .set("bootstrap.servers", self.brokers.joined())
            .set("client.id", client_id)
            // Broker addresses that do not resolve yet (a cluster starting) are retried.
            .set("socket.keepalive.enable", "true");
        let protocol = match (&self.tls, &self.sasl) {
            (None, None) => "plaintext",
            (Some(_), None) => "ssl",
            (None, Some(_)) => "sasl_plaintext",
            (Some(_), Some(_)) => "sasl_ssl",
        };
        config.set("security.protocol", protocol);
        if let Some(tls) = &self.tls {
            let verify = tls.mode != TlsMode::Require;
            config.set(
                "enable.ssl.certificate.verification",
                if verify { "true" } else { "false" },
            );
            config.set(
                "ssl.endpoint.identification.algorithm",
                if tls.mode == TlsMode::VerifyFull {
                    "https"
                } else {
                    "none"
                },
            );
            if let Some(ca) = &tls.ca_file {
                config.set("ssl.ca.location", ca.display().to_string());
            }
            if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
                config
                    .set("ssl.certificate.location", cert.display().to_string())
                    .set("ssl.key.location", key.display().to_string());
            }
        }
        if let Some(sasl) = &self.sasl {
            let password = sasl.password().map_err(Error::Config)?;
            config
                .set("sasl.mechanism", sasl.mechanism.name())
                .set("sasl.username", &sasl.username)
                .set("sasl.password", password.expose());
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use siphon_core::Secret;

    use super::*;
    use crate::config::{Brokers, KafkaSasl, KafkaTls, SaslMechanism};

    #[test]
    fn tls_and_sasl_become_librdkafka_settings() {
        let connection = Connection {
            brokers: Brokers::Many(vec!["a:9092".into(), "b:9093".into()]),
            tls: Some(KafkaTls {
                mode: TlsMode::VerifyCa,
                ca_file: Some("/ca.pem".into()),
                cert_file: None,
                key_file: None,
            }),
            sasl: Some(KafkaSasl {
                mechanism: SaslMechanism::ScramSha512,
                username: "siphon".into(),
                password: Some(Secret::new("hunter2")),
                password_file: None,
            }),
            client: BTreeMap::from([("linger.ms".to_owned(), "7".to_owned())]),
        };
        let config = connection.client_config("siphon-test").unwrap();
        let get = |k: &str| config.get(k).map(str::to_owned);
        assert_eq!(get("bootstrap.servers").as_deref(), Some("a:9092,b:9093"));
        assert_eq!(get("security.protocol").as_deref(), Some("sasl_ssl"));
        assert_eq!(get("sasl.mechanism").as_deref(), Some("SCRAM-SHA-512"));
        assert_eq!(get("sasl.password").as_deref(), Some("hunter2"));
        assert_eq!(get("ssl.ca.location").as_deref(), Some("/ca.pem"));
        assert_eq!(
            get("ssl.endpoint.identification.algorithm").as_deref(),
            Some("none")
        );
        assert_eq!(get("linger.ms").as_deref(), Some("7"));
        // The settings' own Debug never shows the password.
        assert!(!format!("{connection:?}").contains("hunter2"));
    }

    #[test]
    fn bad_settings_name_their_key() {
        let mut connection = Connection {
            brokers: Brokers::One("localhost".into()),
            tls: None,
            sasl: None,
            client: BTreeMap::new(),
        };
        assert!(connection.validate().unwrap_err().contains("brokers"));
        connection.brokers = Brokers::One("localhost:9092".into());
        connection.validate().unwrap();
        connection.client.insert("sasl.password".into(), "x".into());
        assert!(connection.validate().unwrap_err().contains("[sasl]"));
    }
}
