//! The quick-start demo's command line: `--port N` puts its embedded
//! ZooKeeper on port N, and a port that cannot be had is refused with a
//! message that says why.

use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const DEMO: &str = env!("CARGO_BIN_EXE_demo");

/// Runs the demo with `args` to its end (two minutes at most).
fn demo(args: &[&str]) -> Output {
    let mut child = Command::new(DEMO)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the demo");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("demo {args:?} did not end within two minutes");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n{}\n--- stderr ---\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn port_puts_the_embedded_zookeeper_on_that_port() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let out = demo(&["--port", &port.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("ZooKeeper is serving at 127.0.0.1:{port}\n")),
        "{stdout}"
    );
    assert!(stdout.contains("never two at once"), "{stdout}");
}

#[test]
fn port_zero_and_a_port_in_use_are_refused() {
    let out = demo(&["--port", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--port 0: give a port from 1 to 65535"),
        "{}",
        text(&out)
    );
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = demo(&["--port", &port]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains(&format!("127.0.0.1:{port} is already in use")),
        "{}",
        text(&out)
    );
    drop(taken);
    for bad in [
        &["--port", "x"][..],
        &["--port"],
        &["--port", "5", "--connect", "h:1"],
    ] {
        let out = demo(bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", text(&out));
    }
}

#[test]
fn help_tells_the_options() {
    let out = demo(&["--help"]);
    assert!(out.status.success(), "{}", text(&out));
    let help = String::from_utf8_lossy(&out.stdout);
    for option in ["--port N", "--connect HOSTS", "--help"] {
        assert!(help.contains(option), "{option}: {help}");
    }
}
