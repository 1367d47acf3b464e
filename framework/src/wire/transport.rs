//! The byte stream under a session: plain TCP, or TLS over it (`rustls`).
//!
//! A [`Stream`] works with the session's threads as a `TcpStream` does:
//! clones share one connection, the reader blocks on the socket with its
//! read timeout while writers write, and shutting the raw socket down ends
//! every clone. With TLS the clones share one `rustls::ClientConnection`:
//! the reader reads ciphertext without holding its lock and decrypts under
//! it; a writer encrypts under it and then writes the records under a
//! second lock that keeps records on the wire in the order they were
//! sealed, so a writer stuck on a stalled peer never stops the reader.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

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

/// The shared TLS state of one connection.
struct Tls {
    conn: Mutex<Sealed>,
    /// Held while records go onto the socket, so they leave in the order
    /// they were sealed.
    wire: Mutex<()>,
}

/// A TLS connection and the ciphertext read but not yet taken in (it
/// takes in no more while 16 KiB of plaintext wait to be read).
struct Sealed {
    conn: ClientConnection,
    unread: Vec<u8>,
}

/// One connection, plain or TLS; clones share it.
pub(crate) struct Stream {
    sock: TcpStream,
    tls: Option<Arc<Tls>>,
    /// Scratch space for ciphertext reads.
    scratch: Vec<u8>,
}

impl Stream {
    /// A plain TCP connection.
    pub(crate) fn plain(sock: TcpStream) -> Self {
        Stream {
            sock,
            tls: None,
            scratch: Vec::new(),
        }
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
        // The session bounds what it queues; writers seal whole frames.
        conn.set_buffer_limit(None);
        let mut sock = sock;
        while conn.is_handshaking() {
            while conn.wants_write() {
                conn.write_tls(&mut sock).map_err(TlsFailure::from_io)?;
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
                let _ = conn.write_tls(&mut sock);
                return Err(TlsFailure::Rejected(e.to_string()));
            }
        }
        Ok(Stream {
            sock,
            tls: Some(Arc::new(Tls {
                conn: Mutex::new(Sealed {
                    conn,
                    unread: Vec::new(),
                }),
                wire: Mutex::new(()),
            })),
            scratch: Vec::new(),
        })
    }

    /// Another handle on the same connection.
    pub(crate) fn try_clone(&self) -> io::Result<Self> {
        Ok(Stream {
            sock: self.sock.try_clone()?,
            tls: self.tls.clone(),
            scratch: Vec::new(),
        })
    }

    /// Shuts the socket down: every handle's reads and writes end.
    pub(crate) fn shutdown(&self) -> io::Result<()> {
        self.sock.shutdown(Shutdown::Both)
    }

    /// Sets the socket's read timeout (shared by all handles).
    pub(crate) fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        self.sock.set_read_timeout(d)
    }

    pub(crate) fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        self.sock.set_write_timeout(d)
    }

    /// Writes what the connection has sealed, if no writer is writing:
    /// a writer that is will send it with its own records.
    fn flush_sealed(&self, tls: &Tls) -> io::Result<()> {
        let Some(_wire) = tls.wire.try_lock() else {
            return Ok(());
        };
        let mut records = Vec::new();
        {
            let conn = &mut tls.conn.lock().conn;
            while conn.wants_write() {
                conn.write_tls(&mut records)?;
            }
        }
        (&self.sock).write_all(&records)
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

fn tls_io_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(tls) = self.tls.clone() else {
            return self.sock.read(buf);
        };
        loop {
            {
                let mut sealed = tls.conn.lock();
                let Sealed { conn, unread } = &mut *sealed;
                loop {
                    match conn.reader().read(buf) {
                        Ok(n) => return Ok(n),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                    if unread.is_empty() {
                        break;
                    }
                    let mut rest = &unread[..];
                    conn.read_tls(&mut rest)?;
                    let taken = unread.len() - rest.len();
                    unread.drain(..taken);
                    conn.process_new_packets().map_err(tls_io_error)?;
                }
            }
            // An answer the protocol requires (a key update, an alert).
            self.flush_sealed(&tls)?;
            // Nothing to decrypt: wait for ciphertext without the lock.
            self.scratch.resize(32 * 1024, 0);
            let n = self.sock.read(&mut self.scratch)?;
            if n == 0 {
                return Ok(0);
            }
            tls.conn.lock().unread.extend_from_slice(&self.scratch[..n]);
        }
    }
}

impl Write for Stream {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.write_all(data)?;
        Ok(data.len())
    }

    /// Seals `data` under the connection's lock, then writes the records
    /// with the lock released.
    fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        let Some(tls) = &self.tls else {
            return self.sock.write_all(data);
        };
        let _wire = tls.wire.lock();
        let mut records = Vec::with_capacity(data.len() + 64);
        {
            let conn = &mut tls.conn.lock().conn;
            conn.writer().write_all(data)?;
            while conn.wants_write() {
                conn.write_tls(&mut records)?;
            }
        }
        (&self.sock).write_all(&records)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
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
