//! [`TlsConfig`]: TLS on ZooKeeper's secure client port, with `rustls`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use crate::error::{Error, Result};

/// TLS settings for [`ClientBuilder::tls`](crate::ClientBuilder::tls): the
/// CA to verify servers against, an optional client certificate (mutual
/// TLS) and an optional server name.
///
/// The server's certificate must chain to a CA of `ca_file` and name the
/// server: by default the host of the connect string entry being
/// connected to (a DNS name, or an IP address matched against the
/// certificate's IP SANs); [`TlsConfig::server_name`] overrides it. Files
/// are PEM and are read when the client is built. An untrusted or
/// mismatched certificate fails that connection attempt, reported in
/// [`Error::NotConnected`] (`TLS with <host> (<address>) failed: <reason>`);
/// the client keeps trying with back-off, as the Java client does.
///
/// ```no_run
/// use latchkey_framework::{Client, TlsConfig};
///
/// let client = Client::builder()
///     .connect_string("zk1.example.com:2281,zk2.example.com:2281")
///     .tls(TlsConfig::new("/etc/zookeeper/ca.pem")
///         .client_cert("/etc/app/client.pem", "/etc/app/client-key.pem"))
///     .build()?;
/// client.start()?;
/// # Ok::<(), latchkey_framework::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct TlsConfig {
    ca_file: PathBuf,
    client_cert: Option<(PathBuf, PathBuf)>,
    server_name: Option<String>,
}

impl TlsConfig {
    /// Verifies servers against the CA certificates of `ca_file` (PEM, one
    /// or more certificates).
    pub fn new(ca_file: impl Into<PathBuf>) -> Self {
        TlsConfig {
            ca_file: ca_file.into(),
            client_cert: None,
            server_name: None,
        }
    }

    /// Presents a client certificate (mutual TLS, for a server with
    /// `ssl.clientAuth=need` or `want`): `cert_file` holds the certificate
    /// chain, leaf first, and `key_file` its private key (PKCS#8, PKCS#1 or
    /// SEC1), both PEM.
    pub fn client_cert(
        mut self,
        cert_file: impl Into<PathBuf>,
        key_file: impl Into<PathBuf>,
    ) -> Self {
        self.client_cert = Some((cert_file.into(), key_file.into()));
        self
    }

    /// The name every server's certificate must carry, instead of the
    /// host of the connect string entry: for servers reached by an address
    /// their certificate does not name (a proxy, a tunnel).
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Reads the files and makes the `rustls` configuration.
    pub(crate) fn load(&self) -> Result<crate::wire::TlsSettings> {
        let bad = |what: &str, path: &Path, e: &dyn std::fmt::Display| {
            Error::InvalidArgument(format!("TLS {what} {}: {e}", path.display()))
        };
        let certs = |what: &str, path: &Path| -> Result<Vec<CertificateDer<'static>>> {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
                .map_err(|e| bad(what, path, &e))?;
            if certs.is_empty() {
                return Err(bad(what, path, &"no PEM certificate in it"));
            }
            Ok(certs)
        };
        let mut roots = RootCertStore::empty();
        for cert in certs("CA file", &self.ca_file)? {
            roots
                .add(cert)
                .map_err(|e| bad("CA file", &self.ca_file, &e))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::InvalidArgument(format!("TLS: {e}")))?
            .with_root_certificates(roots);
        let config = match &self.client_cert {
            None => builder.with_no_client_auth(),
            Some((cert_file, key_file)) => {
                let chain = certs("client certificate file", cert_file)?;
                let key = PrivateKeyDer::from_pem_file(key_file)
                    .map_err(|e| bad("client key file", key_file, &e))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| bad("client certificate", cert_file, &e))?
            }
        };
        if let Some(name) = &self.server_name {
            crate::wire::transport::server_name(name)
                .map_err(|e| Error::InvalidArgument(format!("TLS server name {name:?}: {e}")))?;
        }
        Ok(crate::wire::TlsSettings {
            config: Arc::new(config),
            server_name: self.server_name.clone(),
        })
    }
}
