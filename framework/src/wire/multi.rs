//! ZooKeeper's multi records (`MultiOperationRecord`, `MultiResponse`):
//! several operations in one request, each behind a `MultiHeader`, the
//! list closed by a header marked done. `multi` (op 14) applies its writes
//! all or none; `multiRead` (op 22) answers each read on its own.

use super::jute::{Reader, Writer};
use super::proto::{self, op};
use crate::acl::Acl;
use crate::error::Error;
use crate::types::{CreateMode, Stat};

/// One operation of a multi request, with server paths.
pub(crate) enum SubRequest<'a> {
    Create {
        path: &'a str,
        data: &'a [u8],
        acl: &'a [Acl],
        mode: CreateMode,
    },
    SetData {
        path: &'a str,
        data: &'a [u8],
        version: i32,
    },
    Delete {
        path: &'a str,
        version: i32,
    },
    Check {
        path: &'a str,
        version: i32,
    },
    GetData {
        path: &'a str,
    },
    GetChildren {
        path: &'a str,
    },
}

impl SubRequest<'_> {
    /// The op code it goes under. Creates ask for the node's stat
    /// (`create2`), as the single create does.
    fn opcode(&self) -> i32 {
        match self {
            SubRequest::Create { mode, .. } if *mode == CreateMode::Container => {
                op::CREATE_CONTAINER
            }
            SubRequest::Create { mode, .. } if mode.ttl_ms().ok().flatten().is_some() => {
                op::CREATE_TTL
            }
            SubRequest::Create { .. } => op::CREATE2,
            SubRequest::SetData { .. } => op::SET_DATA,
            SubRequest::Delete { .. } => op::DELETE,
            SubRequest::Check { .. } => op::CHECK,
            SubRequest::GetData { .. } => op::GET_DATA,
            SubRequest::GetChildren { .. } => op::GET_CHILDREN,
        }
    }

    fn write(&self, w: &mut Writer) {
        match *self {
            SubRequest::Create {
                path,
                data,
                acl,
                mode,
            } => {
                w.string(path).bytes(data);
                proto::write_acls(w, acl);
                w.i32(mode.flags());
                if let Ok(Some(ttl)) = mode.ttl_ms() {
                    w.i64(ttl);
                }
            }
            SubRequest::SetData {
                path,
                data,
                version,
            } => {
                w.string(path).bytes(data).i32(version);
            }
            SubRequest::Delete { path, version } | SubRequest::Check { path, version } => {
                w.string(path).i32(version);
            }
            // Reads in a multiRead leave no watch.
            SubRequest::GetData { path } | SubRequest::GetChildren { path } => {
                w.string(path).bool(false);
            }
        }
    }
}

/// Writes a `MultiOperationRecord` (the request body after its header).
pub(crate) fn write_request(w: &mut Writer, ops: &[SubRequest<'_>]) {
    for sub in ops {
        w.i32(sub.opcode()).bool(false).i32(-1);
        sub.write(w);
    }
    w.i32(-1).bool(true).i32(-1);
}

/// One operation's outcome in a `MultiResponse`.
#[derive(Debug, PartialEq)]
pub(crate) enum SubReply {
    Created {
        path: String,
        stat: Option<Stat>,
    },
    DataSet(Stat),
    Deleted,
    Checked,
    Data(Vec<u8>, Stat),
    Children(Vec<String>),
    /// ZooKeeper's error code; 0 for an operation of a failed `multi` that
    /// would have succeeded.
    Error(i32),
}

/// Reads a `MultiResponse`: one reply per operation, in request order.
pub(crate) fn read_response(body: &[u8]) -> Result<Vec<SubReply>, Error> {
    let mut r = Reader::new(body);
    let mut replies = Vec::new();
    loop {
        let opcode = r.i32()?;
        let done = r.bool()?;
        let _err = r.i32()?;
        if done {
            return Ok(replies);
        }
        let reply = match opcode {
            op::CREATE => SubReply::Created {
                path: r.string()?,
                stat: None,
            },
            op::CREATE2 | op::CREATE_CONTAINER | op::CREATE_TTL => SubReply::Created {
                path: r.string()?,
                stat: Some(proto::read_stat(&mut r)?),
            },
            op::SET_DATA => SubReply::DataSet(proto::read_stat(&mut r)?),
            op::DELETE => SubReply::Deleted,
            op::CHECK => SubReply::Checked,
            op::GET_DATA => SubReply::Data(r.bytes()?, proto::read_stat(&mut r)?),
            op::GET_CHILDREN => SubReply::Children(r.strings()?),
            op::ERROR => SubReply::Error(r.i32()?),
            _ => return Err(Error::Marshalling("unknown operation in a multi reply")),
        };
        replies.push(reply);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(w: &mut Writer, opcode: i32, done: bool, err: i32) {
        w.i32(opcode).bool(done).i32(err);
    }

    #[test]
    fn request_is_headers_and_records_closed_by_done() {
        let mut w = Writer::default();
        write_request(
            &mut w,
            &[
                SubRequest::Check {
                    path: "/a",
                    version: 3,
                },
                SubRequest::Delete {
                    path: "/b",
                    version: -1,
                },
            ],
        );
        let mut r = Reader::new(w.as_bytes());
        assert_eq!(
            (r.i32().unwrap(), r.bool().unwrap(), r.i32().unwrap()),
            (13, false, -1)
        );
        assert_eq!((r.string().unwrap(), r.i32().unwrap()), ("/a".into(), 3));
        assert_eq!(
            (r.i32().unwrap(), r.bool().unwrap(), r.i32().unwrap()),
            (2, false, -1)
        );
        assert_eq!((r.string().unwrap(), r.i32().unwrap()), ("/b".into(), -1));
        assert_eq!(
            (r.i32().unwrap(), r.bool().unwrap(), r.i32().unwrap()),
            (-1, true, -1)
        );
        assert!(r.is_empty());
    }

    #[test]
    fn response_with_errors_and_results() {
        let mut w = Writer::default();
        header(&mut w, op::ERROR, false, 0);
        w.i32(0);
        header(&mut w, op::ERROR, false, -101);
        w.i32(-101);
        header(&mut w, op::CREATE, false, 0);
        w.string("/x0000000001");
        header(&mut w, op::GET_CHILDREN, false, 0);
        w.strings(&["c"]);
        header(&mut w, -1, true, -1);
        let replies = read_response(w.as_bytes()).unwrap();
        assert_eq!(
            replies,
            vec![
                SubReply::Error(0),
                SubReply::Error(-101),
                SubReply::Created {
                    path: "/x0000000001".into(),
                    stat: None
                },
                SubReply::Children(vec!["c".into()]),
            ]
        );
    }

    #[test]
    fn truncated_or_unknown_replies_err_not_panic() {
        assert!(read_response(&[]).is_err());
        let mut w = Writer::default();
        header(&mut w, op::SET_DATA, false, 0);
        w.i32(1);
        assert!(read_response(w.as_bytes()).is_err());
        let mut w = Writer::default();
        header(&mut w, 77, false, 0);
        assert!(read_response(w.as_bytes()).is_err());
    }

    #[test]
    fn creates_go_under_their_modes_op_code_and_replies_with_a_stat_are_read() {
        let create = |mode| SubRequest::Create {
            path: "/n",
            data: b"",
            acl: &[],
            mode,
        };
        let ttl = std::time::Duration::from_secs(5);
        let codes = [
            create(CreateMode::Persistent).opcode(),
            create(CreateMode::EphemeralSequential).opcode(),
            create(CreateMode::Container).opcode(),
            create(CreateMode::PersistentWithTtl(ttl)).opcode(),
        ];
        // create2, create2, createContainer, createTTL (ZooDefs.OpCode).
        assert_eq!(codes, [15, 15, 19, 21]);

        // Servers from 3.9 answer each with its stat.
        let mut w = Writer::default();
        for (i, opcode) in [15, 19, 21].into_iter().enumerate() {
            header(&mut w, opcode, false, 0);
            w.string(&format!("/n{i}"));
            w.i64(i as i64 + 1)
                .i64(0)
                .i64(0)
                .i64(0)
                .i32(0)
                .i32(0)
                .i32(0);
            w.i64(0).i32(0).i32(0).i64(0);
        }
        header(&mut w, -1, true, -1);
        let replies = read_response(w.as_bytes()).unwrap();
        let got: Vec<_> = replies
            .iter()
            .map(|r| match r {
                SubReply::Created {
                    path,
                    stat: Some(stat),
                } => (path.as_str(), stat.czxid),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(got, [("/n0", 1), ("/n1", 2), ("/n2", 3)]);
    }
}
