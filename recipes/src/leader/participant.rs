//! Who takes part in an election, read from the election's nodes (Curator's
//! `Participant`), shared by [`crate::LeaderLatch`] and
//! [`crate::LeaderSelector`].

use latchkey_framework::{paths, Client, ErrorCode, Result};

use crate::leader::leader_latch::LATCH_NAME;
use crate::locks::lock_internals::sort_children;
use crate::locks::mutex::LOCK_NAME;

/// One participant of an election: its id (the data of its node, as
/// UTF-8) and whether it leads (its node is first in the queue).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct Participant {
    /// The participant's id; empty for [`Participant::default`], which
    /// [`crate::LeaderLatch::leader`] returns when nobody takes part.
    pub id: String,
    /// Whether this participant is the leader.
    pub is_leader: bool,
}

impl Participant {
    /// A participant (Curator's `new Participant(id, isLeader)`).
    pub fn new(id: impl Into<String>, is_leader: bool) -> Participant {
        Participant {
            id: id.into(),
            is_leader,
        }
    }
}

/// The children of `path` in Curator's queue order for `lock_names`, as
/// full paths; none if the path does not exist.
pub(crate) fn participant_nodes(
    client: &Client,
    path: &str,
    lock_names: &[&str],
) -> Result<Vec<String>> {
    let mut children = match client.get_children(path) {
        Err(e) if e.is(ErrorCode::NoNode) => return Ok(Vec::new()),
        other => other?,
    };
    sort_children(&mut children, lock_names);
    Ok(children.iter().map(|c| paths::make_path(path, c)).collect())
}

/// Who leads the election at `path`, read without taking part in it: the
/// participant whose node is first in the queue, or `None` if nobody takes
/// part (the path has no participant nodes, or does not exist).
///
/// Curator's `LeaderLatch.getLeader()` and `LeaderSelector.getLeader()`
/// need a participant to ask; this reads the same nodes from any client.
/// `path` may be a [`crate::LeaderLatch`]'s path (`latch-` nodes) or a
/// [`crate::LeaderSelector`]'s (`lock-` nodes), Java's or Rust's; other
/// children of `path` are left out. As with
/// [`crate::LeaderLatch::leader`], this is ZooKeeper's view: the first node's
/// owner may not know yet that it leads (or, while its connection is
/// suspended, may have stopped leading).
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::leader_of;
///
/// match leader_of(client, "/services/indexer/leader")? {
///     Some(leader) => println!("{} leads", leader.id),
///     None => println!("nobody takes part"),
/// }
/// # Ok(()) }
/// ```
pub fn leader_of(client: &Client, path: &str) -> Result<Option<Participant>> {
    let names = [LATCH_NAME, LOCK_NAME];
    let mut nodes = participant_nodes(client, path, &names)?;
    nodes.retain(|node| {
        let name = node.rsplit('/').next().unwrap_or(node);
        names.iter().any(|n| name.contains(n))
    });
    let leader = leader(client, &nodes)?;
    Ok(leader.is_leader.then_some(leader))
}

/// The participants behind `nodes` (in queue order), the first that still
/// exists marked as leader; nodes gone meanwhile are left out.
pub(crate) fn participants(client: &Client, nodes: &[String]) -> Result<Vec<Participant>> {
    let mut out = Vec::with_capacity(nodes.len());
    for node in nodes {
        if let Some(id) = read_id(client, node)? {
            out.push(Participant {
                id,
                is_leader: out.is_empty(),
            });
        }
    }
    Ok(out)
}

/// The first participant behind `nodes` that still exists, as leader, or
/// [`Participant::default`] (empty id, not leader) if none does.
pub(crate) fn leader(client: &Client, nodes: &[String]) -> Result<Participant> {
    for node in nodes {
        if let Some(id) = read_id(client, node)? {
            return Ok(Participant {
                id,
                is_leader: true,
            });
        }
    }
    Ok(Participant::default())
}

fn read_id(client: &Client, node: &str) -> Result<Option<String>> {
    match client.get_data(node) {
        Ok((data, _)) => Ok(Some(String::from_utf8_lossy(&data).into_owned())),
        Err(e) if e.is(ErrorCode::NoNode) => Ok(None),
        Err(e) => Err(e),
    }
}
