//! SASL DIGEST-MD5 logins (ZooKeeper's JAAS `DigestLoginModule`) against a
//! real server configured for them: the identity the server sees, ACLs
//! that only the user passes, the login redone on every connection, and a
//! wrong password or unknown user refused clearly, without a storm.

mod common;

use std::time::{Duration, Instant};

use common::*;
use latchkey_framework::{
    Acl, Client, ClientBuilder, ConnectionState, ErrorCode, ExponentialBackoffRetry, Perms,
    RetryNTimes,
};
use latchkey_recipes::InterProcessMutex;
use latchkey_test::fake_server::{AfterHandshake, FakeServer, Reply, Script};
use latchkey_test::{FaultProxy, ServerConfig, TestingServer};

const SESSION: Duration = Duration::from_secs(10);

fn sasl_server() -> TestingServer {
    TestingServer::start_with(
        ServerConfig::default().sasl_digest(&[("bob", "bob\"s secret"), ("carol", "c4rol")]),
    )
    .expect("start a ZooKeeper with SASL logins")
}

fn builder(connect_string: &str) -> ClientBuilder {
    Client::builder()
        .connect_string(connect_string)
        .session_timeout(SESSION)
        .connection_timeout(Duration::from_secs(5))
        .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(50), 10))
}

/// A SASL reply body (a jute buffer) carrying `token`.
fn sasl_reply(token: &[u8]) -> Vec<u8> {
    let mut body = (token.len() as i32).to_be_bytes().to_vec();
    body.extend_from_slice(token);
    body
}

/// A scripted server that answers every SASL request with `token`.
fn fake_sasl_server(token: &[u8]) -> FakeServer {
    FakeServer::start(Script::default().reply(102, Reply::Ok(sasl_reply(token)))).unwrap()
}

/// A started client at `connect` logging in as `user`, with no retries.
fn logging_in(connect: &str, user: &str, connection_timeout: Duration) -> Client {
    let c = Client::builder()
        .connect_string(connect)
        .session_timeout(SESSION)
        .connection_timeout(connection_timeout)
        .retry_policy(RetryNTimes::new(0, Duration::ZERO))
        .sasl_digest(user, "secret")
        .build()
        .unwrap();
    c.start().unwrap();
    c
}

fn only_bob() -> Vec<Acl> {
    vec![Acl::new(Perms::ALL, "sasl", "bob")]
}

#[test]
fn a_sasl_login_is_the_sessions_identity_for_acls() {
    let server = sasl_server();
    let bob =
        start_connected(builder(&server.connect_string()).sasl_digest("bob", "bob\"s secret"));
    let who = bob.who_am_i().unwrap();
    assert!(
        who.iter()
            .any(|i| i.auth_scheme == "sasl" && i.user == "bob"),
        "whoAmI after the login: {who:?}\n{}",
        server.log_tail(20)
    );
    let path = unique("sasl-acl");
    bob.create()
        .with_acl(only_bob())
        .for_path(&path, b"bob's")
        .unwrap();
    assert_eq!(bob.get_data(&path).unwrap().0, b"bob's");

    // Another user, and nobody at all, are refused by the ACL.
    let carol = start_connected(builder(&server.connect_string()).sasl_digest("carol", "c4rol"));
    let anonymous = start_connected(builder(&server.connect_string()));
    for (who, c) in [("carol", &carol), ("anonymous", &anonymous)] {
        let err = c.get_data(&path).unwrap_err();
        assert!(err.is(ErrorCode::NoAuth), "{who} read bob's node: {err}");
    }
    for c in [bob, carol, anonymous] {
        c.close();
    }
}

#[test]
fn the_login_is_redone_on_every_connection_of_the_session() {
    let server = sasl_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let bob = start_connected(builder(&proxy.connect_string()).sasl_digest("bob", "bob\"s secret"));
    let ctx = Ctx::new(&server, &bob);
    let states = bob.listen();
    let path = unique("sasl-reconnect");
    bob.create()
        .with_acl(only_bob())
        .for_path(&path, b"1")
        .unwrap();
    let session = bob.session_id();
    for round in 0..3 {
        // Each cut gives a new connection to the same session; auth is the
        // connection's, so without a new login the read gets NoAuth.
        assert!(proxy.cut() >= 1, "round {round}: no connection to cut");
        ctx.expect(
            &states,
            ConnectionState::Reconnected,
            Duration::from_secs(20),
        );
        assert_eq!(bob.session_id(), session, "round {round}: a new session");
        let data = bob.get_data(&path).unwrap_or_else(|e| {
            panic!(
                "round {round}: read after reconnecting: {e}\n{}",
                ctx.dump()
            )
        });
        assert_eq!(data.0, b"1");
    }
    bob.close();
}

/// A refused login fails every call with `AuthFailed`, reaches `Lost`, and
/// tries new sessions only as the retry policy allows (none here).
fn refused_without_storm(server: &TestingServer, user: &str, password: &str) {
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = builder(&proxy.connect_string())
        .retry_policy(RetryNTimes::new(0, Duration::ZERO))
        .sasl_digest(user, password)
        .build()
        .unwrap();
    let ctx = Ctx::new(server, &c);
    c.start().unwrap();
    let started = Instant::now();
    let err = c.get_data("/").unwrap_err();
    assert!(
        err.is(ErrorCode::AuthFailed),
        "{user}: expected AuthFailed, got {err}\n{}",
        ctx.dump()
    );
    println!("{user}: {err} after {:?}", started.elapsed());
    let message = err.to_string();
    for part in [
        "get_data /",
        "SASL DIGEST-MD5",
        user,
        "user name or password",
    ] {
        assert!(message.contains(part), "{message:?} should say {part:?}");
    }
    assert!(
        !message.contains(password),
        "{message:?} shows the password"
    );
    wait_until(
        Duration::from_secs(10),
        || {
            c.state_history()
                .iter()
                .any(|(_, s)| *s == ConnectionState::Lost)
        },
        || ctx.dump(),
    );
    // Watched for a while: calls keep failing at once with the same
    // reason, and the client does not come back to try again.
    let before = proxy.accepted_count();
    let watch_until = Instant::now() + Duration::from_secs(4);
    let mut calls = 0;
    while Instant::now() < watch_until {
        let err = c.exists("/").unwrap_err();
        assert!(
            err.is(ErrorCode::AuthFailed),
            "{user}: then {err}\n{}",
            ctx.dump()
        );
        calls += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    let tries = proxy.accepted_count() - before;
    println!("{user}: {calls} calls failed, {tries} connections in 4 s");
    assert_eq!(tries, 0, "{user}: {tries} more connections\n{}", ctx.dump());
    assert!(
        !c.state_history()
            .iter()
            .any(|(_, s)| *s == ConnectionState::Connected),
        "{user}: Connected was told for a session whose login failed\n{}",
        ctx.dump()
    );
    c.close();
}

#[test]
fn a_wrong_password_or_an_unknown_user_is_refused_without_storm() {
    let server = sasl_server();
    refused_without_storm(&server, "bob", "not bob's secret");
    refused_without_storm(&server, "mallory", "c4rol");
    // The server is fine, and so are the right logins.
    let bob =
        start_connected(builder(&server.connect_string()).sasl_digest("bob", "bob\"s secret"));
    bob.exists("/").unwrap();
    bob.close();
}

/// With Curator's default policy (`ExponentialBackoffRetry(100 ms, 3)`) a
/// refused login is tried again in a new session at most 3 times, at
/// least 1 s apart, then never again; calls fail with `AuthFailed`
/// throughout.
#[test]
fn a_refused_login_tries_new_sessions_only_as_the_policy_allows() {
    let server = sasl_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = Client::builder()
        .connect_string(proxy.connect_string())
        .session_timeout(SESSION)
        .connection_timeout(Duration::from_secs(5))
        .sasl_digest("bob", "wrong")
        .build()
        .unwrap();
    let ctx = Ctx::new(&server, &c);
    c.start().unwrap();
    let watch_until = Instant::now() + Duration::from_secs(8);
    let mut calls = 0;
    while Instant::now() < watch_until {
        let err = c.exists("/").unwrap_err();
        assert!(
            err.is(ErrorCode::AuthFailed),
            "call {calls}: {err}\n{}",
            ctx.dump()
        );
        calls += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    let connections = proxy.accepted_count();
    println!("{calls} calls failed; {connections} connections in 8 s");
    assert!(
        (2..=4).contains(&connections),
        "{connections} connections in 8 s: the policy allows 1 + 3\n{}",
        ctx.dump()
    );
    c.close();
}

#[test]
fn the_lock_recipes_run_over_sasl_with_sasl_acls() {
    let server = sasl_server();
    let acl = latchkey_framework::FixedAclProvider(only_bob());
    let clients: Vec<Client> = (0..2)
        .map(|_| {
            start_connected(
                builder(&server.connect_string())
                    .sasl_digest("bob", "bob\"s secret")
                    .acl_provider(acl.clone()),
            )
        })
        .collect();
    let path = unique("sasl-lock");
    let holders = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for c in &clients {
            let holders = &holders;
            let path = &path;
            s.spawn(move || {
                let mutex = InterProcessMutex::new(c, path).unwrap();
                for _ in 0..20 {
                    let guard = mutex.lock().unwrap();
                    assert_eq!(holders.fetch_add(1, std::sync::atomic::Ordering::SeqCst), 0);
                    holders.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    drop(guard);
                }
            });
        }
    });
    // The lock's nodes carry the user's ACL: nobody else may read them.
    let anonymous = start_connected(builder(&server.connect_string()));
    let err = anonymous.get_children(&path).unwrap_err();
    assert!(
        err.is(ErrorCode::NoAuth),
        "anonymous listed the lock: {err}"
    );
    anonymous.close();
    for c in clients {
        c.close();
    }
}

/// A server that answers the client's response with anything but the
/// proof that it knows the password too (`rspauth`), as a man in the
/// middle that does not know the password would: the challenge again, or
/// a wrong proof. A scripted fake, since a real server always proves it;
/// it gives both its replies the same token, so the wrong proof is also
/// a challenge.
#[test]
fn a_server_that_cannot_prove_it_knows_the_password_is_refused() {
    let challenge =
        r#"realm="zk-sasl-md5",nonce="abc",qop="auth",charset=utf-8,algorithm=md5-sess"#;
    for token in [
        challenge.to_owned(),
        format!("rspauth=0123456789abcdef0123456789abcdef,{challenge}"),
    ] {
        let fake = fake_sasl_server(token.as_bytes());
        let c = logging_in(&fake.connect_string(), "bob", Duration::from_secs(5));
        let err = c.exists("/x").unwrap_err();
        assert!(err.is(ErrorCode::AuthFailed), "{token}: {err}");
        assert!(err.to_string().contains("proof"), "{token}: {err}");
        let seen = fake.seen();
        assert_eq!(
            seen.count(102),
            2,
            "the empty token and the response: {seen:?}"
        );
        assert_eq!(
            seen.count(3),
            0,
            "a request went to an unproven server: {seen:?}"
        );
        // Watched for a while: no second try, as the policy allows none.
        let until = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < until {
            assert!(c.exists("/x").unwrap_err().is(ErrorCode::AuthFailed));
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(fake.seen().connections, 1, "{:?}", fake.seen());
        c.close();
    }
}

/// A server with no SASL login configured cannot take one: the client
/// must not go on as anonymous, believing it is `bob`.
#[test]
fn a_server_without_sasl_refuses_the_login() {
    let server = shared_server();
    let c = builder(&server.connect_string())
        .retry_policy(RetryNTimes::new(0, Duration::ZERO))
        .sasl_digest("bob", "bob\"s secret")
        .build()
        .unwrap();
    let ctx = Ctx::new(server, &c);
    c.start().unwrap();
    let err = c.exists("/").unwrap_err();
    assert!(err.is(ErrorCode::AuthFailed), "{err}\n{}", ctx.dump());
    assert!(err.to_string().contains("offers no SASL login"), "{err}");
    c.close();
}

#[test]
fn sasl_and_tls_combine() {
    let certs = latchkey_test::TestCerts::generate().unwrap();
    let server = TestingServer::start_with(
        ServerConfig::default()
            .tls(&certs, latchkey_test::ClientAuth::None)
            .sasl_digest(&[("bob", "bob\"s secret")]),
    )
    .unwrap();
    let bob = start_connected(
        builder(&server.secure_connect_string().unwrap())
            .tls(latchkey_framework::TlsConfig::new(certs.ca_file()))
            .sasl_digest("bob", "bob\"s secret"),
    );
    let who = bob.who_am_i().unwrap();
    assert!(
        who.iter()
            .any(|i| i.auth_scheme == "sasl" && i.user == "bob"),
        "whoAmI over TLS: {who:?}"
    );
    bob.close();
}

/// The SASL tokens a fake saw, in order, with their connection: the
/// bytes after each request's jute length prefix.
fn sasl_tokens(fake: &FakeServer) -> Vec<(usize, Vec<u8>)> {
    fake.seen()
        .requests
        .iter()
        .filter(|r| r.opcode == 102)
        .map(|r| (r.connection, r.body.get(4..).unwrap_or_default().to_vec()))
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// RFC 2831 2.1.2: without `charset=utf-8` in the challenge, the response's
/// user name (and realm) are ISO 8859-1, the encoding the digest is
/// computed over and the server decodes them with; with it, UTF-8. A
/// scripted fake, since ZooKeeper's server always offers UTF-8.
#[test]
fn a_user_name_is_sent_in_the_charset_the_challenge_names() {
    for (charset, expected, not_expected) in [
        ("", &b"username=\"jos\xe9\""[..], &b"jos\xc3\xa9"[..]),
        (
            ",charset=utf-8",
            &b"username=\"jos\xc3\xa9\""[..],
            &b"jos\xe9\""[..],
        ),
    ] {
        let challenge =
            format!(r#"realm="zk-sasl-md5",nonce="abc",qop="auth"{charset},algorithm=md5-sess"#);
        let fake = fake_sasl_server(challenge.as_bytes());
        let c = logging_in(&fake.connect_string(), "jos\u{e9}", Duration::from_secs(5));
        // The fake answers the response with the challenge again: refused.
        let err = c.exists("/x").unwrap_err();
        assert!(err.is(ErrorCode::AuthFailed), "{charset:?}: {err}");
        let tokens = sasl_tokens(&fake);
        let response = &tokens
            .get(1)
            .unwrap_or_else(|| panic!("{charset:?}: no response in {tokens:?}"))
            .1;
        let shown = String::from_utf8_lossy(response).into_owned();
        assert!(
            contains(response, expected) && !contains(response, not_expected),
            "challenge charset {charset:?}: the response should carry {:?}: {shown}\n{response:?}",
            String::from_utf8_lossy(expected),
        );
        c.close();
    }
}

/// Once the handshake is answered the connection is up, and the Java
/// client waits for SASL replies as for any reply: up to the read timeout
/// (2/3 of the session timeout), not the connect timeout. A server that
/// takes longer than the connect timeout to answer a SASL step, well
/// within the session's read timeout, must still get the response.
#[test]
fn a_slow_sasl_reply_within_the_read_timeout_is_waited_for() {
    let challenge =
        r#"realm="zk-sasl-md5",nonce="abc",qop="auth",charset=utf-8,algorithm=md5-sess"#;
    let body = sasl_reply(challenge.as_bytes());
    // 3 s: past the 1 s connect timeout and past a sixth of the session
    // timeout, within its two thirds (6.7 s).
    let late = Reply::Late(Duration::from_secs(3), Box::new(Reply::Ok(body)));
    let fake = FakeServer::start(Script::default().reply(102, late)).unwrap();
    let c = logging_in(&fake.connect_string(), "bob", Duration::from_secs(1));
    let answered = || {
        let tokens = sasl_tokens(&fake);
        tokens.iter().any(|(conn, t)| {
            !t.is_empty() && tokens.iter().any(|(c2, t2)| c2 == conn && t2.is_empty())
        })
    };
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until && !answered() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let seen = fake.seen();
    assert!(
        answered(),
        "no connection got past the slow challenge in 10 s: {} connections, {} SASL requests, states {:?}",
        seen.connections,
        seen.count(102),
        c.state_history()
    );
    c.close();
}

/// `Client::close` stops the client's threads and its connections, also
/// while a login waits for a server that does not answer: the close ends
/// that connection at once, instead of leaving it open behind the closed
/// client until the login's read times out.
#[test]
fn close_during_a_login_ends_its_connection_at_once() {
    let fake =
        FakeServer::start(Script::default().after_handshake(AfterHandshake::Silent)).unwrap();
    let proxy = FaultProxy::start(fake.addr()).unwrap();
    let c = Client::builder()
        .connect_string(proxy.connect_string())
        .session_timeout(Duration::from_secs(30))
        .connection_timeout(Duration::from_secs(5))
        .retry_policy(RetryNTimes::new(0, Duration::ZERO))
        .sasl_digest("bob", "secret")
        .build()
        .unwrap();
    c.start().unwrap();
    wait_until(
        Duration::from_secs(10),
        || fake.seen().count(102) == 1,
        || format!("no login began: {:?}", fake.seen()),
    );
    let started = Instant::now();
    c.close();
    let took = started.elapsed();
    wait_until(
        Duration::from_secs(2),
        || proxy.connection_count() == 0,
        || {
            format!(
                "close took {took:?}; {} connection(s) still open 2 s after it: {:?}",
                proxy.connection_count(),
                fake.seen()
            )
        },
    );
    println!(
        "close took {took:?}, the connection ended {:?} after",
        started.elapsed()
    );
}

/// A session that expires is followed by a new one, which logs in again
/// on its own connection: the user's nodes are still the client's.
#[test]
fn a_new_session_after_expiry_logs_in_again() {
    let server = sasl_server();
    let bob =
        start_connected(builder(&server.connect_string()).sasl_digest("bob", "bob\"s secret"));
    let ctx = Ctx::new(&server, &bob);
    let states = bob.listen();
    let path = unique("sasl-expiry");
    bob.create()
        .with_acl(only_bob())
        .for_path(&path, b"1")
        .unwrap();
    let session = bob.session_id();
    bob.expire_session_for_testing()
        .unwrap_or_else(|e| panic!("expiry: {e}\n{}", ctx.dump()));
    ctx.expect(&states, ConnectionState::Lost, Duration::from_secs(20));
    wait_until(
        Duration::from_secs(20),
        || bob.session_id() != session && bob.exists("/").is_ok(),
        || ctx.dump(),
    );
    let data = bob
        .get_data(&path)
        .unwrap_or_else(|e| panic!("read in the new session: {e}\n{}", ctx.dump()));
    assert_eq!(data.0, b"1");
    let who = bob.who_am_i().unwrap();
    assert!(
        who.iter()
            .any(|i| i.auth_scheme == "sasl" && i.user == "bob"),
        "whoAmI in the new session: {who:?}\n{}",
        ctx.dump()
    );
    bob.close();
}

/// The retry policy bounds refused logins in a row, not over the client's
/// life: once a new session has logged in, a later refusal gets the whole
/// policy again. Here the client's connection lands once on a member
/// without SASL (it refuses the login), and a new session logs in on the
/// right one; twice, under a policy of one new session per refusal.
#[test]
fn a_session_that_logged_in_clears_the_count_of_refused_logins() {
    let good = sasl_server();
    let bad = shared_server();
    let to_good = FaultProxy::start(good.addr()).unwrap();
    let to_bad = FaultProxy::start(bad.addr()).unwrap();
    to_bad.set_refuse(true);
    let c = builder(&format!(
        "{},{}",
        to_good.connect_string(),
        to_bad.connect_string()
    ))
    .retry_policy(RetryNTimes::new(1, Duration::ZERO))
    .sasl_digest("bob", "bob\"s secret")
    .build()
    .unwrap();
    let ctx = Ctx::new(&good, &c);
    c.start().unwrap();
    wait_until(
        Duration::from_secs(20),
        || c.exists("/").is_ok(),
        || ctx.dump(),
    );
    for round in 0..2 {
        // The next connection reaches the member without SASL only.
        to_good.set_refuse(true);
        to_bad.set_refuse(false);
        to_good.cut();
        wait_until(
            Duration::from_secs(20),
            || c.exists("/").is_err_and(|e| e.is(ErrorCode::AuthFailed)),
            || format!("round {round}: no refusal\n{}", ctx.dump()),
        );
        // The policy's new session (at least 1 s later) finds the right one.
        to_bad.set_refuse(true);
        to_good.set_refuse(false);
        wait_until(
            Duration::from_secs(15),
            || c.exists("/").is_ok(),
            || {
                format!(
                    "round {round}: no new session logged in after the refusal: {:?}\n{}",
                    c.exists("/").err().map(|e| e.to_string()),
                    ctx.dump()
                )
            },
        );
    }
    c.close();
}

/// RFC 2831: a challenge without `charset=utf-8` is ISO 8859-1, its realm
/// included. Such a realm is answered (in ISO 8859-1, as the digest takes
/// it), not refused as "not text". A scripted fake, since ZooKeeper's
/// server always offers UTF-8.
#[test]
fn a_latin1_challenge_is_answered() {
    let challenge = b"realm=\"r\xe9alm\",nonce=\"abc\",qop=\"auth\",algorithm=md5-sess";
    let fake = fake_sasl_server(challenge);
    let c = logging_in(&fake.connect_string(), "bob", Duration::from_secs(5));
    // The fake answers the response with the challenge again: refused.
    let err = c.exists("/x").unwrap_err();
    let tokens = sasl_tokens(&fake);
    let response = tokens.get(1).map(|(_, t)| t.clone()).unwrap_or_default();
    assert!(
        contains(&response, b"realm=\"r\xe9alm\""),
        "no response with the realm in ISO 8859-1: {err}\nsent {:?}",
        tokens
            .iter()
            .map(|(_, t)| String::from_utf8_lossy(t).into_owned())
            .collect::<Vec<_>>()
    );
    c.close();
}
