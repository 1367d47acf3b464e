//! ZooKeeper operations as functions over one session: one request (or a
//! pipelined pair) each, with server paths, no retries and no namespace.
//! The client, its background work and the public builders sit on top.

use std::time::Instant;

use crate::acl::Acl;
use crate::error::{ErrorCode, Result};
use crate::paths;
use crate::types::{CreateMode, Stat};
use crate::wire::jute::{Reader, Writer};
use crate::wire::proto::{self, op};
use crate::wire::{WatchRegistration, WireSession};

/// A create request's op code, and what writes its body.
fn create_request<'a>(
    path: &'a str,
    data: &'a [u8],
    acl: &'a [Acl],
    mode: CreateMode,
) -> (i32, impl Fn(&mut Writer) + 'a) {
    // A TTL out of range was refused before (see `CreateMode::ttl_ms`).
    let ttl = mode.ttl_ms().ok().flatten();
    let opcode = match (mode, ttl) {
        (CreateMode::Container, _) => op::CREATE_CONTAINER,
        (_, Some(_)) => op::CREATE_TTL,
        _ => op::CREATE2,
    };
    let body = move |w: &mut Writer| {
        w.string(path).bytes(data);
        proto::write_acls(w, acl);
        w.i32(mode.flags());
        if let Some(ttl) = ttl {
            w.i64(ttl);
        }
    };
    (opcode, body)
}

/// The created node's path and stat from a create's reply.
fn created(path: &str, reply: Result<Vec<u8>>) -> Result<(String, Stat)> {
    let body = reply.map_err(|e| e.with_path(path))?;
    let mut r = Reader::new(&body);
    Ok((r.string()?, proto::read_stat(&mut r)?))
}

pub(crate) fn wire_create(
    s: &WireSession,
    path: &str,
    data: &[u8],
    acl: &[Acl],
    mode: CreateMode,
    deadline: Instant,
) -> Result<(String, Stat)> {
    let (opcode, body) = create_request(path, data, acl, mode);
    created(path, s.call(opcode, body, None, deadline))
}

/// [`wire_create`] with the parent's children listed in the same round trip
/// (the listing is taken just after the create). The listing is `None` if
/// it failed; the create's outcome stands either way.
pub(crate) fn wire_create_listing_parent(
    s: &WireSession,
    path: &str,
    data: &[u8],
    acl: &[Acl],
    mode: CreateMode,
    parent: &str,
    deadline: Instant,
) -> Result<(String, Stat, Option<Vec<String>>)> {
    let (opcode, body) = create_request(path, data, acl, mode);
    let list = |w: &mut Writer| {
        w.string(parent).bool(false);
    };
    let (create, listed) = s.call_pair((opcode, &body), (op::GET_CHILDREN, &list), deadline);
    let (name, stat) = created(path, create)?;
    let children = listed.ok().and_then(|b| Reader::new(&b).strings().ok());
    Ok((name, stat, children))
}

pub(crate) fn wire_delete(
    s: &WireSession,
    path: &str,
    version: Option<i32>,
    deadline: Instant,
) -> Result<()> {
    s.call(
        op::DELETE,
        |w| {
            w.string(path).i32(version.unwrap_or(-1));
        },
        None,
        deadline,
    )
    .map_err(|e| e.with_path(path))?;
    Ok(())
}

pub(crate) fn wire_exists(
    s: &WireSession,
    path: &str,
    watch: Option<WatchRegistration>,
    deadline: Instant,
) -> Result<Option<Stat>> {
    let watching = watch.is_some();
    match s.call(
        op::EXISTS,
        |w| {
            w.string(path).bool(watching);
        },
        watch,
        deadline,
    ) {
        Ok(body) => Ok(Some(proto::read_stat(&mut Reader::new(&body))?)),
        Err(e) if e.is(ErrorCode::NoNode) => Ok(None),
        Err(e) => Err(e.with_path(path)),
    }
}

pub(crate) fn wire_get_data(
    s: &WireSession,
    path: &str,
    watch: Option<WatchRegistration>,
    deadline: Instant,
) -> Result<(Vec<u8>, Stat)> {
    let watching = watch.is_some();
    let body = s
        .call(
            op::GET_DATA,
            |w| {
                w.string(path).bool(watching);
            },
            watch,
            deadline,
        )
        .map_err(|e| e.with_path(path))?;
    let mut r = Reader::new(&body);
    Ok((r.bytes()?, proto::read_stat(&mut r)?))
}

pub(crate) fn wire_set_data(
    s: &WireSession,
    path: &str,
    data: &[u8],
    version: Option<i32>,
    deadline: Instant,
) -> Result<Stat> {
    let body = s
        .call(
            op::SET_DATA,
            |w| {
                w.string(path).bytes(data).i32(version.unwrap_or(-1));
            },
            None,
            deadline,
        )
        .map_err(|e| e.with_path(path))?;
    proto::read_stat(&mut Reader::new(&body))
}

pub(crate) fn wire_children(
    s: &WireSession,
    path: &str,
    watch: Option<WatchRegistration>,
    deadline: Instant,
) -> Result<Vec<String>> {
    let watching = watch.is_some();
    let body = s
        .call(
            op::GET_CHILDREN,
            |w| {
                w.string(path).bool(watching);
            },
            watch,
            deadline,
        )
        .map_err(|e| e.with_path(path))?;
    Reader::new(&body).strings()
}

pub(crate) fn wire_sync(s: &WireSession, path: &str, deadline: Instant) -> Result<()> {
    s.call(
        op::SYNC,
        |w| {
            w.string(path);
        },
        None,
        deadline,
    )
    .map_err(|e| e.with_path(path))?;
    Ok(())
}

/// Creates each node of `nodes` that does not exist yet, in order, with
/// the ACL `acl_for` gives its server path; NodeExists counts as done.
pub(crate) fn create_missing<'a>(
    s: &WireSession,
    nodes: impl IntoIterator<Item = &'a str>,
    mode: CreateMode,
    acl_for: &dyn Fn(&str) -> Vec<Acl>,
    deadline: Instant,
) -> Result<()> {
    for node in nodes {
        match wire_create(s, node, &[], &acl_for(node), mode, deadline) {
            Ok(_) => {}
            Err(e) if e.is(ErrorCode::NodeExists) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The ancestors of a server path, outermost first (`/a`, `/a/b` for `/a/b/c`).
pub(crate) fn ancestors(server_path: &str) -> impl Iterator<Item = &str> {
    server_path
        .match_indices('/')
        .skip(1)
        .map(move |(end, _)| &server_path[..end])
}

/// A server path's parent and name.
pub(crate) fn split_parent(server_path: &str) -> (&str, &str) {
    match server_path.rfind('/') {
        Some(0) => ("/", &server_path[1..]),
        Some(i) => (&server_path[..i], &server_path[i + 1..]),
        None => ("/", server_path),
    }
}

/// The child of `parent` named with a protected-mode `prefix`, if any.
pub(crate) fn find_protected(
    s: &WireSession,
    parent: &str,
    prefix: &str,
    deadline: Instant,
) -> Result<Option<(String, Stat)>> {
    let children = match wire_children(s, parent, None, deadline) {
        Err(e) if e.is(ErrorCode::NoNode) => return Ok(None),
        other => other?,
    };
    let Some(name) = children.into_iter().find(|c| c.starts_with(prefix)) else {
        return Ok(None);
    };
    let path = paths::make_path(parent, &name);
    log::debug!("protected create found its node {path} after a lost reply");
    match wire_exists(s, &path, None, deadline)? {
        Some(stat) => Ok(Some((path, stat))),
        None => Ok(None),
    }
}

/// Deletes every descendant of `path` (not `path` itself).
pub(crate) fn delete_children(s: &WireSession, path: &str, deadline: Instant) -> Result<()> {
    let children = match wire_children(s, path, None, deadline) {
        Err(e) if e.is(ErrorCode::NoNode) => return Ok(()),
        other => other?,
    };
    for child in children {
        let child = paths::make_path(path, &child);
        delete_children(s, &child, deadline)?;
        match wire_delete(s, &child, None, deadline) {
            Err(e) if e.is(ErrorCode::NoNode) => {}
            other => other?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_splits_into_its_parent_and_name() {
        assert_eq!(
            split_parent("/locks/orders/_c_x-lock-1"),
            ("/locks/orders", "_c_x-lock-1")
        );
        assert_eq!(split_parent("/top"), ("/", "top"));
        let nested: Vec<&str> = ancestors("/a/b/c").collect();
        assert_eq!(nested, ["/a", "/a/b"]);
    }
}
