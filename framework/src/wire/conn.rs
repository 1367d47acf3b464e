//! A live connection as the engine drives it: a non-blocking socket, plain
//! or TLS, touched by the engine's thread only. Bytes to send wait in the
//! connection's own buffer (plain) or in `rustls`'s (TLS) until the socket
//! takes them; nothing here ever blocks.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use mio::net::TcpStream;
use mio::unix::SourceFd;
use nix::sys::socket::{self as socket, MsgFlags};
use rustls::ClientConnection;

/// Reads take at most this much at a time, so frames are dispatched as
/// they arrive rather than after a large backlog is buffered.
const READ_CHUNK: usize = 64 * 1024;

/// What one read from the socket gave.
pub(crate) enum Received {
    /// This many plaintext bytes were appended.
    Bytes(usize),
    /// Bytes were appended, fewer than asked for: the socket had no more.
    /// Data arriving later raises a new readiness event (the poll is
    /// edge-triggered on every arrival), so reading again now would only
    /// cost a call that finds nothing.
    Drained,
    /// Nothing more for now.
    WouldBlock,
    /// The server closed the connection.
    Closed,
}

/// One live connection.
pub(crate) struct Conn {
    sock: TcpStream,
    fd: RawFd,
    tls: Option<Box<ClientConnection>>,
    /// Plain TCP: bytes queued and not written yet, from `written` on.
    out: Vec<u8>,
    written: usize,
    scratch: Vec<u8>,
}

impl Conn {
    /// A connection on `sock`, which must be non-blocking.
    pub(crate) fn new(sock: TcpStream, tls: Option<Box<ClientConnection>>) -> Self {
        Conn {
            fd: sock.as_raw_fd(),
            sock,
            tls,
            out: Vec::new(),
            written: 0,
            scratch: vec![0; READ_CHUNK],
        }
    }

    /// The socket, to register with a poll.
    pub(crate) fn source(&self) -> SourceFd<'_> {
        SourceFd(&self.fd)
    }

    /// The socket's descriptor, to change what a poll watches it for.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Ends the connection.
    pub(crate) fn shut_down(&self) {
        let _ = self.sock.shutdown(Shutdown::Both);
    }

    /// Queues `frame` to be sent after everything queued before it.
    pub(crate) fn queue(&mut self, frame: &[u8]) {
        match &mut self.tls {
            None => self.out.extend_from_slice(frame),
            // With no buffer limit (set at the handshake), sealing takes it all.
            Some(tls) => {
                let _ = tls.writer().write_all(frame);
            }
        }
    }

    /// Whether bytes wait to be written.
    pub(crate) fn has_output(&self) -> bool {
        match &self.tls {
            None => self.written < self.out.len(),
            Some(tls) => tls.wants_write(),
        }
    }

    /// Writes what the socket takes now; what it does not wait for the next
    /// writable event.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        match &mut self.tls {
            None => {
                while self.written < self.out.len() {
                    match send_now(self.fd, &self.out[self.written..]) {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(n) => self.written += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                if self.written == self.out.len() {
                    self.out.clear();
                    self.written = 0;
                } else if self.written >= READ_CHUNK {
                    self.out.drain(..self.written);
                    self.written = 0;
                }
                Ok(())
            }
            Some(tls) => {
                while tls.wants_write() {
                    match tls.write_tls(&mut NoSigPipe(self.fd)) {
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }
        }
    }

    /// Reads once from the connection, appending plaintext to `into`.
    pub(crate) fn receive(&mut self, into: &mut Vec<u8>) -> io::Result<Received> {
        let Some(tls) = &mut self.tls else {
            return match receive_now(self.fd, &mut self.scratch) {
                Ok(0) => Ok(Received::Closed),
                Ok(n) => {
                    into.extend_from_slice(&self.scratch[..n]);
                    match n < self.scratch.len() {
                        true => Ok(Received::Drained),
                        false => Ok(Received::Bytes(n)),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Received::WouldBlock),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Received::Bytes(0)),
                Err(e) => Err(e),
            };
        };
        loop {
            match tls.reader().read(&mut self.scratch) {
                Ok(0) => return Ok(Received::Closed),
                Ok(n) => {
                    into.extend_from_slice(&self.scratch[..n]);
                    return Ok(Received::Bytes(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            match tls.read_tls(&mut &self.sock) {
                Ok(0) => return Ok(Received::Closed),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Received::WouldBlock),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            if let Err(e) = tls.process_new_packets() {
                // rustls has queued an alert saying why: send it, as far as
                // the socket takes it, before the connection is dropped.
                let _ = tls.write_tls(&mut NoSigPipe(self.fd));
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
    }
}

/// Writes what a plain socket takes now, without waiting (the flag says so
/// whatever the socket's mode), and without a `SIGPIPE` if the server has
/// gone.
fn send_now(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
    Ok(socket::send(fd, data, flags)?)
}

/// Reads what a plain socket has now, without waiting.
fn receive_now(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    Ok(socket::recv(fd, buf, MsgFlags::MSG_DONTWAIT)?)
}

/// A socket as `rustls` reads and writes it, with every write saying
/// `MSG_NOSIGNAL`: `rustls` writes records with a vectored write, which
/// for a `TcpStream` is `writev(2)`, and that raises `SIGPIPE` on a
/// connection the server has closed, killing a host process that did not
/// ignore the signal. Waits (or not) as the socket's mode says.
pub(crate) struct NoSigPipe(pub(crate) RawFd);

impl Read for NoSigPipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Ok(socket::recv(self.0, buf, MsgFlags::empty())?)
    }
}

impl Write for NoSigPipe {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        Ok(socket::send(self.0, data, MsgFlags::MSG_NOSIGNAL)?)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let flags = MsgFlags::MSG_NOSIGNAL;
        Ok(socket::sendmsg::<()>(self.0, bufs, &[], flags, None)?)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

    use crate::wire::transport::{Stream, TlsSettings};

    /// A CA and a server certificate for 127.0.0.1 it signs: (CA, chain, key).
    fn certs() -> (
        CertificateDer<'static>,
        CertificateDer<'static>,
        PrivateKeyDer<'static>,
    ) {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        (ca_cert.der().clone(), leaf.der().clone(), key)
    }

    /// A record the live connection cannot decrypt ends it with an error,
    /// and rustls's alert saying why goes to the server first (TLS 1.2,
    /// where an alert's record type is in the clear).
    #[test]
    fn an_undecryptable_record_is_answered_with_an_alert() {
        let (ca, leaf, key) = certs();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server_config = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS12])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![leaf], key)
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            let mut tls = rustls::ServerConnection::new(Arc::new(server_config)).unwrap();
            while tls.is_handshaking() {
                tls.complete_io(&mut sock).unwrap();
            }
            // An application-data record of garbage: its MAC cannot check out.
            let mut record = vec![0x17, 0x03, 0x03, 0x00, 0x40];
            record.extend(std::iter::repeat_n(0x5a, 0x40));
            sock.write_all(&record).unwrap();
            // What the client sends back before it closes.
            sock.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut answer = Vec::new();
            let _ = sock.read_to_end(&mut answer);
            answer
        });
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).unwrap();
        let client_config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let settings = TlsSettings {
            config: Arc::new(client_config),
            server_name: None,
        };
        let sock = std::net::TcpStream::connect(addr).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let stream = Stream::tls(sock, &settings, "127.0.0.1", deadline)
            .map_err(|e| format!("{e:?}"))
            .unwrap();
        let mut conn = stream.into_conn().unwrap();
        let mut received = Vec::new();
        let failed = loop {
            assert!(
                Instant::now() < deadline,
                "the garbage record was never refused"
            );
            match conn.receive(&mut received) {
                Err(e) => break e,
                Ok(Received::Closed) => panic!("the connection closed without an error"),
                Ok(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        assert_eq!(failed.kind(), io::ErrorKind::InvalidData, "{failed}");
        drop(conn);
        let answer = server.join().unwrap();
        assert_eq!(
            answer.first(),
            Some(&0x15),
            "the client closed without an alert: it sent {answer:02x?}"
        );
    }
}
