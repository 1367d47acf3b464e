//! Transactions (`multi`) and `multiRead` against a real ZooKeeper: results,
//! all-or-nothing failure, bad input, namespaces, size limits, retries.

mod common;

use std::thread;
use std::time::Duration;

use common::*;
use latchkey_framework::{
    Acl, Client, ConnectionState, CreateMode, Error, ErrorCode, OperationType, ReadResult,
    TransactionResult,
};
use latchkey_test::FaultProxy;

#[test]
fn a_transaction_applies_every_operation_and_returns_each_result() {
    let server = shared_server();
    let c = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &c);
    let base = unique("txn-ok");
    c.create().for_path(&base, b"").unwrap();
    let config = format!("{base}/config");
    let old = format!("{base}/old");
    c.create().for_path(&config, b"v1").unwrap();
    c.create().for_path(&old, b"").unwrap();
    let (_, stat) = c.get_data(&config).unwrap();

    let results = c
        .transaction()
        .check(&config, stat.version)
        .create(&format!("{base}/new"), b"n")
        .create_with_mode(
            &format!("{base}/seq-"),
            b"s",
            CreateMode::PersistentSequential,
        )
        .set_data(&config, b"v2")
        .delete(&old)
        .commit()
        .unwrap_or_else(|e| panic!("{e}\n{}", ctx.dump()));

    let ops: Vec<_> = results.iter().map(|r| r.op).collect();
    assert_eq!(
        ops,
        [
            OperationType::Check,
            OperationType::Create,
            OperationType::Create,
            OperationType::SetData,
            OperationType::Delete
        ]
    );
    assert_eq!(
        results[1].result_path.as_deref(),
        Some(&*format!("{base}/new"))
    );
    let seq = results[2].result_path.clone().unwrap();
    assert!(
        seq.starts_with(&format!("{base}/seq-")) && seq.len() == base.len() + 15,
        "{seq}"
    );
    assert_eq!(results[2].for_path, format!("{base}/seq-"));
    assert_eq!(c.get_data(&seq).unwrap().0, b"s");
    // One transaction, one zxid: the creates and the set-data share it.
    let (_, created) = c.get_data(&format!("{base}/new")).unwrap();
    let set = results[3].result_stat.unwrap();
    assert_eq!(created.czxid, set.mzxid, "{results:?}");
    assert_eq!(set.version, stat.version + 1);
    assert_eq!(c.get_data(&config).unwrap().0, b"v2");
    assert!(c.exists(&old).unwrap().is_none());
    assert!(results[0].result_path.is_none() && results[0].result_stat.is_none());

    // An empty transaction commits nothing and returns nothing.
    assert!(c.transaction().commit().unwrap().is_empty());
    c.close();
}

/// ZooKeeper's guarantee, seen through the client: one failing operation
/// fails the transaction, the error names it, and nothing changed.
/// A transaction to commit, and the operation index, name, path and code
/// it must fail with.
type Failure<'a> = (
    Box<dyn Fn() -> Result<Vec<TransactionResult>, Error> + 'a>,
    usize,
    &'static str,
    String,
    ErrorCode,
);

#[test]
fn a_failing_operation_names_itself_and_changes_nothing() {
    let server = shared_server();
    let c = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &c);
    let base = unique("txn-fail");
    c.create().for_path(&base, b"").unwrap();
    let config = format!("{base}/config");
    c.create().for_path(&config, b"v1").unwrap();
    let fresh = format!("{base}/fresh");

    let failures: [Failure<'_>; 4] = [
        (
            Box::new(|| {
                c.transaction()
                    .create(&fresh, b"")
                    .set_data_with_version(&config, b"v2", 7)
                    .commit()
            }),
            1,
            "setData",
            config.clone(),
            ErrorCode::BadVersion,
        ),
        (
            Box::new(|| {
                c.transaction()
                    .create(&fresh, b"")
                    .set_data(&config, b"v2")
                    .check(&config, 5)
                    .commit()
            }),
            2,
            "check",
            config.clone(),
            ErrorCode::BadVersion,
        ),
        (
            Box::new(|| {
                c.transaction()
                    .set_data(&config, b"v2")
                    .create(&fresh, b"")
                    .delete(&format!("{base}/missing"))
                    .commit()
            }),
            2,
            "delete",
            format!("{base}/missing"),
            ErrorCode::NoNode,
        ),
        (
            Box::new(|| {
                c.transaction()
                    .create(&fresh, b"")
                    .create(&config, b"")
                    .commit()
            }),
            1,
            "create",
            config.clone(),
            ErrorCode::NodeExists,
        ),
    ];
    for (commit, want_index, want_op, want_path, want_code) in failures {
        let err = commit().expect_err("the transaction must fail");
        match &err {
            Error::TransactionFailed {
                index,
                op,
                path,
                code,
            } => assert_eq!(
                (*index, *op, path.as_str(), *code),
                (want_index, want_op, want_path.as_str(), want_code),
                "{err}"
            ),
            other => panic!("not a transaction failure: {other}\n{}", ctx.dump()),
        }
        assert!(err.is(want_code), "{err}");
        let text = err.to_string();
        assert!(
            text.contains(want_op)
                && text.contains(&want_path)
                && text.contains(&format!("{want_code}")),
            "{text}"
        );
        // Nothing changed: no new node, the data and version as before.
        assert!(c.exists(&fresh).unwrap().is_none(), "{err}\n{}", ctx.dump());
        let (data, stat) = c.get_data(&config).unwrap();
        assert_eq!((data.as_slice(), stat.version), (&b"v1"[..], 0), "{err}");
    }
    c.close();
}

#[test]
fn bad_input_is_refused_before_sending_naming_operation_and_path() {
    let server = shared_server();
    let c = Client::builder()
        .connect_string(server.connect_string())
        .max_request_size(64 * 1024)
        .build()
        .unwrap();
    c.start().unwrap();
    assert!(c.block_until_connected(Duration::from_secs(30)).unwrap());
    let base = unique("txn-bad");
    let ok = format!("{base}-ok");

    let err = c
        .transaction()
        .create(&ok, b"")
        .set_data("no-slash", b"")
        .commit()
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidPath { path, reason } if path == "no-slash" && reason.contains("operation 1 (setData)")),
        "{err}"
    );
    let err = c.transaction().delete("/").commit().unwrap_err();
    assert!(matches!(err, Error::InvalidPath { .. }), "{err}");
    let err = c.transaction().create("/", b"").commit().unwrap_err();
    assert!(matches!(err, Error::InvalidPath { .. }), "{err}");
    let err = c
        .transaction()
        .create_with_acl(&ok, b"", CreateMode::Persistent, Vec::<Acl>::new())
        .commit()
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains(&ok) && m.contains("create")),
        "{err}"
    );
    // Each operation fits; together they are over the limit.
    let chunk = vec![7u8; 40 * 1024];
    let err = c
        .transaction()
        .create(&ok, &chunk)
        .create(&format!("{ok}2"), &chunk)
        .commit()
        .unwrap_err();
    assert!(
        matches!(&err, Error::RequestTooLarge { operation: "multi", path, size, max: 65536 }
            if path == &ok && *size > 80 * 1024),
        "{err}"
    );
    let err = c.multi_read().get_data("bad").execute().unwrap_err();
    assert!(matches!(err, Error::InvalidPath { .. }), "{err}");
    // Nothing was sent and the connection is fine.
    assert!(c.exists(&ok).unwrap().is_none());
    assert_eq!(c.state(), Some(ConnectionState::Connected));
    c.close();
}

#[test]
fn transactions_and_multi_reads_are_namespaced() {
    let server = shared_server();
    let ns = unique("txn-ns");
    let ns = ns.trim_start_matches('/');
    let c = start_connected(
        Client::builder()
            .connect_string(server.connect_string())
            .namespace(ns),
    );
    let plain = connect(&server.connect_string(), Duration::from_secs(10));
    let results = c
        .transaction()
        .create("/a", b"1")
        .create_with_mode("/a/e-", b"", CreateMode::EphemeralSequential)
        .commit()
        .unwrap();
    let e = results[1].result_path.clone().unwrap();
    assert!(e.starts_with("/a/e-"), "{e}");
    assert_eq!(plain.get_data(&format!("/{ns}/a")).unwrap().0, b"1");
    let err = c.transaction().delete("/a").commit().unwrap_err();
    assert!(
        matches!(&err, Error::TransactionFailed { path, code: ErrorCode::NotEmpty, .. } if path == "/a"),
        "{err}"
    );

    let reads = c
        .multi_read()
        .get_data("/a")
        .get_children("/a")
        .get_data("/missing")
        .execute()
        .unwrap();
    assert_eq!(reads.len(), 3);
    match &reads[0] {
        Ok(ReadResult::Data { path, data, stat }) => {
            assert_eq!(
                (path.as_str(), data.as_slice(), stat.num_children),
                ("/a", &b"1"[..], 1)
            )
        }
        other => panic!("{other:?}"),
    }
    let e_name = e.trim_start_matches("/a/").to_owned();
    match &reads[1] {
        Ok(ReadResult::Children { path, children }) => {
            assert_eq!((path.as_str(), children.clone()), ("/a", vec![e_name]))
        }
        other => panic!("{other:?}"),
    }
    let err = reads[2].as_ref().unwrap_err();
    assert!(err.is(ErrorCode::NoNode), "{err}");
    assert!(err.to_string().contains("get_data /missing"), "{err}");
    assert!(c.multi_read().execute().unwrap().is_empty());
    c.close();
    plain.close();
}

/// A commit made while the connection is down waits for the reconnect and
/// goes through once, as any retried operation does.
#[test]
fn a_commit_is_retried_across_a_connection_loss() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = connect(&proxy.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &c);
    let states = c.listen();
    let base = unique("txn-retry");
    proxy.set_refuse(true);
    proxy.cut();
    ctx.expect(&states, ConnectionState::Suspended, Duration::from_secs(10));
    let committer = {
        let c = c.clone();
        let base = base.clone();
        thread::spawn(move || {
            c.transaction()
                .create(&base, b"")
                .create(&format!("{base}/child"), b"")
                .commit()
        })
    };
    // Let an attempt or two fail against the refusing proxy first.
    wait_until(
        Duration::from_secs(10),
        || c.metrics().retries > 0,
        || ctx.dump(),
    );
    proxy.set_refuse(false);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !committer.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "commit hung\n{}",
            ctx.dump()
        );
        thread::sleep(Duration::from_millis(20));
    }
    let results = committer
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}\n{}", ctx.dump()));
    assert_eq!(results.len(), 2);
    assert_eq!(c.get_children(&base).unwrap(), vec!["child"]);
    c.close();
}
