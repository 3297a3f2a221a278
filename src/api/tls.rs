//! TLS on the TCP listener (`[api] tls_cert`, `tls_key`): the certificate and key read from PEM files, the
//! rustls server config (aws-lc-rs, the build's one TLS stack; TLS 1.2 and 1.3; HTTP/1.1 by ALPN), and the
//! reload on SIGHUP.
//!
//! The config's resolver hands every handshake the certificate current at that moment, so a reload changes
//! what new connections get and leaves open ones alone. A reload that fails (a file unreadable, bad PEM, a key
//! that is not the certificate's) keeps the certificate in use and says why.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ServerConfig};

/// The listener's certificate: the files it comes from and what they held when last read.
#[derive(Debug)]
pub struct TlsCertificate {
    cert_file: PathBuf,
    key_file: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
}

impl TlsCertificate {
    /// Reads the certificate chain and key; errors name the config key and the file.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Arc<Self>, String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let key = read(cert_file, key_file, &provider)?;
        Ok(Arc::new(Self {
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            provider,
            current: RwLock::new(Arc::new(key)),
        }))
    }

    /// Reads both files again; on success new connections get the new certificate, on failure the old one
    /// stays.
    pub fn reload(&self) -> Result<(), String> {
        let key = read(&self.cert_file, &self.key_file, &self.provider)?;
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(key);
        Ok(())
    }

    /// The acceptor of the listener: TLS 1.2 and 1.3 with this certificate, HTTP/1.1.
    pub fn acceptor(self: &Arc<Self>) -> Result<TlsAcceptor, String> {
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("api.tls_cert: {e}"))?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

impl ResolvesServerCert for TlsCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
    }
}

fn read(cert_file: &Path, key_file: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let cert_error = |e: String| format!("api.tls_cert {}: {e}", cert_file.display());
    let key_error = |e: String| format!("api.tls_key {}: {e}", key_file.display());
    // Bounded like every file agentd reads on someone's word (a regular file of at most 4 MiB).
    let cert_pem = crate::input::files::read_bytes_blocking(cert_file).map_err(|e| format!("api.tls_cert: {e}"))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| cert_error(format!("not a PEM certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(cert_error("no CERTIFICATE block in the file".into()));
    }
    let key_pem = crate::input::files::read_bytes_blocking(key_file).map_err(|e| format!("api.tls_key: {e}"))?;
    // The key's bytes never reach a message: only what kind of problem it is.
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => key_error("no PRIVATE KEY block in the file".into()),
        _ => key_error("not a PEM private key".into()),
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => key_error(format!("not the key of {}", cert_file.display())),
        rustls::Error::InvalidCertificate(e) => cert_error(format!("not a usable certificate: {e}")),
        e => key_error(format!("unusable key or certificate: {e}")),
    })
}
