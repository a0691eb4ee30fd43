//! TLS to a database with rustls, in libpq's modes: `require` (encrypt, trust any
//! certificate), `verify_ca` (the certificate chains to `tls_ca_file`), `verify_full` (and
//! names the host). Shared by the PostgreSQL source and sink (feature `tls`).

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, Error as TlsError, RootCertStore,
    SignatureScheme,
};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// TLS to the server, as libpq's `sslmode` has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum TlsMode {
    /// No TLS.
    #[default]
    Disable,
    /// Encrypt; trust any server certificate.
    Require,
    /// Encrypt; the certificate must chain to `tls_ca_file`.
    VerifyCa,
    /// Like `verify_ca`, and the certificate must name the host.
    VerifyFull,
}

impl TlsMode {
    /// The mode in force for a URL: `configured`, or for a URL whose scheme asks for TLS
    /// (`https://`, NATS's `tls://`) `verify_full`, else none.
    pub fn for_url(configured: Option<TlsMode>, url: &str) -> TlsMode {
        match configured {
            Some(mode) => mode,
            None if url.starts_with("https://") || url.starts_with("tls://") => TlsMode::VerifyFull,
            None => TlsMode::Disable,
        }
    }
}

impl TryFrom<String> for TlsMode {
    type Error = String;

    fn try_from(value: String) -> std::result::Result<Self, Self::Error> {
        match value.as_str() {
            "disable" => Ok(TlsMode::Disable),
            "require" => Ok(TlsMode::Require),
            "verify_ca" | "verify-ca" => Ok(TlsMode::VerifyCa),
            "verify_full" | "verify-full" => Ok(TlsMode::VerifyFull),
            other => Err(format!(
                "unknown tls mode {other:?}; allowed: \"disable\", \"require\", \"verify_ca\", \"verify_full\""
            )),
        }
    }
}

impl TlsMode {
    /// The mode a connection URL's `sslmode` asks for (`prefer` and `allow`, which fall back
    /// to plain text, are taken as `disable`).
    pub fn from_url(url: &str) -> TlsMode {
        let query = url.split_once('?').map_or("", |(_, q)| q);
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix("sslmode="))
            .and_then(|mode| TlsMode::try_from(mode.to_owned()).ok())
            .unwrap_or_default()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Makes ring rustls' process-wide provider, for a client library that builds its TLS
/// configuration from that default (mysql_async): with ring and aws-lc-rs both in one build
/// (other dependencies enable the latter), rustls cannot choose one itself and panics.
/// Idempotent; a provider installed before stays.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The rustls configuration for `mode`; `None` without TLS. `verify_ca` and `verify_full`
/// trust the certificates of `ca_file` (PEM), or the system's when there is none.
pub fn client_config(mode: TlsMode, ca_file: Option<&Path>) -> Result<Option<ClientConfig>> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::permanent(format!("TLS: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match mode {
        TlsMode::Disable => return Ok(None),
        TlsMode::Require => Arc::new(AnyCertificate(provider())),
        TlsMode::VerifyCa | TlsMode::VerifyFull => {
            let roots = match ca_file {
                Some(path) => file_roots(path)?,
                None => system_roots()?,
            };
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| Error::permanent(format!("TLS: {e}")))?;
            if mode == TlsMode::VerifyCa {
                Arc::new(AnyName(webpki))
            } else {
                webpki
            }
        }
    };
    Ok(Some(
        builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth(),
    ))
}

/// The certificates of a PEM file.
fn file_roots(path: &Path) -> Result<RootCertStore> {
    let bad = |e: &dyn std::fmt::Display| {
        Error::permanent(format!("tls_ca_file {}: {e}", path.display()))
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| bad(&e))? {
        roots.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
    }
    Ok(roots)
}

/// The system's trusted certificates.
fn system_roots() -> Result<RootCertStore> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(Error::permanent(format!(
            "TLS: no trusted certificate found on this system ({:?}); give tls_ca_file",
            found.errors
        )));
    }
    Ok(roots)
}

/// `require`: any certificate, but the handshake's signatures are still checked.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, TlsError> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify_ca`: the chain must verify; the host name need not match.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, TlsError> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(TlsError::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, TlsError> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, TlsError> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_sslmode_chooses_the_mode() {
        assert_eq!(
            TlsMode::from_url("postgres://u@h/db?sslmode=require"),
            TlsMode::Require
        );
        assert_eq!(
            TlsMode::from_url("postgres://u@h/db?application_name=x&sslmode=verify-full"),
            TlsMode::VerifyFull
        );
        assert_eq!(
            TlsMode::from_url("postgres://u@h/db?sslmode=prefer"),
            TlsMode::Disable
        );
        assert_eq!(TlsMode::from_url("postgres://u@h/db"), TlsMode::Disable);
    }
}
