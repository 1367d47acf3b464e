//! The connection options every subcommand takes (`lock`, `inspect`,
//! `watch`): where ZooKeeper is, how long to wait for it, the session
//! timeout, TLS and SASL. One parser, one help text and one way to connect,
//! so the three commands cannot drift apart.

use std::time::Duration;

use latchkey_framework::{Client, ClientBuilder, Error, ExponentialBackoffRetry, TlsConfig};

use crate::{Exit, EX_SOFTWARE, EX_UNAVAILABLE};

/// The help of the connection options, for each command's `--help`
/// (a macro, so that the usages can `concat!` it into their constants).
macro_rules! connection_help {
    () => {
        "\
Connection options (the same for lock, inspect and watch):
  --connect HOSTS            ZooKeeper hosts, host:port[,host:port...][/chroot]
                             (default: $LATCHKEY_CONNECT, else 127.0.0.1:2181)
  --connection-timeout SECS  how long to wait for ZooKeeper before giving up
                             (exit 69; default 15)
  --session-timeout SECS     ZooKeeper session timeout (default 15)
  --tls-ca FILE              connect with TLS (to the servers' secure client
                             port), verifying them against the CA
                             certificates in FILE (PEM)
  --tls-cert FILE            with --tls-key: present this client certificate
                             chain (PEM, leaf first), for mutual TLS
  --tls-key FILE             the client certificate's private key (PEM)
  --tls-server-name NAME     the name the servers' certificates must carry,
                             instead of the hosts of --connect
  --sasl-user USER           log in as USER with SASL DIGEST-MD5; the password
                             is the first line of --sasl-password-file, else
                             $LATCHKEY_SASL_PASSWORD (never an argument, which
                             ps would show)
  --sasl-password-file FILE  the file that holds USER's password

SECS are seconds (5, 0.5), or a number with a unit: 500ms, 2s, 1m, 1h.
"
    };
}
pub(crate) use connection_help;

/// The default of `--session-timeout` and `--connection-timeout`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// The connect string when neither `--connect` nor `$LATCHKEY_CONNECT` gives one.
const DEFAULT_CONNECT: &str = "127.0.0.1:2181";

/// A year: as long as `lock` ever waits. Longer durations, `inf` among them,
/// are taken as this (for `--timeout`: no timeout at all).
pub(crate) const FOREVER: Duration = Duration::from_secs(365 * 24 * 3600);

/// The environment variable that holds the SASL password.
pub(crate) const SASL_PASSWORD_ENV: &str = "LATCHKEY_SASL_PASSWORD";

/// The environment the connection options fall back on.
#[derive(Clone, Debug, Default)]
pub(crate) struct Env {
    /// `$LATCHKEY_CONNECT`.
    pub(crate) connect: Option<String>,
    /// `$LATCHKEY_SASL_PASSWORD`.
    pub(crate) sasl_password: Option<String>,
}

impl Env {
    /// This process's environment.
    pub(crate) fn from_process() -> Env {
        Env {
            connect: std::env::var("LATCHKEY_CONNECT").ok(),
            sasl_password: std::env::var(SASL_PASSWORD_ENV).ok(),
        }
    }
}

/// TLS, as the options give it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Tls {
    pub(crate) ca: String,
    pub(crate) client_cert: Option<(String, String)>,
    pub(crate) server_name: Option<String>,
}

/// The connection options, parsed and checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConnOpts {
    pub(crate) connect: String,
    pub(crate) session_timeout: Duration,
    pub(crate) connection_timeout: Duration,
    pub(crate) tls: Option<Tls>,
    /// `(user, password)` for SASL DIGEST-MD5.
    pub(crate) sasl: Option<(String, String)>,
}

/// The connection options seen so far on a command line.
#[derive(Debug, Default)]
pub(crate) struct ConnArgs {
    connect: Option<String>,
    session_timeout: Option<Duration>,
    connection_timeout: Option<Duration>,
    tls_ca: Option<String>,
    tls_cert: Option<String>,
    tls_key: Option<String>,
    tls_server_name: Option<String>,
    sasl_user: Option<String>,
    sasl_password_file: Option<String>,
}

impl ConnArgs {
    /// Whether `name` is a connection option (each takes a value).
    pub(crate) fn is_option(name: &str) -> bool {
        matches!(
            name,
            "--connect"
                | "--session-timeout"
                | "--connection-timeout"
                | "--tls-ca"
                | "--tls-cert"
                | "--tls-key"
                | "--tls-server-name"
                | "--sasl-user"
                | "--sasl-password-file"
        )
    }

    /// What the value of the connection option `name` is, for messages.
    pub(crate) fn value_name(name: &str) -> &'static str {
        match name {
            "--connect" => "HOSTS",
            "--session-timeout" | "--connection-timeout" => "SECS",
            "--tls-server-name" => "NAME",
            "--sasl-user" => "USER",
            _ => "FILE",
        }
    }

    /// Takes the connection option `name` with its `value`; `name` must be
    /// one ([`ConnArgs::is_option`]).
    pub(crate) fn take(&mut self, name: &str, value: String) -> Result<(), Exit> {
        let not_empty = |what: &str| -> Result<String, Exit> {
            if value.trim().is_empty() {
                Err(Exit::usage(format!(
                    "{name} needs {what}, not an empty value"
                )))
            } else {
                Ok(value.clone())
            }
        };
        match name {
            "--connect" => self.connect = Some(not_empty("host:port[,host:port...]")?),
            "--session-timeout" => self.session_timeout = Some(seconds(name, &value, false)?),
            "--connection-timeout" => self.connection_timeout = Some(seconds(name, &value, false)?),
            "--tls-ca" => self.tls_ca = Some(not_empty("a file")?),
            "--tls-cert" => self.tls_cert = Some(not_empty("a file")?),
            "--tls-key" => self.tls_key = Some(not_empty("a file")?),
            "--tls-server-name" => self.tls_server_name = Some(not_empty("a name")?),
            "--sasl-user" => self.sasl_user = Some(not_empty("a user name")?),
            "--sasl-password-file" => self.sasl_password_file = Some(not_empty("a file")?),
            _ => return Err(Exit::usage(format!("unknown option {name:?}"))),
        }
        Ok(())
    }

    /// Checks the options together, fills in the defaults from `env`, reads
    /// the password file, and checks that a client can be built from them
    /// (a malformed host list, an unusable certificate file), all before
    /// any network work. Every error is bad usage (exit 64).
    pub(crate) fn finish(self, env: &Env) -> Result<ConnOpts, Exit> {
        let connect = self
            .connect
            .or_else(|| env.connect.clone().filter(|s| !s.trim().is_empty()))
            .unwrap_or_else(|| DEFAULT_CONNECT.to_owned());
        let tls = match self.tls_ca {
            None => {
                for (given, option) in [
                    (self.tls_cert.is_some(), "--tls-cert"),
                    (self.tls_key.is_some(), "--tls-key"),
                    (self.tls_server_name.is_some(), "--tls-server-name"),
                ] {
                    if given {
                        return Err(Exit::usage(format!(
                            "{option} needs --tls-ca FILE, which turns TLS on"
                        )));
                    }
                }
                None
            }
            Some(ca) => {
                readable("--tls-ca", &ca)?;
                let client_cert = match (self.tls_cert, self.tls_key) {
                    (None, None) => None,
                    (Some(cert), Some(key)) => {
                        readable("--tls-cert", &cert)?;
                        readable("--tls-key", &key)?;
                        Some((cert, key))
                    }
                    _ => {
                        return Err(Exit::usage(
                            "--tls-cert and --tls-key go together (a certificate and its key)",
                        ))
                    }
                };
                Some(Tls {
                    ca,
                    client_cert,
                    server_name: self.tls_server_name,
                })
            }
        };
        let sasl = match (self.sasl_user, self.sasl_password_file) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(Exit::usage(
                    "--sasl-password-file needs --sasl-user USER, whose password it holds",
                ))
            }
            (Some(user), Some(file)) => {
                let text = std::fs::read_to_string(&file).map_err(|e| {
                    Exit::usage(format!(
                        "--sasl-password-file {file:?}: cannot read it: {e}"
                    ))
                })?;
                let password = text.lines().next().unwrap_or("").to_owned();
                if password.is_empty() {
                    return Err(Exit::usage(format!(
                        "--sasl-password-file {file:?}: its first line (the password) is empty"
                    )));
                }
                Some((user, password))
            }
            (Some(user), None) => match env.sasl_password.clone() {
                Some(password) if !password.is_empty() => Some((user, password)),
                _ => {
                    return Err(Exit::usage(
                        "--sasl-user needs a password: --sasl-password-file FILE, \
                         or $LATCHKEY_SASL_PASSWORD",
                    ))
                }
            },
        };
        let opts = ConnOpts {
            connect,
            session_timeout: self.session_timeout.unwrap_or(DEFAULT_TIMEOUT),
            connection_timeout: self.connection_timeout.unwrap_or(DEFAULT_TIMEOUT),
            tls,
            sasl,
        };
        // Catch a malformed host list or certificate file now.
        opts.builder().build().map_err(|e| opts.build_error(&e))?;
        Ok(opts)
    }
}

/// Refuses a file that cannot be opened, naming the option.
fn readable(option: &str, file: &str) -> Result<(), Exit> {
    std::fs::File::open(file)
        .map(drop)
        .map_err(|e| Exit::usage(format!("{option} {file:?}: cannot read it: {e}")))
}

impl ConnOpts {
    /// A client builder with these options and the commands' retry policy.
    pub(crate) fn builder(&self) -> ClientBuilder {
        let mut builder = Client::builder()
            .connect_string(&self.connect)
            .session_timeout(self.session_timeout)
            .connection_timeout(self.connection_timeout)
            .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(100), 3));
        if let Some(tls) = &self.tls {
            let mut config = TlsConfig::new(&tls.ca);
            if let Some((cert, key)) = &tls.client_cert {
                config = config.client_cert(cert, key);
            }
            if let Some(name) = &tls.server_name {
                config = config.server_name(name);
            }
            builder = builder.tls(config);
        }
        if let Some((user, password)) = &self.sasl {
            builder = builder.sasl_digest(user, password);
        }
        builder
    }

    /// The bad-usage error for a client these options cannot build.
    fn build_error(&self, e: &Error) -> Exit {
        let text = e.to_string();
        if self.tls.is_some() && text.contains("TLS") {
            // The framework's message names the file and what is wrong.
            Exit::usage(text)
        } else {
            Exit::usage(format!("--connect {:?}: {text}", self.connect))
        }
    }

    /// Builds and starts a client, and waits up to the connection timeout
    /// for it to connect: exit 69 if it does not, 70 if the server refuses
    /// the SASL login. `started` runs once the
    /// client is built, before it starts: `lock` watches for Ctrl-C there.
    pub(crate) fn connect(&self, started: impl FnOnce(&Client)) -> Result<Client, Exit> {
        let client = self.builder().build().map_err(|e| self.build_error(&e))?;
        started(&client);
        client.start().map_err(|e| {
            Exit::new(
                EX_UNAVAILABLE,
                format!("cannot start a ZooKeeper client: {e}"),
            )
        })?;
        let waited = client.block_until_connected_or_err(self.connection_timeout);
        let Err(e) = waited else {
            return Ok(client);
        };
        client.close();
        Err(match e {
            // A refused login: the server answered, and said no.
            Error::AuthFailed { .. } => Exit::new(EX_SOFTWARE, format!("{e}")),
            Error::ConnectTimeout { last_attempt, .. } => Exit::new(
                EX_UNAVAILABLE,
                format!(
                    "cannot reach ZooKeeper at {} within {:?} (--connection-timeout){}",
                    self.connect,
                    self.connection_timeout,
                    last_attempt
                        .map(|why| format!("; last attempt: {why}"))
                        .unwrap_or_default()
                ),
            ),
            e => Exit::new(
                EX_UNAVAILABLE,
                format!("cannot reach ZooKeeper at {}: {e}", self.connect),
            ),
        })
    }
}

/// Parses a duration: seconds (`3`, `0.5`, `1e9`), or a number with a unit
/// (`500ms`, `2s`, `1m`, `1h`); zero is allowed only where `zero_ok`.
/// Durations of a year or more (`inf` among them) come back as [`FOREVER`].
pub(crate) fn seconds(option: &str, v: &str, zero_ok: bool) -> Result<Duration, Exit> {
    let bad = || {
        Exit::usage(format!(
            "{option} needs seconds such as 5, 0.5 or 500ms, not {v:?}"
        ))
    };
    let t = v.trim();
    let (number, unit) = [("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)]
        .iter()
        .find_map(|(suffix, unit)| t.strip_suffix(suffix).map(|n| (n, *unit)))
        .unwrap_or((t, 1.0));
    let secs: f64 = number.parse::<f64>().map_err(|_| bad())? * unit;
    if secs.is_nan() || secs < 0.0 || (!zero_ok && secs == 0.0) {
        return Err(bad());
    }
    if secs >= FOREVER.as_secs_f64() {
        return Ok(FOREVER);
    }
    Duration::try_from_secs_f64(secs).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[(&str, &str)], env: &Env) -> Result<ConnOpts, Exit> {
        let mut c = ConnArgs::default();
        for (name, value) in args {
            assert!(ConnArgs::is_option(name), "{name}");
            c.take(name, (*value).to_owned())?;
        }
        c.finish(env)
    }

    #[test]
    fn defaults_and_environment() {
        let o = parse(&[], &Env::default()).unwrap();
        assert_eq!(o.connect, "127.0.0.1:2181");
        assert_eq!(o.session_timeout, Duration::from_secs(15));
        assert_eq!(o.connection_timeout, Duration::from_secs(15));
        assert!(o.tls.is_none() && o.sasl.is_none());
        let env = Env {
            connect: Some("zk:1".into()),
            sasl_password: None,
        };
        assert_eq!(parse(&[], &env).unwrap().connect, "zk:1");
        let blank = Env {
            connect: Some(" ".into()),
            sasl_password: None,
        };
        assert_eq!(parse(&[], &blank).unwrap().connect, "127.0.0.1:2181");
        let o = parse(&[("--connect", "h:2")], &env).unwrap();
        assert_eq!(o.connect, "h:2");
    }

    #[test]
    fn durations_take_units() {
        for (v, want) in [
            ("3", Duration::from_secs(3)),
            ("0.5", Duration::from_millis(500)),
            ("1s", Duration::from_secs(1)),
            ("250ms", Duration::from_millis(250)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("inf", FOREVER),
            ("1e12", FOREVER),
        ] {
            assert_eq!(seconds("--x", v, false).unwrap(), want, "{v}");
        }
        assert_eq!(seconds("--x", "0", true).unwrap(), Duration::ZERO);
        for bad in ["", "0", "0s", "-1", "soon", "s", "1x", "NaN", "1 s s"] {
            let e = seconds("--connection-timeout", bad, false).unwrap_err();
            assert_eq!(e.code, crate::EX_USAGE, "{bad}");
            assert!(e.message.contains("--connection-timeout"), "{}", e.message);
        }
    }

    #[test]
    fn bad_values_name_their_option() {
        let env = Env::default();
        for (args, option) in [
            (&[("--connection-timeout", "x")][..], "--connection-timeout"),
            (&[("--session-timeout", "0")], "--session-timeout"),
            (&[("--connect", "")], "--connect"),
            (&[("--connect", "host:no-port")], "--connect"),
            (&[("--tls-cert", "c.pem")], "--tls-cert"),
            (&[("--tls-server-name", "zk")], "--tls-server-name"),
            (&[("--tls-ca", "/nonexistent/ca.pem")], "--tls-ca"),
            (
                &[("--tls-ca", "/dev/null"), ("--tls-cert", "/dev/null")],
                "--tls-key",
            ),
            (&[("--sasl-user", "bob")], "--sasl-user"),
            (&[("--sasl-password-file", "/dev/null")], "--sasl-user"),
            (
                &[
                    ("--sasl-user", "bob"),
                    ("--sasl-password-file", "/nonexistent"),
                ],
                "--sasl-password-file",
            ),
        ] {
            let e = parse(args, &env).unwrap_err();
            assert_eq!(e.code, crate::EX_USAGE, "{args:?}");
            assert!(e.message.contains(option), "{args:?}: {}", e.message);
        }
    }

    #[test]
    fn sasl_password_from_file_or_environment() {
        let dir = std::env::temp_dir().join(format!("latchkey-cli-conn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("password");
        std::fs::write(&file, "bobsecret\n").unwrap();
        let env = Env {
            connect: None,
            sasl_password: Some("fromenv".into()),
        };
        let o = parse(
            &[
                ("--sasl-user", "bob"),
                ("--sasl-password-file", file.to_str().unwrap()),
            ],
            &env,
        )
        .unwrap();
        assert_eq!(o.sasl, Some(("bob".into(), "bobsecret".into())));
        let o = parse(&[("--sasl-user", "bob")], &env).unwrap();
        assert_eq!(o.sasl, Some(("bob".into(), "fromenv".into())));
        std::fs::write(&file, "\n").unwrap();
        let e = parse(
            &[
                ("--sasl-user", "bob"),
                ("--sasl-password-file", file.to_str().unwrap()),
            ],
            &env,
        )
        .unwrap_err();
        assert!(e.message.contains("empty"), "{}", e.message);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
