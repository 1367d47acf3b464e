//! The blocking byte stream a connection starts on: plain TCP, or TLS over
//! it (`rustls`). One thread owns it while it connects, shakes hands and
//! logs in; then [`Stream::into_conn`] hands the socket and the TLS state
//! to the engine's non-blocking [`Conn`](super::conn::Conn). Probes and a
//! test's session expiry use it for their short exchanges too.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

use super::conn::{Conn, NoSigPipe};

/// What a session needs for TLS: the `rustls` configuration and the name
/// to verify servers by, if not each connect string entry's host.
#[derive(Clone)]
pub(crate) struct TlsSettings {
    pub config: Arc<ClientConfig>,
    pub server_name: Option<String>,
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// `name` as a TLS server name: a DNS name or an IP address.
pub(crate) fn server_name(name: &str) -> Result<ServerName<'static>, String> {
    let name = name.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(name.to_owned()).map_err(|e| e.to_string())
}

/// The host part of a connect string entry (`host:port`, `[v6]:port`).
pub(crate) fn host_of(entry: &str) -> &str {
    entry.rsplit_once(':').map_or(entry, |(host, _)| host)
}

/// Why the TLS handshake failed.
#[derive(Debug)]
pub(crate) enum TlsFailure {
    /// No progress within the time given.
    TimedOut,
    /// The peer or the verification refused: the `rustls` reason.
    Rejected(String),
    /// A socket error.
    Io(io::Error),
}

/// One connection, plain or TLS, with blocking reads and writes under the
/// socket's timeouts.
pub(crate) struct Stream {
    sock: TcpStream,
    tls: Option<Box<ClientConnection>>,
}

impl Stream {
    /// A plain TCP connection.
    pub(crate) fn plain(sock: TcpStream) -> Self {
        Stream { sock, tls: None }
    }

    /// Runs the TLS handshake on `sock` as client of `name`, finishing by
    /// `deadline`.
    pub(crate) fn tls(
        sock: TcpStream,
        settings: &TlsSettings,
        name: &str,
        deadline: Instant,
    ) -> Result<Self, TlsFailure> {
        let name = server_name(name).map_err(TlsFailure::Rejected)?;
        let mut conn = ClientConnection::new(Arc::clone(&settings.config), name)
            .map_err(|e| TlsFailure::Rejected(e.to_string()))?;
        // The engine bounds what it queues; it seals whole frames.
        conn.set_buffer_limit(None);
        let mut sock = sock;
        while conn.is_handshaking() {
            while conn.wants_write() {
                conn.write_tls(&mut NoSigPipe(sock.as_raw_fd()))
                    .map_err(TlsFailure::from_io)?;
            }
            if !conn.is_handshaking() {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(TlsFailure::TimedOut);
            }
            sock.set_read_timeout(Some(left)).map_err(TlsFailure::Io)?;
            if conn.read_tls(&mut sock).map_err(TlsFailure::from_io)? == 0 {
                return Err(TlsFailure::Io(io::ErrorKind::UnexpectedEof.into()));
            }
            if let Err(e) = conn.process_new_packets() {
                // Tell the server why (an alert) before giving up.
                let _ = conn.write_tls(&mut NoSigPipe(sock.as_raw_fd()));
                return Err(TlsFailure::Rejected(e.to_string()));
            }
        }
        Ok(Stream {
            sock,
            tls: Some(Box::new(conn)),
        })
    }

    /// Sets the socket's read timeout.
    pub(crate) fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        self.sock
            .set_read_timeout(d.map(|d| d.max(Duration::from_millis(1))))
    }

    /// Sets the socket's write timeout.
    pub(crate) fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        self.sock
            .set_write_timeout(d.map(|d| d.max(Duration::from_millis(1))))
    }

    /// The connection as the engine drives it, non-blocking from now on.
    pub(crate) fn into_conn(self) -> io::Result<Conn> {
        self.sock.set_nonblocking(true)?;
        Ok(Conn::new(
            mio::net::TcpStream::from_std(self.sock),
            self.tls,
        ))
    }
}

impl TlsFailure {
    fn from_io(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => TlsFailure::TimedOut,
            _ => match rustls_error(&e) {
                Some(why) => TlsFailure::Rejected(why),
                None => TlsFailure::Io(e),
            },
        }
    }
}

/// The `rustls` reason inside an I/O error of a TLS stream, if that is
/// what it is (a rejected certificate, an alert from the server).
pub(crate) fn rustls_error(e: &io::Error) -> Option<String> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .map(ToString::to_string)
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.tls {
            None => self.sock.read(buf),
            Some(conn) => {
                rustls::Stream::new(&mut **conn, &mut NoSigPipe(self.sock.as_raw_fd())).read(buf)
            }
        }
    }
}

impl Write for Stream {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        match &mut self.tls {
            None => self.sock.write(data),
            Some(conn) => {
                rustls::Stream::new(&mut **conn, &mut NoSigPipe(self.sock.as_raw_fd())).write(data)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.tls {
            None => self.sock.flush(),
            Some(conn) => {
                rustls::Stream::new(&mut **conn, &mut NoSigPipe(self.sock.as_raw_fd())).flush()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn no_roots() -> TlsSettings {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        TlsSettings {
            config: Arc::new(config),
            server_name: None,
        }
    }

    #[test]
    fn server_names_from_connect_string_entries() {
        assert_eq!(host_of("zk1.example.com:2281"), "zk1.example.com");
        assert_eq!(host_of("[::1]:2281"), "[::1]");
        assert!(matches!(
            server_name(host_of("[::1]:2281")),
            Ok(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            server_name("127.0.0.1"),
            Ok(ServerName::IpAddress(_))
        ));
        assert!(matches!(server_name("zk1"), Ok(ServerName::DnsName(_))));
        assert!(server_name("not a name!").is_err());
    }

    #[test]
    fn handshake_with_a_silent_server_keeps_its_deadline() {
        // Accepted by the kernel's backlog, never answered.
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let sock = TcpStream::connect(silent.local_addr().unwrap()).unwrap();
        let started = Instant::now();
        let deadline = started + Duration::from_millis(300);
        let result = Stream::tls(sock, &no_roots(), "127.0.0.1", deadline);
        assert!(
            matches!(result, Err(TlsFailure::TimedOut)),
            "{:?}",
            result.err()
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn plain_server_fails_the_handshake_with_a_reason() {
        let plain = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = plain.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = plain.accept().unwrap();
            // What a plain ZooKeeper port says: a length-prefixed frame.
            let _ = c.write_all(&[0, 0, 0, 36, 0, 0, 0, 0, 0, 0, 0x75, 0x30]);
            let _ = c.read(&mut [0u8; 512]);
        });
        let sock = TcpStream::connect(addr).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        match Stream::tls(sock, &no_roots(), "127.0.0.1", deadline) {
            Err(TlsFailure::Rejected(reason)) => assert!(!reason.is_empty()),
            other => panic!("expected a rejection, got {:?}", other.err()),
        }
        server.join().unwrap();
    }
}
