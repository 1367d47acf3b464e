//! The seeded fault-and-schedule checker: latchkey clients doing a random
//! mix of lock operations, leader elections and counter increments against
//! real ZooKeeper while a nemesis injects faults; an oracle outside
//! ZooKeeper checks the recorded history.
//!
//! ```sh
//! cargo run -p latchkey-test --bin check -- --seed 7 --seconds 60 --ensemble
//! ```
//!
//! Every run prints its seed; a failing run prints the command that replays
//! it and writes its history to a file. The seed fixes the random choices
//! (operations, timeouts, faults and their timing); thread scheduling stays
//! the machine's. Exit status: 0 passed, 1 violations found, 2 could not
//! run.
//!
//! Controls prove the checker can fail: `--no-lock` enters the oracle
//! without taking any lock, `--broken-lock` uses mutexes whose queue lets
//! two holders in at once, `--broken-leader` has latch participants lead
//! when their node is one of the first two, `--broken-counter`
//! increments without a version check, `--broken-cas` answers an applied
//! compare-and-set whose reply was lost as refused (issue 38's bug 1 put
//! back), `--wrong-model` checks the shared count's history against a
//! deliberately wrong model, and `--broken-queue` takes queue items
//! without lock nodes; each must report violations. `--cas-workload`
//! (most operations compare-and-sets, written as `try_set_count` writes)
//! and `--lost-replies` (a nemesis that holds one session's replies past
//! its read timeout) run the fixed code under the `--broken-cas`
//! control's conditions.

mod args;
mod counter;
mod curator;
mod election;
mod env;
mod history;
mod linear;
mod nemesis;
mod oracle;
mod orphans;
mod queue;
mod rng;
mod session;
mod workload;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use args::Args;
use env::Servers;
use history::History;
use latchkey_test::peers::Peer;
use nemesis::Nemesis;
use oracle::Oracle;
use rng::Rng;
use session::{ClientSettings, Session};
use workload::{Locks, Paths, Stats, Worker, World};

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("check: {e}\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    println!("check: seed={} ({})", args.seed, args.replay_command());
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("check: could not run: {e}");
            ExitCode::from(2)
        }
    }
}

/// What a finished run found.
struct Outcome {
    faults: BTreeMap<String, u64>,
    worst_recovery: Duration,
    worst_leader_recovery: Duration,
    /// The counter's value at the end, if it could be read.
    counter_final: Option<i64>,
    /// The linearizability check's words for the summary.
    linear: String,
    orphans: Vec<String>,
    stuck: Vec<String>,
}

fn run(args: &Args) -> Result<bool, String> {
    let mut servers = Servers::start(args.ensemble)?;
    let history = Arc::new(History::new());
    let oracle = Arc::new(Oracle::new(Arc::clone(&history)));
    let settings = ClientSettings {
        session_timeout: args.session_timeout,
        connection_timeout: args.connection_timeout,
    };
    let root = latchkey_test::unique_path("check");
    let mut sessions = Vec::new();
    for i in 0..args.clients {
        let (proxies, connect) = servers.proxies()?;
        let s = Session::connect(
            format!("s{i}"),
            &connect,
            proxies,
            settings,
            &history,
            Duration::from_secs(30),
        )?;
        sessions.push(Arc::new(s));
    }
    let world = Arc::new(World {
        history: Arc::clone(&history),
        oracle: Arc::clone(&oracle),
        stats: Stats::default(),
        paths: Paths::under(&root),
        no_lock: args.no_lock,
        broken_lock: args.broken_lock,
        broken_leader: args.broken_leader,
        broken_counter: args.broken_counter,
        broken_cas: args.broken_cas,
        cas_workload: args.cas_workload,
        linear: Default::default(),
        counter: Default::default(),
        last_leader_ms: Default::default(),
        fault_epoch: Default::default(),
        stop: Default::default(),
        direct_connect: servers.connect_string(),
        settings,
    });
    let outcome = exercise(args, &mut servers, &world, &sessions)?;
    let ok = report(args, &world, &outcome, &servers);
    Ok(ok)
}

/// Runs the workers and the nemesis for the run's time, stops the workers
/// (each within a bound), closes every client and looks for orphaned nodes.
fn exercise(
    args: &Args,
    servers: &mut Servers,
    world: &Arc<World>,
    sessions: &[Arc<Session>],
) -> Result<Outcome, String> {
    let until = Instant::now() + args.duration;
    // Workers go on until told to stop (after the last fault healed and
    // every session got a lock again); this only bounds a lost stop.
    let workers_until = until + args.progress_bound + Duration::from_secs(300);
    let mut workers = Vec::new();
    for (i, session) in sessions.iter().enumerate() {
        let locks = Arc::new(
            Locks::new(session, &world.paths, args.broken_lock).map_err(|e| e.to_string())?,
        );
        for t in 0..args.threads {
            let who = format!("{}.t{t}", session.name);
            let rng = Rng::stream(args.seed, 1 + (i * args.threads + t) as u64);
            let (world, session, locks) =
                (Arc::clone(world), Arc::clone(session), Arc::clone(&locks));
            let name = who.clone();
            let handle = thread::Builder::new()
                .name(who.clone())
                .spawn(move || {
                    Worker {
                        world: &world,
                        session: &session,
                        locks: &locks,
                        who,
                        rng,
                    }
                    .run(workers_until)
                })
                .map_err(|e| format!("spawn a worker: {e}"))?;
            workers.push((name, handle));
        }
        // Leader latch participants (none in the `--no-lock` control).
        for l in 0..if args.no_lock { 0 } else { args.latches } {
            let who = format!("{}.l{l}", session.name);
            let rng = Rng::stream(args.seed, 2000 + (i * args.latches + l) as u64);
            let (world, session) = (Arc::clone(world), Arc::clone(session));
            let name = who.clone();
            let handle = thread::Builder::new()
                .name(who.clone())
                .spawn(move || {
                    election::Participant {
                        world: &world,
                        session: &session,
                        who,
                        rng,
                    }
                    .run(workers_until)
                })
                .map_err(|e| format!("spawn a latch participant: {e}"))?;
            workers.push((name, handle));
        }
    }
    let queue_load = queue::QueueLoad::start(world, sessions, args.seed, args.broken_queue)?;
    let mut peers = Vec::new();
    for (i, mut peer) in start_peers(args, world).into_iter().enumerate() {
        let who = format!("curator{i}");
        let rng = Rng::stream(args.seed, 1000 + i as u64);
        let world = Arc::clone(world);
        let name = who.clone();
        let handle = thread::Builder::new()
            .name(who.clone())
            .spawn(move || {
                curator::run(&world, &mut peer, &who, rng, workers_until);
                peer
            })
            .map_err(|e| format!("spawn a peer driver: {e}"))?;
        peers.push((name, handle));
    }
    let mut nemesis = Nemesis {
        servers,
        sessions,
        history: &world.history,
        oracle: &world.oracle,
        fault_epoch: &world.fault_epoch,
        rng: Rng::stream(args.seed, 0),
        session_timeout: args.session_timeout,
        progress_bound: args.progress_bound,
        expect_progress: !args.no_lock && !args.broken_lock,
        last_leader: &world.last_leader_ms,
        expect_leader: !args.no_lock && !args.broken_leader && args.latches > 0,
        faults: BTreeMap::new(),
        lost_replies: args.lost_replies,
        worst_recovery: Duration::ZERO,
        worst_leader_recovery: Duration::ZERO,
    };
    if args.faults {
        nemesis.run(until);
    }
    let (faults, worst_recovery, worst_leader_recovery) = (
        nemesis.faults,
        nemesis.worst_recovery,
        nemesis.worst_leader_recovery,
    );
    while Instant::now() < until {
        thread::sleep(Duration::from_millis(50).min(until - Instant::now()));
    }
    world.stop.store(true, Ordering::SeqCst);
    world.history.record("checker", "stop workers");

    // The longest acquire timeout, the connection timeout and margin.
    let join_bound = Duration::from_secs(2) + args.connection_timeout + Duration::from_secs(20);
    let joined_by = Instant::now() + join_bound;
    let mut stuck = Vec::new();
    for (who, handle) in workers {
        while !handle.is_finished() && Instant::now() < joined_by {
            thread::sleep(Duration::from_millis(20));
        }
        if !handle.is_finished() {
            stuck.push(format!("{who} still busy {join_bound:?} after the stop"));
        } else if handle.join().is_err() {
            stuck.push(format!("{who} panicked"));
        }
    }
    for (who, handle) in peers {
        while !handle.is_finished() && Instant::now() < joined_by + Duration::from_secs(60) {
            thread::sleep(Duration::from_millis(20));
        }
        if !handle.is_finished() {
            stuck.push(format!("{who} still busy after the stop"));
        } else {
            match handle.join() {
                Ok(mut peer) => {
                    if let Err(e) = peer.quit(Duration::from_secs(10)) {
                        world.history.record(&who, format!("quit: {e}"));
                    }
                }
                Err(_) => stuck.push(format!("{who}'s driver panicked")),
            }
        }
    }
    for s in &stuck {
        world.oracle.violation(s.clone());
    }
    // Faults healed, sessions open: the queue is drained and checked.
    queue_load.finish(world, &sessions[0].client, args.progress_bound);
    // Every increment has returned: the counter holds its final value.
    let counter_final = if args.no_lock {
        None
    } else {
        let value = orphans::counter_value(&world.direct_connect, &world.paths.atomic)?;
        world
            .counter
            .check_final(&world.history, &world.oracle, &world.paths.atomic, value);
        Some(value)
    };
    // Every compare-and-set and increment has returned: one read of each
    // node ends their histories, which are then checked.
    let linear = if args.no_lock {
        String::new()
    } else {
        world.linear.read_finals(
            &world.history,
            &world.direct_connect,
            &world.paths.cas,
            &world.paths.atomic,
        )?;
        world.linear.check(
            &world.history,
            &world.oracle,
            &world.paths.cas,
            &world.paths.atomic,
            args.wrong_model,
        )
    };
    for s in sessions {
        s.mark_in_doubt();
        s.client.close();
    }
    world.history.record("checker", "closed every client");
    let orphans = orphans::remaining(
        &world.direct_connect,
        &world.paths,
        args.session_timeout * 2 + Duration::from_secs(10),
    )?;
    for o in &orphans {
        world
            .history
            .record("checker", format!("orphaned node {o}"));
    }
    Ok(Outcome {
        faults,
        worst_recovery,
        worst_leader_recovery,
        counter_final,
        linear,
        orphans,
        stuck,
    })
}

/// Starts the Curator peers (none, with a note, if Java or the Curator
/// jars are missing).
fn start_peers(args: &Args, world: &World) -> Vec<Peer> {
    use latchkey_test::peers::{peer_available, PeerKind};
    if args.curator == 0 {
        return Vec::new();
    }
    if let Err(e) = peer_available(PeerKind::Curator) {
        println!("check: no Curator peers: {e}");
        return Vec::new();
    }
    let mut peers = Vec::new();
    for i in 0..args.curator {
        match Peer::start_with_session_timeout(
            PeerKind::Curator,
            &world.direct_connect,
            args.session_timeout,
        ) {
            Ok(p) => peers.push(p),
            Err(e) => println!("check: Curator peer {i} did not start: {e}"),
        }
    }
    peers
}

/// Prints the summary; on failure writes the history and the replay
/// command. True when the run passed.
fn report(args: &Args, world: &World, outcome: &Outcome, servers: &Servers) -> bool {
    let st = &world.stats;
    let violations = world.oracle.violations();
    let overrun = Duration::from_micros(st.worst_overrun_us.load(Ordering::Relaxed));
    let overrun_fails = args.strict_deadlines && overrun > args.connection_timeout;
    let faults: u64 = outcome.faults.values().sum();
    let passed = violations.is_empty() && outcome.orphans.is_empty() && !overrun_fails;
    let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    println!(
        "check: {} seed={} mode={} seconds={} clients={}x{} curator_peers={} ops={} grants={} grants_in_doubt={} \
         timeouts={} errors={} reentrant={} downgrades={} upgrades_refused={} closes_while_waiting={} \
         cancels={} worst_cancel_ms={} revoke_requests={} revocations_honoured={} max_changes={} \
         leader_terms={} leader_terms_in_doubt={} increments={} increments_not_done={} increment_errors={} \
         counter_final={} {} faults={faults} {:?} violations={} orphaned_nodes={} worst_recovery_ms={} \
         worst_leader_recovery_ms={} \
         worst_deadline_overrun_ms={} history_events={}",
        if passed { "PASSED" } else { "FAILED" },
        args.seed,
        if args.ensemble { "ensemble" } else { "single" },
        args.duration.as_secs(),
        args.clients,
        args.threads,
        args.curator,
        load(&st.ops),
        load(&st.grants),
        load(&st.grants_in_doubt),
        load(&st.timeouts),
        load(&st.errors),
        load(&st.reentrant),
        load(&st.downgrades),
        load(&st.upgrades_refused),
        load(&st.closes_while_waiting),
        load(&st.cancels),
        load(&st.worst_cancel_us) / 1000,
        load(&st.revoke_requests),
        load(&st.revocations_honoured),
        load(&st.max_changes),
        load(&st.leader_terms),
        load(&st.leader_terms_in_doubt),
        load(&world.counter.succeeded),
        load(&world.counter.unsucceeded),
        load(&world.counter.errors),
        outcome
            .counter_final
            .map_or("-".to_string(), |v| v.to_string()),
        outcome.linear,
        outcome.faults,
        violations.len(),
        outcome.orphans.len(),
        outcome.worst_recovery.as_millis(),
        outcome.worst_leader_recovery.as_millis(),
        overrun.as_millis(),
        world.history.len(),
    );
    if overrun > args.connection_timeout {
        println!(
            "check: an acquire ran {overrun:?} past its timeout (more than the connection timeout {:?}): {}{}",
            args.connection_timeout,
            st.worst_overrun_op.lock(),
            if args.strict_deadlines { "" } else { "; reported only (--strict-deadlines fails on it)" }
        );
    }
    if passed && args.history.is_none() {
        return true;
    }
    for v in violations.iter().take(20) {
        println!("check: violation: {v}");
    }
    for o in outcome.orphans.iter().take(20) {
        println!("check: orphaned node: {o}");
    }
    for s in &outcome.stuck {
        println!("check: {s}");
    }
    let path = args.history_path();
    let header = format!(
        "latchkey check history, seed {}\nreplay: {}\n{}",
        args.seed,
        args.replay_command(),
        if passed {
            String::new()
        } else {
            servers.log_tails(30)
        }
    );
    match world.history.write_to(&path, &header) {
        Ok(()) => println!("check: history written to {}", path.display()),
        Err(e) => println!("check: cannot write the history to {}: {e}", path.display()),
    }
    if !passed {
        println!("check: replay with: {}", args.replay_command());
    }
    passed
}
