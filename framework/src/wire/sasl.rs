//! SASL DIGEST-MD5 login (RFC 2831), as ZooKeeper's JAAS digest login
//! (`DigestLoginModule`) takes it: after each connection's handshake and
//! before anything else, the client sends an empty token, answers the
//! server's challenge, and checks the server's proof (`rspauth`) that it
//! knows the password too.

use std::io::{self, Read, Write};

use md5::{Digest, Md5};

use super::jute::Reader;
use super::proto::{self, op, ReplyHeader};

/// The service and server name a ZooKeeper server's DIGEST-MD5 login
/// answers to: `digest-uri` is `zookeeper/zk-sasl-md5` whatever the host.
const DIGEST_URI: &str = "zookeeper/zk-sasl-md5";

/// A user and password for the DIGEST-MD5 login.
#[derive(Clone)]
pub(crate) struct SaslDigest {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for SaslDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslDigest")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// Why a login did not complete.
#[derive(Debug)]
pub(crate) enum LoginError {
    /// The server refused it, or proved it does not know the password:
    /// trying again as the same user cannot help.
    Rejected(String),
    /// The connection failed meanwhile.
    Io(io::Error),
}

impl From<io::Error> for LoginError {
    fn from(e: io::Error) -> Self {
        LoginError::Io(e)
    }
}

/// Logs in on a fresh connection whose handshake was answered; `xid`
/// gives each request's xid. Reads with the stream's own timeout.
pub(crate) fn login<S: Read + Write>(
    s: &mut S,
    creds: &SaslDigest,
    max_reply: usize,
    mut xid: impl FnMut() -> i32,
) -> Result<(), LoginError> {
    let rejected = LoginError::Rejected;
    // DIGEST-MD5 has no initial response: an empty token asks for the challenge.
    let challenge = exchange(s, xid(), &[], max_reply)
        .map_err(|e| e.or_rejected("the server refused the login before its challenge"))?;
    let challenge = Challenge::parse(&challenge).map_err(rejected)?;
    let cnonce = uuid::Uuid::new_v4().simple().to_string();
    let answer = challenge.answer(creds, &cnonce).map_err(rejected)?;
    let proof = exchange(s, xid(), &answer.response, max_reply)
        .map_err(|e| e.or_rejected("the server rejected the user name or password"))?;
    let proof = String::from_utf8_lossy(&proof);
    match proof.strip_prefix("rspauth=") {
        Some(rspauth) if rspauth == answer.rspauth => Ok(()),
        _ => Err(rejected(
            "the server's proof of the password is wrong: it may not be the server it claims"
                .into(),
        )),
    }
}

/// One SASL request and its reply's token.
fn exchange<S: Read + Write>(
    s: &mut S,
    xid: i32,
    token: &[u8],
    max_reply: usize,
) -> Result<Vec<u8>, Exchange> {
    let mut w = proto::request(xid, op::SASL);
    w.bytes(token);
    s.write_all(&w.finish_frame()).map_err(Exchange::Io)?;
    let frame = super::connect::read_frame(s, max_reply).map_err(Exchange::Io)?;
    let mut r = Reader::new(&frame);
    let header = ReplyHeader::read(&mut r).map_err(|e| Exchange::Io(io::Error::other(e)))?;
    // Nothing else was asked on this connection, and nothing is watched
    // on it yet: any other frame is a protocol error.
    if header.xid != xid {
        return Err(Exchange::Io(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a reply to xid {} during the SASL login", header.xid),
        )));
    }
    if header.err != 0 {
        return Err(Exchange::Refused(header.err));
    }
    r.bytes().map_err(|e| Exchange::Io(io::Error::other(e)))
}

enum Exchange {
    Io(io::Error),
    /// The server answered with this error code (AUTHFAILED, or
    /// SESSIONCLOSEDREQUIRESASLAUTH) and closes the connection.
    Refused(i32),
}

impl Exchange {
    fn or_rejected(self, why: &str) -> LoginError {
        match self {
            Exchange::Io(e) => LoginError::Io(e),
            Exchange::Refused(code) => LoginError::Rejected(format!("{why} (error {code})")),
        }
    }
}

/// The fields of a digest-challenge the client needs.
#[derive(Debug)]
struct Challenge {
    realm: String,
    nonce: String,
    utf8: bool,
}

/// The client's digest-response, and the `rspauth` the server must send back.
#[derive(Debug)]
struct Answer {
    response: Vec<u8>,
    rspauth: String,
}

impl Challenge {
    fn parse(token: &[u8]) -> Result<Challenge, String> {
        if token.is_empty() {
            // What a server with no SASL login configured answers.
            return Err("the server offers no SASL login (an empty challenge)".into());
        }
        // ISO 8859-1 (RFC 2831) unless it names charset=utf-8: read it as
        // ISO 8859-1 first (every byte is a character, and UTF-8 puts no
        // quote or comma inside a character), then as UTF-8 if it says so.
        let latin1: String = token.iter().map(|&b| char::from(b)).collect();
        let mut fields = parse_fields(&latin1)?;
        let utf8 = fields
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("charset") && v.eq_ignore_ascii_case("utf-8"));
        if utf8 {
            let text = std::str::from_utf8(token)
                .map_err(|_| "the challenge names charset=utf-8 but is not UTF-8")?;
            fields = parse_fields(text)?;
        }
        let get = |key: &str| {
            fields
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v.as_str())
        };
        let nonce = get("nonce").ok_or("the challenge has no nonce")?.to_owned();
        let qop_auth = get("qop").is_none_or(|q| q.split(',').any(|q| q.trim() == "auth"));
        if !qop_auth {
            return Err("the server does not offer qop=auth".into());
        }
        if get("algorithm") != Some("md5-sess") {
            return Err("the challenge does not name algorithm=md5-sess".into());
        }
        Ok(Challenge {
            realm: get("realm").unwrap_or("").to_owned(),
            nonce,
            utf8,
        })
    }

    fn answer(&self, creds: &SaslDigest, cnonce: &str) -> Result<Answer, String> {
        let text = |s: &str| encode(s, self.utf8);
        let user = text(&creds.user).ok_or("the user name is not ISO 8859-1")?;
        let password = text(&creds.password).ok_or("the password is not ISO 8859-1")?;
        let realm = text(&self.realm).ok_or("the realm is not ISO 8859-1")?;
        // The directives are UTF-8 with charset=utf-8, else ISO 8859-1
        // (the digest's encoding, which the checks above showed fits).
        let sent = |s: &str| -> Vec<u8> {
            if self.utf8 {
                s.as_bytes().to_vec()
            } else {
                s.chars().map(|c| c as u8).collect()
            }
        };
        // As the challenge had it, byte for byte.
        let nonce = sent(&self.nonce);
        let nc = "00000001";
        let digest = |a2: &str| response_value(&user, &realm, &password, &nonce, cnonce, nc, a2);
        let mut response = Vec::new();
        if self.utf8 {
            response.extend_from_slice(b"charset=utf-8,");
        }
        for (key, value) in [
            ("username", sent(&creds.user)),
            ("realm", sent(&self.realm)),
            ("nonce", nonce.clone()),
        ] {
            response.extend_from_slice(format!("{key}=").as_bytes());
            response.extend(quoted(&value));
            response.push(b',');
        }
        response.extend_from_slice(
            format!(
                "nc={nc},cnonce=\"{cnonce}\",digest-uri=\"{DIGEST_URI}\",maxbuf=65536,response={},qop=auth",
                digest(&format!("AUTHENTICATE:{DIGEST_URI}")),
            )
            .as_bytes(),
        );
        Ok(Answer {
            response,
            rspauth: digest(&format!(":{DIGEST_URI}")),
        })
    }
}

/// RFC 2831's response-value for qop=auth, with A2 given.
fn response_value(
    user: &[u8],
    realm: &[u8],
    password: &[u8],
    nonce: &[u8],
    cnonce: &str,
    nc: &str,
    a2: &str,
) -> String {
    let secret = md5(&[user, b":", realm, b":", password]);
    let a1 = md5(&[&secret, b":", nonce, b":", cnonce.as_bytes()]);
    let a2 = hex(&md5(&[a2.as_bytes()]));
    hex(&md5(&[
        hex(&a1).as_bytes(),
        b":",
        nonce,
        b":",
        nc.as_bytes(),
        b":",
        cnonce.as_bytes(),
        b":auth:",
        a2.as_bytes(),
    ]))
}

fn md5(parts: &[&[u8]]) -> [u8; 16] {
    let mut h = Md5::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// RFC 2831: ISO 8859-1 when every character fits (whatever the charset),
/// else UTF-8, which only `charset=utf-8` allows.
fn encode(s: &str, utf8: bool) -> Option<Vec<u8>> {
    if s.chars().all(|c| (c as u32) < 0x100) {
        Some(s.chars().map(|c| c as u8).collect())
    } else if utf8 {
        Some(s.as_bytes().to_vec())
    } else {
        None
    }
}

/// A quoted-string of encoded text: `"` and `\\` escaped (in ISO 8859-1
/// and UTF-8 alike those bytes are only ever those characters).
fn quoted(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + 2);
    out.push(b'"');
    for &b in s {
        if b == b'"' || b == b'\\' {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b'"');
    out
}

/// `key=value` pairs, comma-separated; values may be quoted with `\` escapes.
fn parse_fields(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut fields = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(fields);
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('\\') => value.extend(chars.next()),
                    Some('"') => break,
                    Some(c) => value.push(c),
                    None => return Err("an unterminated quoted value in the challenge".into()),
                }
            }
            // Up to the next field.
            for c in chars.by_ref() {
                if c == ',' {
                    break;
                }
            }
        } else {
            value = chars.by_ref().take_while(|c| *c != ',').collect();
        }
        fields.push((key.trim().to_owned(), value.trim().to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 2831's example (section 4): the IMAP login of "chris".
    #[test]
    fn rfc_2831_example_response_and_rspauth() {
        let a2 = |s: &str| {
            response_value(
                b"chris",
                b"elwood.innosoft.com",
                b"secret",
                b"OA6MG9tEQGm2hh",
                "OA6MHXh6VqTrRk",
                "00000001",
                s,
            )
        };
        assert_eq!(
            a2("AUTHENTICATE:imap/elwood.innosoft.com"),
            "d388dad90d4bbd760a152321f2143af7"
        );
        assert_eq!(
            a2(":imap/elwood.innosoft.com"),
            "ea40f60335c427b5527b84dbabcdfffd"
        );
    }

    #[test]
    fn a_challenge_as_zookeeper_sends_it() {
        let c = Challenge::parse(
            br#"realm="zk-sasl-md5",nonce="n\"o,nce",qop="auth",charset=utf-8,algorithm=md5-sess"#,
        )
        .unwrap();
        assert_eq!(c.realm, "zk-sasl-md5");
        assert_eq!(c.nonce, "n\"o,nce");
        assert!(c.utf8);
        let creds = SaslDigest {
            user: "bob".into(),
            password: "pw".into(),
        };
        let a = c.answer(&creds, "cn").unwrap();
        let response = String::from_utf8(a.response).unwrap();
        assert!(response.starts_with("charset=utf-8,username=\"bob\",realm=\"zk-sasl-md5\",nonce=\"n\\\"o,nce\",nc=00000001,cnonce=\"cn\",digest-uri=\"zookeeper/zk-sasl-md5\""), "{response}");
        assert!(response.ends_with(",qop=auth"));
    }

    /// A server side that replies with canned frames.
    struct Canned {
        replies: io::Cursor<Vec<u8>>,
        sent: Vec<u8>,
    }

    impl Read for Canned {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.replies.read(buf)
        }
    }

    impl Write for Canned {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.sent.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn reply(xid: i32, err: i32, token: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&xid.to_be_bytes());
        body.extend_from_slice(&0i64.to_be_bytes());
        body.extend_from_slice(&err.to_be_bytes());
        body.extend_from_slice(&(token.len() as i32).to_be_bytes());
        body.extend_from_slice(token);
        let mut frame = (body.len() as i32).to_be_bytes().to_vec();
        frame.extend(body);
        frame
    }

    fn login_against(replies: Vec<u8>) -> Result<(), LoginError> {
        let mut server = Canned {
            replies: io::Cursor::new(replies),
            sent: Vec::new(),
        };
        let creds = SaslDigest {
            user: "bob".into(),
            password: "pw".into(),
        };
        let mut next = 7;
        login(&mut server, &creds, 1 << 20, || {
            next += 1;
            next
        })
    }

    /// RFC 2831: with charset=utf-8, names and passwords that fit ISO
    /// 8859-1 are hashed as ISO 8859-1 (é as one byte, 0xe9), as Java's
    /// DIGEST-MD5 does on both sides; others as UTF-8.
    #[test]
    fn latin_1_credentials_are_hashed_as_iso_8859_1() {
        let c =
            Challenge::parse(b"realm=\"r\",nonce=\"n\",charset=utf-8,algorithm=md5-sess").unwrap();
        let want = |user: &[u8], password: &[u8]| {
            response_value(
                user,
                b"r",
                password,
                b"n",
                "cn",
                "00000001",
                "AUTHENTICATE:zookeeper/zk-sasl-md5",
            )
        };
        let response = |user: &str, password: &str| {
            let creds = SaslDigest {
                user: user.into(),
                password: password.into(),
            };
            String::from_utf8_lossy(&c.answer(&creds, "cn").unwrap().response).into_owned()
        };
        let latin = response("jos\u{e9}", "p\u{e4}ss");
        assert!(
            latin.contains(&format!("response={},", want(b"jos\xe9", b"p\xe4ss"))),
            "{latin}"
        );
        assert!(!latin.contains(&want("jos\u{e9}".as_bytes(), "p\u{e4}ss".as_bytes())));
        // Beyond ISO 8859-1: UTF-8.
        let beyond = response("\u{263a}", "pw");
        assert!(
            beyond.contains(&want("\u{263a}".as_bytes(), b"pw")),
            "{beyond}"
        );
    }

    /// RFC 2831's lists may have empty elements and spaces around commas.
    #[test]
    fn empty_list_elements_and_spaces_are_skipped() {
        let c = Challenge::parse(b", realm=\"r\",,  nonce=\"n\" , ,algorithm=md5-sess,").unwrap();
        assert_eq!((c.realm.as_str(), c.nonce.as_str()), ("r", "n"));
    }

    #[test]
    fn debug_output_shows_the_user_and_not_the_password() {
        let creds = SaslDigest {
            user: "bob".into(),
            password: "hunter2".into(),
        };
        let shown = format!("{creds:?}");
        assert!(
            shown.contains("bob") && !shown.contains("hunter2"),
            "{shown}"
        );
    }

    #[test]
    fn a_reply_to_another_request_is_a_protocol_error() {
        match login_against(reply(99, 0, b"nonce=n,algorithm=md5-sess")) {
            Err(LoginError::Io(e)) => {
                assert_eq!(e.kind(), io::ErrorKind::InvalidData);
                assert!(e.to_string().contains("xid 99"), "{e}");
            }
            other => panic!("expected a protocol error, got {other:?}"),
        }
    }

    #[test]
    fn a_refusal_and_a_cut_are_told_apart() {
        match login_against(reply(8, -115, b"")) {
            Err(LoginError::Rejected(why)) => assert!(why.contains("-115"), "{why}"),
            other => panic!("expected a rejection, got {other:?}"),
        }
        let mut replies = reply(8, 0, b"nonce=n,algorithm=md5-sess");
        replies.extend(reply(9, -115, b""));
        match login_against(replies) {
            Err(LoginError::Rejected(why)) => {
                assert!(why.contains("user name or password"), "{why}")
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
        // The connection ends before the second reply: not a rejection.
        match login_against(reply(8, 0, b"nonce=n,algorithm=md5-sess")) {
            Err(LoginError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
            other => panic!("expected a cut, got {other:?}"),
        }
    }

    #[test]
    fn challenges_it_cannot_answer_are_refused_with_a_reason() {
        for (token, why) in [
            (
                &b"realm=\"r\",qop=\"auth\",algorithm=md5-sess"[..],
                "no nonce",
            ),
            (
                b"nonce=\"n\",qop=\"auth-conf\",algorithm=md5-sess",
                "qop=auth",
            ),
            (b"nonce=\"n\",qop=\"auth\"", "md5-sess"),
            (b"nonce=\"n", "unterminated"),
            (b"charset=utf-8,nonce=\"\xff\"", "not UTF-8"),
            (b"", "no SASL login"),
        ] {
            let err = Challenge::parse(token).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
        let c = Challenge::parse(b"nonce=n,algorithm=md5-sess").unwrap();
        let creds = SaslDigest {
            user: "b\u{263a}b".into(),
            password: "pw".into(),
        };
        assert!(c.answer(&creds, "cn").unwrap_err().contains("user name"));
    }
}
