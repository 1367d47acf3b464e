//! Certificates made for a test, and the TLS server mode of
//! [`TestingServer`](crate::TestingServer).
//!
//! [`TestCerts::generate`] makes a fresh CA and, signed by it, a server
//! certificate for `127.0.0.1` and `localhost` and a client certificate,
//! all as PEM files in a temp dir. [`ServerConfig::tls`](crate::ServerConfig::tls)
//! then serves ZooKeeper's secure client port with them.

use std::io;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tempfile::TempDir;

/// Whether the server asks for a client certificate (`ssl.clientAuth`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate asked for.
    None,
    /// Asked for, not required; one that is presented must be trusted.
    Want,
    /// Required (mutual TLS). ZooKeeper's default.
    Need,
}

impl ClientAuth {
    /// The `ssl.clientAuth` value.
    pub fn as_cfg(self) -> &'static str {
        match self {
            ClientAuth::None => "none",
            ClientAuth::Want => "want",
            ClientAuth::Need => "need",
        }
    }
}

/// A CA with a server and a client certificate, as PEM files in a temp
/// dir that goes when this is dropped.
///
/// ```
/// let certs = latchkey_test::TestCerts::generate()?;
/// assert!(std::fs::read_to_string(certs.ca_file())?.contains("BEGIN CERTIFICATE"));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct TestCerts {
    dir: TempDir,
}

impl TestCerts {
    /// Makes a fresh CA (ECDSA P-256) and the certificates it signs: the
    /// server's for `127.0.0.1` and `localhost`, and a client's.
    pub fn generate() -> io::Result<TestCerts> {
        TestCerts::generate_for(&["127.0.0.1", "localhost"])
    }

    /// Like [`TestCerts::generate`], the server's and client's
    /// certificates for `names` only (for example a host name without
    /// its address).
    pub fn generate_for(names: &[&str]) -> io::Result<TestCerts> {
        let dir = tempfile::Builder::new()
            .prefix("latchkey-certs-")
            .tempdir()?;
        let certs = TestCerts { dir };
        certs.write(names).map_err(io::Error::other)?;
        Ok(certs)
    }

    fn write(&self, names: &[&str]) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A name of its own: another test CA is another issuer.
        let name = format!("latchkey test CA {}", crate::unique_path("ca"));
        ca.distinguished_name.push(DnType::CommonName, name);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);
        let leaf = |cn: &str,
                    usage: ExtendedKeyUsagePurpose|
         -> Result<(String, String), rcgen::Error> {
            let key = KeyPair::generate()?;
            let mut p =
                CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())?;
            p.distinguished_name.push(DnType::CommonName, cn);
            p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            p.extended_key_usages = vec![usage];
            let cert = p.signed_by(&key, &issuer)?;
            Ok((cert.pem(), key.serialize_pem()))
        };
        let (server_cert, server_key) = leaf("zookeeper", ExtendedKeyUsagePurpose::ServerAuth)?;
        let (client_cert, client_key) =
            leaf("latchkey client", ExtendedKeyUsagePurpose::ClientAuth)?;
        std::fs::write(self.ca_file(), ca_cert.pem())?;
        // ZooKeeper's PEM key store: the key and its certificate in one file.
        std::fs::write(self.server_keystore(), format!("{server_key}{server_cert}"))?;
        std::fs::write(self.client_cert_file(), client_cert)?;
        std::fs::write(self.client_key_file(), client_key)?;
        Ok(())
    }

    /// The CA certificate (PEM): the clients' trust anchor, and the
    /// server's trust store for client certificates.
    pub fn ca_file(&self) -> PathBuf {
        self.path("ca.pem")
    }

    /// The server's private key followed by its certificate (PEM), for
    /// `ssl.keyStore.location` with `ssl.keyStore.type=PEM`.
    pub fn server_keystore(&self) -> PathBuf {
        self.path("server.pem")
    }

    /// The client certificate (PEM).
    pub fn client_cert_file(&self) -> PathBuf {
        self.path("client.pem")
    }

    /// The client certificate's private key (PEM, PKCS#8).
    pub fn client_key_file(&self) -> PathBuf {
        self.path("client-key.pem")
    }

    /// The temp dir holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}
