//! TLS for PostgreSQL connections, with libpq's `sslmode` and
//! `sslrootcert` meanings, on rustls (no system OpenSSL needed).
//!
//! | `sslmode` | encrypted | server certificate checked |
//! | --- | --- | --- |
//! | `disable` | no | - |
//! | `prefer` (default) | when the server offers it | no (as libpq, unless `sslrootcert` names a file: then as `verify-ca`) |
//! | `require` | yes | no (likewise) |
//! | `verify-ca` | yes | signed by a certificate in `sslrootcert` |
//! | `verify-full` | yes | that, and issued for the host connected to |
//!
//! `sslrootcert` defaults to `~/.postgresql/root.crt`, as in libpq.
//! Client certificates (`sslcert`, `sslkey`) are not supported and are
//! refused when given, rather than silently ignored.

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::PathBuf;
use std::sync::Arc;

/// How a connection is encrypted, from the URL's `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub(crate) fn parse(text: &str) -> Result<SslMode, String> {
        Ok(match text {
            "disable" => SslMode::Disable,
            "prefer" | "allow" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode={other} is not one of disable, allow, prefer, require, verify-ca, verify-full"
                ));
            }
        })
    }
}

/// The URL's TLS settings.
#[derive(Clone, Debug)]
pub(crate) struct TlsSettings {
    pub mode: SslMode,
    /// `sslrootcert` as given (`None`: libpq's default file).
    pub root_cert: Option<PathBuf>,
}

impl TlsSettings {
    /// The root certificate file: as given, else libpq's default.
    fn root_cert_file(&self) -> Option<PathBuf> {
        self.root_cert.clone().or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".postgresql/root.crt"))
        })
    }

    /// The rustls configuration for these settings, or why it cannot be
    /// made (a missing or unreadable root certificate file).
    pub fn client_config(&self) -> Result<rustls::ClientConfig, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = match self.mode {
            SslMode::VerifyCa | SslMode::VerifyFull => Some(self.load_roots()?),
            // libpq: with a root certificate file present, `require` (and
            // `prefer`) verify the chain as `verify-ca` does.
            SslMode::Prefer | SslMode::Require => match self.root_cert_file() {
                Some(f) if f.is_file() => Some(self.load_roots()?),
                _ => None,
            },
            SslMode::Disable => None,
        };
        let verifier: Arc<dyn ServerCertVerifier> = match roots {
            None => Arc::new(AnyCertificate {
                algorithms: provider.signature_verification_algorithms,
            }),
            Some((store, pinned)) => {
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
                        .build()
                        .map_err(|e| format!("sslrootcert: {e}"))?;
                Arc::new(Trusted {
                    webpki,
                    pinned,
                    check_name: self.mode == SslMode::VerifyFull,
                })
            }
        };
        Ok(rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth())
    }

    /// The root certificates, as a store and as given.
    fn load_roots(&self) -> Result<(RootCertStore, Vec<CertificateDer<'static>>), String> {
        let Some(file) = self.root_cert_file() else {
            return Err("sslrootcert: no file given and no HOME for ~/.postgresql/root.crt".into());
        };
        let shown = file.display();
        let pem = std::fs::read(&file).map_err(|e| {
            format!(
                "sslrootcert {shown}: {e} (sslmode=verify-ca and verify-full need the CA's certificate)"
            )
        })?;
        let mut roots = RootCertStore::empty();
        let mut pinned = Vec::new();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("sslrootcert {shown}: {e}"))?;
            roots
                .add(cert.clone())
                .map_err(|e| format!("sslrootcert {shown}: {e}"))?;
            pinned.push(cert);
        }
        if roots.is_empty() {
            return Err(format!("sslrootcert {shown}: no PEM certificate in it"));
        }
        Ok((roots, pinned))
    }
}

/// `sslmode=require` without a root certificate: encrypted, any
/// certificate accepted (the handshake's signatures are still checked).
#[derive(Debug)]
struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `verify-ca` (and `require` with a root certificate file): the server's
/// certificate is one of the roots (a self-signed server certificate, as
/// PostgreSQL's documentation makes one) or is signed by one. `verify-full`
/// also needs it issued for the host connected to.
#[derive(Debug)]
struct Trusted {
    webpki: Arc<WebPkiServerVerifier>,
    pinned: Vec<CertificateDer<'static>>,
    check_name: bool,
}

impl ServerCertVerifier for Trusted {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self
            .pinned
            .iter()
            .any(|root| root.as_ref() == end_entity.as_ref())
        {
            if self.check_name {
                let parsed = ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_name(&parsed, server_name)?;
            }
            return Ok(ServerCertVerified::assertion());
        }
        match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}
