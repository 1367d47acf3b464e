//! The isolation tests of `isolation.rs` that need the engine's new API,
//! `Error::is_unsent` (true when a request was certainly never written, so
//! not applied and safe to retry; it looks through the `Operation` and
//! `Timeout` wrappers) and `ClientBuilder::max_unsent_bytes` (the cap on
//! a connection's unsent bytes, 16 MiB by default; an error from meeting
//! it names the cap): writes that gave up on a stalled connection stay
//! within the cap and those said unsent are never applied, and a call
//! whose deadline has passed is unsent. `isolation.rs` measures the same
//! without that API (RSS and what the server applied).

mod common;
mod isolation_support;

use std::time::Duration;

use latchkey_framework::{Error, ErrorCode};

use isolation_support::*;

/// The most memory abandoned writes may take.
const RSS_BOUND: u64 = 64 << 20;

/// Checks what every flood must show: RSS growth below [`RSS_BOUND`],
/// some calls refused unsent (400 × 256 KiB is far past any cap), and no
/// more writes applied than calls that were not said to be unsent.
fn check_flood(f: &Flood) {
    let unsent = f
        .results
        .iter()
        .filter(|r| r.as_ref().is_err_and(Error::is_unsent))
        .count();
    let maybe_sent = f.results.len() - unsent;
    assert!(
        f.rss_growth < RSS_BOUND && unsent > 0 && f.applied <= maybe_sent as i64,
        "{}\n{unsent} said unsent, so at most {maybe_sent} may be applied; RSS growth must \
         stay below {} MiB",
        f.figures(),
        RSS_BOUND >> 20
    );
}

/// With the default cap (16 MiB), abandoned 256 KiB writes on a stalled
/// connection take less than 64 MiB, and none said unsent is applied.
#[test]
fn abandoned_writes_stay_within_the_default_cap_and_unsent_ones_are_not_applied() {
    let _serial = serial();
    check_flood(&flood(|b| b));
}

/// With a cap of 5,000,000 bytes, 32 threads writing 256 KiB at once to
/// a stalled connection (8 MiB waiting) meet it: those calls wait for room
/// until their 300 ms deadline, then fail unsent with an error that names
/// the cap. (A call that gives up takes its request back, so calls one
/// after another never fill the outbox.)
#[test]
fn meeting_the_unsent_cap_fails_unsent_naming_the_cap() {
    const CAP: usize = 5_000_000;
    let _serial = serial();
    let f = flood_with(32, Duration::from_millis(300), |b| b.max_unsent_bytes(CAP));
    check_flood(&f);
    let names_cap = |e: &Error| {
        let shown: String = e
            .to_string()
            .chars()
            .filter(|c| !",_".contains(*c))
            .collect();
        e.is_unsent() && shown.contains(&CAP.to_string())
    };
    assert!(
        f.results.iter().any(|r| r.as_ref().is_err_and(names_cap)),
        "no unsent error names the cap {CAP}: {}",
        f.figures()
    );
}

/// Under the default cap (16 MiB), the same 32 threads writing 256 KiB at
/// once to a stalled connection (8 MiB waiting) all find room: their
/// calls fail unsent at their deadline, none for a cap.
#[test]
fn the_default_cap_leaves_room_for_eight_mib() {
    let _serial = serial();
    let f = flood_with(32, Duration::from_millis(300), |b| b);
    check_flood(&f);
    let capped = f
        .results
        .iter()
        .filter(|r| matches!(r, Err(e) if e.to_string().contains("max_unsent_bytes")))
        .count();
    assert_eq!(
        capped,
        0,
        "calls refused for the cap with 8 MiB waiting under the default 16 MiB: {}",
        f.figures()
    );
}

/// 20 creates with a zero timeout each fail with a timeout that is
/// unsent, and none is applied.
#[test]
fn a_call_past_its_deadline_fails_unsent() {
    let _serial = serial();
    let (results, mut children) = zero_timeout_creates();
    children.sort();
    let wrong: Vec<_> = results
        .iter()
        .filter(|r| !matches!(r, Err(e) if e.is(ErrorCode::OperationTimeout) && e.is_unsent()))
        .collect();
    assert!(
        wrong.is_empty() && children.is_empty(),
        "{} of {ZERO_CREATES} zero-timeout creates applied ({children:?}); {} outcomes not an \
         unsent timeout, the first: {:?}",
        children.len(),
        wrong.len(),
        wrong.first()
    );
}
