//! ZooKeeper protocol records: op codes, the session handshake, requests
//! and the replies the framework decodes.

use super::jute::{Reader, Writer};
use crate::acl::Acl;
use crate::error::Error;
use crate::Stat;

/// Op codes from ZooKeeper's `ZooDefs.OpCode`.
#[allow(dead_code)]
pub(crate) mod op {
    pub const CREATE: i32 = 1;
    pub const DELETE: i32 = 2;
    pub const EXISTS: i32 = 3;
    pub const GET_DATA: i32 = 4;
    pub const SET_DATA: i32 = 5;
    pub const GET_ACL: i32 = 6;
    pub const SET_ACL: i32 = 7;
    pub const GET_CHILDREN: i32 = 8;
    pub const SYNC: i32 = 9;
    pub const PING: i32 = 11;
    pub const GET_CHILDREN2: i32 = 12;
    pub const CHECK: i32 = 13;
    pub const MULTI: i32 = 14;
    pub const CREATE2: i32 = 15;
    pub const CREATE_CONTAINER: i32 = 19;
    pub const CREATE_TTL: i32 = 21;
    pub const MULTI_READ: i32 = 22;
    pub const GET_EPHEMERALS: i32 = 103;
    pub const GET_ALL_CHILDREN_NUMBER: i32 = 104;
    pub const WHO_AM_I: i32 = 107;
    pub const AUTH: i32 = 100;
    pub const SASL: i32 = 102;
    pub const SET_WATCHES: i32 = 101;
    pub const REMOVE_WATCHES: i32 = 18;
    pub const SET_WATCHES2: i32 = 105;
    pub const ADD_WATCH: i32 = 106;
    pub const CLOSE_SESSION: i32 = -11;
    /// A failed operation's slot in a multi reply.
    pub const ERROR: i32 = -1;
}

/// ZooKeeper's name of an operation, for messages.
pub(crate) fn op_name(opcode: i32) -> &'static str {
    match opcode {
        op::CREATE => "create",
        op::DELETE => "delete",
        op::EXISTS => "exists",
        op::GET_DATA => "getData",
        op::SET_DATA => "setData",
        op::GET_CHILDREN | op::GET_CHILDREN2 => "getChildren",
        op::SYNC => "sync",
        op::CREATE2 => "create",
        op::CREATE_CONTAINER => "createContainer",
        op::SET_WATCHES => "setWatches",
        op::CHECK => "check",
        op::GET_ACL => "getACL",
        op::SET_ACL => "setACL",
        op::CREATE_TTL => "createTTL",
        op::GET_EPHEMERALS => "getEphemerals",
        op::GET_ALL_CHILDREN_NUMBER => "getAllChildrenNumber",
        op::WHO_AM_I => "whoAmI",
        op::ADD_WATCH => "addWatch",
        op::REMOVE_WATCHES => "removeWatches",
        op::SET_WATCHES2 => "setWatches2",
        op::MULTI => "multi",
        op::MULTI_READ => "multiRead",
        op::SASL => "sasl",
        _ => "request",
    }
}

/// Reserved xids the server echoes for non-request traffic.
pub(crate) mod xid {
    pub const WATCH_EVENT: i32 = -1;
    pub const PING: i32 = -2;
    pub const AUTH: i32 = -4;
    pub const SET_WATCHES: i32 = -8;
}

pub(crate) struct ConnectRequest<'a> {
    pub last_zxid: i64,
    pub timeout_ms: i32,
    pub session_id: i64,
    pub passwd: &'a [u8],
    pub read_only: bool,
}

impl ConnectRequest<'_> {
    pub(crate) fn frame(&self) -> Vec<u8> {
        let mut w = Writer::frame();
        w.i32(0) // protocol version
            .i64(self.last_zxid)
            .i32(self.timeout_ms)
            .i64(self.session_id)
            .bytes(self.passwd)
            .bool(self.read_only);
        w.finish_frame()
    }
}

#[derive(Debug)]
pub(crate) struct ConnectResponse {
    pub timeout_ms: i32,
    pub session_id: i64,
    pub passwd: Vec<u8>,
    pub read_only: bool,
}

impl ConnectResponse {
    pub(crate) fn read(body: &[u8]) -> Result<Self, Error> {
        let mut r = Reader::new(body);
        let _protocol_version = r.i32()?;
        let timeout_ms = r.i32()?;
        let session_id = r.i64()?;
        let passwd = r.bytes()?;
        // Servers before 3.4 omit the flag.
        let read_only = if r.is_empty() { false } else { r.bool()? };
        Ok(ConnectResponse {
            timeout_ms,
            session_id,
            passwd,
            read_only,
        })
    }
}

/// Starts a request frame with its header.
pub(crate) fn request(xid: i32, opcode: i32) -> Writer {
    let mut w = Writer::frame();
    w.i32(xid).i32(opcode);
    w
}

pub(crate) fn write_acls(w: &mut Writer, acls: &[Acl]) {
    w.i32(acls.len() as i32);
    for acl in acls {
        w.i32(acl.perms.bits() as i32)
            .string(&acl.id.scheme)
            .string(&acl.id.id);
    }
}

pub(crate) fn read_acls(r: &mut Reader<'_>) -> Result<Vec<Acl>, Error> {
    let n = r.i32()?;
    // Each entry needs at least 12 bytes: refuse counts the record cannot hold.
    if n < 0 || n as usize > r.rest().len() / 12 {
        return Err(Error::Marshalling("ACL vector longer than its record"));
    }
    (0..n)
        .map(|_| {
            let perms = crate::acl::Perms::from_bits(r.i32()? as u32);
            let scheme = r.string()?;
            let id = r.string()?;
            Ok(Acl::new(perms, &scheme, &id))
        })
        .collect()
}

pub(crate) fn read_stat(r: &mut Reader<'_>) -> Result<Stat, Error> {
    Ok(Stat {
        czxid: r.i64()?,
        mzxid: r.i64()?,
        ctime: r.i64()?,
        mtime: r.i64()?,
        version: r.i32()?,
        cversion: r.i32()?,
        aversion: r.i32()?,
        ephemeral_owner: r.i64()?,
        data_length: r.i32()?,
        num_children: r.i32()?,
        pzxid: r.i64()?,
    })
}

/// The header of every reply frame.
pub(crate) struct ReplyHeader {
    pub xid: i32,
    pub zxid: i64,
    pub err: i32,
}

impl ReplyHeader {
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, Error> {
        Ok(ReplyHeader {
            xid: r.i32()?,
            zxid: r.i64()?,
            err: r.i32()?,
        })
    }
}

/// What a watch notification carries on the wire.
pub(crate) struct WatcherEvent {
    pub event_type: i32,
    pub path: String,
}

impl WatcherEvent {
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, Error> {
        let event_type = r.i32()?;
        let _keeper_state = r.i32()?;
        let path = r.string()?;
        Ok(WatcherEvent { event_type, path })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::Perms;

    #[test]
    fn operations_are_named_as_zookeeper_names_them() {
        // Op codes as numbers, from ZooKeeper's ZooDefs.OpCode.
        let names = [
            (1, "create"),
            (2, "delete"),
            (3, "exists"),
            (4, "getData"),
            (5, "setData"),
            (6, "getACL"),
            (7, "setACL"),
            (8, "getChildren"),
            (9, "sync"),
            (12, "getChildren"),
            (13, "check"),
            (14, "multi"),
            (15, "create"),
            (18, "removeWatches"),
            (19, "createContainer"),
            (21, "createTTL"),
            (22, "multiRead"),
            (101, "setWatches"),
            (102, "sasl"),
            (103, "getEphemerals"),
            (104, "getAllChildrenNumber"),
            (105, "setWatches2"),
            (106, "addWatch"),
            (107, "whoAmI"),
            (11, "request"),
            (-11, "request"),
            (999, "request"),
        ];
        for (opcode, name) in names {
            assert_eq!(op_name(opcode), name, "op code {opcode}");
        }
        // And the reserved xids, as the Java client's ClientCnxn has them.
        assert_eq!(
            [xid::WATCH_EVENT, xid::PING, xid::AUTH, xid::SET_WATCHES],
            [-1, -2, -4, -8]
        );
        assert_eq!((op::CLOSE_SESSION, op::ERROR), (-11, -1));
    }

    #[test]
    fn the_handshake_is_laid_out_as_the_java_client_writes_it() {
        let frame = ConnectRequest {
            last_zxid: 0x0102,
            timeout_ms: 30_000,
            session_id: -2,
            passwd: b"pw",
            read_only: true,
        }
        .frame();
        let mut want = Vec::new();
        want.extend(0i32.to_be_bytes());
        want.extend(0x0102i64.to_be_bytes());
        want.extend(30_000i32.to_be_bytes());
        want.extend((-2i64).to_be_bytes());
        want.extend(2i32.to_be_bytes());
        want.extend(b"pw");
        want.push(1);
        assert_eq!(&frame[..4], &(want.len() as i32).to_be_bytes());
        assert_eq!(&frame[4..], &want[..]);

        let mut reply = Writer::frame();
        reply.i32(0).i32(4_000).i64(77).bytes(b"secret");
        let old = ConnectResponse::read(&reply.as_bytes()[4..]).unwrap();
        assert_eq!(
            (
                old.timeout_ms,
                old.session_id,
                &old.passwd[..],
                old.read_only
            ),
            (4_000, 77, &b"secret"[..], false),
            "a server before 3.4 sends no read-only flag"
        );
        reply.bool(true);
        let ro = ConnectResponse::read(&reply.as_bytes()[4..]).unwrap();
        assert!(ro.read_only);
    }

    #[test]
    fn acls_round_trip_and_impossible_counts_are_refused() {
        let acls = vec![
            Acl::new(Perms::READ, "world", "anyone"),
            Acl::new(Perms::ALL, "digest", "bob:hash"),
        ];
        let mut w = Writer::frame();
        write_acls(&mut w, &acls);
        let bytes = w.finish_frame();
        let mut r = Reader::new(&bytes[4..]);
        assert_eq!(read_acls(&mut r).unwrap(), acls);
        assert!(r.is_empty());
        // Refused before reading entries: a negative count, or more entries
        // than the bytes left can hold (12 bytes at least each).
        let one_empty_entry = [1i32, 0, 0].map(i32::to_be_bytes).concat();
        for (count, rest) in [(-1i32, &[][..]), (i32::MAX, &[]), (2, &one_empty_entry)] {
            let mut body = count.to_be_bytes().to_vec();
            body.extend(rest);
            match read_acls(&mut Reader::new(&body)) {
                Err(Error::Marshalling(why)) => {
                    assert_eq!(why, "ACL vector longer than its record", "count {count}")
                }
                other => panic!("count {count}: {other:?}"),
            }
        }
        // None, and exactly enough bytes for one entry of empty strings.
        assert!(read_acls(&mut Reader::new(&0i32.to_be_bytes()))
            .unwrap()
            .is_empty());
        let mut body = 1i32.to_be_bytes().to_vec();
        body.extend(&one_empty_entry);
        assert_eq!(read_acls(&mut Reader::new(&body)).unwrap().len(), 1);
    }

    #[test]
    fn stat_fields_are_read_in_wire_order() {
        let mut w = Writer::frame();
        w.i64(1).i64(2).i64(3).i64(4).i32(5).i32(6).i32(7);
        w.i64(8).i32(9).i32(10).i64(11);
        let bytes = w.finish_frame();
        let stat = read_stat(&mut Reader::new(&bytes[4..])).unwrap();
        let got = (
            (stat.czxid, stat.mzxid, stat.ctime, stat.mtime),
            (stat.version, stat.cversion, stat.aversion),
            (stat.ephemeral_owner, stat.data_length, stat.num_children),
            stat.pzxid,
        );
        assert_eq!(got, ((1, 2, 3, 4), (5, 6, 7), (8, 9, 10), 11));

        let mut w = Writer::frame();
        w.i32(7).i64(-1).i32(-101);
        w.i32(3).i32(-1).string("/n");
        let bytes = w.finish_frame();
        let mut r = Reader::new(&bytes[4..]);
        let h = ReplyHeader::read(&mut r).unwrap();
        assert_eq!((h.xid, h.zxid, h.err), (7, -1, -101));
        let e = WatcherEvent::read(&mut r).unwrap();
        assert_eq!((e.event_type, e.path.as_str()), (3, "/n"));
    }
}
