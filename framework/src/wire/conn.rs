//! A live connection as the engine drives it: a non-blocking socket, plain
//! or TLS, that only the engine's thread touches. Bytes to send wait in the
//! connection's own buffer (plain) or in `rustls`'s (TLS) until the socket
//! takes them; nothing here ever blocks.

use std::io::{self, Read, Write};

use mio::net::TcpStream;
use rustls::ClientConnection;

/// Reads take at most this much at a time, so frames are dispatched as
/// they arrive rather than after a large backlog is buffered.
const READ_CHUNK: usize = 64 * 1024;

/// What one read from the socket gave.
pub(crate) enum Received {
    /// This many plaintext bytes were appended.
    Bytes(usize),
    /// Nothing more for now.
    WouldBlock,
    /// The server closed the connection.
    Closed,
}

/// One live connection.
pub(crate) struct Conn {
    sock: TcpStream,
    tls: Option<Box<ClientConnection>>,
    /// Plain TCP: bytes queued and not written yet, from `written` on.
    out: Vec<u8>,
    written: usize,
    scratch: Vec<u8>,
}

impl Conn {
    pub(crate) fn new(sock: TcpStream, tls: Option<Box<ClientConnection>>) -> Self {
        Conn {
            sock,
            tls,
            out: Vec::new(),
            written: 0,
            scratch: vec![0; READ_CHUNK],
        }
    }

    /// The socket, to register with the engine's poll.
    pub(crate) fn source(&mut self) -> &mut TcpStream {
        &mut self.sock
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
                    match self.sock.write(&self.out[self.written..]) {
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
                    match tls.write_tls(&mut self.sock) {
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
            return match self.sock.read(&mut self.scratch) {
                Ok(0) => Ok(Received::Closed),
                Ok(n) => {
                    into.extend_from_slice(&self.scratch[..n]);
                    Ok(Received::Bytes(n))
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
            match tls.read_tls(&mut self.sock) {
                Ok(0) => return Ok(Received::Closed),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Received::WouldBlock),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            if let Err(e) = tls.process_new_packets() {
                // rustls has queued an alert saying why: send it, as far as
                // the socket takes it, before the connection is dropped.
                let _ = tls.write_tls(&mut self.sock);
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
    }
}
