//! Benchmarks latchkey against Apache Curator and kazoo on the same
//! ZooKeeper server in the same run.
//!
//! ```text
//! cargo run --release -p latchkey-examples --bin bench             # full run, ~10 minutes
//! cargo run --release -p latchkey-examples --bin bench -- --quick  # ~2 minutes
//! cargo run --release -p latchkey-examples --bin bench -- --help
//! ```
//!
//! Without `--connect` it starts its own ZooKeeper (Debian's, through the
//! test harness). Curator runs in the Java peer and kazoo in the Python peer
//! of `latchkey-test` (Debian's `libcurator-recipes-java` and
//! `python3-kazoo`); latchkey runs in this process. Every round runs every
//! scenario for each library in turn, the order rotating from round to
//! round, and the figures are medians over the rounds:
//!
//! - floor: raw create (ephemeral sequential) + getChildren + delete with
//!   each library's own client, the least one lock cycle can cost; the
//!   `zookeeper` crate (0.8), a client without recipes, takes part here
//!   only;
//! - uncontended `InterProcessMutex` acquire + release, with the CPU time
//!   the client process spent per 1,000 cycles;
//! - contended: N sessions loop on one mutex; handoffs per second and
//!   handoff latency p50/p99;
//! - herd: W waiters behind one holder (W + 1 sessions looping on one
//!   mutex); from the server's `mntr`, the requests and watch events per
//!   handoff, which must not grow with W;
//! - read-write lock with mostly readers, and semaphore leases;
//! - a `DistributedQueue` (Curator's layout): one producer putting items
//!   one by one, N consumer sessions taking them; items per second and
//!   the time from a put's start to the item's consumer (latchkey and
//!   Curator only);
//! - resident memory of one process holding 100 sessions (each with a lock).
//!
//! The timed runs check themselves: a counter shared by a process' threads
//! must never see two holders of a mutex (or a reader with a writer, or
//! more leases than the semaphore has), else the run fails.
//!
//! It prints a table and writes `docs/BENCHMARKS.md` and SVG plots next to
//! it (`--out DIR` to write elsewhere, `--no-write` to only print).
//!
//! `--scale` runs the scale scenarios instead (held locks per client,
//! waiters per lock with the naive lock beside, a waiter giving up,
//! sessions per process; see `latchkey_examples::bench::scale`) and
//! rewrites only the scale section of `docs/BENCHMARKS.md`.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use latchkey_examples::bench::bare::BareSession;
use latchkey_examples::bench::io_thread::IoThreadSession;
use latchkey_examples::bench::mntr::{self, Counters};
use latchkey_examples::bench::reader::ReaderSession;
use latchkey_examples::bench::report::{self, keys, Better, Library, Results};
use latchkey_examples::bench::scale::{self, ScaleConfig};
use latchkey_examples::bench::scale_child;
use latchkey_examples::bench::slots::SlotSession;
use latchkey_examples::bench::svg::{Chart, Series};
use latchkey_examples::bench::{procfs, stats};
use latchkey_framework::{Client, CreateMode, ExponentialBackoffRetry, TlsConfig};
use latchkey_recipes::{
    InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2, QueueBuilder,
    StringSerializer,
};
use latchkey_test::peers::{peer_available, Peer, PeerKind};
use latchkey_test::{
    four_letter_word, unique_path, ClientAuth, ServerConfig, TestCerts, TestingServer,
};

/// Every session's settings, the same for the three libraries (the peers'
/// defaults): 10 s sessions, 5 s connection timeout,
/// `ExponentialBackoffRetry(100 ms, 3)`.
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a session may take to connect.
const CONNECT_WAIT: Duration = Duration::from_secs(30);
/// Bound on one uncontended acquire.
const ACQUIRE_WAIT: Duration = Duration::from_secs(30);
/// Extra time a timed run's threads (or a peer's answer) get after the run.
const GRACE: Duration = Duration::from_secs(90);
/// How long the memory reading waits for the sessions to settle.
const SETTLE: Duration = Duration::from_secs(1);
/// The JVM's default JIT (tiered up to C2), for the embedded server.
const FULL_JIT: &str = "-XX:TieredStopAtLevel=4";
/// The TLS server's warm-up, in main warm-ups' cycles: its JIT has only
/// these cycles to compile the server's paths before the rounds.
const TLS_WARMUP: usize = 10;
/// The session count of the throughput and p99 targets.
const TARGET_SESSIONS: usize = 8;
/// The command that reproduces a run, as the docs show it.
const COMMAND: &str = "cargo run --release -p latchkey-examples --features zk08 --bin bench";

const USAGE: &str = "\
usage: bench [--quick] [--connect HOST:PORT[,...]] [--libs latchkey,curator,kazoo,zookeeper,bare,reader,io]
             [--rounds N] [--no-tls] [--out DIR | --no-write]
       bench --scale [--quick] [--held N,N,..] [--waiters N,N,..] [--sessions N,N,..]
             [--connect HOST:PORT] [--libs latchkey,curator] [--out DIR | --no-write]

  --quick      a short run (~2 minutes): fewer rounds, cycles and contenders
  --connect    use this ZooKeeper instead of starting one (the herd counters
               need mntr allowed and a single server)
  --libs       which libraries to run (default: all that are installed)
  --rounds N   rounds per scenario (default 5, quick 2)
  --no-tls     leave out latchkey's uncontended cycle over TLS, which otherwise runs
               (with the embedded server and latchkey) on a second server that serves
               TLS, plain beside it, for the row over TLS ÷ plain; --tls, the
               default, is still taken
  --out DIR    where BENCHMARKS.md and the plots go (default: the docs/ folder)
  --no-write   print the table only
  --scale      the scale scenarios only (latchkey and Curator; a few minutes), which
               rewrite only the scale section of BENCHMARKS.md; with --connect the
               server restart is left out
  --held, --waiters, --sessions
               the scale sizes (default 1,100,1000,10000; 2,10,100,1000; 1,100,1000;
               quick: a tenth of the largest)";

/// What a run measures and how much.
#[derive(Clone, Debug)]
struct Config {
    quick: bool,
    rounds: usize,
    cycles: usize,
    contenders: Vec<usize>,
    run: Duration,
    /// Herd runs: this many sessions wait while one holds (sessions = waiters + 1).
    waiters: Vec<usize>,
    herd_run: Duration,
    rw_sessions: usize,
    rw_write_every: usize,
    sem_sessions: usize,
    sem_leases: usize,
    /// The queue run: consumer sessions, and items put.
    queue_consumers: usize,
    queue_items: usize,
    hold_sessions: usize,
    warmup_cycles: usize,
}

impl Config {
    fn full() -> Self {
        Config {
            quick: false,
            rounds: 5,
            cycles: 1000,
            contenders: vec![2, 8, 32, 64],
            run: Duration::from_secs(2),
            waiters: vec![2, 8, 32, 64],
            herd_run: Duration::from_millis(1500),
            rw_sessions: 8,
            rw_write_every: 10,
            sem_sessions: 8,
            sem_leases: 2,
            queue_consumers: 4,
            queue_items: 1000,
            hold_sessions: 100,
            warmup_cycles: 500,
        }
    }

    fn quick() -> Self {
        Config {
            quick: true,
            rounds: 2,
            cycles: 300,
            contenders: vec![2, 8, 32],
            run: Duration::from_secs(1),
            herd_run: Duration::from_secs(1),
            warmup_cycles: 200,
            queue_items: 300,
            ..Config::full()
        }
    }
}

type Res<T> = Result<T, String>;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The memory reading's child: `--hold N CONNECT PATH`.
    // The scale run's latchkey process: `--scale-child CONNECT SESSION_MS`.
    if let [flag, connect, ms] = args.as_slice() {
        if flag == "--scale-child" {
            let ms = ms.parse().unwrap_or(10_000);
            if let Err(e) = scale_child::main(connect, Duration::from_millis(ms)) {
                eprintln!("bench --scale-child: {e}");
                std::process::exit(1);
            }
            return;
        }
    }
    if let [flag, n, connect, path] = args.as_slice() {
        if flag == "--hold" {
            if let Err(e) = hold_child(n, connect, path) {
                eprintln!("bench --hold: {e}");
                std::process::exit(1);
            }
            return;
        }
    }
    let code = match parse_args(&args).and_then(run) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("bench: {e}");
            1
        }
    };
    std::process::exit(code);
}

struct Args {
    cfg: Config,
    /// `--scale`: the scale scenarios instead of the rounds.
    scale: Option<ScaleConfig>,
    connect: Option<String>,
    libs: Vec<Library>,
    out: Option<PathBuf>,
    /// `--tls` / `--no-tls`; by default TLS runs wherever it can.
    tls: Option<bool>,
}

fn parse_args(args: &[String]) -> Res<Args> {
    let mut quick = false;
    let mut connect = None;
    let mut libs = None;
    let mut rounds = None;
    let mut scale = false;
    let (mut held, mut waiters, mut sessions) = (None, None, None);
    let mut tls = None;
    let mut out = Some(PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs"
    )));
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--quick" => quick = true,
            "--scale" => scale = true,
            "--held" => held = Some(scale::parse_sizes(&value("--held")?)?),
            "--waiters" => waiters = Some(scale::parse_sizes(&value("--waiters")?)?),
            "--sessions" => sessions = Some(scale::parse_sizes(&value("--sessions")?)?),
            "--connect" => connect = Some(value("--connect")?),
            "--libs" => {
                let names = value("--libs")?;
                let parsed: Res<Vec<Library>> = names
                    .split(',')
                    .map(|n| match n.trim().to_ascii_lowercase().as_str() {
                        "latchkey" => Ok(Library::Latchkey),
                        "curator" => Ok(Library::Curator),
                        "kazoo" => Ok(Library::Kazoo),
                        "zookeeper" | "zookeeper08" => Ok(Library::Zookeeper08),
                        "bare" => Ok(Library::Bare),
                        "reader" => Ok(Library::Reader),
                        "io" => Ok(Library::IoThread),
                        other => Err(format!("unknown library {other:?}\n{USAGE}")),
                    })
                    .collect();
                libs = Some(parsed?);
            }
            "--rounds" => {
                let n: usize = value("--rounds")?
                    .parse()
                    .map_err(|_| format!("--rounds needs a number\n{USAGE}"))?;
                rounds = Some(n.clamp(1, 50));
            }
            "--tls" => tls = Some(true),
            "--no-tls" => tls = Some(false),
            "--out" => out = Some(PathBuf::from(value("--out")?)),
            "--no-write" => out = None,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let mut cfg = if quick {
        Config::quick()
    } else {
        Config::full()
    };
    if let Some(r) = rounds {
        cfg.rounds = r;
    }
    let scale = scale.then(|| {
        let mut s = if quick {
            ScaleConfig::quick()
        } else {
            ScaleConfig::full()
        };
        s.held = held.unwrap_or(s.held);
        s.waiters = waiters.unwrap_or(s.waiters);
        s.sessions = sessions.unwrap_or(s.sessions);
        s
    });
    if tls == Some(true) && connect.is_some() {
        return Err(format!(
            "--tls needs the embedded server (it makes the certificates)\n{USAGE}"
        ));
    }
    let mut libs = libs.unwrap_or_else(|| Library::ALL.to_vec());
    libs.sort();
    libs.dedup();
    Ok(Args {
        cfg,
        scale,
        connect,
        libs,
        out,
        tls,
    })
}

/// What the docs say about the run besides the figures.
struct Setup {
    started: SystemTime,
    machine: String,
    zookeeper: String,
    versions: Vec<(Library, String)>,
    embedded: bool,
    herd: bool,
    tls: bool,
}

fn run(args: Args) -> Res<()> {
    let started = Instant::now();
    let cfg = args.cfg.clone();
    let (mut server, connect) = match &args.connect {
        Some(c) => (None, c.clone()),
        None => {
            println!("starting ZooKeeper ...");
            // The harness caps the server's JIT at C1 so that tests start
            // fast; a benchmark wants the server as it runs in production.
            let config = ServerConfig::default().jvm_arg(FULL_JIT);
            let server = TestingServer::start_with(config)
                .map_err(|e| format!("cannot start ZooKeeper: {e}"))?;
            let connect = server.connect_string();
            (Some(server), connect)
        }
    };
    let mntr_addr = herd_address(&connect);
    if mntr_addr.is_none() {
        println!("herd counters off: they need one server that answers mntr");
    }
    let zookeeper = mntr_addr
        .or_else(|| first_address(&connect))
        .and_then(|a| four_letter_word(a, "srvr", Duration::from_secs(5)).ok())
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Zookeeper version: "))
                // Debian's build says `3.8.0-${mvngit.commit.id}, built on ...`.
                .map(|v| v.split([',', '$']).next().unwrap_or(v))
                .map(|v| v.trim().trim_end_matches('-').to_owned())
        })
        .unwrap_or_else(|| "unknown".into());

    if let Some(scale_cfg) = &args.scale {
        let result = run_scale(scale_cfg, &args, server.as_mut(), &connect, mntr_addr);
        match server {
            Some(server) => drop(server),
            None => clean_up(&connect),
        }
        result?;
        println!("done in {:.0?}", started.elapsed());
        return Ok(());
    }
    let mut over_tls = match args.tls.unwrap_or(true)
        && server.is_some()
        && args.libs.contains(&Library::Latchkey)
    {
        true => Some(OverTls::start()?),
        false => None,
    };
    let mut drivers: Vec<Box<dyn Driver>> = Vec::new();
    let mut versions = Vec::new();
    for lib in &args.libs {
        match lib {
            Library::Latchkey => {
                drivers.push(Box::new(Ours::new(&connect)?));
                versions.push((
                    Library::Latchkey,
                    format!("{} (this build, release)", env!("CARGO_PKG_VERSION")),
                ));
            }
            #[cfg(feature = "zk08")]
            Library::Zookeeper08 => {
                drivers.push(Box::new(Zk08::new(&connect)?));
                versions.push((Library::Zookeeper08, "(crates.io, release)".to_owned()));
            }
            #[cfg(not(feature = "zk08"))]
            Library::Zookeeper08 => {
                println!(
                    "skipping zookeeper 0.8: built without the `zk08` feature (--features zk08)"
                );
                continue;
            }
            Library::Bare => {
                drivers.push(Box::new(Floor::<BareSession>::new(&connect)?));
                versions.push((Library::Bare, "(this build, release)".to_owned()));
            }
            Library::Reader => {
                drivers.push(Box::new(Floor::<ReaderSession>::new(&connect)?));
                versions.push((Library::Reader, "(this build, release)".to_owned()));
            }
            Library::IoThread => {
                drivers.push(Box::new(Floor::<IoThreadSession>::new(&connect)?));
                versions.push((Library::IoThread, "(this build, release)".to_owned()));
            }
            Library::Curator | Library::Kazoo => {
                let kind = peer_kind(*lib);
                if let Err(why) = peer_available(kind) {
                    println!("skipping {}: {why}", lib.name());
                    continue;
                }
                println!("starting the {} peer ...", lib.name());
                let mut peer = Peer::start(kind, &connect)
                    .map_err(|e| format!("cannot start the {} peer: {e}", lib.name()))?;
                let v = peer
                    .command_ok("version", Duration::from_secs(30))
                    .map_err(|e| e.to_string())?;
                versions.push((*lib, describe_version(&v)));
                drivers.push(Box::new(PeerDriver { lib: *lib, peer }));
            }
        }
    }
    if drivers.is_empty() {
        return Err("no library to run".into());
    }

    let mut results = Results::default();
    println!(
        "{} run: {} rounds, {} cycles, contenders {:?}, waiters {:?}, {:?} per timed run",
        if cfg.quick { "quick" } else { "full" },
        cfg.rounds,
        cfg.cycles,
        cfg.contenders,
        cfg.waiters,
        cfg.run
    );
    warm_up(&mut drivers, &cfg)?;
    if let Some(t) = over_tls.as_mut() {
        // A server of its own, with no other scenario to warm it up.
        let cycles = cfg.warmup_cycles * TLS_WARMUP;
        t.plain
            .mutex(&bench_path("warmup-latchkey-plain/mutex"), cycles)?;
        t.tls
            .mutex(&bench_path("warmup-latchkey-tls/mutex"), cycles)?;
    }
    for round in 0..cfg.rounds {
        println!(
            "round {}/{} ({:.0?} so far)",
            round + 1,
            cfg.rounds,
            started.elapsed()
        );
        // Rotate who goes first, so no library always runs on a fresher
        // (or more tired) server.
        drivers.rotate_left(usize::from(round > 0));
        run_round(&mut drivers, &cfg, mntr_addr, &mut results)?;
        if let Some(t) = over_tls.as_mut() {
            tls_round(t, &cfg, round, &mut results)?;
        }
    }
    let libs: Vec<Library> = drivers
        .iter()
        .map(|d| d.lib())
        .filter(|l| l.has_recipes())
        .collect();
    drop(drivers);
    let tls_ran = over_tls.is_some();
    drop(over_tls);
    measure_memory(&libs, &connect, &cfg, &mut results)?;
    match server {
        Some(server) => drop(server),
        None => clean_up(&connect),
    }

    let (header, rows) = report::rows(&results);
    println!("\n{}", report::text_table(&header, &rows));
    let waiters: Vec<usize> = if mntr_addr.is_some() {
        cfg.waiters.clone()
    } else {
        Vec::new()
    };
    let targets = report::targets(&results, &waiters, TARGET_SESSIONS);
    for t in &targets {
        println!(
            "{:<7} {}: {} (goal {})",
            t.verdict(),
            t.what,
            t.measured,
            t.goal
        );
    }
    let setup = Setup {
        started: SystemTime::now() - started.elapsed(),
        machine: procfs::machine(),
        zookeeper,
        versions,
        embedded: args.connect.is_none(),
        tls: tls_ran,
        herd: mntr_addr.is_some(),
    };
    if let Some(dir) = &args.out {
        write_docs(dir, &cfg, &setup, &results, &targets)?;
        println!("wrote {}/BENCHMARKS.md and plots", dir.display());
    }
    println!("done in {:.0?}", started.elapsed());
    Ok(())
}

/// The scale scenarios (`--scale`): figures, then the docs' scale section.
fn run_scale(
    cfg: &ScaleConfig,
    args: &Args,
    server: Option<&mut TestingServer>,
    connect: &str,
    mntr_addr: Option<SocketAddr>,
) -> Res<()> {
    let Some(mntr) = mntr_addr else {
        return Err("the scale run needs one server that answers mntr".into());
    };
    let mut libs: Vec<Library> = args
        .libs
        .iter()
        .copied()
        .filter(|l| matches!(l, Library::Latchkey | Library::Curator))
        .collect();
    if libs.contains(&Library::Curator) {
        if let Err(why) = peer_available(PeerKind::Curator) {
            println!("skipping Curator: {why}");
            libs.retain(|l| *l != Library::Curator);
        }
    }
    println!(
        "scale run: held {:?}, waiters {:?}, sessions {:?}, libraries {:?}",
        cfg.held,
        cfg.waiters,
        cfg.sessions,
        libs.iter().map(|l| l.name()).collect::<Vec<_>>()
    );
    let began = Instant::now();
    let load0 = scale::load_average();
    let restarted = server.is_some();
    let path = |what: &str| bench_path(what);
    let results = scale::run(
        cfg,
        &libs,
        scale::Target {
            connect,
            mntr,
            server,
            path: &path,
        },
    )?;
    println!("\n{}", scale::text(&results));
    let info = scale::RunInfo {
        started: SystemTime::now() - began.elapsed(),
        took: began.elapsed(),
        load: (load0, scale::load_average()),
        machine: procfs::machine(),
        restarted,
    };
    if let Some(dir) = &args.out {
        scale::write(dir, cfg, &results, &info)?;
        println!(
            "wrote the scale section of {}/BENCHMARKS.md and its plots",
            dir.display()
        );
    }
    Ok(())
}

/// latchkey over TLS: a second server that serves TLS (the harness's TLS
/// mode, so Netty serves both its ports), and one latchkey client on each
/// of its ports, so that the cycle over TLS is divided by a plain one on
/// the same server; the main server, and every library's figures on it,
/// stay as they are.
struct OverTls {
    plain: Ours,
    tls: Ours,
    _server: TestingServer,
    /// The server's key and CA files, which must outlive it.
    _certs: TestCerts,
}

impl OverTls {
    fn start() -> Res<Self> {
        println!("starting a second ZooKeeper, which serves TLS ...");
        let certs = TestCerts::generate().map_err(|e| format!("cannot make certificates: {e}"))?;
        let config = ServerConfig::default()
            .jvm_arg(FULL_JIT)
            .tls(&certs, ClientAuth::None);
        let server = TestingServer::start_with(config)
            .map_err(|e| format!("cannot start the TLS ZooKeeper: {e}"))?;
        let secure = server
            .secure_connect_string()
            .ok_or("the TLS ZooKeeper has no secure port")?;
        Ok(OverTls {
            plain: Ours::new(&server.connect_string())?,
            tls: Ours::with_tls(&secure, &certs)?,
            _server: server,
            _certs: certs,
        })
    }
}

/// latchkey's uncontended mutex cycle on the TLS server, plain and over
/// TLS (which goes first alternates by round): the cycle over TLS, its p99,
/// and its ratio to the plain one of the same round.
fn tls_round(t: &mut OverTls, cfg: &Config, round: usize, results: &mut Results) -> Res<()> {
    let mut plain = || {
        t.plain
            .mutex(&bench_path("latchkey-plain-mutex"), cfg.cycles)
    };
    let (p, c) = if round.is_multiple_of(2) {
        let p = plain()?.0;
        (
            p,
            t.tls
                .mutex(&bench_path("latchkey-tls-mutex"), cfg.cycles)?
                .0,
        )
    } else {
        let c = t
            .tls
            .mutex(&bench_path("latchkey-tls-mutex"), cfg.cycles)?
            .0;
        (plain()?.0, c)
    };
    let lib = Library::Latchkey;
    let label = "uncontended mutex acquire + release, over TLS";
    results.add(
        "mutex.tls",
        label,
        "µs/cycle",
        Better::Lower,
        lib,
        c.mean_us(),
    );
    let label = "uncontended mutex cycle p99, over TLS";
    results.add(
        "mutex.tls.p99",
        label,
        "µs",
        Better::Lower,
        lib,
        c.p99_us as f64,
    );
    let ratio = c.mean_us() / p.mean_us().max(f64::MIN_POSITIVE);
    let label = "uncontended mutex cycle, over TLS ÷ plain (same server)";
    results.add("mutex.tls.ratio", label, "x", Better::Lower, lib, ratio);
    println!(
        "  latchkey mutex over TLS {:>8.0} µs/cycle, plain {:.0} µs/cycle on the same server: {ratio:.2}x",
        c.mean_us(),
        p.mean_us()
    );
    Ok(())
}

/// Every path the bench uses is under one fresh node, which a run against
/// `--connect` removes at the end.
fn base_path() -> &'static str {
    static BASE: OnceLock<String> = OnceLock::new();
    BASE.get_or_init(|| unique_path("latchkey-bench"))
}

/// A fresh path for one run of one scenario.
fn bench_path(what: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{}/{what}-{n}", base_path())
}

/// Removes what the run left on a server that outlives it.
fn clean_up(connect: &str) {
    let removed = connected(connect, 1).and_then(|clients| {
        let c = &clients[0];
        let done = match c
            .delete()
            .deleting_children_if_needed()
            .for_path(base_path())
        {
            Err(e) if !e.is(latchkey_framework::ErrorCode::NoNode) => Err(e.to_string()),
            _ => Ok(()),
        };
        c.close();
        done
    });
    if let Err(e) = removed {
        println!("could not remove {}: {e}", base_path());
    }
}

/// A peer's `version` answer (`5.4.0 java-17.0.15`) as `5.4.0 on Java 17.0.15`.
fn describe_version(answer: &str) -> String {
    let mut words = answer.split_whitespace();
    let version = words.next().unwrap_or("unknown");
    match words.next().and_then(|r| r.split_once('-')) {
        Some((runtime, v)) => {
            let mut name = runtime.to_owned();
            if let Some(first) = name.get_mut(..1) {
                first.make_ascii_uppercase();
            }
            format!("{version} on {name} {v}")
        }
        None => version.to_owned(),
    }
}

fn peer_kind(lib: Library) -> PeerKind {
    match lib {
        Library::Kazoo => PeerKind::Kazoo,
        _ => PeerKind::Curator,
    }
}

fn first_address(connect: &str) -> Option<SocketAddr> {
    let hosts = connect.split('/').next().unwrap_or(connect);
    hosts
        .split(',')
        .next()
        .and_then(|h| h.trim().to_socket_addrs().ok())
        .and_then(|mut a| a.next())
}

/// The server whose `mntr` counts the herd: only with a single server (an
/// ensemble spreads the sessions) that answers `mntr`.
fn herd_address(connect: &str) -> Option<SocketAddr> {
    let hosts = connect.split('/').next().unwrap_or(connect);
    if hosts.split(',').count() != 1 {
        return None;
    }
    let addr = first_address(connect)?;
    let text = four_letter_word(addr, "mntr", Duration::from_secs(5)).ok()?;
    mntr::parse(&text).map(|_| addr)
}

fn read_mntr(addr: SocketAddr) -> Res<Counters> {
    let text =
        four_letter_word(addr, "mntr", Duration::from_secs(5)).map_err(|e| format!("mntr: {e}"))?;
    mntr::parse(&text).ok_or_else(|| "mntr: no zk_packets_received".to_string())
}

/// One acquire+release (or raw) cycle benchmark's answer.
#[derive(Clone, Copy, Debug)]
struct Cycles {
    cycles: u64,
    total_us: u64,
    p50_us: u64,
    p99_us: u64,
}

impl Cycles {
    fn mean_us(&self) -> f64 {
        self.total_us as f64 / self.cycles.max(1) as f64
    }
}

/// The herd counters between 1/4 and 3/4 of a contended run.
#[derive(Clone, Copy, Debug)]
struct Window {
    handoffs: u64,
    counters: Counters,
}

/// A contended run's answer.
#[derive(Clone, Copy, Debug)]
struct Contended {
    cycles: u64,
    elapsed_us: u64,
    p50_us: u64,
    p99_us: u64,
    window: Option<Window>,
}

/// A timed read-write or semaphore run's answer.
#[derive(Clone, Copy, Debug)]
struct Timed {
    ops: u64,
    elapsed_us: u64,
    p50_us: u64,
    p99_us: u64,
}

impl Timed {
    /// A run of ours: every thread's acquire latencies, and how long it took.
    fn of(latencies: Vec<Vec<u64>>, elapsed: Duration) -> Timed {
        let all = sorted_latencies(latencies);
        Timed {
            ops: all.len() as u64,
            elapsed_us: micros(elapsed),
            p50_us: stats::percentile(&all, 0.50),
            p99_us: stats::percentile(&all, 0.99),
        }
    }
}

/// One library's way of running each scenario.
trait Driver {
    fn lib(&self) -> Library;
    fn floor(&mut self, path: &str, cycles: usize) -> Res<Cycles>;
    /// The cycles and the CPU time the client's process spent on them.
    fn mutex(&mut self, path: &str, cycles: usize) -> Res<(Cycles, Duration)>;
    fn contended(
        &mut self,
        path: &str,
        sessions: usize,
        run: Duration,
        mntr: Option<SocketAddr>,
    ) -> Res<Contended>;
    fn rw(&mut self, path: &str, sessions: usize, run: Duration, write_every: usize) -> Res<Timed>;
    fn sem(&mut self, path: &str, sessions: usize, leases: usize, run: Duration) -> Res<Timed>;
    /// One producer puts `items` on a `DistributedQueue` at `path`,
    /// `consumers` sessions take them: `ops` items taken, and the time from
    /// each put's start to its consumer. `None` where the library has no
    /// queue of Curator's layout here.
    fn queue(&mut self, _path: &str, _consumers: usize, _items: usize) -> Res<Option<Timed>> {
        Ok(None)
    }
}

fn warm_up(drivers: &mut [Box<dyn Driver>], cfg: &Config) -> Res<()> {
    println!("warming up (JIT, caches, the server) ...");
    for d in drivers.iter_mut() {
        let base = bench_path(&format!("warmup-{}", d.lib().name().replace(' ', "-")));
        d.floor(&format!("{base}/floor"), cfg.warmup_cycles)?;
        if !d.lib().runs_lock_cycle() {
            continue;
        }
        d.mutex(&format!("{base}/mutex"), cfg.warmup_cycles)?;
        d.contended(&format!("{base}/contended"), TARGET_SESSIONS, cfg.run, None)?;
    }
    Ok(())
}

fn run_round(
    drivers: &mut [Box<dyn Driver>],
    cfg: &Config,
    mntr: Option<SocketAddr>,
    results: &mut Results,
) -> Res<()> {
    let path = |d: &dyn Driver, what: &str| {
        bench_path(&format!("{}-{what}", d.lib().name().replace(' ', "-")))
    };
    for d in drivers.iter_mut() {
        let lib = d.lib();
        let c = d.floor(&path(d.as_ref(), "floor"), cfg.cycles)?;
        let label = "floor: create + getChildren + delete";
        results.add(
            keys::FLOOR,
            label,
            "µs/cycle",
            Better::Lower,
            lib,
            c.mean_us(),
        );
        println!("  {:<13} floor  {:>8.0} µs/cycle", lib.name(), c.mean_us());
    }
    for d in drivers.iter_mut().filter(|d| d.lib().runs_lock_cycle()) {
        let lib = d.lib();
        let (c, cpu) = d.mutex(&path(d.as_ref(), "mutex"), cfg.cycles)?;
        let label = "uncontended mutex acquire + release";
        results.add(
            keys::MUTEX,
            label,
            "µs/cycle",
            Better::Lower,
            lib,
            c.mean_us(),
        );
        let label = "uncontended mutex cycle p50";
        results.add(
            keys::MUTEX_P50,
            label,
            "µs",
            Better::Lower,
            lib,
            c.p50_us as f64,
        );
        let label = "uncontended mutex cycle p99";
        results.add(
            "mutex.p99",
            label,
            "µs",
            Better::Lower,
            lib,
            c.p99_us as f64,
        );
        let cpu_ms = cpu.as_secs_f64() * 1e3 * 1000.0 / c.cycles.max(1) as f64;
        let label = "client CPU per 1,000 uncontended cycles";
        results.add(keys::CPU, label, "ms", Better::Lower, lib, cpu_ms);
        println!(
            "  {:<8} mutex       {:>8.0} µs/cycle, p50 {} µs, CPU {cpu_ms:.1} ms per 1,000",
            lib.name(),
            c.mean_us(),
            c.p50_us
        );
    }
    for &n in &cfg.contenders {
        for d in drivers.iter_mut().filter(|d| d.lib().runs_lock_cycle()) {
            let lib = d.lib();
            let c = d.contended(&path(d.as_ref(), "contended"), n, cfg.run, None)?;
            let per_s = c.cycles as f64 / (c.elapsed_us.max(1) as f64 / 1e6);
            let l = |what: &str| format!("contended, {n} sessions: {what}");
            results.add(
                &keys::throughput(n),
                &l("throughput"),
                "handoffs/s",
                Better::Higher,
                lib,
                per_s,
            );
            results.add(
                &keys::p50(n),
                &l("handoff p50"),
                "µs",
                Better::Lower,
                lib,
                c.p50_us as f64,
            );
            results.add(
                &keys::p99(n),
                &l("handoff p99"),
                "µs",
                Better::Lower,
                lib,
                c.p99_us as f64,
            );
            println!(
                "  {:<8} contended {n:>2} {per_s:>8.0} handoffs/s, p50 {} µs, p99 {} µs",
                lib.name(),
                c.p50_us,
                c.p99_us
            );
        }
    }
    for &w in cfg.waiters.iter().filter(|_| mntr.is_some()) {
        for d in drivers.iter_mut().filter(|d| d.lib().has_recipes()) {
            let lib = d.lib();
            let c = d.contended(&path(d.as_ref(), "herd"), w + 1, cfg.herd_run, mntr)?;
            let Some(win) = c.window.filter(|win| win.handoffs > 0) else {
                return Err(format!(
                    "{}: no handoffs counted with {w} waiters",
                    lib.name()
                ));
            };
            let h = win.handoffs as f64;
            let req = win.counters.requests as f64 / h;
            let ev = win.counters.watch_events as f64 / h;
            let l = |what: &str| format!("herd, {w} waiters: {what}");
            results.add(
                &keys::requests(w),
                &l("requests per handoff"),
                "requests",
                Better::Lower,
                lib,
                req,
            );
            results.add(
                &keys::events(w),
                &l("watch events per handoff"),
                "events",
                Better::Lower,
                lib,
                ev,
            );
            println!(
                "  {:<8} herd      {w:>2} {req:>8.2} requests, {ev:.2} watch events per handoff",
                lib.name()
            );
        }
    }
    for d in drivers.iter_mut().filter(|d| d.lib().has_recipes()) {
        let lib = d.lib();
        let (n, every) = (cfg.rw_sessions, cfg.rw_write_every);
        let t = d.rw(&path(d.as_ref(), "rw"), n, cfg.run, every)?;
        let per_s = t.ops as f64 / (t.elapsed_us.max(1) as f64 / 1e6);
        let l = |what: &str| format!("read-write lock, {n} sessions, 1 write in {every}: {what}");
        results.add(
            "rw.throughput",
            &l("throughput"),
            "locks/s",
            Better::Higher,
            lib,
            per_s,
        );
        results.add(
            "rw.p50",
            &l("acquire p50"),
            "µs",
            Better::Lower,
            lib,
            t.p50_us as f64,
        );
        results.add(
            "rw.p99",
            &l("acquire p99"),
            "µs",
            Better::Lower,
            lib,
            t.p99_us as f64,
        );
        println!(
            "  {:<8} rw          {per_s:>8.0} locks/s, p50 {} µs, p99 {} µs",
            lib.name(),
            t.p50_us,
            t.p99_us
        );
    }
    for d in drivers.iter_mut().filter(|d| d.lib().has_recipes()) {
        let lib = d.lib();
        let (n, leases) = (cfg.sem_sessions, cfg.sem_leases);
        let t = d.sem(&path(d.as_ref(), "sem"), n, leases, cfg.run)?;
        let per_s = t.ops as f64 / (t.elapsed_us.max(1) as f64 / 1e6);
        let l = |what: &str| format!("semaphore, {n} sessions, {leases} leases: {what}");
        results.add(
            "sem.throughput",
            &l("throughput"),
            "leases/s",
            Better::Higher,
            lib,
            per_s,
        );
        results.add(
            "sem.p50",
            &l("acquire p50"),
            "µs",
            Better::Lower,
            lib,
            t.p50_us as f64,
        );
        results.add(
            "sem.p99",
            &l("acquire p99"),
            "µs",
            Better::Lower,
            lib,
            t.p99_us as f64,
        );
        println!(
            "  {:<8} semaphore   {per_s:>8.0} leases/s, p50 {} µs, p99 {} µs",
            lib.name(),
            t.p50_us,
            t.p99_us
        );
    }
    for d in drivers.iter_mut().filter(|d| d.lib().has_recipes()) {
        let lib = d.lib();
        let (n, items) = (cfg.queue_consumers, cfg.queue_items);
        let Some(t) = d.queue(&path(d.as_ref(), "queue"), n, items)? else {
            continue;
        };
        let per_s = t.ops as f64 / (t.elapsed_us.max(1) as f64 / 1e6);
        let l = |what: &str| format!("queue, 1 producer, {n} consumers: {what}");
        results.add(
            "queue.throughput",
            &l("throughput"),
            "items/s",
            Better::Higher,
            lib,
            per_s,
        );
        results.add(
            "queue.p50",
            &l("put to consumer p50"),
            "µs",
            Better::Lower,
            lib,
            t.p50_us as f64,
        );
        results.add(
            "queue.p99",
            &l("put to consumer p99"),
            "µs",
            Better::Lower,
            lib,
            t.p99_us as f64,
        );
        println!(
            "  {:<8} queue       {per_s:>8.0} items/s, p50 {} µs, p99 {} µs",
            lib.name(),
            t.p50_us,
            t.p99_us
        );
    }
    Ok(())
}

// ----- latchkey, in this process -------------------------------------------

struct Ours {
    connect: String,
    client: Client,
}

impl Ours {
    fn new(connect: &str) -> Res<Self> {
        Ok(Ours {
            connect: connect.to_owned(),
            client: connected(connect, 1)?.remove(0),
        })
    }

    /// A client connecting with TLS, verifying the server by `certs`' CA.
    fn with_tls(connect: &str, certs: &TestCerts) -> Res<Self> {
        let tls = TlsConfig::new(certs.ca_file());
        Ok(Ours {
            connect: connect.to_owned(),
            client: connected_with(connect, 1, Some(tls))?.remove(0),
        })
    }
}

impl Drop for Ours {
    fn drop(&mut self) {
        self.client.close();
    }
}

/// What the floors' sessions do: [`BareSession`] (one thread reads its own
/// replies), [`ReaderSession`] (a reader thread hands them over) and
/// [`IoThreadSession`] (an I/O thread writes the requests handed to it and
/// hands the replies over).
trait FloorSession: Sized + Send + 'static {
    /// The column it is shown in.
    const LIB: Library;
    fn connect(addr: SocketAddr, timeout: Duration, session: Duration) -> std::io::Result<Self>;
    fn ensure_path(&mut self, path: &str) -> std::io::Result<()>;
    fn sequential_cycle(&mut self, parent: &str, prefix: &str) -> std::io::Result<()>;
    fn acquire(&mut self, parent: &str, prefix: &str, data: &[u8]) -> std::io::Result<String>;
    fn release(&mut self, node: &str) -> std::io::Result<()>;
    fn close(self) -> std::io::Result<()>;
}

impl FloorSession for BareSession {
    const LIB: Library = Library::Bare;
    fn connect(addr: SocketAddr, timeout: Duration, session: Duration) -> std::io::Result<Self> {
        BareSession::connect(addr, timeout, session)
    }
    fn ensure_path(&mut self, path: &str) -> std::io::Result<()> {
        BareSession::ensure_path(self, path)
    }
    fn sequential_cycle(&mut self, parent: &str, prefix: &str) -> std::io::Result<()> {
        BareSession::sequential_cycle(self, parent, prefix)
    }
    fn acquire(&mut self, parent: &str, prefix: &str, data: &[u8]) -> std::io::Result<String> {
        BareSession::acquire(self, parent, prefix, data)
    }
    fn release(&mut self, node: &str) -> std::io::Result<()> {
        BareSession::release(self, node)
    }
    fn close(self) -> std::io::Result<()> {
        BareSession::close(self)
    }
}

impl FloorSession for ReaderSession {
    const LIB: Library = Library::Reader;
    fn connect(addr: SocketAddr, timeout: Duration, session: Duration) -> std::io::Result<Self> {
        ReaderSession::connect(addr, timeout, session)
    }
    fn ensure_path(&mut self, path: &str) -> std::io::Result<()> {
        SlotSession::ensure_path(self, path)
    }
    fn sequential_cycle(&mut self, parent: &str, prefix: &str) -> std::io::Result<()> {
        SlotSession::sequential_cycle(self, parent, prefix)
    }
    fn acquire(&mut self, parent: &str, prefix: &str, data: &[u8]) -> std::io::Result<String> {
        SlotSession::acquire(self, parent, prefix, data)
    }
    fn release(&mut self, node: &str) -> std::io::Result<()> {
        SlotSession::release(self, node)
    }
    fn close(self) -> std::io::Result<()> {
        ReaderSession::close(self)
    }
}

impl FloorSession for IoThreadSession {
    const LIB: Library = Library::IoThread;
    fn connect(addr: SocketAddr, timeout: Duration, session: Duration) -> std::io::Result<Self> {
        IoThreadSession::connect(addr, timeout, session)
    }
    fn ensure_path(&mut self, path: &str) -> std::io::Result<()> {
        SlotSession::ensure_path(self, path)
    }
    fn sequential_cycle(&mut self, parent: &str, prefix: &str) -> std::io::Result<()> {
        SlotSession::sequential_cycle(self, parent, prefix)
    }
    fn acquire(&mut self, parent: &str, prefix: &str, data: &[u8]) -> std::io::Result<String> {
        SlotSession::acquire(self, parent, prefix, data)
    }
    fn release(&mut self, node: &str) -> std::io::Result<()> {
        SlotSession::release(self, node)
    }
    fn close(self) -> std::io::Result<()> {
        IoThreadSession::close(self)
    }
}

/// No library: the requests on bare sockets (see [`BareSession`],
/// [`ReaderSession`] and [`IoThreadSession`]), a session per scenario so that none idles
/// unpinged.
struct Floor<S> {
    addr: SocketAddr,
    session: std::marker::PhantomData<fn() -> S>,
}

impl<S: FloorSession> Floor<S> {
    /// Long enough for a scenario's cycles, which never ping.
    const SESSION: Duration = Duration::from_secs(30);

    fn new(connect: &str) -> Res<Self> {
        let addr = first_address(connect)
            .ok_or_else(|| format!("{}: cannot resolve {connect}", S::LIB.name()))?;
        Ok(Floor {
            addr,
            session: std::marker::PhantomData,
        })
    }

    fn no_recipes() -> String {
        format!(
            "the {} has no recipes: it runs the floor and the lock cycles only",
            S::LIB.name()
        )
    }

    fn session(&self, path: &str) -> Res<S> {
        let err = |e: std::io::Error| format!("{} on {}: {e}", S::LIB.name(), self.addr);
        let mut s = S::connect(self.addr, CONNECT_WAIT, Self::SESSION).map_err(err)?;
        s.ensure_path(path).map_err(err)?;
        Ok(s)
    }

    fn cycles(
        &self,
        path: &str,
        cycles: usize,
        mut cycle: impl FnMut(&mut S) -> std::io::Result<()>,
    ) -> Res<(Cycles, Duration)> {
        let err = |e: std::io::Error| format!("{}: {path}: {e}", S::LIB.name());
        let mut s = self.session(path)?;
        let measured = with_cpu(|| timed_cycles(cycles, || cycle(&mut s).map_err(err)))?;
        s.close().map_err(err)?;
        Ok(measured)
    }
}

impl<S: FloorSession> Driver for Floor<S> {
    fn lib(&self) -> Library {
        S::LIB
    }

    fn floor(&mut self, path: &str, cycles: usize) -> Res<Cycles> {
        let prefix = format!("{path}/lock-");
        let (c, _) = self.cycles(path, cycles, |s| s.sequential_cycle(path, &prefix))?;
        Ok(c)
    }

    fn mutex(&mut self, path: &str, cycles: usize) -> Res<(Cycles, Duration)> {
        // Named as a protected lock node is; the data is Curator's default.
        let prefix = format!("{path}/_c_3f2504e0-4f89-41d3-9a0c-0305e82c3301-lock-");
        self.cycles(path, cycles, |s| {
            let node = s.acquire(path, &prefix, b"127.0.0.1")?;
            s.release(&node)
        })
    }

    fn contended(
        &mut self,
        path: &str,
        sessions: usize,
        run: Duration,
        mntr: Option<SocketAddr>,
    ) -> Res<Contended> {
        let mut lockers = Vec::with_capacity(sessions);
        for i in 0..sessions {
            // Each session's nodes named apart, as protection's ids make them.
            let prefix = format!(
                "{path}/_c_{:08x}-0000-4000-8000-{i:012x}-lock-",
                std::process::id()
            );
            lockers.push((self.session(path)?, prefix, None::<String>));
        }
        let parent = path.to_owned();
        let err = |e: std::io::Error| format!("{} contended: {e}", S::LIB.name());
        // A waiter does not give up at the run's end: it is next in a
        // queue that drains as every thread stops after its release.
        let acquire = move |(s, prefix, held): &mut (S, String, Option<String>), _: Duration| {
            *held = Some(s.acquire(&parent, prefix, b"127.0.0.1").map_err(err)?);
            Ok(true)
        };
        let release = move |(s, _, held): &mut (S, String, Option<String>)| match held.take() {
            Some(node) => s.release(&node).map_err(err),
            None => Ok(()),
        };
        contended_with(lockers, S::LIB.name(), path, run, mntr, acquire, release)
    }

    fn rw(&mut self, _: &str, _: usize, _: Duration, _: usize) -> Res<Timed> {
        Err(Self::no_recipes())
    }

    fn sem(&mut self, _: &str, _: usize, _: usize, _: Duration) -> Res<Timed> {
        Err(Self::no_recipes())
    }
}

/// The `zookeeper` crate (0.8) in this process, for the raw floor (with
/// the `zk08` feature).
#[cfg(feature = "zk08")]
struct Zk08 {
    zk: zookeeper::ZooKeeper,
}

#[cfg(feature = "zk08")]
impl Zk08 {
    const NO_RECIPES: &'static str =
        "the zookeeper crate has no lock recipes: it runs the floor only";

    fn new(connect: &str) -> Res<Self> {
        let err =
            |e: zookeeper::ZkError| format!("zookeeper 0.8: cannot connect to {connect}: {e:?}");
        let zk = zookeeper::ZooKeeper::connect(connect, SESSION_TIMEOUT, |_| {}).map_err(err)?;
        // It connects in the background: the first request waits for it.
        let deadline = Instant::now() + CONNECT_WAIT;
        while zk.exists("/", false).is_err() {
            if Instant::now() >= deadline {
                return Err(format!(
                    "zookeeper 0.8: not connected to {connect} within {CONNECT_WAIT:?}"
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
        Ok(Zk08 { zk })
    }
}

#[cfg(feature = "zk08")]
impl Drop for Zk08 {
    fn drop(&mut self) {
        let _ = self.zk.close();
    }
}

#[cfg(feature = "zk08")]
impl Driver for Zk08 {
    fn lib(&self) -> Library {
        Library::Zookeeper08
    }

    fn floor(&mut self, path: &str, cycles: usize) -> Res<Cycles> {
        use zookeeper::{Acl, CreateMode as Mode, ZooKeeperExt};
        let err = |e: zookeeper::ZkError| format!("zookeeper 0.8 floor: {e:?}");
        let zk = &self.zk;
        zk.ensure_path(path).map_err(err)?;
        let prefix = format!("{path}/lock-");
        timed_cycles(cycles, || {
            let node = zk
                .create(
                    &prefix,
                    Vec::new(),
                    Acl::open_unsafe().clone(),
                    Mode::EphemeralSequential,
                )
                .map_err(err)?;
            zk.get_children(path, false).map_err(err)?;
            zk.delete(&node, None).map_err(err)
        })
    }

    fn mutex(&mut self, _: &str, _: usize) -> Res<(Cycles, Duration)> {
        Err(Self::NO_RECIPES.into())
    }

    fn contended(
        &mut self,
        _: &str,
        _: usize,
        _: Duration,
        _: Option<SocketAddr>,
    ) -> Res<Contended> {
        Err(Self::NO_RECIPES.into())
    }

    fn rw(&mut self, _: &str, _: usize, _: Duration, _: usize) -> Res<Timed> {
        Err(Self::NO_RECIPES.into())
    }

    fn sem(&mut self, _: &str, _: usize, _: usize, _: Duration) -> Res<Timed> {
        Err(Self::NO_RECIPES.into())
    }
}

/// `n` clients with their own sessions, all connected.
fn connected(connect: &str, n: usize) -> Res<Vec<Client>> {
    connected_with(connect, n, None)
}

/// `n` connected clients, over TLS with `tls`.
fn connected_with(connect: &str, n: usize, tls: Option<TlsConfig>) -> Res<Vec<Client>> {
    let mut clients = Vec::with_capacity(n);
    let close_all = |clients: &[Client]| clients.iter().for_each(Client::close);
    for _ in 0..n {
        let mut builder = Client::builder()
            .connect_string(connect)
            .session_timeout(SESSION_TIMEOUT)
            .connection_timeout(CONNECTION_TIMEOUT)
            .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(100), 3));
        if let Some(tls) = &tls {
            builder = builder.tls(tls.clone());
        }
        let c = builder.build().map_err(|e| e.to_string())?;
        if let Err(e) = c.start() {
            close_all(&clients);
            return Err(e.to_string());
        }
        clients.push(c);
    }
    for c in &clients {
        if !c.block_until_connected(CONNECT_WAIT).unwrap_or(false) {
            close_all(&clients);
            return Err(format!("a session did not connect within {CONNECT_WAIT:?}"));
        }
    }
    Ok(clients)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Runs `cycle` `cycles` times in a row, timing each.
fn timed_cycles(cycles: usize, mut cycle: impl FnMut() -> Res<()>) -> Res<Cycles> {
    let mut per_cycle = Vec::with_capacity(cycles);
    let start = Instant::now();
    for _ in 0..cycles {
        let t0 = Instant::now();
        cycle()?;
        per_cycle.push(micros(t0.elapsed()));
    }
    Ok(cycles_of(per_cycle, start.elapsed()))
}

/// What `work` returns, and the CPU time this process spent on it (see
/// [`procfs::cpu_time`]).
fn with_cpu<T>(work: impl FnOnce() -> Res<T>) -> Res<(T, Duration)> {
    let me = std::process::id();
    let cpu0 = procfs::cpu_time(me).map_err(|e| e.to_string())?;
    let out = work()?;
    let cpu = procfs::cpu_time(me).map_err(|e| e.to_string())?;
    Ok((out, cpu.saturating_sub(cpu0)))
}

fn cycles_of(mut per_cycle: Vec<u64>, total: Duration) -> Cycles {
    per_cycle.sort_unstable();
    Cycles {
        cycles: per_cycle.len() as u64,
        total_us: micros(total),
        p50_us: stats::percentile(&per_cycle, 0.50),
        p99_us: stats::percentile(&per_cycle, 0.99),
    }
}

/// Runs `step` on one thread per state until `run` has passed (each step
/// gets the time left and returns `None` to stop), with `during` on this
/// thread meanwhile. Returns what every thread's steps returned, and the
/// elapsed time; fails on the first error of any thread, or if a thread is
/// still busy `GRACE` after the run.
fn run_crew<S, T>(
    states: Vec<S>,
    run: Duration,
    step: impl Fn(&mut S, Duration) -> Res<Option<T>> + Send + Sync + 'static,
    during: impl FnOnce(Instant) -> Res<()>,
) -> Res<(Vec<Vec<T>>, Duration)>
where
    S: Send + 'static,
    T: Send + 'static,
{
    let step = Arc::new(step);
    let stop = Arc::new(AtomicBool::new(false));
    let error: Arc<Mutex<Option<String>>> = Arc::default();
    let gate = Arc::new(Barrier::new(states.len() + 1));
    let start: Arc<Mutex<Option<Instant>>> = Arc::default();
    let handles: Vec<JoinHandle<Vec<T>>> = states
        .into_iter()
        .map(|mut state| {
            let (step, stop, error, gate, start) = (
                Arc::clone(&step),
                Arc::clone(&stop),
                Arc::clone(&error),
                Arc::clone(&gate),
                Arc::clone(&start),
            );
            thread::spawn(move || {
                gate.wait();
                let Some(end) = start.lock().map(|s| s.map(|s| s + run)).unwrap_or(None) else {
                    return Vec::new();
                };
                let mut out = Vec::new();
                while !stop.load(Ordering::Acquire) {
                    let left = end.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    match step(&mut state, left) {
                        Ok(Some(t)) => out.push(t),
                        Ok(None) => break,
                        Err(e) => {
                            stop.store(true, Ordering::Release);
                            if let Ok(mut slot) = error.lock() {
                                slot.get_or_insert(e);
                            }
                            break;
                        }
                    }
                }
                out
            })
        })
        .collect();
    let began = Instant::now();
    if let Ok(mut s) = start.lock() {
        *s = Some(began);
    }
    gate.wait();
    let during = during(began);
    let deadline = began + run + GRACE;
    while handles.iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    let elapsed = began.elapsed();
    if handles.iter().any(|h| !h.is_finished()) {
        stop.store(true, Ordering::Release);
        return Err(format!("a thread was still busy {GRACE:?} after the run"));
    }
    let mut outs = Vec::with_capacity(handles.len());
    for h in handles {
        outs.push(
            h.join()
                .map_err(|_| "a bench thread panicked".to_string())?,
        );
    }
    if let Some(e) = error.lock().ok().and_then(|mut e| e.take()) {
        return Err(e);
    }
    during?;
    Ok((outs, elapsed))
}

fn sorted_latencies(outs: Vec<Vec<u64>>) -> Vec<u64> {
    let mut all: Vec<u64> = outs.into_iter().flatten().collect();
    all.sort_unstable();
    all
}

impl Driver for Ours {
    fn lib(&self) -> Library {
        Library::Latchkey
    }

    fn floor(&mut self, path: &str, cycles: usize) -> Res<Cycles> {
        let c = &self.client;
        let err = |e: latchkey_framework::Error| format!("latchkey floor: {e}");
        c.ensure_path(path).map_err(err)?;
        let prefix = format!("{path}/lock-");
        timed_cycles(cycles, || {
            let node = c
                .create()
                .mode(CreateMode::EphemeralSequential)
                .for_path(&prefix, b"")
                .map_err(err)?;
            c.get_children(path).map_err(err)?;
            c.delete().for_path(&node).map_err(err)
        })
    }

    fn mutex(&mut self, path: &str, cycles: usize) -> Res<(Cycles, Duration)> {
        let err = |e: latchkey_framework::Error| format!("latchkey mutex: {e}");
        let m = InterProcessMutex::new(&self.client, path).map_err(err)?;
        with_cpu(|| {
            timed_cycles(cycles, || {
                if !m.acquire_timeout(ACQUIRE_WAIT).map_err(err)? {
                    return Err(format!(
                        "latchkey mutex: {path} not acquired within {ACQUIRE_WAIT:?}"
                    ));
                }
                m.release().map_err(err)
            })
        })
    }

    fn contended(
        &mut self,
        path: &str,
        sessions: usize,
        run: Duration,
        mntr: Option<SocketAddr>,
    ) -> Res<Contended> {
        let clients = connected(&self.connect, sessions)?;
        let result = contended_on(&clients, path, run, mntr);
        clients.iter().for_each(Client::close);
        result
    }

    fn rw(&mut self, path: &str, sessions: usize, run: Duration, write_every: usize) -> Res<Timed> {
        let clients = connected(&self.connect, sessions)?;
        let result = rw_on(&clients, path, run, write_every.max(1));
        clients.iter().for_each(Client::close);
        result
    }

    fn sem(&mut self, path: &str, sessions: usize, leases: usize, run: Duration) -> Res<Timed> {
        let clients = connected(&self.connect, sessions)?;
        let result = sem_on(&clients, path, leases, run);
        clients.iter().for_each(Client::close);
        result
    }

    fn queue(&mut self, path: &str, consumers: usize, items: usize) -> Res<Option<Timed>> {
        let clients = connected(&self.connect, consumers + 1)?;
        let result = queue_on(&clients, path, items);
        clients.iter().for_each(Client::close);
        result.map(Some)
    }
}

/// The queue run: `clients[0]` puts `items` one by one on a producer-only
/// `DistributedQueue`, each other client consumes with a callback; the
/// latency of an item is from its put's start to its consumer.
fn queue_on(clients: &[Client], path: &str, items: usize) -> Res<Timed> {
    let err = |e: latchkey_framework::Error| format!("latchkey queue: {e}");
    let put_at: Arc<Vec<OnceLock<Instant>>> =
        Arc::new((0..items).map(|_| OnceLock::new()).collect());
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    let consumers = clients[1..]
        .iter()
        .map(|c| {
            let (put_at, tx) = (Arc::clone(&put_at), tx.clone());
            let q = QueueBuilder::new(c, StringSerializer, path)
                .consumer(move |item: String| {
                    let i: usize = item.parse()?;
                    let at = put_at
                        .get(i)
                        .and_then(OnceLock::get)
                        .ok_or("an item never put")?;
                    let _ = tx.send(micros(at.elapsed()));
                    Ok(())
                })
                .build_queue()
                .map_err(err)?;
            q.start().map_err(err)?;
            Ok(q)
        })
        .collect::<Res<Vec<_>>>()?;
    let producer = QueueBuilder::new(&clients[0], StringSerializer, path)
        .build_queue()
        .map_err(err)?;
    producer.start().map_err(err)?;
    let start = Instant::now();
    for (i, at) in put_at.iter().enumerate() {
        let _ = at.set(Instant::now());
        producer.put(&i.to_string()).map_err(err)?;
    }
    let deadline = Instant::now() + GRACE;
    let mut latencies = Vec::with_capacity(items);
    while latencies.len() < items {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(us) => latencies.push(us),
            Err(_) => {
                return Err(format!(
                    "latchkey queue: {} of {items} items taken within {GRACE:?}",
                    latencies.len()
                ))
            }
        }
    }
    let elapsed = start.elapsed();
    drop(consumers);
    Ok(Timed::of(vec![latencies], elapsed))
}

/// The contended mutex run, measured as the peers measure it: each holder
/// takes a generation number while it holds the lock; handoff g is from
/// holder g-1's `release()` returning to holder g's `acquire` returning,
/// clamped at 0.
fn contended_on(
    clients: &[Client],
    path: &str,
    run: Duration,
    mntr: Option<SocketAddr>,
) -> Res<Contended> {
    let err = |e: latchkey_framework::Error| format!("latchkey contended: {e}");
    let mutexes: Vec<InterProcessMutex> = clients
        .iter()
        .map(|c| InterProcessMutex::new(c, path))
        .collect::<Result<_, _>>()
        .map_err(err)?;
    let acquire =
        move |m: &mut InterProcessMutex, left: Duration| m.acquire_timeout(left).map_err(err);
    let release = move |m: &mut InterProcessMutex| m.release().map_err(err);
    contended_with(mutexes, "latchkey", path, run, mntr, acquire, release)
}

/// The contended run of `lockers`, one thread each: `acquire` (given the
/// time left; false to stop) and `release` in a loop, with a shared
/// counter that fails the run if two hold at once.
fn contended_with<L: Send + 'static>(
    lockers: Vec<L>,
    lib: &'static str,
    path: &str,
    run: Duration,
    mntr: Option<SocketAddr>,
    acquire: impl Fn(&mut L, Duration) -> Res<bool> + Send + Sync + 'static,
    release: impl Fn(&mut L) -> Res<()> + Send + Sync + 'static,
) -> Res<Contended> {
    let generation = Arc::new(AtomicU64::new(0));
    let holders = Arc::new(AtomicUsize::new(0));
    let (gen, lock_path) = (Arc::clone(&generation), path.to_owned());
    let step = move |m: &mut L, left: Duration| {
        if !acquire(m, left)? {
            return Ok(None);
        }
        let acquired = Instant::now();
        if holders.fetch_add(1, Ordering::SeqCst) != 0 {
            return Err(format!(
                "{lib} contended: two holders of {lock_path} at once"
            ));
        }
        let g = gen.fetch_add(1, Ordering::SeqCst);
        holders.fetch_sub(1, Ordering::SeqCst);
        release(m)?;
        Ok(Some((g, acquired, Instant::now())))
    };
    let mut window = None;
    let (outs, elapsed) = run_crew(lockers, run, step, |began| {
        let Some(addr) = mntr else { return Ok(()) };
        // The steady middle of the run: no session set-up or tear-down.
        sleep_until(began + run / 4);
        let (g0, m0) = (generation.load(Ordering::SeqCst), read_mntr(addr)?);
        sleep_until(began + run * 3 / 4);
        let (g1, m1) = (generation.load(Ordering::SeqCst), read_mntr(addr)?);
        window = Some(Window {
            handoffs: g1 - g0,
            counters: m0.until(m1),
        });
        Ok(())
    })?;
    let total = generation.load(Ordering::SeqCst) as usize;
    let mut acquired_at = vec![None; total];
    let mut released_at = vec![None; total];
    for (g, acquired, released) in outs.into_iter().flatten() {
        acquired_at[g as usize] = Some(acquired);
        released_at[g as usize] = Some(released);
    }
    let mut handoffs: Vec<u64> = (1..total)
        .filter_map(|g| {
            let (a, r) = (acquired_at[g]?, released_at[g - 1]?);
            Some(micros(a.saturating_duration_since(r)))
        })
        .collect();
    handoffs.sort_unstable();
    Ok(Contended {
        cycles: total as u64,
        elapsed_us: micros(elapsed),
        p50_us: stats::percentile(&handoffs, 0.50),
        p99_us: stats::percentile(&handoffs, 0.99),
        window,
    })
}

fn sleep_until(at: Instant) {
    thread::sleep(at.saturating_duration_since(Instant::now()));
}

/// Read-write lock, mostly readers: each session takes the read lock, and
/// the write lock on every `write_every`-th turn.
fn rw_on(clients: &[Client], path: &str, run: Duration, write_every: usize) -> Res<Timed> {
    let err = |e: latchkey_framework::Error| format!("latchkey rw: {e}");
    let states: Vec<(InterProcessReadWriteLock, usize)> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| InterProcessReadWriteLock::new(c, path).map(|rw| (rw, i)))
        .collect::<Result<_, _>>()
        .map_err(err)?;
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let writes = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&writes);
    let lock_path = path.to_owned();
    let step = move |(rw, turn): &mut (InterProcessReadWriteLock, usize), left: Duration| {
        let write = *turn % write_every == 0;
        *turn += 1;
        let lock = if write {
            rw.write_lock()
        } else {
            rw.read_lock()
        };
        let t0 = Instant::now();
        if !lock.acquire_timeout(left).map_err(err)? {
            return Ok(None);
        }
        let waited = micros(t0.elapsed());
        if write {
            if writers.fetch_add(1, Ordering::SeqCst) != 0 || readers.load(Ordering::SeqCst) != 0 {
                return Err(format!("latchkey rw: a writer of {lock_path} is not alone"));
            }
            counted.fetch_add(1, Ordering::Relaxed);
            writers.fetch_sub(1, Ordering::SeqCst);
        } else {
            readers.fetch_add(1, Ordering::SeqCst);
            if writers.load(Ordering::SeqCst) != 0 {
                return Err(format!(
                    "latchkey rw: a reader of {lock_path} overlaps a writer"
                ));
            }
            readers.fetch_sub(1, Ordering::SeqCst);
        }
        lock.release().map_err(err)?;
        Ok(Some(waited))
    };
    let (outs, elapsed) = run_crew(states, run, step, |_| Ok(()))?;
    Ok(Timed::of(outs, elapsed))
}

/// Semaphore leases: each session takes one lease and gives it back.
fn sem_on(clients: &[Client], path: &str, leases: usize, run: Duration) -> Res<Timed> {
    let err = |e: latchkey_framework::Error| format!("latchkey sem: {e}");
    let max = u32::try_from(leases).map_err(|_| "too many leases".to_string())?;
    let sems: Vec<InterProcessSemaphoreV2> = clients
        .iter()
        .map(|c| InterProcessSemaphoreV2::new(c, path, max))
        .collect::<Result<_, _>>()
        .map_err(err)?;
    let out = Arc::new(AtomicUsize::new(0));
    let sem_path = path.to_owned();
    let step = move |sem: &mut InterProcessSemaphoreV2, left: Duration| {
        let t0 = Instant::now();
        let Some(lease) = sem.acquire_timeout(left).map_err(err)? else {
            return Ok(None);
        };
        let waited = micros(t0.elapsed());
        if out.fetch_add(1, Ordering::SeqCst) >= leases {
            return Err(format!(
                "latchkey sem: more than {leases} leases of {sem_path} out"
            ));
        }
        out.fetch_sub(1, Ordering::SeqCst);
        lease.return_lease().map_err(err)?;
        Ok(Some(waited))
    };
    let (outs, elapsed) = run_crew(sems, run, step, |_| Ok(()))?;
    Ok(Timed::of(outs, elapsed))
}

// ----- Curator and kazoo, through their peers -------------------------------

struct PeerDriver {
    lib: Library,
    peer: Peer,
}

impl PeerDriver {
    /// Sends `line` and parses the numbers after `OK` (at least `min`).
    fn numbers(&mut self, line: &str, timeout: Duration, min: usize) -> Res<Vec<u64>> {
        let reply = self
            .peer
            .command_ok(line, timeout)
            .map_err(|e| format!("{}: {e}", self.lib.name()))?;
        let nums: Vec<u64> = reply
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|_| format!("{}: `{line}` answered `OK {reply}`", self.lib.name()))?;
        if nums.len() < min {
            return Err(format!(
                "{}: `{line}` answered `OK {reply}`",
                self.lib.name()
            ));
        }
        Ok(nums)
    }

    fn cycles(&mut self, line: &str, cycles: usize) -> Res<Cycles> {
        // At most 100 ms a cycle before the answer counts as lost.
        let timeout = GRACE + Duration::from_millis(100) * cycles as u32;
        let n = self.numbers(line, timeout, 4)?;
        Ok(Cycles {
            cycles: n[0],
            total_us: n[1],
            p50_us: n[2],
            p99_us: n[3],
        })
    }

    fn timed(&mut self, line: &str, run: Duration) -> Res<Timed> {
        let n = self.numbers(line, run + GRACE * 2, 4)?;
        Ok(Timed {
            ops: n[0],
            elapsed_us: n[1],
            p50_us: n[2],
            p99_us: n[3],
        })
    }
}

impl Driver for PeerDriver {
    fn lib(&self) -> Library {
        self.lib
    }

    fn floor(&mut self, path: &str, cycles: usize) -> Res<Cycles> {
        self.cycles(&format!("bench floor {path} {cycles}"), cycles)
    }

    fn mutex(&mut self, path: &str, cycles: usize) -> Res<(Cycles, Duration)> {
        let pid = self.peer.pid();
        let cpu0 = procfs::cpu_time(pid).map_err(|e| e.to_string())?;
        let c = self.cycles(&format!("bench mutex {path} {cycles}"), cycles)?;
        let cpu = procfs::cpu_time(pid).map_err(|e| e.to_string())?;
        Ok((c, cpu.saturating_sub(cpu0)))
    }

    fn contended(
        &mut self,
        path: &str,
        sessions: usize,
        run: Duration,
        mntr: Option<SocketAddr>,
    ) -> Res<Contended> {
        let secs = run.as_secs_f64();
        let line = match mntr {
            Some(a) => format!("bench contended {path} {sessions} {secs} {a}"),
            None => format!("bench contended {path} {sessions} {secs}"),
        };
        let n = self.numbers(&line, run + GRACE * 2, 4)?;
        let window = (n.len() >= 7).then(|| Window {
            handoffs: n[4],
            counters: Counters {
                requests: n[5],
                watch_events: n[6],
            },
        });
        Ok(Contended {
            cycles: n[0],
            elapsed_us: n[1],
            p50_us: n[2],
            p99_us: n[3],
            window,
        })
    }

    fn rw(&mut self, path: &str, sessions: usize, run: Duration, write_every: usize) -> Res<Timed> {
        let secs = run.as_secs_f64();
        self.timed(
            &format!("bench rw {path} {sessions} {secs} {write_every}"),
            run,
        )
    }

    fn sem(&mut self, path: &str, sessions: usize, leases: usize, run: Duration) -> Res<Timed> {
        let secs = run.as_secs_f64();
        self.timed(&format!("bench sem {path} {sessions} {leases} {secs}"), run)
    }

    fn queue(&mut self, path: &str, consumers: usize, items: usize) -> Res<Option<Timed>> {
        if self.lib != Library::Curator {
            return Ok(None);
        }
        self.timed(
            &format!("queue bench {path} {consumers} {items}"),
            Duration::ZERO,
        )
        .map(Some)
    }
}

// ----- memory ----------------------------------------------------------------

/// Resident memory of a fresh process per library holding `hold_sessions`
/// sessions, each with a mutex held.
fn measure_memory(libs: &[Library], connect: &str, cfg: &Config, results: &mut Results) -> Res<()> {
    let n = cfg.hold_sessions;
    for &lib in libs {
        let (rss, threads) = match lib {
            Library::Latchkey => hold_in_child(connect, n)?,
            _ => hold_in_peer(lib, connect, n)?,
        };
        let mib = rss as f64 / (1024.0 * 1024.0);
        let label = format!("resident memory, one process holding {n} sessions");
        results.add(keys::MEMORY, &label, "MiB", Better::Lower, lib, mib);
        let label = format!("threads, one process holding {n} sessions");
        results.add(
            "memory.threads",
            &label,
            "threads",
            Better::Lower,
            lib,
            threads as f64,
        );
        println!(
            "  {:<8} memory      {mib:>8.1} MiB, {threads} threads with {n} sessions",
            lib.name()
        );
    }
    Ok(())
}

fn hold_in_peer(lib: Library, connect: &str, n: usize) -> Res<(u64, u64)> {
    let mut peer = Peer::start(peer_kind(lib), connect)
        .map_err(|e| format!("cannot start the {} peer: {e}", lib.name()))?;
    let path = bench_path(&format!("{}-hold", lib.name()));
    peer.command_ok(&format!("bench hold {path} {n}"), GRACE * 2)
        .map_err(|e| format!("{}: {e}", lib.name()))?;
    thread::sleep(SETTLE);
    let pid = peer.pid();
    let reading = procfs::rss_bytes(pid).and_then(|r| Ok((r, procfs::threads(pid)?)));
    let _ = peer.quit(Duration::from_secs(10));
    reading.map_err(|e| e.to_string())
}

/// A child process of this program (`--hold`), so that the reading is of a
/// process that does nothing but hold the sessions, like the peers.
fn hold_in_child(connect: &str, n: usize) -> Res<(u64, u64)> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let path = bench_path("latchkey-hold");
    let mut child = Command::new(exe)
        .args(["--hold", &n.to_string(), connect, &path])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the --hold child: {e}"))?;
    let reading = (|| {
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(GRACE * 2)
            .map_err(|_| "the --hold child did not get ready".to_string())?;
        if line.trim() != "READY" {
            return Err(format!("the --hold child said {line:?}"));
        }
        thread::sleep(SETTLE);
        let pid = child.id();
        Ok((
            procfs::rss_bytes(pid).map_err(|e| e.to_string())?,
            procfs::threads(pid).map_err(|e| e.to_string())?,
        ))
    })();
    finish_child(&mut child);
    reading
}

/// Closes the child's stdin (it then closes its sessions and exits); kills
/// it if it is still there after 10 s.
fn finish_child(child: &mut Child) {
    drop(child.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The `--hold` child: opens `n` sessions, takes a mutex on each, says
/// READY and keeps them until its stdin closes.
fn hold_child(n: &str, connect: &str, path: &str) -> Res<()> {
    let n: usize = n.parse().map_err(|_| format!("bad session count {n:?}"))?;
    let clients = connected(connect, n.clamp(1, 10_000))?;
    let held = (|| {
        let mut mutexes = Vec::with_capacity(clients.len());
        for (i, c) in clients.iter().enumerate() {
            let m =
                InterProcessMutex::new(c, &format!("{path}/s{i}")).map_err(|e| e.to_string())?;
            if !m.acquire_timeout(ACQUIRE_WAIT).map_err(|e| e.to_string())? {
                return Err(format!("{path}/s{i} not acquired within {ACQUIRE_WAIT:?}"));
            }
            mutexes.push(m);
        }
        println!("READY");
        std::io::stdout().flush().map_err(|e| e.to_string())?;
        // Until the parent closes our stdin (bounded by its own timeouts).
        let mut sink = String::new();
        while std::io::stdin().read_line(&mut sink).is_ok_and(|r| r > 0) {
            sink.clear();
        }
        for m in &mutexes {
            let _ = m.release();
        }
        Ok(())
    })();
    clients.iter().for_each(Client::close);
    held
}

// ----- the report ------------------------------------------------------------

fn write_docs(
    dir: &std::path::Path,
    cfg: &Config,
    setup: &Setup,
    results: &Results,
    targets: &[report::Target],
) -> Res<()> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))
    };
    // The plots are about the recipes; a library without any has no point there.
    let libs: Vec<Library> = results
        .libraries()
        .into_iter()
        .filter(|l| l.has_recipes())
        .collect();
    let series =
        |xs: &[usize], key: &dyn Fn(usize) -> String, lib: Library, name: String, dashed| Series {
            name,
            color: lib.color().into(),
            dashed,
            points: xs
                .iter()
                .map(|&n| (n as f64, results.median(&key(n), lib).unwrap_or(f64::NAN)))
                .collect(),
        };
    let (sessions, waiters) = (cfg.contenders.as_slice(), cfg.waiters.as_slice());
    let sessions_label = "sessions contending for one mutex".to_string();
    write(
        "bench-throughput.svg",
        Chart {
            title: "Contended mutex throughput (higher is better)".into(),
            x_label: sessions_label.clone(),
            y_label: "handoffs per second".into(),
            log_x: true,
            log_y: false,
            series: libs
                .iter()
                .map(|&l| series(sessions, &keys::throughput, l, l.name().into(), false))
                .collect(),
        }
        .to_svg(),
    )?;
    write(
        "bench-latency.svg",
        Chart {
            title: "Handoff latency, p50 solid, p99 dashed (lower is better)".into(),
            x_label: sessions_label.clone(),
            y_label: "µs from release() to the next acquire() (log scale)".into(),
            log_x: true,
            log_y: true,
            series: libs
                .iter()
                .flat_map(|&l| {
                    [
                        series(sessions, &keys::p50, l, format!("{} p50", l.name()), false),
                        series(sessions, &keys::p99, l, format!("{} p99", l.name()), true),
                    ]
                })
                .collect(),
        }
        .to_svg(),
    )?;
    if setup.herd {
        write(
            "bench-herd.svg",
            Chart {
                title: "Herd cost: requests (solid) and watch events (dashed) per handoff".into(),
                x_label: "sessions waiting behind the holder of one mutex".into(),
                y_label: "per handoff, from the server's mntr".into(),
                log_x: true,
                log_y: false,
                series: libs
                    .iter()
                    .flat_map(|&l| {
                        [
                            series(
                                waiters,
                                &keys::requests,
                                l,
                                format!("{} requests", l.name()),
                                false,
                            ),
                            series(
                                waiters,
                                &keys::events,
                                l,
                                format!("{} watch events", l.name()),
                                true,
                            ),
                        ]
                    })
                    .collect(),
            }
            .to_svg(),
        )?;
    }
    // The scale section comes from `--scale` runs: keep it.
    let mut doc = markdown(cfg, setup, results, targets);
    if let Ok(old) = std::fs::read_to_string(dir.join("BENCHMARKS.md")) {
        if let Some(section) = scale::existing_section(&old) {
            doc = scale::splice(&doc, section);
        }
    }
    write("BENCHMARKS.md", doc)
}

/// A duration in seconds for prose: `2 s`, `1.5 s`.
fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

fn markdown(cfg: &Config, setup: &Setup, results: &Results, targets: &[report::Target]) -> String {
    let mut s = String::new();
    let mut line = |l: &str| {
        s.push_str(l);
        s.push('\n');
    };
    line("# Benchmarks");
    line("");
    line(&format!(
        "latchkey against Apache Curator and kazoo on one ZooKeeper server in one run. \
         Written by `{COMMAND}{}` on {}; every figure below is measured, none is edited.",
        if cfg.quick { " -- --quick" } else { "" },
        procfs::utc(setup.started)
    ));
    line("");
    line("## Setup");
    line("");
    line(&format!("- Machine: {}.", setup.machine));
    line(&format!(
        "- ZooKeeper {} ({}), on the same machine as the clients.",
        setup.zookeeper,
        if setup.embedded {
            "Debian's `zookeeper` package: one standalone server on 127.0.0.1, started by the test \
             harness with its settings (`forceSync=no`, 256 MiB heap, serial GC) except the JIT, \
             which runs in full as in production instead of the tests' C1 only"
        } else {
            "given with `--connect`"
        }
    ));
    if setup.tls {
        line(
            "- TLS: a second server of the same settings serves TLS on a secure client port \
             (with Netty, ZooKeeper's connection factory for TLS, which then serves its plain \
             port too); the rows \"over TLS\" are latchkey's uncontended cycle there (rustls, \
             TLS 1.2 or 1.3 as negotiated, no client certificate), and \"over TLS ÷ plain\" \
             divides it by the same cycle on that server's plain port in the same round. The \
             main server and every other row stay on ZooKeeper's default (NIO) factory.",
        );
    }
    for (lib, v) in &setup.versions {
        let how = match lib {
            Library::Latchkey => "in the bench process",
            Library::Curator => {
                "Debian's `libcurator-recipes-java`, in the Java peer of `latchkey-test`"
            }
            Library::Kazoo => "Debian's `python3-kazoo`, in the Python peer of `latchkey-test`",
            Library::Zookeeper08 => {
                "the `zookeeper` crate from crates.io, in the bench process; a client without \
                 recipes, so it runs the raw floor only"
            }
            Library::Bare => {
                "no library: the requests of the floor and of an uncontended lock cycle written \
                 by one thread on a blocking socket, in the bench process, with nothing else \
                 (no pings, watches, retries or deadlines); its CPU is the kernel's and the \
                 server's share of a cycle, which no client goes below"
            }
            Library::Reader => {
                "no library either: the bare socket with a reader thread, the Java client's \
                 shape. Per session one thread owns the socket's reads, parses each reply and \
                 hands it to the caller waiting for its xid (a slot per request, mutex and \
                 condition variable), and each watch event to whoever waits for that path; \
                 callers write their own requests under a mutex. The same requests as the bare \
                 socket's, in the bench process; what it costs above the bare socket is the \
                 hand-over between threads, and the CPU, uncontended p50 and contended \
                 throughput targets are set against it"
            }
            Library::IoThread => {
                "no library either: the bare socket owned both ways by an I/O thread per \
                 session, the Java client's shape (its SendThread) and latchkey's. Callers put \
                 their request frames on a queue (mutex and VecDeque) and wake the thread \
                 (a mio Waker); the thread writes them on the non-blocking socket, reads the \
                 replies and watch events (mio Poll, edge-triggered) and hands each over as the \
                 reader thread does. The same requests as the bare socket's, in the bench \
                 process; what it costs above the reader thread is the hand-over of each \
                 request to the I/O thread (a wake of that thread), and the same targets' \
                 ratios to it are shown for information"
            }
        };
        line(&format!("- {} {v}: {how}.", lib.name()));
    }
    line(&format!(
        "- {} rounds{}; in each round every scenario runs for each library in turn, and the \
         library that goes first changes from round to round. Figures are medians over the rounds; \
         ratios are latchkey's median divided by the other library's. A warm-up round (JIT, \
         server) is not counted.",
        cfg.rounds,
        if cfg.quick { " (quick mode)" } else { "" }
    ));
    line(&format!(
        "- Every session: {} s session timeout, {} s connection \
         timeout, `ExponentialBackoffRetry(100 ms, 3)`; every contender is its own session and thread.",
        SESSION_TIMEOUT.as_secs(),
        CONNECTION_TIMEOUT.as_secs()
    ));
    line("");
    line("## Targets");
    line("");
    line("| target | goal | measured | verdict |");
    line("|---|---|---|---|");
    for t in targets {
        line(&format!(
            "| {} | {} | {} | {} |",
            t.what,
            t.goal,
            t.measured,
            t.verdict()
        ));
    }
    line("");
    line("## Results");
    line("");
    line("↑: higher is better, ↓: lower is better.");
    line("");
    let (header, rows) = report::rows(results);
    s.push_str(&report::markdown_table(&header, &rows));
    s.push_str(
        "\nEvery round's figures for the targets' scenarios (the medians above come from these; \
         a JVM's CPU falls as its JIT warms up):\n\n",
    );
    let (throughput, p99) = (
        keys::throughput(TARGET_SESSIONS),
        keys::p99(TARGET_SESSIONS),
    );
    let shown = [
        keys::FLOOR,
        keys::MUTEX,
        keys::MUTEX_P50,
        keys::CPU,
        &throughput,
        &p99,
    ];
    s.push_str(&report::samples_table(results, &shown));
    let mut line = |l: &str| {
        s.push_str(l);
        s.push('\n');
    };
    line("");
    line("## Plots");
    line("");
    line("![Contended throughput](bench-throughput.svg)");
    line("");
    line("![Handoff latency](bench-latency.svg)");
    if setup.herd {
        line("");
        line("![Herd cost](bench-herd.svg)");
    }
    line("");
    line("## Scenarios");
    line("");
    line(&format!(
        "- **floor**: {} cycles of create (ephemeral sequential), getChildren and delete with the \
         library's own client: the requests one lock cycle cannot do without. The `zookeeper` \
         crate (0.8), which latchkey chose not to build on (see the README), takes part here, \
         and so do the bare socket, the reader thread and the I/O thread.",
        cfg.cycles
    ));
    line(&format!(
        "- **uncontended mutex**: {} acquire + release cycles of `InterProcessMutex` (kazoo: `Lock`) \
         by one session. Client CPU is the CPU time of the client's whole process over those cycles \
         (all its threads, from Linux's per-thread scheduler statistics; for Curator that includes \
         the JVM's JIT and GC threads). The bare socket sends what latchkey's uncontended cycle \
         sends (create and list written together, then delete) with no library at all: its CPU is \
         the least any client can spend on a cycle here. The reader thread sends the same \
         requests with its replies handed over by a reader thread, as the Java client's are: \
         the floor of a client whose I/O runs on a thread of its own, which the CPU and p50 \
         targets are set against. The I/O thread sends them too, each handed to the thread \
         that writes it and its reply handed back, as the Java client's and latchkey's are.",
        cfg.cycles
    ));
    line(&format!(
        "- **contended**: {:?} sessions, each on its own thread, loop acquire + release on one mutex \
         for {}. Throughput is handoffs per second; a handoff's latency runs from one holder's \
         `release()` returning to the next holder's `acquire()` returning (0 when the next holder \
         saw the deletion first). The bare socket's sessions send the requests of Curator's lock \
         (create and list together, watch the predecessor, list again at its event, delete), \
         each on its own blocking socket, with nothing else; at the end of the run its waiters \
         drain their queue rather than give up. The reader thread's sessions send the same, \
         each with its reader thread handing the replies and the predecessor's event to the \
         session's caller; the I/O thread's the same again, each request handed to its \
         session's I/O thread first.",
        cfg.contenders,
        seconds(cfg.run)
    ));
    line(&format!(
        "- **herd**: {:?} waiters behind one holder (one more session than waiters) loop on one \
         mutex for {}. Requests and watch events per handoff come from the server's `mntr` \
         (`zk_packets_received` and the sums of the `zk_*_watch_count` summaries) read at 1/4 and \
         3/4 of the run, divided by the handoffs between the two readings; pings and the second \
         reading count as requests. A lock with a herd effect would need more of both as waiters \
         grow.",
        cfg.waiters,
        seconds(cfg.herd_run)
    ));
    line(&format!(
        "- **read-write lock**: {} sessions loop taking the read lock, and the write lock on every \
         {}th turn, for {}; acquire latency over all turns. kazoo 2.8's `ReadLock` waits for the \
         last write node among all children, even one queued after it (its contender pattern does \
         not match its own read node), so its readers and writers wait for each other until their \
         timeouts: its figures here show that, not a fault of the bench.",
        cfg.rw_sessions,
        cfg.rw_write_every,
        seconds(cfg.run)
    ));
    line(&format!(
        "- **semaphore**: {} sessions loop taking one of {} leases of `InterProcessSemaphoreV2` \
         (kazoo: `Semaphore`) and returning it, for {}.",
        cfg.sem_sessions,
        cfg.sem_leases,
        seconds(cfg.run)
    ));
    line(&format!(
        "- **memory**: a fresh process per library opens {} sessions and holds a mutex on each; its \
         resident set (`VmRSS`) after a second. For Curator this is the JVM with the peer's \
         settings (`-XX:+UseSerialGC`, default heap); the peers also keep their own command session.",
        cfg.hold_sessions
    ));
    line(
        "- **correctness**: in the timed runs the threads of each process share a counter that \
          must never see two holders of the mutex, a reader beside a writer, or more leases than \
          the semaphore has; a run that sees one fails instead of reporting a figure.",
    );
    line("");
    line("## Notes");
    line("");
    line(
        "- latchkey and Curator both send five requests per handoff: create, list the children, \
          watch the predecessor, list again when it goes, delete. latchkey sends the create and \
          the first listing in one round trip and wakes the waiter from the engine thread as \
          the event is read. (Until this build a waiter next in line also watched its own node and took the \
          lock on its predecessor's deletion without listing again; a session closed on the \
          server deletes its nodes in one transaction whose events come in no fixed order, so \
          that shortcut could grant a lock whose node was already gone. It lists again now, as \
          Curator does.)",
    );
    line(
        "- The server shares the machine's cores with the clients, so the contended figures \
          measure the server as much as the clients.",
    );
    line(
        "- Client CPU includes the kernel's work for the client's sockets; on loopback that \
          includes delivering each request into the server's socket and waking its thread. In \
          latchkey a caller never touches the socket: it queues its \
          request and wakes the engine thread (an `eventfd` write), which writes it; the \
          engine's `epoll_wait` wakes for the reply, and it hands the reply to the caller (a \
          futex wake). That is two hand-overs between threads per round trip, as in the Java \
          client and the I/O thread floor; the reader thread floor has one (its callers write), \
          the bare socket none. What latchkey spends above the I/O thread floor is its own \
          work: user space, and one poll serving every session of the process.",
    );
    line("");
    line("## Reproduce");
    line("");
    line("```sh");
    line(&format!(
        "{COMMAND}                 # full run, about 10 minutes, rewrites this file"
    ));
    line(&format!("{COMMAND} -- --quick      # about 2 minutes"));
    line(&format!("{COMMAND} -- --connect 127.0.0.1:2181 --no-write"));
    line(&format!(
        "{COMMAND} -- --scale         # the scale section only, a few minutes"
    ));
    line("```");
    line("");
    line(
        "It needs Debian's `zookeeper`, `libcurator-recipes-java`, `python3-kazoo` and a JDK \
          (`./dev bench` installs them first); a missing peer is skipped.",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_well() {
        assert_eq!(
            describe_version("5.4.0 java-17.0.15"),
            "5.4.0 on Java 17.0.15"
        );
        assert_eq!(
            describe_version("2.8.0 python-3.11.2"),
            "2.8.0 on Python 3.11.2"
        );
        assert_eq!(describe_version("5.4.0"), "5.4.0");
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(seconds(Duration::from_secs(2)), "2 s");
    }

    #[test]
    fn scenario_paths_are_fresh_and_under_one_base() {
        let (a, b) = (bench_path("x"), bench_path("x"));
        assert_ne!(a, b);
        assert!(a.starts_with(&format!("{}/x-", base_path())), "{a}");
    }
}
