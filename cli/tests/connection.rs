//! The connection options that `lock`, `inspect` and `watch` share
//! (`--connect`, `--connection-timeout`, `--session-timeout`, TLS, SASL):
//! the same names, defaults, checks and help for all three, and a TLS and
//! SASL login that each of them makes against a real ZooKeeper.

mod common;

use std::net::TcpListener;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{output_within, LATCHKEY};
use latchkey_test::{ClientAuth, ServerConfig, TestCerts, TestingServer};

/// Runs `latchkey ARGS` to the end (with `env` added to its environment);
/// kills it and panics if it has not ended `within`.
fn latchkey_env(args: &[&str], env: &[(&str, &str)], within: Duration) -> Output {
    let mut cmd = Command::new(LATCHKEY);
    cmd.args(args)
        .envs(env.iter().copied())
        .env_remove("LATCHKEY_CONNECT");
    output_within(cmd, args, within)
}

fn latchkey(args: &[&str]) -> Output {
    latchkey_env(args, &[], Duration::from_secs(60))
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `127.0.0.1:PORT` of a port nobody listens on (bound, then let go).
fn closed_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr.to_string()
}

/// The arguments of each command around its connection options: `lock`
/// with a command to run, `inspect` and `watch` with a path.
fn command_line<'a>(command: &'a str, options: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![command];
    args.extend_from_slice(options);
    match command {
        "lock" => args.extend(["/cli-conn/lock", "--", "true"]),
        "watch" => args.extend(["/cli-conn", "--count", "0"]),
        _ => args.push("/cli-conn"),
    }
    args
}

const COMMANDS: [&str; 3] = ["inspect", "watch", "lock"];

#[test]
fn a_short_connection_timeout_against_a_closed_port_exits_69_soon() {
    let dead = closed_port();
    for command in COMMANDS {
        let args = command_line(command, &["--connect", &dead, "--connection-timeout", "1s"]);
        let started = Instant::now();
        let out = latchkey_env(&args, &[], Duration::from_secs(30));
        let took = started.elapsed();
        assert_eq!(out.status.code(), Some(69), "{args:?}: {}", text(&out));
        assert!(took < Duration::from_secs(5), "{args:?} took {took:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("cannot reach ZooKeeper") && stderr.contains(&dead),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn bad_connection_values_exit_64_naming_the_option() {
    for command in COMMANDS {
        for (options, option) in [
            (
                &["--connection-timeout", "soon"][..],
                "--connection-timeout",
            ),
            (&["--connection-timeout", "0"], "--connection-timeout"),
            (&["--session-timeout", "-1"], "--session-timeout"),
            (&["--connect", "host:no-port"], "--connect"),
            (&["--tls-ca", "/nonexistent/ca.pem"], "--tls-ca"),
            (&["--tls-key", "/dev/null"], "--tls-key"),
            (&["--sasl-user", "bob"], "--sasl-user"),
        ] {
            let args = command_line(command, options);
            let out = latchkey(&args);
            assert_eq!(out.status.code(), Some(64), "{args:?}: {}", text(&out));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains(option), "{args:?}: {stderr}");
            assert!(stderr.contains("--help"), "{args:?}: {stderr}");
        }
    }
}

#[test]
fn each_commands_help_lists_the_connection_options() {
    for command in COMMANDS {
        let out = latchkey(&[command, "--help"]);
        assert!(out.status.success(), "{command}: {}", text(&out));
        let help = String::from_utf8(out.stdout).unwrap();
        assert!(
            help.starts_with(&format!("Usage: latchkey {command}")),
            "{help}"
        );
        for option in [
            "--connect HOSTS",
            "--connection-timeout SECS",
            "--session-timeout SECS",
            "--tls-ca FILE",
            "--tls-cert FILE",
            "--tls-key FILE",
            "--tls-server-name NAME",
            "--sasl-user USER",
            "--sasl-password-file FILE",
            "(default 15)",
        ] {
            assert!(help.contains(option), "{command}: {option}:\n{help}");
        }
    }
}

#[test]
fn every_command_logs_in_with_tls_and_sasl() {
    let certs = TestCerts::generate().expect("make certificates");
    let server = TestingServer::start_with(
        ServerConfig::default()
            .tls(&certs, ClientAuth::Need)
            .sasl_digest(&[("bob", "bobsecret")]),
    )
    .expect("start a TLS and SASL ZooKeeper");
    let secure = server.secure_connect_string().unwrap();
    let password_file = certs.dir().join("bob.password");
    std::fs::write(&password_file, "bobsecret\n").unwrap();
    let (ca, cert, key) = (
        certs.ca_file(),
        certs.client_cert_file(),
        certs.client_key_file(),
    );
    let tls = [
        "--connect",
        &secure,
        "--tls-ca",
        ca.to_str().unwrap(),
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
        "--connection-timeout",
        "20",
    ];
    let mut with_file = tls.to_vec();
    with_file.extend([
        "--sasl-user",
        "bob",
        "--sasl-password-file",
        password_file.to_str().unwrap(),
    ]);
    for command in COMMANDS {
        let args = command_line(command, &with_file);
        let out = latchkey(&args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
    }
    // The password from the environment; a wrong one is refused (exit 70).
    let mut from_env = tls.to_vec();
    from_env.extend(["--sasl-user", "bob"]);
    let args = command_line("inspect", &from_env);
    let out = latchkey_env(
        &args,
        &[("LATCHKEY_SASL_PASSWORD", "bobsecret")],
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{}", text(&out));
    // lock keeps the password from its command.
    let mut lock = vec!["lock"];
    lock.extend_from_slice(&from_env);
    lock.extend([
        "/cli-conn/env",
        "--",
        "sh",
        "-c",
        "test -z \"${LATCHKEY_SASL_PASSWORD+set}\"",
    ]);
    let out = latchkey_env(
        &lock,
        &[("LATCHKEY_SASL_PASSWORD", "bobsecret")],
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = latchkey_env(
        &args,
        &[("LATCHKEY_SASL_PASSWORD", "wrong")],
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(70), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("bob"),
        "{}",
        text(&out)
    );
    // Without TLS options the secure port does not answer in ZooKeeper's
    // plain protocol: exit 69, not a hang.
    let out = latchkey(&[
        "inspect",
        "/",
        "--connect",
        &secure,
        "--connection-timeout",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(69), "{}", text(&out));
}
