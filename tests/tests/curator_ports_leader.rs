//! Ports of Apache Curator's test classes for the leader, shared-count,
//! atomic and barrier recipes. Each table lists every test method of the
//! Curator class and the Rust test that ports it (in this file unless
//! another file is named), or why it does not apply.
//!
//! ## TestLeaderLatch
//!
//! | Curator method | Rust test (file::fn) or "not applicable: reason" |
//! |---|---|
//! | testWithCircuitBreaker | not applicable: Curator's circuit-breaking `ConnectionStateListenerManagerFactory`, which latchkey's client does not have (every listener hears every state) |
//! | testUncreatedPathGetLeader | curator_ports_leader::latch_leader_of_an_uncreated_path_is_nobody |
//! | testGetChildrenHitsNoNode | curator_ports_leader::latch_recovers_when_the_server_comes_back_empty (without Curator's `debugHandleReconnectedLatch`, either latch may win) |
//! | testWatchedNodeDeletedOnReconnect | curator_ports_leader::latch_watching_a_deleted_leader_node_leads (Curator's forced `reset()` has no latchkey equivalent) |
//! | testSessionInterruptionDoNotCauseBrainSplit | leader::an_expired_leader_gives_way_and_queues_again |
//! | testResettingOfLeadershipAfterConcurrentLeadershipChange | not applicable: drives Curator's package-private `reset()` of two latches through its debug latches; latchkey has no `reset` (a latch queues again only when its node goes: leader::a_latch_whose_node_is_deleted_queues_again) |
//! | testLeadershipElectionWhenNodeDisappearsAfterChildrenAreRetrieved | curator_ports_leader::latch_leader_gone_between_listing_and_watch |
//! | testSessionErrorPolicy | leader::with_the_session_policy_a_latch_leads_on_through_a_short_outage, leader::with_the_standard_policy_a_short_outage_ends_a_latch_s_leadership |
//! | testErrorPolicies | curator_ports_leader::latch_error_policies_decide_when_leadership_ends |
//! | testProperCloseWithoutConnectionEstablished | curator_ports_leader::latch_closed_before_connecting_creates_nothing |
//! | testResetRace | not applicable: races Curator's package-private `reset()` against `start()` through a debug latch; latchkey has no `reset` (a latch never queues a second node: leader::a_latch_whose_look_fails_keeps_its_node_and_leads) |
//! | testCreateDeleteRace | curator_ports_leader::latch_closed_while_its_create_is_in_flight_leaves_no_node |
//! | testLostConnection | curator_ports_leader::latch_lost_connection_then_one_leader |
//! | testCorrectWatching | curator_ports_leader::latch_closing_a_later_latch_does_not_make_another_lead |
//! | testWaiting | curator_ports_leader::latch_waiters_lead_one_at_a_time |
//! | testBasic | curator_ports_leader::latch_basic_started_in_order (difference: latches started back to back from one thread may queue in any order, each joins from its own thread, as `LeaderLatch::start` says; Curator runs this test with one latch) |
//! | testBasicAlt | curator_ports_leader::latch_basic_started_in_threads |
//! | testCallbackSanity | curator_ports_leader::latch_callback_sanity (Curator's `reset()` is done by deleting the latch's node) |
//! | testCallbackNotifyLeader | curator_ports_leader::latch_callback_notify_leader |
//! | testCallbackDontNotify | curator_ports_leader::latch_callback_dont_notify |
//! | testNoServerAtStart | curator_ports_leader::latch_started_before_the_server_leads_once_it_is_up |
//! | testRelativePath | curator_ports_leader::latch_relative_path_is_refused |
//!
//! ## TestLeaderSelector
//!
//! | Curator method | Rust test (file::fn) or "not applicable: reason" |
//! |---|---|
//! | testInterruption | not applicable: Java's `Thread.interrupt()` of the leader's thread; its check that the lock is released cleanly after an interrupted term is in curator_ports_leader::selector_interrupt_ends_the_term |
//! | testErrorPolicies | curator_ports_leader::selector_error_policies_decide_when_a_term_ends |
//! | testLeaderNodeDeleteOnInterrupt | curator_ports_leader::selector_interrupted_while_disconnected_deletes_its_node_on_reconnect |
//! | testInterruptLeadershipWithRequeue | curator_ports_leader::selector_interrupted_twice_with_auto_requeue_leads_again (Curator's delaying executor is Java-only) |
//! | testInterruptLeadership | curator_ports_leader::selector_interrupt_ends_the_term |
//! | testRaceAtStateChanged | not applicable: holds Curator's selector between its lock and `takeLeadership` with internal debug latches and cancels from a state listener by throwing `CancelLeadershipException`. Deliberate difference: latchkey still calls `take_leadership` for a hold lost before the term starts, with a term that is already interrupted (`Leadership::is_valid` false), instead of skipping it (documented on `LeaderSelector`) |
//! | testAutoRequeue | curator_ports_leader::selector_auto_requeue_leads_again |
//! | testServerDying | curator_ports_leader::selector_term_ends_when_the_server_dies |
//! | testKillSessionThenCloseShouldElectNewLeader | curator_ports_leader::selector_after_an_expired_session_requeue_then_close_elects_the_other (deliberate difference: a selector only queued when its session expires stays queued, its lock node made again in the new session, so only the old leader needs `requeue`; Curator's election is cancelled and both requeue; documented on `LeaderSelector`) |
//! | testKillServerThenCloseShouldElectNewLeader | curator_ports_leader::selector_after_the_server_comes_back_close_elects_the_other |
//! | testClosing | curator_ports_leader::selector_closing |
//! | testRotatingLeadership | curator_ports_leader::selector_rotating_leadership |
//!
//! ## TestLeaderSelectorParticipants
//!
//! | Curator method | Rust test (file::fn) or "not applicable: reason" |
//! |---|---|
//! | testId | curator_ports_leader::selector_participant_id |
//! | testBasic | curator_ports_leader::selector_participants_basic |
//!
//! ## TestLeaderSelectorCluster
//!
//! | Curator method | Rust test (file::fn) or "not applicable: reason" |
//! |---|---|
//! | testRestart | curator_ports_leader::selector_on_an_ensemble_leads_again_after_its_server_and_the_ensemble_go |
//! | testLostRestart | curator_ports_leader::selector_on_an_ensemble_leads_again_after_its_server_and_the_ensemble_go (two of three members stop instead of all three, so that they can rejoin one at a time) |
//!
//! ## TestLeaderSelectorEdges
//!
//! Curator's `ChaosMonkeyCnxnFactory` (a server that closes the connection
//! right after applying the first create under the lock and then refuses
//! requests for 6 s) is a proxy here: replies held until the node is
//! there, then the connection cut and new ones refused for a while.
//!
//! | Curator method | Rust test (file::fn) or "not applicable: reason" |
//! |---|---|
//! | flappingTest | curator_ports_leader::selector_flapping_connection_leaves_no_lock_node |
//! | createProtectedNodeInBackgroundTest | curator_ports_leader::protected_create_with_lost_reply_and_retries_leaves_no_node (a blocking create: latchkey has no background create) |
//! | createProtectedNodeInBackgroundTestNoRetry | curator_ports_leader::protected_create_with_lost_reply_and_no_retry_leaves_no_node |
//!
//! ## TestSharedCount
//!
//! | Curator method | Rust test (file::fn) or "not applicable: reason" |
//! |---|---|
//! | testMultiClients | curator_ports_leader::shared_count_multi_clients_hear_every_value_in_order |
//! | testSimple | curator_ports_leader::shared_count_simple |
//! | testSimpleVersioned | recipe_edges::shared_count_simple_versioned |
//! | testMultiClientVersioned | recipe_edges::shared_count_multi_client_versioned |
//! | testMultiClientDifferentSeed | recipe_edges::shared_count_multi_client_versioned |
//! | testDisconnectEventOnWatcherDoesNotRetry | recipe_edges::shared_count_catches_up_after_each_reconnect |
//! | testDisconnectReconnectEventDoesNotFireValueWatcher | curator_ports_leader::shared_count_reconnect_tells_no_change_that_did_not_happen (deliberate difference: Curator tells listeners the value again after each reconnection, latchkey's `listen` only new values, as `SharedCount::listen` says) |
//! | testDisconnectReconnectWithMultipleClients | recipe_edges::shared_count_catches_up_after_each_reconnect |
//!
//! ## TestDistributedAtomicLong
//!
//! | Curator method | Rust test (file::fn) or "not applicable: reason" |
//! |---|---|
//! | testCorruptedValue | curator_ports_leader::atomic_corrupted_value_is_an_error |
//! | testCompareAndSetWithFreshInstance | curator_ports_leader::atomic_compare_and_set_with_fresh_instance |
//! | testCompareAndSet | curator_ports_leader::atomic_compare_and_set_losing_to_an_increment_fails |
//! | testForceSet | curator_ports_leader::atomic_force_set_alongside_increments (100 rounds each instead of 1000; Curator reads the value after 0-1 rounds) |
//! | testSimulation | curator_ports_leader::atomic_simulation_of_twenty_sessions |
//! | testBasic | curator_ports_leader::atomic_basic |
//!
//! ## TestDistributedBarrier
//!
//! | Curator method | Rust test (file::fn) or "not applicable: reason" |
//! |---|---|
//! | testServerCrash | curator_ports_leader::barrier_wait_fails_when_the_server_crashes |
//! | testMultiClient | curator_ports_leader::barrier_multi_client |
//! | testNoBarrier | curator_ports_leader::barrier_not_set_passes |
//! | testBasic | curator_ports_leader::barrier_basic |
//!
//! ## TestDistributedDoubleBarrier
//!
//! | Curator method | Rust test (file::fn) or "not applicable: reason" |
//! |---|---|
//! | testMultiClient | curator_ports_leader::double_barrier_multi_client |
//! | testSpuriousWakeup | not applicable: calls Java's `notifyAll()` on the recipe object to wake its waiter; latchkey's waits are private and cannot be woken from outside (that `enter` waits for every member is in curator_ports_leader::double_barrier_basic) |
//! | testOverSubscribed | curator_ports_leader::double_barrier_over_subscribed (the six start together instead of being held in an overridden `getChildrenForEntering`) |
//! | testBasic | curator_ports_leader::double_barrier_basic |
//!
//! One shared server for the binary; short session timeouts (1–4 s). Tests
//! that need a server to go away use a [`FaultProxy`] in front of the
//! shared server (pause: the connection is cut off, the server keeps the
//! session; refuse + cut: the server looks dead). Two tests start servers
//! of their own: the one whose server comes back empty, and the
//! three-member ensemble.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use crossbeam_channel::Receiver;
use latchkey_framework::{
    Client, ConnectionState, ConnectionStateErrorPolicy, CreateMode, Error, ErrorCode,
    ExponentialBackoffRetry, RetryNTimes, SessionConnectionStateErrorPolicy,
    StandardConnectionStateErrorPolicy,
};
use latchkey_recipes::{
    CloseMode, DistributedAtomicLong, DistributedBarrier, DistributedDoubleBarrier, LatchEvent,
    LatchState, LeaderLatch, LeaderSelector, PromotedToLock, SharedCount,
};
use latchkey_test::{FaultProxy, TestingCluster};

/// Session timeout of the clients that do not lose their session.
const SESSION: Duration = Duration::from_secs(4);
/// Session timeout of the clients whose session a test lets expire.
const SHORT_SESSION: Duration = Duration::from_secs(2);
/// How long anything that should happen may take on a loaded machine.
const WITHIN: Duration = Duration::from_secs(10);

/// A connected client of the shared server.
fn client() -> Client {
    connect(&shared_server().connect_string(), SESSION)
}

/// A client that does not retry (Curator's tests use `RetryOneTime(1)`).
fn client_with(
    connect_string: &str,
    session: Duration,
    retries: u32,
    policy: Option<Arc<dyn ConnectionStateErrorPolicy>>,
    wait: bool,
) -> Client {
    let mut b = Client::builder()
        .connect_string(connect_string)
        .session_timeout(session)
        .connection_timeout(Duration::from_secs(1))
        .retry_policy(RetryNTimes::new(retries, Duration::from_millis(100)));
    if let Some(p) = policy {
        b = b.connection_state_error_policy_arc(p);
    }
    if wait {
        return start_connected(b);
    }
    let c = b.build().expect("build client");
    c.start().expect("start client");
    c
}

/// A proxy in front of the shared server and a connected client through
/// it, with its state channel and a failure context.
struct Proxied {
    proxy: FaultProxy,
    client: Client,
    states: Receiver<ConnectionState>,
    ctx: Ctx,
}

impl Proxied {
    fn new(session: Duration, policy: Option<Arc<dyn ConnectionStateErrorPolicy>>) -> Proxied {
        let server = shared_server();
        let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
        let client = client_with(&proxy.connect_string(), session, 1, policy, true);
        let states = client.listen();
        let ctx = Ctx::new(server, &client);
        Proxied {
            proxy,
            client,
            states,
            ctx,
        }
    }

    fn expect(&self, want: ConnectionState) {
        self.ctx.expect(&self.states, want, WITHIN);
    }

    /// The server looks dead to the client: connections are cut and new
    /// ones refused.
    fn kill(&self) {
        self.proxy.set_refuse(true);
        self.proxy.cut();
    }

    fn revive(&self) {
        self.proxy.set_refuse(false);
    }
}

/// The indexes of the latches that lead now.
fn leaders(latches: &[LeaderLatch]) -> Vec<usize> {
    (0..latches.len())
        .filter(|&i| latches[i].has_leadership())
        .collect()
}

/// Waits until exactly one latch leads and returns its index.
fn wait_one_leader(latches: &[LeaderLatch]) -> usize {
    let mut found = 0;
    wait_until(
        WITHIN,
        || {
            let l = leaders(latches);
            found = l.first().copied().unwrap_or(0);
            l.len() == 1
        },
        || format!("leaders: {:?}", leaders(latches)),
    );
    found
}

/// The next event on `rx` within [`WITHIN`], or `None`.
fn next<T>(rx: &Receiver<T>) -> Option<T> {
    rx.recv_timeout(WITHIN).ok()
}

// ---------------------------------------------------------------------
// TestLeaderLatch
// ---------------------------------------------------------------------

/// Curator's TestLeaderLatch.testUncreatedPathGetLeader (CURATOR-436): the
/// leader of a path nobody created is "nobody", not an error.
#[test]
fn latch_leader_of_an_uncreated_path_is_nobody() {
    let c = client();
    let latch = LeaderLatch::new(&c, &unique("latch-uncreated")).unwrap();
    let leader = latch.leader().unwrap();
    assert!(leader.id.is_empty() && !leader.is_leader, "{leader:?}");
    assert!(latch.participants().unwrap().is_empty());
}

/// Curator's TestLeaderLatch.testGetChildrenHitsNoNode: the server comes
/// back empty (its data gone, so every session and node with it) while
/// one latch leads and another waits; the latches queue again and exactly
/// one leads, the old leader told it no longer does. Curator holds the
/// old leader back with a debug latch so that the other wins; without
/// that hook either may win, and the test checks that one does.
#[test]
fn latch_recovers_when_the_server_comes_back_empty() {
    let mut server = latchkey_test::TestingServer::start().unwrap();
    let policy: Arc<dyn ConnectionStateErrorPolicy> = Arc::new(StandardConnectionStateErrorPolicy);
    let cs: Vec<Client> = (0..2)
        .map(|_| {
            client_with(
                &server.connect_string(),
                SESSION,
                1,
                Some(policy.clone()),
                true,
            )
        })
        .collect();
    let path = "/testGetChildrenHitsNoNode";
    let latch0 = LeaderLatch::with_id(&cs[0], path, "id0").unwrap();
    let events0 = latch0.listen();
    latch0.start().unwrap();
    assert_eq!(next(&events0), Some(LatchEvent::IsLeader));
    let latch1 = LeaderLatch::with_id(&cs[1], path, "id1").unwrap();
    let events1 = latch1.listen();
    latch1.start().unwrap();
    wait_until(
        WITHIN,
        || sorted_children(&cs[0], path).len() == 2,
        || format!("{:?}", sorted_children(&cs[0], path)),
    );
    assert!(latch0.has_leadership() && !latch1.has_leadership());

    server.stop().unwrap();
    for entry in std::fs::read_dir(server.data_dir()).unwrap() {
        let p = entry.unwrap().path();
        let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
    }
    server.restart().unwrap();
    assert_eq!(
        next(&events0),
        Some(LatchEvent::NotLeader),
        "{:?}",
        cs[0].state_history()
    );
    let latches = [latch0, latch1];
    let leader = wait_one_leader(&latches);
    let events = [&events0, &events1];
    assert_eq!(next(events[leader]), Some(LatchEvent::IsLeader));
    wait_until(
        WITHIN,
        || sorted_children(&cs[0], path).len() == 2,
        || format!("{:?}", sorted_children(&cs[0], path)),
    );
}

/// Curator's TestLeaderLatch.testWatchedNodeDeletedOnReconnect: latch 2
/// watches latch 1's node; latch 1 closes (its node deleted) and latch 2
/// leads with one node. Curator also forces its package-private `reset()`
/// at that moment through a debug latch; latchkey has no `reset`.
#[test]
fn latch_watching_a_deleted_leader_node_leads() {
    let c = client();
    let path = unique("latch-watched-deleted");
    let latch1 = LeaderLatch::with_id(&c, &path, "1").unwrap();
    latch1.start().unwrap();
    assert!(latch1.await_leadership(WITHIN).unwrap());
    let latch2 = LeaderLatch::with_id(&c, &path, "2").unwrap();
    latch2.start().unwrap();
    wait_until(
        WITHIN,
        || sorted_children(&c, &path).len() == 2,
        String::new,
    );
    latch1.close().unwrap();
    assert!(latch2.await_leadership(WITHIN).unwrap());
    assert_eq!(sorted_children(&c, &path).len(), 1);
}

/// Curator's TestLeaderLatch.testLeadershipElectionWhenNodeDisappearsAfterChildrenAreRetrieved:
/// candidate 0 has listed the queue and is about to watch the leader's
/// node when the leader closes (Curator stops it there with a debug
/// latch; here its requests on that node are held at a proxy). Exactly
/// one candidate leads afterwards.
#[test]
fn latch_leader_gone_between_listing_and_watch() {
    let c = client();
    let p = Proxied::new(SESSION, None);
    let path = unique("latch-gone-after-listing");
    let initial = LeaderLatch::with_id(&c, &path, "initial-leader").unwrap();
    initial.start().unwrap();
    assert!(initial.await_leadership(WITHIN).unwrap());
    let leader_node = initial.our_path().unwrap();
    p.proxy.pause_requests_at(&request_path(&leader_node));
    let candidate0 = LeaderLatch::with_id(&p.client, &path, "candidate-0").unwrap();
    candidate0.start().unwrap();
    wait_until(
        WITHIN,
        || p.proxy.requests_paused(),
        || format!("candidate 0 never looked at the leader\n{}", p.ctx.dump()),
    );
    assert_eq!(sorted_children(&c, &path).len(), 2);
    let candidate1 = LeaderLatch::with_id(&c, &path, "candidate-1").unwrap();
    candidate1.start().unwrap();
    wait_until(
        WITHIN,
        || sorted_children(&c, &path).len() == 3,
        String::new,
    );
    initial.close().unwrap();
    p.proxy.resume();
    let latches = [candidate0, candidate1];
    wait_one_leader(&latches);
    thread::sleep(Duration::from_millis(300));
    assert_eq!(leaders(&latches).len(), 1, "{:?}", leaders(&latches));
}

/// Through a proxy, a latch leads; the server goes away until the session
/// is lost. Returns what the client's states and the latch's events told,
/// in order, as Curator's test records them ("true"/"false" for the
/// latch's events), up to `Lost` and the events within a moment after.
fn latch_states_until_lost(policy: Arc<dyn ConnectionStateErrorPolicy>) -> Vec<String> {
    let p = Proxied::new(SHORT_SESSION, Some(policy));
    let latch = LeaderLatch::new(&p.client, &unique("latch-error-policy")).unwrap();
    let events = latch.listen();
    latch.start().unwrap();
    assert_eq!(next(&events), Some(LatchEvent::IsLeader));
    let _connected: Vec<_> = p.states.try_iter().collect();
    p.kill();
    let mut told = Vec::new();
    let deadline = Instant::now() + WITHIN;
    let mut lost_at = None;
    while lost_at.is_none_or(|t: Instant| t.elapsed() < Duration::from_millis(500)) {
        assert!(
            Instant::now() < deadline,
            "no Lost: {told:?}\n{}",
            p.ctx.dump()
        );
        crossbeam_channel::select! {
            recv(p.states) -> s => {
                let s = s.unwrap();
                if s == ConnectionState::Lost && lost_at.is_none() {
                    lost_at = Some(Instant::now());
                }
                told.push(format!("{s:?}"));
            }
            recv(events) -> e => if let Ok(e) = e {
                told.push((e == LatchEvent::IsLeader).to_string());
            },
            default(Duration::from_millis(50)) => {}
        }
    }
    latch.close().unwrap();
    told
}

/// Curator's TestLeaderLatch.testErrorPolicies: with the standard policy
/// a latch stops leading at `Suspended`, with the session policy only at
/// `Lost`.
#[test]
fn latch_error_policies_decide_when_leadership_ends() {
    let standard = latch_states_until_lost(Arc::new(StandardConnectionStateErrorPolicy));
    let pair = &standard[..2.min(standard.len())];
    assert!(
        pair == ["Suspended", "false"] || pair == ["false", "Suspended"],
        "{standard:?}"
    );
    assert_eq!(standard[2..], ["Lost"], "{standard:?}");
    let session = latch_states_until_lost(Arc::new(SessionConnectionStateErrorPolicy));
    assert_eq!(
        session.first().map(String::as_str),
        Some("Suspended"),
        "{session:?}"
    );
    let pair = &session[1..];
    assert!(
        pair == ["Lost", "false"] || pair == ["false", "Lost"],
        "{session:?}"
    );
}

/// Curator's TestLeaderLatch.testProperCloseWithoutConnectionEstablished:
/// a latch started and closed before the client ever connects creates no
/// node once it does connect.
#[test]
fn latch_closed_before_connecting_creates_nothing() {
    let proxy = FaultProxy::start(shared_server().addr()).unwrap();
    proxy.set_refuse(true);
    let c = client_with(&proxy.connect_string(), SESSION, 1, None, false);
    let path = unique("latch-close-unconnected");
    let latch = LeaderLatch::new(&c, &path).unwrap();
    latch.start().unwrap();
    latch.close().unwrap();
    assert_eq!(latch.state(), LatchState::Closed);
    proxy.set_refuse(false);
    assert!(c.block_until_connected(WITHIN).unwrap());
    thread::sleep(Duration::from_millis(500));
    assert!(c.exists(&path).unwrap().is_none() || sorted_children(&c, &path).is_empty());
}

/// Curator's TestLeaderLatch.testCreateDeleteRace: a latch closed while
/// its node's create is on its way (the server applies it, the reply is
/// held) leaves no node once the reply comes.
#[test]
fn latch_closed_while_its_create_is_in_flight_leaves_no_node() {
    let c = client();
    let p = Proxied::new(SESSION, None);
    let path = unique("latch-create-delete-race");
    c.create()
        .creating_parents_if_needed()
        .for_path(&path, b"")
        .unwrap();
    p.proxy.pause_replies();
    let latch = LeaderLatch::new(&p.client, &path).unwrap();
    latch.start().unwrap();
    wait_until(
        WITHIN,
        || sorted_children(&c, &path).len() == 1,
        || format!("the create never came\n{}", p.ctx.dump()),
    );
    latch.close().unwrap();
    p.proxy.resume();
    wait_until(
        WITHIN,
        || sorted_children(&c, &path).is_empty(),
        || format!("{:?}\n{}", sorted_children(&c, &path), p.ctx.dump()),
    );
}

/// Curator's TestLeaderLatch.testLostConnection: ten latches on one
/// client; the session is lost and nobody leads; once the server is back
/// exactly one leads.
#[test]
fn latch_lost_connection_then_one_leader() {
    let p = Proxied::new(SHORT_SESSION, None);
    let path = unique("latch-lost-connection");
    let latches: Vec<LeaderLatch> = (0..10)
        .map(|_| LeaderLatch::new(&p.client, &path).unwrap())
        .collect();
    for l in &latches {
        l.start().unwrap();
    }
    wait_one_leader(&latches);
    p.kill();
    p.expect(ConnectionState::Lost);
    thread::sleep(Duration::from_millis(200));
    assert!(leaders(&latches).is_empty(), "{:?}", leaders(&latches));
    p.revive();
    wait_one_leader(&latches);
}

/// Curator's TestLeaderLatch.testCorrectWatching: of ten latches, closing
/// the third does not make the second lead (the first still does).
#[test]
fn latch_closing_a_later_latch_does_not_make_another_lead() {
    let c = client();
    let path = unique("latch-correct-watching");
    let mut latches = Vec::new();
    for _ in 0..10 {
        let l = LeaderLatch::new(&c, &path).unwrap();
        l.start().unwrap();
        latches.push(l);
        wait_one_leader(&latches);
    }
    let leader = wait_one_leader(&latches);
    latches[2].close().unwrap();
    thread::sleep(Duration::from_millis(200));
    assert!(!latches[1].has_leadership());
    assert_eq!(leaders(&latches), [leader]);
}

/// Curator's TestLeaderLatch.testWaiting: ten threads each start a latch,
/// wait to lead, check that nobody else leads, and close; ten rounds.
#[test]
fn latch_waiters_lead_one_at_a_time() {
    let c = client();
    for round in 0..10 {
        let path = unique(&format!("latch-waiting-{round}"));
        let there_is_a_leader = AtomicBool::new(false);
        thread::scope(|s| {
            for _ in 0..10 {
                s.spawn(|| {
                    let latch = LeaderLatch::new(&c, &path).unwrap();
                    latch.start().unwrap();
                    assert!(latch.await_leadership(WITHIN).unwrap());
                    assert!(
                        there_is_a_leader
                            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                            .is_ok(),
                        "two leaders"
                    );
                    thread::sleep(Duration::from_millis(rand_below(10)));
                    there_is_a_leader.store(false, Ordering::SeqCst);
                    latch.close().unwrap();
                });
            }
        });
    }
}

/// A small pseudo-random number below `n` (no dependency for this).
fn rand_below(n: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(Instant::now().elapsed().as_nanos() as u64);
    h.finish() % n.max(1)
}

/// Curator's `basic(mode)`: latches lead one at a time, the leader closes
/// and the next leads, until none is left; started in order, leadership
/// follows the start order.
fn latch_basic(in_threads: bool) {
    let c = client();
    let path = unique("latch-basic");
    let mut latches: Vec<LeaderLatch> = (0..5)
        .map(|i| LeaderLatch::with_id(&c, &path, &i.to_string()).unwrap())
        .collect();
    if in_threads {
        thread::scope(|s| {
            for l in &latches {
                s.spawn(move || {
                    thread::sleep(Duration::from_millis(rand_below(100)));
                    l.start().unwrap();
                });
            }
        });
    } else {
        // Each latch joins from its own thread: latches started back to
        // back may queue in any order. Started one after the other's node
        // is there, they queue in start order.
        for l in &latches {
            l.start().unwrap();
            wait_until(WITHIN, || l.our_path().is_some(), String::new);
        }
    }
    while !latches.is_empty() {
        let leader = wait_one_leader(&latches);
        if !in_threads {
            assert_eq!(leader, 0, "leadership follows the start order");
        }
        latches.remove(leader).close().unwrap();
    }
}

/// Curator's TestLeaderLatch.testBasic (Curator runs it with one latch;
/// here five).
#[test]
fn latch_basic_started_in_order() {
    latch_basic(false);
}

/// Curator's TestLeaderLatch.testBasicAlt (five latches started from
/// threads).
#[test]
fn latch_basic_started_in_threads() {
    latch_basic(true);
}

/// Curator's `testCallbackSanity` / `testCallbackNotifyLeader`: each of
/// ten latches, on first leading, gives its node up (Curator calls its
/// package-private `reset()`; here the node is deleted, after which the
/// latch queues again), and on leading the second time closes. Returns
/// how often the latches were told they lead and they do not.
fn latch_callbacks(silent: usize) -> (usize, usize) {
    let c = client();
    let path = unique("latch-callbacks");
    let latches: Vec<LeaderLatch> = (0..10)
        .map(|i| {
            let mode = if i < silent {
                CloseMode::Silent
            } else {
                CloseMode::NotifyLeader
            };
            LeaderLatch::with_close_mode(&c, &path, "", mode).unwrap()
        })
        .collect();
    let leader_told = AtomicUsize::new(0);
    let not_leader_told = AtomicUsize::new(0);
    thread::scope(|s| {
        for latch in &latches {
            let events = latch.listen();
            let (c, leader_told, not_leader_told) = (&c, &leader_told, &not_leader_told);
            s.spawn(move || {
                let mut been_leader = false;
                // The channel disconnects when the latch closes.
                while let Ok(e) = events.recv_timeout(Duration::from_secs(20)) {
                    match e {
                        LatchEvent::IsLeader => {
                            leader_told.fetch_add(1, Ordering::SeqCst);
                            if !been_leader {
                                been_leader = true;
                                let node = latch.our_path().expect("a leader has a node");
                                let _ = c.delete().for_path(&node);
                            } else {
                                latch.close().unwrap();
                            }
                        }
                        LatchEvent::NotLeader => {
                            not_leader_told.fetch_add(1, Ordering::SeqCst);
                        }
                        other => panic!("a latch told {other:?}"),
                    }
                }
                assert_eq!(latch.state(), LatchState::Closed, "the latch never closed");
            });
        }
        for latch in &latches {
            latch.start().unwrap();
        }
    });
    (
        leader_told.load(Ordering::SeqCst),
        not_leader_told.load(Ordering::SeqCst),
    )
}

/// Curator's TestLeaderLatch.testCallbackSanity.
#[test]
fn latch_callback_sanity() {
    assert_eq!(latch_callbacks(10), (20, 10));
}

/// Curator's TestLeaderLatch.testCallbackNotifyLeader: three latches close
/// silently, seven tell their listeners.
#[test]
fn latch_callback_notify_leader() {
    assert_eq!(latch_callbacks(3), (20, 20 - 3));
}

/// Curator's TestLeaderLatch.testCallbackDontNotify: a latch that closes in
/// `NotifyLeader` mode while it does not lead tells nothing; the leader
/// closing in that mode is told once.
#[test]
fn latch_callback_dont_notify() {
    let c = client();
    let path = unique("latch-dont-notify");
    let leader = LeaderLatch::new(&c, &path).unwrap();
    let notified = LeaderLatch::with_close_mode(&c, &path, "", CloseMode::NotifyLeader).unwrap();
    let leader_events = leader.listen();
    let notified_events = notified.listen();
    leader.start().unwrap();
    assert!(leader.await_leadership(WITHIN).unwrap());
    notified.start().unwrap();
    wait_until(
        WITHIN,
        || sorted_children(&c, &path).len() == 2,
        String::new,
    );
    notified.close().unwrap();
    leader.close_with(CloseMode::NotifyLeader).unwrap();
    assert_eq!(leader.state(), LatchState::Closed);
    assert_eq!(notified.state(), LatchState::Closed);
    let told: Vec<_> = leader_events.iter().collect();
    assert_eq!(told, [LatchEvent::IsLeader, LatchEvent::NotLeader]);
    let told: Vec<_> = notified_events.iter().collect();
    assert!(told.is_empty(), "{told:?}");
}

/// Curator's TestLeaderLatch.testNoServerAtStart: a latch started while no
/// server answers leads once one does, told exactly once.
#[test]
fn latch_started_before_the_server_leads_once_it_is_up() {
    let proxy = FaultProxy::start(shared_server().addr()).unwrap();
    proxy.set_refuse(true);
    let c = client_with(&proxy.connect_string(), SESSION, 5, None, false);
    let latch = LeaderLatch::new(&c, &unique("latch-no-server")).unwrap();
    let events = latch.listen();
    latch.start().unwrap();
    thread::sleep(Duration::from_millis(300));
    proxy.set_refuse(false);
    assert_eq!(
        next(&events),
        Some(LatchEvent::IsLeader),
        "{:?}",
        c.state_history()
    );
    assert!(events.recv_timeout(Duration::from_millis(300)).is_err());
    latch.close().unwrap();
    let rest: Vec<_> = events.iter().collect();
    assert!(rest.is_empty(), "{rest:?}");
}

/// Curator's TestLeaderLatch.testRelativePath: a relative path is refused.
#[test]
fn latch_relative_path_is_refused() {
    let c = client();
    assert!(matches!(
        LeaderLatch::new(&c, "parent"),
        Err(Error::InvalidPath { .. })
    ));
}

// ---------------------------------------------------------------------
// TestLeaderSelector, TestLeaderSelectorParticipants
// ---------------------------------------------------------------------

/// A selector whose `take_leadership` sends `"leader"` on the returned
/// channel, leads until its term ends, and then sends `"release"`.
fn blocking_selector(c: &Client, path: &str, id: &str) -> (LeaderSelector, Receiver<&'static str>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let s = LeaderSelector::new(c, path, id, move |l| {
        let _ = tx.send("leader");
        l.wait(Duration::MAX);
        let _ = tx.send("release");
    })
    .unwrap();
    (s, rx)
}

/// Through a proxy, a selector leads; the server goes away until the
/// session is lost. What the client's states and the term told, in order
/// ("leader", "release"), up to `Lost` and a moment after.
fn selector_states_until_lost(policy: Arc<dyn ConnectionStateErrorPolicy>) -> Vec<String> {
    let p = Proxied::new(SHORT_SESSION, Some(policy));
    let (selector, terms) = blocking_selector(&p.client, &unique("selector-error-policy"), "");
    selector.start().unwrap();
    assert_eq!(next(&terms), Some("leader"));
    let _connected: Vec<_> = p.states.try_iter().collect();
    p.kill();
    let mut told = Vec::new();
    let deadline = Instant::now() + WITHIN;
    let mut lost_at = None;
    while lost_at.is_none_or(|t: Instant| t.elapsed() < Duration::from_millis(500)) {
        assert!(
            Instant::now() < deadline,
            "no Lost: {told:?}\n{}",
            p.ctx.dump()
        );
        crossbeam_channel::select! {
            recv(p.states) -> s => {
                let s = s.unwrap();
                if s == ConnectionState::Lost && lost_at.is_none() {
                    lost_at = Some(Instant::now());
                }
                told.push(format!("{s:?}"));
            }
            recv(terms) -> t => if let Ok(t) = t { told.push(t.to_owned()) },
            default(Duration::from_millis(50)) => {}
        }
    }
    selector.close();
    told
}

/// Curator's TestLeaderSelector.testErrorPolicies: with the standard
/// policy a term ends at `Suspended`, with the session policy at `Lost`.
#[test]
fn selector_error_policies_decide_when_a_term_ends() {
    let standard = selector_states_until_lost(Arc::new(StandardConnectionStateErrorPolicy));
    let pair = &standard[..2.min(standard.len())];
    assert!(
        pair == ["Suspended", "release"] || pair == ["release", "Suspended"],
        "{standard:?}"
    );
    assert_eq!(standard[2..], ["Lost"], "{standard:?}");
    let session = selector_states_until_lost(Arc::new(SessionConnectionStateErrorPolicy));
    assert_eq!(
        session.first().map(String::as_str),
        Some("Suspended"),
        "{session:?}"
    );
    let pair = &session[1..];
    assert!(
        pair == ["Lost", "release"] || pair == ["release", "Lost"],
        "{session:?}"
    );
}

/// Curator's TestLeaderSelector.testLeaderNodeDeleteOnInterrupt: a term
/// interrupted while the server cannot be reached gives its lock node up
/// once the client is back in the same session.
#[test]
fn selector_interrupted_while_disconnected_deletes_its_node_on_reconnect() {
    let p = Proxied::new(SESSION, None);
    let c = client();
    let path = unique("selector-node-delete-on-interrupt");
    let (selector, terms) = blocking_selector(&p.client, &path, "");
    selector.start().unwrap();
    assert_eq!(next(&terms), Some("leader"));
    let session = p.client.session_id();
    p.proxy.pause();
    p.expect(ConnectionState::Suspended);
    selector.interrupt_leadership();
    p.proxy.resume();
    p.expect(ConnectionState::Reconnected);
    assert_eq!(p.client.session_id(), session);
    wait_until(
        WITHIN,
        || sorted_children(&c, &path).is_empty(),
        || format!("{:?}\n{}", sorted_children(&c, &path), p.ctx.dump()),
    );
}

/// Curator's TestLeaderSelector.testInterruptLeadershipWithRequeue: with
/// auto-requeue, interrupting the term twice in a row leads again.
#[test]
fn selector_interrupted_twice_with_auto_requeue_leads_again() {
    let c = client();
    let (selector, terms) = blocking_selector(&c, &unique("selector-interrupt-requeue"), "");
    selector.auto_requeue();
    selector.start().unwrap();
    assert_eq!(next(&terms), Some("leader"));
    thread::sleep(Duration::from_millis(20));
    selector.interrupt_leadership();
    thread::sleep(Duration::from_millis(20));
    selector.interrupt_leadership();
    assert_eq!(next(&terms), Some("release"));
    assert_eq!(next(&terms), Some("leader"));
}

/// Curator's TestLeaderSelector.testInterruptLeadership (and the clean
/// release of its testInterruption): an interrupted term ends, its lock
/// node goes and no error is told.
#[test]
fn selector_interrupt_ends_the_term() {
    let c = client();
    let path = unique("selector-interrupt");
    let (selector, terms) = blocking_selector(&c, &path, "");
    selector.start().unwrap();
    assert_eq!(next(&terms), Some("leader"));
    selector.interrupt_leadership();
    assert_eq!(next(&terms), Some("release"));
    wait_until(
        WITHIN,
        || sorted_children(&c, &path).is_empty(),
        String::new,
    );
    assert_eq!(selector.last_error(), None);
}

/// Curator's TestLeaderSelector.testAutoRequeue: a term that returns at
/// once, with auto-requeue, leads again.
#[test]
fn selector_auto_requeue_leads_again() {
    let c = client();
    let (tx, rx) = crossbeam_channel::unbounded();
    let selector = LeaderSelector::new(&c, &unique("selector-auto-requeue"), "", move |_| {
        thread::sleep(Duration::from_millis(10));
        let _ = tx.send(());
    })
    .unwrap();
    selector.auto_requeue();
    selector.start().unwrap();
    assert!(next(&rx).is_some());
    assert!(next(&rx).is_some());
}

/// Curator's TestLeaderSelector.testServerDying: the server dies while a
/// selector leads; the session is lost and the term ends.
#[test]
fn selector_term_ends_when_the_server_dies() {
    let p = Proxied::new(SHORT_SESSION, None);
    let (selector, terms) = blocking_selector(&p.client, &unique("selector-server-dying"), "");
    selector.start().unwrap();
    assert_eq!(next(&terms), Some("leader"));
    p.kill();
    p.expect(ConnectionState::Lost);
    assert_eq!(next(&terms), Some("release"));
    assert!(!selector.has_leadership());
}

/// Counts the terms under way; `take_leadership` of
/// [`counting_selector`] leads until its term ends.
#[derive(Default)]
struct Terms {
    leading: AtomicUsize,
    interrupted: AtomicUsize,
}

fn counting_selector(
    c: &Client,
    path: &str,
    terms: &Arc<Terms>,
    started: &crossbeam_channel::Sender<()>,
) -> LeaderSelector {
    let (terms, started) = (Arc::clone(terms), started.clone());
    LeaderSelector::new(c, path, "", move |l| {
        terms.leading.fetch_add(1, Ordering::SeqCst);
        let _ = started.send(());
        l.wait(Duration::MAX);
        if l.is_interrupted() {
            terms.interrupted.fetch_add(1, Ordering::SeqCst);
        }
        terms.leading.fetch_sub(1, Ordering::SeqCst);
    })
    .unwrap()
}

/// Closes whichever of the two selectors leads; the other must lead next,
/// alone.
fn close_the_leader_and_see_the_other_lead(
    sel: &[LeaderSelector; 2],
    terms: &Terms,
    started: &Receiver<()>,
) {
    assert_eq!(terms.leading.load(Ordering::SeqCst), 1);
    let leader = (0..2)
        .find(|&i| sel[i].has_leadership())
        .expect("no selector has leadership");
    sel[leader].close();
    assert!(next(started).is_some(), "the other did not lead");
    thread::sleep(Duration::from_millis(100));
    assert_eq!(terms.leading.load(Ordering::SeqCst), 1);
    assert!(sel[1 - leader].has_leadership());
}

/// Curator's TestLeaderSelector.testKillSessionThenCloseShouldElectNewLeader:
/// two selectors on one client; its session expires, the term is
/// interrupted; both requeue, one leads; it closes, the other leads.
#[test]
fn selector_after_an_expired_session_requeue_then_close_elects_the_other() {
    let c = client();
    let path = unique("selector-kill-session");
    let terms = Arc::new(Terms::default());
    let (started_tx, started) = crossbeam_channel::unbounded();
    let sel = [
        counting_selector(&c, &path, &terms, &started_tx),
        counting_selector(&c, &path, &terms, &started_tx),
    ];
    sel[0].start().unwrap();
    sel[1].start().unwrap();
    assert!(next(&started).is_some());
    c.expire_session_for_testing().unwrap();
    wait_until(
        WITHIN,
        || terms.interrupted.load(Ordering::SeqCst) == 1,
        || format!("{:?}", c.state_history()),
    );
    assert!(c.block_until_connected(WITHIN).unwrap());
    // Curator's queued selector fails its acquire with the session, so
    // both requeue. latchkey's queued selector stays queued (its lock node
    // is made again in the new session), so only the old leader can
    // requeue; the other leads meanwhile or after it. (It queues again
    // because the client's retry policy allows it; with none left it would
    // fail and need a requeue too.)
    let requeued = AtomicUsize::new(0);
    wait_until(
        WITHIN,
        || {
            for s in &sel {
                if s.requeue().unwrap_or(false) {
                    requeued.fetch_add(1, Ordering::SeqCst);
                }
            }
            requeued.load(Ordering::SeqCst) >= 1
        },
        || format!("errors {:?} {:?}", sel[0].last_error(), sel[1].last_error()),
    );
    assert_eq!(requeued.load(Ordering::SeqCst), 1);
    assert!(next(&started).is_some());
    wait_until(
        WITHIN,
        || sel.iter().filter(|s| s.has_leadership()).count() == 1,
        String::new,
    );
    close_the_leader_and_see_the_other_lead(&sel, &terms, &started);
}

/// Curator's TestLeaderSelector.testKillServerThenCloseShouldElectNewLeader:
/// two auto-requeueing selectors on one client; the server goes away (here
/// until the session is lost) and comes back; the term was interrupted,
/// one leads again; it closes, the other leads.
#[test]
fn selector_after_the_server_comes_back_close_elects_the_other() {
    let p = Proxied::new(SHORT_SESSION, None);
    let path = unique("selector-kill-server");
    let terms = Arc::new(Terms::default());
    let (started_tx, started) = crossbeam_channel::unbounded();
    let sel = [
        counting_selector(&p.client, &path, &terms, &started_tx),
        counting_selector(&p.client, &path, &terms, &started_tx),
    ];
    for s in &sel {
        s.auto_requeue();
        s.start().unwrap();
    }
    assert!(next(&started).is_some());
    p.kill();
    p.expect(ConnectionState::Lost);
    p.revive();
    wait_until(
        WITHIN,
        || terms.interrupted.load(Ordering::SeqCst) == 1,
        || p.ctx.dump(),
    );
    assert!(next(&started).is_some(), "{}", p.ctx.dump());
    close_the_leader_and_see_the_other_lead(&sel, &terms, &started);
}

/// Curator's TestLeaderSelector.testClosing: of two selectors one leads;
/// closing the other changes nothing; closing the leader ends its term.
#[test]
fn selector_closing() {
    let c = client();
    let path = unique("selector-closing");
    let (a, _ta) = blocking_selector(&c, &path, "a");
    let (b, _tb) = blocking_selector(&c, &path, "b");
    a.start().unwrap();
    b.start().unwrap();
    wait_until(
        WITHIN,
        || a.has_leadership() || b.has_leadership(),
        String::new,
    );
    assert_ne!(a.has_leadership(), b.has_leadership());
    let (positive, negative) = if a.has_leadership() {
        (&a, &b)
    } else {
        (&b, &a)
    };
    negative.close();
    thread::sleep(Duration::from_millis(300));
    assert!(positive.has_leadership() && !negative.has_leadership());
    positive.close();
    wait_until(WITHIN, || !positive.has_leadership(), String::new);
    wait_until(
        WITHIN,
        || sorted_children(&c, &path).is_empty(),
        String::new,
    );
}

/// Curator's TestLeaderSelector.testRotatingLeadership: five selectors,
/// three rounds (start, then requeue); every selector leads once a round.
#[test]
fn selector_rotating_leadership() {
    let c = client();
    let path = unique("selector-rotating");
    let (tx, rx) = crossbeam_channel::unbounded();
    let selectors: Vec<LeaderSelector> = (0..5)
        .map(|i| {
            let tx = tx.clone();
            LeaderSelector::new(&c, &path, "", move |_| {
                thread::sleep(Duration::from_millis(20));
                let _ = tx.send(i);
            })
            .unwrap()
        })
        .collect();
    for round in 0..3 {
        for s in &selectors {
            if round == 0 {
                s.start().unwrap();
            } else {
                // Its previous term may still be releasing its lock.
                wait_until(WITHIN, || s.requeue().unwrap_or(false), String::new);
            }
        }
        let mut seen = HashSet::new();
        for _ in 0..selectors.len() {
            let i = next(&rx).unwrap_or_else(|| panic!("round {round}: seen {seen:?}"));
            assert!(seen.insert(i), "round {round}: {i} led twice");
        }
    }
}

/// Curator's TestLeaderSelectorParticipants.testId: a selector's id is
/// what the leader and the participants tell.
#[test]
fn selector_participant_id() {
    let c = client();
    let (selector, terms) = blocking_selector(&c, &unique("selector-id"), "");
    selector.set_id("A is A").unwrap();
    selector.start().unwrap();
    assert_eq!(next(&terms), Some("leader"));
    let leader = selector.leader().unwrap();
    assert!(leader.is_leader);
    assert_eq!(leader.id, "A is A");
    let participants = selector.participants().unwrap();
    assert_eq!(participants.len(), 1);
    assert_eq!(participants[0].id, "A is A");
    assert_eq!(participants[0].id, selector.id());
}

/// Curator's TestLeaderSelectorParticipants.testBasic: ten selectors on
/// one client all see the same participants: ten distinct ids, one leader.
#[test]
fn selector_participants_basic() {
    let c = client();
    let path = unique("selector-participants");
    let selectors: Vec<(LeaderSelector, Receiver<&str>)> = (0..10)
        .map(|i| blocking_selector(&c, &path, &i.to_string()))
        .collect();
    for (s, _) in &selectors {
        s.start().unwrap();
    }
    wait_until(
        WITHIN,
        || selectors[0].0.participants().is_ok_and(|p| p.len() == 10),
        || format!("{:?}", selectors[0].0.participants()),
    );
    let participants = selectors[0].0.participants().unwrap();
    for (s, _) in &selectors[1..] {
        assert_eq!(s.participants().unwrap(), participants);
    }
    let ids: HashSet<String> = participants.iter().map(|p| p.id.clone()).collect();
    let expected: HashSet<String> = (0..10).map(|i| i.to_string()).collect();
    assert_eq!(ids, expected);
    assert_eq!(participants.iter().filter(|p| p.is_leader).count(), 1);
}

// ---------------------------------------------------------------------
// TestLeaderSelectorEdges, TestLeaderSelectorCluster
// ---------------------------------------------------------------------

/// How long the server refuses everything after the create that Curator's
/// `ChaosMonkeyCnxnFactory` cuts off (Curator: 6 s).
/// Longer than the client's retries take (each waits up to the 1 s
/// connection timeout for a connection).
const LOCKOUT: Duration = Duration::from_millis(1500);

/// Curator's `ChaosMonkeyCnxnFactory` through a proxy: the next create
/// under `parent` is applied by the server, but its reply never comes: the
/// connection is cut once the node is there, and for `lockout` new
/// connections are refused, so that the client's retries fail too.
/// `start` sends the create. Returns once the lockout is over.
fn chaos_create(
    p: &Proxied,
    observer: &Client,
    parent: &str,
    lockout: Duration,
    start: impl FnOnce(),
) {
    p.proxy.pause_replies();
    start();
    wait_until(
        WITHIN,
        || !sorted_children(observer, parent).is_empty(),
        || format!("the create never came\n{}", p.ctx.dump()),
    );
    p.proxy.set_refuse(true);
    p.proxy.cut();
    p.proxy.resume();
    thread::sleep(lockout);
    p.proxy.set_refuse(false);
}

/// Curator's TestLeaderSelectorEdges.flappingTest: the connection closes
/// right after the selector's lock node is created (the client never
/// hears of it) and stays refused a while; the client reconnects, the
/// selector has not led, and no lock node is left behind: a second
/// selector leads at once.
#[test]
fn selector_flapping_connection_leaves_no_lock_node() {
    let observer = client();
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(30))
            .connection_timeout(Duration::from_secs(1))
            .retry_policy(RetryNTimes::new(1, Duration::from_millis(500))),
    );
    let p = Proxied {
        states: c.listen(),
        ctx: Ctx::new(server, &c),
        proxy,
        client: c,
    };
    let path = unique("selector-flapping");
    observer.create().for_path(&path, b"").unwrap();
    let (tx, led) = crossbeam_channel::unbounded();
    let take = move |_: &latchkey_recipes::Leadership| {
        let _ = tx.send(());
    };
    let selector1 = LeaderSelector::new(&p.client, &path, "", take.clone()).unwrap();
    chaos_create(&p, &observer, &path, LOCKOUT, || selector1.start().unwrap());
    p.expect(ConnectionState::Reconnected);
    assert!(led.try_recv().is_err(), "led through the lost create");
    wait_until(
        WITHIN,
        || sorted_children(&observer, &path).is_empty(),
        || format!("{:?}\n{}", sorted_children(&observer, &path), p.ctx.dump()),
    );
    let selector2 = LeaderSelector::new(&p.client, &path, "", take).unwrap();
    selector2.start().unwrap();
    assert!(
        led.recv_timeout(Duration::from_secs(2)).is_ok(),
        "{:?} {:?}",
        selector1.last_error(),
        sorted_children(&observer, &path)
    );
}

/// Curator's createProtectedNodeInBackgroundTest (`retries` 2) and
/// createProtectedNodeInBackgroundTestNoRetry (0): a protected
/// ephemeral-sequential create whose reply is lost fails with a
/// connection loss, and the node it made is removed.
fn protected_create_with_lost_reply(retries: u32) {
    let observer = client();
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(30))
            .connection_timeout(Duration::from_secs(1))
            .retry_policy(RetryNTimes::new(retries, Duration::from_millis(100))),
    );
    let p = Proxied {
        states: c.listen(),
        ctx: Ctx::new(server, &c),
        proxy,
        client: c,
    };
    let path = unique("protected-lost-reply");
    observer.create().for_path(&path, b"").unwrap();
    let (tx, result) = crossbeam_channel::bounded(1);
    let creator = p.client.clone();
    let node = format!("{path}/foo-");
    let lockout = LOCKOUT * (retries + 1);
    chaos_create(&p, &observer, &path, lockout, || {
        thread::spawn(move || {
            let _ = tx.send(
                creator
                    .create()
                    .with_protection()
                    .mode(CreateMode::EphemeralSequential)
                    .for_path(&node, b""),
            );
        });
    });
    match result.recv_timeout(WITHIN) {
        Ok(Err(e)) if e.is(ErrorCode::ConnectionLoss) => {}
        other => panic!("{other:?}\n{}", p.ctx.dump()),
    }
    wait_until(
        WITHIN,
        || sorted_children(&observer, &path).is_empty(),
        || format!("{:?}\n{}", sorted_children(&observer, &path), p.ctx.dump()),
    );
}

/// Curator's TestLeaderSelectorEdges.createProtectedNodeInBackgroundTest.
#[test]
fn protected_create_with_lost_reply_and_retries_leaves_no_node() {
    protected_create_with_lost_reply(2);
}

/// Curator's TestLeaderSelectorEdges.createProtectedNodeInBackgroundTestNoRetry.
#[test]
fn protected_create_with_lost_reply_and_no_retry_leaves_no_node() {
    protected_create_with_lost_reply(0);
}

/// The member of `cluster` that serves the session `session`.
fn serving_member(cluster: &TestingCluster, session: i64) -> Option<usize> {
    let sid = format!("sid=0x{session:x}");
    (0..cluster.size()).find(|&i| {
        cluster
            .four_letter(i, "cons")
            .is_ok_and(|cons| cons.contains(&sid))
    })
}

/// Curator's TestLeaderSelectorCluster.testRestart and testLostRestart, on
/// one three-member ensemble. testRestart: an auto-requeueing selector
/// leads (its lock node listed); the member its client is connected to is
/// killed; it leads again. testLostRestart: the whole ensemble stops, the
/// term ends with the lost session, the ensemble comes back, the old lock
/// node is deleted (as its expiry would), and a requeue leads again.
#[test]
fn selector_on_an_ensemble_leads_again_after_its_server_and_the_ensemble_go() {
    let mut cluster = TestingCluster::start(3).unwrap();
    let observer = connect(&cluster.connect_string(), SESSION);
    let c = client_with(&cluster.connect_string(), SESSION, 1, None, true);

    // testRestart.
    let path = "/leader";
    let (tx, led) = crossbeam_channel::unbounded();
    let selector = LeaderSelector::new(&c, path, "", move |l| {
        let names = l.bound_client().get_children("/leader").unwrap_or_default();
        let _ = tx.send(names.len());
    })
    .unwrap();
    selector.auto_requeue();
    selector.start().unwrap();
    assert!(next(&led).is_some_and(|n| n > 0));
    let member = serving_member(&cluster, c.session_id()).expect("the client's member");
    cluster.kill(member).unwrap();
    let t = Instant::now();
    // Terms come and go all along: take the first after the kill.
    let again = loop {
        match led.recv_timeout(Duration::from_secs(20)) {
            Ok(n) if t.elapsed() > Duration::from_millis(50) => break Some(n),
            Ok(_) => {}
            Err(_) => break None,
        }
    };
    assert!(again.is_some_and(|n| n > 0), "{}", cluster.describe(20));
    selector.close();
    cluster.restart(member).unwrap();
    cluster.wait_for_quorum(Duration::from_secs(30)).unwrap();

    // testLostRestart. Curator's listener ends its term on `Lost` only;
    // here the session policy does the same (the standard policy would end
    // it at `Suspended`).
    let c = client_with(
        &cluster.connect_string(),
        SESSION,
        1,
        Some(Arc::new(SessionConnectionStateErrorPolicy)),
        true,
    );
    let states = c.listen();
    let lost_path = "/leader-lost";
    let (tx, led) = crossbeam_channel::unbounded();
    let lock_node = Arc::new(Mutex::new(None));
    let node_seen = Arc::clone(&lock_node);
    let selector = LeaderSelector::new(&c, lost_path, "", move |l| {
        let names = l.bound_client().get_children(lost_path).unwrap_or_default();
        if names.len() != 1 {
            let _ = tx.send(Err(format!("names size isn't 1: {names:?}")));
            return;
        }
        *node_seen.lock().unwrap() = Some(names[0].clone());
        let _ = tx.send(Ok(()));
        let ended = l.wait(Duration::from_secs(60));
        let _ = tx.send(if !ended && l.is_lost() {
            Ok(())
        } else {
            Err("the term did not end with the lost session".into())
        });
    })
    .unwrap();
    selector.start().unwrap();
    assert_eq!(next(&led), Some(Ok(())));
    let _: Vec<_> = states.try_iter().collect();
    // Curator stops the whole ensemble; here two of three members stop:
    // without a quorum the third serves nobody either, and a member that
    // restarts can rejoin it.
    for i in 1..cluster.size() {
        cluster.stop(i).unwrap();
    }
    assert_eq!(
        led.recv_timeout(Duration::from_secs(20)),
        Ok(Ok(())),
        "{:?}",
        c.state_history()
    );
    assert!(!selector.has_leadership());
    let node = lock_node.lock().unwrap().clone().expect("the lock node");
    for i in 1..cluster.size() {
        cluster.restart(i).unwrap();
    }
    cluster.wait_for_quorum(Duration::from_secs(30)).unwrap();
    assert!(c.block_until_connected(Duration::from_secs(30)).unwrap());
    let _ = observer.delete().for_path(&format!("{lost_path}/{node}"));
    assert!(led.try_recv().is_err(), "led again before the requeue");
    assert!(!selector.has_leadership());
    wait_until(
        WITHIN,
        || selector.requeue().unwrap_or(false),
        || format!("{:?}", selector.last_error()),
    );
    assert_eq!(
        led.recv_timeout(Duration::from_secs(20)),
        Ok(Ok(())),
        "{:?}",
        c.state_history()
    );
}

// ---------------------------------------------------------------------
// TestSharedCount
// ---------------------------------------------------------------------

/// Curator's TestSharedCount.testMultiClients: five clients listen to a
/// count that a sixth sets to 100 random values one after another (each
/// once every listener heard the last); each listener hears every value,
/// in order, until -1 ends it.
#[test]
fn shared_count_multi_clients_hear_every_value_in_order() {
    let path = unique("count-multi-clients");
    let cs = clients(6, SESSION);
    let heard = Arc::new(AtomicUsize::new(0));
    let mut listeners = Vec::new();
    for c in &cs[..5] {
        let count = SharedCount::new(c, &path, 10).unwrap();
        let changes = count.listen();
        let heard = Arc::clone(&heard);
        listeners.push(thread::spawn(move || {
            let mut values = Vec::new();
            while let Ok(v) = changes.recv_timeout(Duration::from_secs(20)) {
                heard.fetch_add(1, Ordering::SeqCst);
                if v < 0 {
                    break;
                }
                values.push(v);
            }
            drop(count);
            values
        }));
    }
    let count = SharedCount::new(&cs[5], &path, 10).unwrap();
    let mut sent = Vec::new();
    for i in 0..100 {
        let value = (rand_below(100) as i32 + i) % 100;
        sent.push(value);
        let before = heard.load(Ordering::SeqCst);
        // A write of the value it has is told too (a new version).
        count.set_count(value).unwrap();
        wait_until(
            WITHIN,
            || heard.load(Ordering::SeqCst) >= before + 5,
            || {
                format!(
                    "value {i}: {} of 5 heard",
                    heard.load(Ordering::SeqCst) - before
                )
            },
        );
    }
    count.set_count(-1).unwrap();
    for l in listeners {
        assert_eq!(l.join().unwrap(), sent);
    }
}

/// Curator's TestSharedCount.testSimple: three `try_set_count`s succeed
/// and the listener hears them.
#[test]
fn shared_count_simple() {
    let c = client();
    let count = SharedCount::new(&c, &unique("count-simple"), 0).unwrap();
    let changes = count.listen();
    for value in [1, 2, 10] {
        let current = count.versioned_value();
        assert!(count.try_set_count(&current, value).unwrap());
        assert_eq!(next(&changes), Some(value));
    }
    assert_eq!(count.count(), 10);
}

/// Curator's TestSharedCount.testDisconnectReconnectEventDoesNotFireValueWatcher:
/// a count is set, the connection is suspended and restored; no change is
/// told for the reconnection itself; a later set is told. Curator re-reads
/// the count on `Reconnected` and tells every listener the value again
/// (the test asserts more than two calls); latchkey's `listen` tells only
/// new values, so exactly two: 11 and 12.
#[test]
fn shared_count_reconnect_tells_no_change_that_did_not_happen() {
    let p = Proxied::new(SESSION, None);
    let count = SharedCount::new(&p.client, &unique("count-reconnect"), 10).unwrap();
    let changes = count.listen();
    count.set_count(11).unwrap();
    assert_eq!(next(&changes), Some(11));
    p.proxy.pause();
    p.expect(ConnectionState::Suspended);
    p.proxy.resume();
    p.expect(ConnectionState::Reconnected);
    thread::sleep(Duration::from_millis(300));
    assert!(
        changes.try_recv().is_err(),
        "a change told for a reconnection"
    );
    assert!(count.try_set_count(&count.versioned_value(), 12).unwrap());
    assert_eq!(next(&changes), Some(12));
    thread::sleep(Duration::from_millis(300));
    assert!(changes.try_recv().is_err());
}

// ---------------------------------------------------------------------
// TestDistributedAtomicLong
// ---------------------------------------------------------------------

fn retry_one_time() -> RetryNTimes {
    RetryNTimes::new(1, Duration::from_millis(1))
}

/// Curator's TestDistributedAtomicLong.testCorruptedValue: data that is not
/// a long is an error, not a value.
#[test]
fn atomic_corrupted_value_is_an_error() {
    let c = client();
    let path = unique("atomic-corrupted");
    c.create().for_path(&path, b"foo").unwrap();
    let dal = DistributedAtomicLong::new(&c, &path, retry_one_time()).unwrap();
    assert!(dal.get().is_err());
}

/// Curator's TestDistributedAtomicLong.testCompareAndSetWithFreshInstance.
#[test]
fn atomic_compare_and_set_with_fresh_instance() {
    let c = client();
    let dal = DistributedAtomicLong::new(&c, &unique("atomic-fresh"), retry_one_time()).unwrap();
    assert!(!dal.compare_and_set(0, 1).unwrap().succeeded);
    assert!(dal.initialize(0).unwrap());
    assert!(dal.compare_and_set(0, 1).unwrap().succeeded);
    assert!(!dal.initialize(0).unwrap());
}

/// Curator's TestDistributedAtomicLong.testCompareAndSet: a compare-and-set
/// whose write meets another increment (Curator increments from
/// `valueToBytes`; here from another session while the write is held at a
/// proxy) does not succeed.
#[test]
fn atomic_compare_and_set_losing_to_an_increment_fails() {
    let p = Proxied::new(SESSION, None);
    let other = client();
    let path = unique("atomic-cas");
    let dal = DistributedAtomicLong::new(&p.client, &path, retry_one_time()).unwrap();
    dal.force_set(1).unwrap();
    assert!(dal.compare_and_set(1, 5).unwrap().succeeded);
    assert!(!dal.compare_and_set(1, 5).unwrap().succeeded);
    // setData (op code 5) of the counter's node.
    p.proxy.pause_requests_at(&request_on(5, &path));
    let (tx, result) = crossbeam_channel::bounded(1);
    thread::spawn(move || {
        let _ = tx.send(dal.compare_and_set(5, 10));
    });
    wait_until(WITHIN, || p.proxy.requests_paused(), || p.ctx.dump());
    let inc = DistributedAtomicLong::new(&other, &path, retry_one_time()).unwrap();
    assert!(inc.increment().unwrap().succeeded);
    p.proxy.resume();
    match result.recv_timeout(WITHIN) {
        Ok(Ok(v)) => assert!(!v.succeeded, "{v:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(inc.get().unwrap().post_value, 6);
}

/// Curator's TestDistributedAtomicLong.testForceSet: increments and
/// force-sets to 0 running side by side (100 rounds each; Curator starts
/// 1000 and reads at once); the counter stays small.
#[test]
fn atomic_force_set_alongside_increments() {
    let c = client();
    let path = unique("atomic-force-set");
    let dal = DistributedAtomicLong::new(&c, &path, retry_one_time()).unwrap();
    thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..100 {
                let _ = dal.increment().unwrap();
                thread::sleep(Duration::from_millis(10));
            }
        });
        s.spawn(|| {
            for _ in 0..100 {
                dal.force_set(0).unwrap();
                thread::sleep(Duration::from_millis(10));
            }
        });
        thread::sleep(Duration::from_millis(200));
        assert!(dal.get().unwrap().pre_value < 10);
    });
}

/// Curator's TestDistributedAtomicLong.testSimulation: 20 sessions
/// increment one counter 50 times each, promoted to a lock; each sees its
/// increments rise, and both optimistic and promoted tries happen.
#[test]
fn atomic_simulation_of_twenty_sessions() {
    let path = unique("atomic-simulation");
    let lock = unique("atomic-simulation-lock");
    let cs = clients(20, SESSION);
    let optimistic = AtomicUsize::new(0);
    let promoted = AtomicUsize::new(0);
    let errors = AtomicUsize::new(0);
    thread::scope(|s| {
        for c in &cs {
            let (path, lock) = (&path, &lock);
            let (optimistic, promoted, errors) = (&optimistic, &promoted, &errors);
            s.spawn(move || {
                let policy = || ExponentialBackoffRetry::new(Duration::from_millis(3), 3);
                let dal = DistributedAtomicLong::new(c, path, policy())
                    .unwrap()
                    .promoted_to_lock(
                        PromotedToLock::new(lock)
                            .timeout(WITHIN)
                            .retry_policy(policy()),
                    )
                    .unwrap();
                let mut previous = -1;
                for _ in 0..50 {
                    thread::sleep(Duration::from_millis(rand_below(10)));
                    let v = dal.increment().unwrap();
                    if v.succeeded {
                        if v.post_value <= previous {
                            errors.fetch_add(1, Ordering::SeqCst);
                        }
                        previous = v.post_value;
                    }
                    optimistic.fetch_add(v.stats.optimistic_tries as usize, Ordering::SeqCst);
                    promoted.fetch_add(v.stats.promoted_tries as usize, Ordering::SeqCst);
                }
            });
        }
    });
    println!(
        "optimistic tries {}, promoted tries {}",
        optimistic.load(Ordering::SeqCst),
        promoted.load(Ordering::SeqCst)
    );
    assert_eq!(errors.load(Ordering::SeqCst), 0);
    assert!(optimistic.load(Ordering::SeqCst) > 0);
    assert!(promoted.load(Ordering::SeqCst) > 0);
}

/// Curator's TestDistributedAtomicLong.testBasic: increment, decrement,
/// add and subtract on a path whose parents do not exist, each in one
/// optimistic try.
#[test]
fn atomic_basic() {
    let c = client();
    let path = format!("{}/bar/counter", unique("atomic-basic"));
    let dal = DistributedAtomicLong::new(&c, &path, retry_one_time()).unwrap();
    let steps: [(&str, i64, i64); 4] = [
        ("increment", 0, 1),
        ("decrement", 1, 0),
        ("add", 0, 10),
        ("subtract", 10, 5),
    ];
    for (op, pre, post) in steps {
        let v = match op {
            "increment" => dal.increment(),
            "decrement" => dal.decrement(),
            "add" => dal.add(10),
            _ => dal.subtract(5),
        }
        .unwrap();
        assert!(v.succeeded, "{op}");
        assert_eq!(
            (v.stats.optimistic_tries, v.stats.promoted_tries),
            (1, 0),
            "{op}"
        );
        assert_eq!((v.pre_value, v.post_value), (pre, post), "{op}");
    }
}

// ---------------------------------------------------------------------
// TestDistributedBarrier, TestDistributedDoubleBarrier
// ---------------------------------------------------------------------

/// Curator's TestDistributedBarrier.testServerCrash: the server dies while
/// a client waits on a set barrier; the wait fails with a connection loss
/// rather than passing or waiting out its timeout.
#[test]
fn barrier_wait_fails_when_the_server_crashes() {
    let p = Proxied::new(SESSION, None);
    let barrier = DistributedBarrier::new(&p.client, &unique("barrier-crash")).unwrap();
    barrier.set_barrier().unwrap();
    let (tx, result) = crossbeam_channel::bounded(1);
    let waiter = barrier.clone();
    thread::spawn(move || {
        let _ = tx.send(waiter.wait_on_barrier(Duration::from_secs(30)));
    });
    thread::sleep(Duration::from_millis(500));
    p.kill();
    match result.recv_timeout(WITHIN) {
        Ok(Err(e)) if e.is(ErrorCode::ConnectionLoss) => {}
        other => panic!("{other:?}\n{}", p.ctx.dump()),
    }
}

/// Curator's TestDistributedBarrier.testMultiClient: one client sets the
/// barrier, two others wait (Curator's waits are 10 ms; here until
/// removed), a fourth removes it, and both waits end.
#[test]
fn barrier_multi_client() {
    let cs = clients(4, SESSION);
    let path = unique("barrier-multi");
    DistributedBarrier::new(&cs[0], &path)
        .unwrap()
        .set_barrier()
        .unwrap();
    let passed = AtomicUsize::new(0);
    thread::scope(|s| {
        for c in &cs[1..3] {
            let (path, passed) = (&path, &passed);
            s.spawn(move || {
                let b = DistributedBarrier::new(c, path).unwrap();
                if b.wait_on_barrier(WITHIN).unwrap() {
                    passed.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        thread::sleep(Duration::from_millis(1000));
        assert_eq!(passed.load(Ordering::SeqCst), 0);
        DistributedBarrier::new(&cs[3], &path)
            .unwrap()
            .remove_barrier()
            .unwrap();
    });
    assert_eq!(passed.load(Ordering::SeqCst), 2);
}

/// Curator's TestDistributedBarrier.testNoBarrier: a barrier never set
/// passes at once, with a timeout and without one.
#[test]
fn barrier_not_set_passes() {
    let c = client();
    let barrier = DistributedBarrier::new(&c, &unique("barrier-none")).unwrap();
    assert!(barrier.wait_on_barrier(WITHIN).unwrap());
    let unbounded = call_within("an unbounded wait on no barrier", WITHIN, move || {
        barrier.wait_on_barrier(Duration::MAX)
    });
    assert!(unbounded.unwrap());
}

/// Curator's TestDistributedBarrier.testBasic: a wait on a set barrier
/// passes when another thread removes it a second later.
#[test]
fn barrier_basic() {
    let c = client();
    let barrier = DistributedBarrier::new(&c, &unique("barrier-basic")).unwrap();
    barrier.set_barrier().unwrap();
    let remover = barrier.clone();
    thread::spawn(move || {
        thread::sleep(Duration::from_secs(1));
        remover.remove_barrier().unwrap();
    });
    assert!(barrier.wait_on_barrier(WITHIN).unwrap());
}

/// Five members enter and leave a double barrier, each on `client_of(i)`:
/// nobody passes `enter` before all five are in, and all leave.
fn double_barrier_five(client_of: impl Fn(usize) -> Client + Sync) {
    const QTY: usize = 5;
    let path = unique("double-barrier");
    let count = AtomicI64::new(0);
    let max = AtomicI64::new(0);
    let entered = std::sync::Barrier::new(QTY);
    let left = std::sync::Barrier::new(QTY);
    thread::scope(|s| {
        for i in 0..QTY {
            let (path, count, max, entered, left) = (&path, &count, &max, &entered, &left);
            let client_of = &client_of;
            s.spawn(move || {
                let c = client_of(i);
                let b = DistributedDoubleBarrier::new(&c, path, QTY).unwrap();
                assert!(b.enter(WITHIN).unwrap());
                let now = count.fetch_add(1, Ordering::SeqCst) + 1;
                max.fetch_max(now, Ordering::SeqCst);
                entered.wait();
                assert_eq!(count.load(Ordering::SeqCst), QTY as i64);
                assert!(b.leave(WITHIN).unwrap());
                count.fetch_sub(1, Ordering::SeqCst);
                left.wait();
            });
        }
    });
    assert_eq!(count.load(Ordering::SeqCst), 0);
    assert_eq!(max.load(Ordering::SeqCst), QTY as i64);
}

/// Curator's TestDistributedDoubleBarrier.testMultiClient: five members on
/// five clients.
#[test]
fn double_barrier_multi_client() {
    double_barrier_five(|_| client());
}

/// Curator's TestDistributedDoubleBarrier.testBasic: five members on one
/// client.
#[test]
fn double_barrier_basic() {
    let c = client();
    double_barrier_five(|_| c.clone());
}

/// Curator's TestDistributedDoubleBarrier.testOverSubscribed: six members
/// of a barrier for five, all arriving before any looks at the others
/// (Curator holds them in an overridden `getChildrenForEntering`; here they
/// start together), all enter and all leave.
#[test]
fn double_barrier_over_subscribed() {
    let c = client();
    let path = unique("double-barrier-over");
    let start = std::sync::Barrier::new(6);
    thread::scope(|s| {
        for _ in 0..6 {
            let (c, path, start) = (&c, &path, &start);
            s.spawn(move || {
                let b = DistributedDoubleBarrier::new(c, path, 5).unwrap();
                start.wait();
                assert!(b.enter(WITHIN).unwrap());
                assert!(b.leave(WITHIN).unwrap());
            });
        }
    });
}
