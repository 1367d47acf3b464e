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
