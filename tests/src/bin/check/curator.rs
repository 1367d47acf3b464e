//! Curator peer processes (the Java peer of `latchkey_test::peers`) taking
//! the same locks as the latchkey sessions, one command at a time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use latchkey_test::peers::Peer;

use crate::oracle::{HoldId, Mode};
use crate::rng::Rng;
use crate::session::Claim;
use crate::workload::World;

/// Runs random operations on `peer` until the stop flag (or `until`).
/// Stops early, with a note in the history, if the peer stops answering.
pub fn run(world: &World, peer: &mut Peer, who: &str, mut rng: Rng, until: Instant) {
    let p = &world.paths;
    while !world.stop.load(Ordering::SeqCst) && Instant::now() < until {
        let ms = rng.weighted(&[(1, 0), (1, 10), (2, 100), (2, 500)]);
        let (path, mode, kind) = match rng.index(4) {
            0 => (
                &p.mutexes[rng.index(p.mutexes.len())],
                Mode::Exclusive,
                "mutex".to_string(),
            ),
            1 => (&p.rw, Mode::Exclusive, "write".to_string()),
            2 => (&p.rw, Mode::Shared, "read".to_string()),
            _ => (
                &p.sem,
                Mode::Leases {
                    n: 1,
                    max: p.sem_max,
                },
                format!("sem {} {}", p.sem, p.sem_max),
            ),
        };
        // `sem` names its path in `kind`; the others take it next.
        let target = if kind.starts_with("sem") {
            kind.clone()
        } else {
            format!("{kind} {path}")
        };
        let acquire = if kind.starts_with("sem") {
            format!("{target} acquire 1 {ms}")
        } else {
            format!("{target} acquire {ms}")
        };
        world.stats.ops.fetch_add(1, Ordering::Relaxed);
        let before = world.fault_epoch.load(Ordering::SeqCst);
        world.history.record(who, format!("invoke {acquire}"));
        let reply = peer.command_ok(
            &acquire,
            Duration::from_millis(ms) + Duration::from_secs(60),
        );
        let after = world.fault_epoch.load(Ordering::SeqCst);
        match reply {
            Ok(r) if r.starts_with("acquired") => {
                let claim = Claim::Quiet {
                    faults: Arc::clone(&world.fault_epoch),
                    epoch: if before == after { before } else { 1 },
                };
                let counted = claim.counts();
                let counter = if counted {
                    &world.stats.grants
                } else {
                    &world.stats.grants_in_doubt
                };
                counter.fetch_add(1, Ordering::Relaxed);
                world.history.record(
                    who,
                    format!("grant {target}{}", if counted { "" } else { " IN-DOUBT" }),
                );
                let hold: HoldId = world.oracle.enter(path, who, mode, Some(claim), None);
                std::thread::sleep(rng.millis(0, 15));
                world.oracle.exit(hold);
                let release = format!("{target} release");
                match peer.command_ok(&release, Duration::from_secs(60)) {
                    Ok(_) => world.history.record(who, format!("release {target}")),
                    Err(e) => world
                        .history
                        .record(who, format!("release {target} failed: {e}")),
                }
            }
            Ok(r) => {
                world.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                world.history.record(who, format!("{r} {target}"));
            }
            Err(e) => {
                world.stats.errors.fetch_add(1, Ordering::Relaxed);
                world.history.record(who, format!("fail {target}: {e}"));
                if e.kind() != std::io::ErrorKind::Other {
                    world
                        .history
                        .record(who, "the peer stopped answering; it takes no more locks");
                    return;
                }
            }
        }
    }
}

/// Counts faults for [`Claim::Quiet`]: odd while a fault is on.
pub fn fault_started(epoch: &AtomicU64) {
    epoch.fetch_add(1, Ordering::SeqCst);
}

/// See [`fault_started`].
pub fn fault_healed(epoch: &AtomicU64) {
    epoch.fetch_add(1, Ordering::SeqCst);
}
