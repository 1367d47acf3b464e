//! Access control lists and the provider that picks one for each new node.

use std::fmt;

/// ZooKeeper permission bits (`ZooDefs.Perms`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Perms(u32);

impl Perms {
    /// Read data and list children.
    pub const READ: Perms = Perms(1);
    /// Set data.
    pub const WRITE: Perms = Perms(2);
    /// Create children.
    pub const CREATE: Perms = Perms(4);
    /// Delete children.
    pub const DELETE: Perms = Perms(8);
    /// Set the ACL.
    pub const ADMIN: Perms = Perms(16);
    /// Every permission.
    pub const ALL: Perms = Perms(31);

    /// Permissions from raw bits (ZooKeeper's `ZooDefs.Perms` values).
    pub fn from_bits(bits: u32) -> Perms {
        Perms(bits)
    }

    /// The raw bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether every bit of `other` is set here.
    pub fn contains(self, other: Perms) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Perms {
    type Output = Perms;
    fn bitor(self, rhs: Perms) -> Perms {
        Perms(self.0 | rhs.0)
    }
}

impl fmt::Debug for Perms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Perms::READ, 'r'),
            (Perms::WRITE, 'w'),
            (Perms::CREATE, 'c'),
            (Perms::DELETE, 'd'),
            (Perms::ADMIN, 'a'),
        ];
        let s: String = names
            .iter()
            .filter(|(p, _)| self.contains(*p))
            .map(|(_, c)| *c)
            .collect();
        write!(f, "Perms({s})")
    }
}

/// An identity in a scheme: `world:anyone`, `digest:user:hash`, `auth:`, `ip:127.0.0.1`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Id {
    /// The scheme.
    pub scheme: String,
    /// The identity within the scheme.
    pub id: String,
}

/// One ACL entry: permissions granted to an identity.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Acl {
    /// What is granted.
    pub perms: Perms,
    /// To whom.
    pub id: Id,
}

impl Acl {
    /// An entry from its parts.
    pub fn new(perms: Perms, scheme: &str, id: &str) -> Acl {
        Acl {
            perms,
            id: Id {
                scheme: scheme.into(),
                id: id.into(),
            },
        }
    }

    /// `OPEN_ACL_UNSAFE`: everyone may do everything.
    pub fn open_unsafe() -> Vec<Acl> {
        vec![Acl::new(Perms::ALL, "world", "anyone")]
    }

    /// `CREATOR_ALL_ACL`: everything for the authenticated creator.
    pub fn creator_all() -> Vec<Acl> {
        vec![Acl::new(Perms::ALL, "auth", "")]
    }

    /// `READ_ACL_UNSAFE`: everyone may read.
    pub fn read_unsafe() -> Vec<Acl> {
        vec![Acl::new(Perms::READ, "world", "anyone")]
    }
}

/// Chooses the ACL of each node the client creates (Curator's `ACLProvider`).
pub trait AclProvider: Send + Sync {
    /// The ACL for nodes with no specific rule.
    fn default_acl(&self) -> Vec<Acl>;
    /// The ACL for a node at `path` (namespace-relative).
    fn acl_for_path(&self, path: &str) -> Vec<Acl> {
        let _ = path;
        self.default_acl()
    }
}

/// Gives every node `OPEN_ACL_UNSAFE`, as Curator's default provider does.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultAclProvider;

impl AclProvider for DefaultAclProvider {
    fn default_acl(&self) -> Vec<Acl> {
        Acl::open_unsafe()
    }
}

/// Gives every node the same fixed ACL.
#[derive(Clone, Debug)]
pub struct FixedAclProvider(pub Vec<Acl>);

impl AclProvider for FixedAclProvider {
    fn default_acl(&self) -> Vec<Acl> {
        self.0.clone()
    }
}
