//! ZooKeeper path rules and Curator's node naming.
//!
//! Pure string functions, no I/O:
//!
//! - **Validation**: [`validate_path`] applies ZooKeeper's own
//!   `PathUtils.validatePath` rules, [`validate_path_sequential`] the variant
//!   for sequential creates, [`validate_namespace`] Curator's namespace rule.
//! - **Building and taking apart**: [`make_path`], [`make_path_all`],
//!   [`get_node_from_path`], [`parent`], [`path_and_node`], [`split`]
//!   (Curator's `ZKPaths`).
//! - **Namespaces**: [`fix_for_namespace`] (and
//!   [`fix_for_namespace_sequential`]) and [`strip_namespace`].
//! - **Protected mode**: a protected create names its node
//!   `_c_<uuid>-<name>` so that, after a lost reply, the client can find the
//!   node it created ([`protected_path`], [`protected_uuid`],
//!   [`find_protected`], ...).
//! - **Lock-node order**: [`sort_children`] orders the children of a lock
//!   path by the sequence number after the lock name, as Curator's lock
//!   recipes do.
//!
//! The functions that build or take apart paths never panic and never
//! fail: given a path that [`validate_path`] refuses they still return
//! something, but only valid paths get documented results.
//!
//! ```
//! use latchkey_framework::paths;
//!
//! assert!(paths::validate_path("/locks/backup").is_ok());
//! assert!(paths::validate_path("/locks//backup").is_err());
//! assert_eq!(paths::make_path("/locks/", "/backup"), "/locks/backup");
//! assert_eq!(paths::fix_for_namespace(Some("app"), "/locks"), "/app/locks");
//!
//! let id = "2b1c6a4e-8f3d-4c2a-9b7e-1d5f0a3c9e21";
//! let node = paths::protected_path("/locks/backup/lock-", id);
//! assert_eq!(node, format!("/locks/backup/_c_{id}-lock-"));
//!
//! // The server appends a sequence number; the children sort by it.
//! let mut children = vec![
//!     format!("_c_{id}-lock-0000000012"),
//!     "_c_0c2e5a9f-1b7d-4e3a-8f6c-5d4b3a291807-lock-0000000011".to_string(),
//! ];
//! paths::sort_children(&mut children, "lock-");
//! assert!(children[0].ends_with("0000000011"));
//! assert_eq!(paths::protected_uuid(&children[1]), Some(id));
//! ```

use std::cmp::Ordering;
use std::fmt;

/// ZooKeeper's path separator.
pub const PATH_SEPARATOR: char = '/';

/// The first characters of a protected node's name (Curator's
/// `ProtectedUtils.PROTECTED_PREFIX`).
pub const PROTECTED_PREFIX: &str = "_c_";

/// The character between the protection id and the node name.
pub const PROTECTED_SEPARATOR: char = '-';

/// Length of a protected name's prefix: `_c_`, a 36-character UUID and `-`.
pub const PROTECTED_PREFIX_WITH_UUID_LEN: usize = 40;

/// Length of a UUID's canonical text (`8-4-4-4-12` hex digits).
const UUID_LEN: usize = 36;

/// Why a path (or namespace) is not valid.
///
/// Positions are byte offsets into the string that was checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PathErrorKind {
    /// The path is the empty string.
    Empty,
    /// The path does not start with `/`.
    NoLeadingSlash,
    /// The path ends with `/` and is not the root.
    TrailingSlash,
    /// Two `/` in a row: a node with an empty name.
    EmptyNodeName {
        /// Byte offset of the second `/`.
        at: usize,
    },
    /// A `.` or `..` segment.
    RelativePath {
        /// Byte offset of the segment's last `.`.
        at: usize,
    },
    /// A NUL character.
    NullChar {
        /// Byte offset of the character.
        at: usize,
    },
    /// A character ZooKeeper refuses: U+0001–U+001F, U+007F–U+009F,
    /// U+D800–U+F8FF, U+FFF0–U+FFFF, or any character above U+FFFF (Java
    /// sees those as surrogates, U+D800–U+DFFF).
    InvalidChar {
        /// Byte offset of the character.
        at: usize,
        /// The character.
        ch: char,
    },
    /// A namespace starts with `/` (Curator's namespaces are relative:
    /// `app`, `app/sub`).
    NamespaceLeadingSlash,
}

impl fmt::Display for PathErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PathErrorKind::Empty => write!(f, "path must not be empty"),
            PathErrorKind::NoLeadingSlash => write!(f, "path must start with /"),
            PathErrorKind::TrailingSlash => write!(f, "path must not end with /"),
            PathErrorKind::EmptyNodeName { at } => {
                write!(f, "empty node name (two / in a row) at byte {at}")
            }
            PathErrorKind::RelativePath { at } => {
                write!(f, "relative path segment (. or ..) at byte {at}")
            }
            PathErrorKind::NullChar { at } => write!(f, "null character at byte {at}"),
            PathErrorKind::InvalidChar { at, ch } => write!(
                f,
                "invalid character {ch:?} (U+{:04X}) at byte {at}",
                u32::from(ch)
            ),
            PathErrorKind::NamespaceLeadingSlash => {
                write!(f, "namespace must not start with /")
            }
        }
    }
}

/// A path (or namespace) that ZooKeeper or Curator would refuse, with the
/// reason.
///
/// `Display` shows both: `invalid path "/a//b": empty node name (two / in
/// a row) at byte 3`. To show the reason alone (say, next to the path
/// elsewhere) display [`kind`](Self::kind).
///
/// ```
/// use latchkey_framework::paths::{validate_path, PathErrorKind};
///
/// let err = validate_path("/a//b").unwrap_err();
/// assert_eq!(err.path(), "/a//b");
/// assert_eq!(*err.kind(), PathErrorKind::EmptyNodeName { at: 3 });
/// assert!(err.to_string().contains("/a//b"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PathError {
    path: String,
    kind: PathErrorKind,
}

impl PathError {
    fn new(path: &str, kind: PathErrorKind) -> Self {
        PathError {
            path: path.to_owned(),
            kind,
        }
    }

    /// The path (or namespace) as given.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Why it is invalid.
    pub fn kind(&self) -> &PathErrorKind {
        &self.kind
    }
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid path {:?}: {}", self.path, self.kind)
    }
}

impl std::error::Error for PathError {}

/// Checks a path against ZooKeeper's rules (`PathUtils.validatePath`).
///
/// A valid path starts with `/`; does not end with `/` unless it is the
/// root `/`; has no empty segments (`//`), no `.` or `..` segments, no NUL
/// and none of the characters U+0001–U+001F, U+007F–U+009F, U+D800–U+F8FF,
/// U+FFF0–U+FFFF or above U+FFFF. As in ZooKeeper the first problem from
/// the left is reported, after the checks for emptiness, the leading `/`
/// and a trailing `/`.
///
/// # Errors
///
/// A [`PathError`] naming the path and the first rule it breaks.
///
/// ```
/// use latchkey_framework::paths::validate_path;
///
/// assert!(validate_path("/").is_ok());
/// assert!(validate_path("/app/.config/lock").is_ok());
/// for bad in ["", "app", "/app/", "/app//lock", "/app/../x", "/a\u{7}b", "/😀"] {
///     assert!(validate_path(bad).is_err(), "{bad:?}");
/// }
/// ```
pub fn validate_path(path: &str) -> Result<(), PathError> {
    check_path(path).map_err(|kind| PathError::new(path, kind))
}

/// Checks a path for a sequential create, which may end with `/` (the
/// server then names the node with the sequence number alone).
///
/// ZooKeeper checks `path + "1"`, so the root `/` and a last segment of `.`
/// or `..` are allowed here too (`/a/.` becomes `/a/.0000000001`).
///
/// # Errors
///
/// A [`PathError`] naming `path` (without the `1`) and the first rule that
/// `path + "1"` breaks.
///
/// ```
/// use latchkey_framework::paths::{validate_path, validate_path_sequential};
///
/// assert!(validate_path("/queue/").is_err());
/// assert!(validate_path_sequential("/queue/").is_ok());
/// assert!(validate_path_sequential("/queue//").is_err());
/// ```
pub fn validate_path_sequential(path: &str) -> Result<(), PathError> {
    let mut probe = String::with_capacity(path.len() + 1);
    probe.push_str(path);
    probe.push('1');
    check_path(&probe).map_err(|kind| PathError::new(path, kind))
}

/// Checks a namespace the way Curator does: `"/" + namespace` must be a
/// valid path.
///
/// A namespace is relative (`app`, `app/sub`); the empty namespace is
/// allowed and means none. Positions in the error are byte offsets into
/// `namespace`.
///
/// # Errors
///
/// A [`PathError`] naming the namespace: [`PathErrorKind::NamespaceLeadingSlash`]
/// for a leading `/`, otherwise the first path rule broken.
///
/// ```
/// use latchkey_framework::paths::validate_namespace;
///
/// assert!(validate_namespace("app").is_ok());
/// assert!(validate_namespace("app/sub").is_ok());
/// assert!(validate_namespace("/app").is_err());
/// assert!(validate_namespace("app/").is_err());
/// ```
pub fn validate_namespace(namespace: &str) -> Result<(), PathError> {
    if namespace.starts_with(PATH_SEPARATOR) {
        return Err(PathError::new(
            namespace,
            PathErrorKind::NamespaceLeadingSlash,
        ));
    }
    let mut probe = String::with_capacity(namespace.len() + 1);
    probe.push(PATH_SEPARATOR);
    probe.push_str(namespace);
    check_path(&probe).map_err(|kind| PathError::new(namespace, shift_back(kind)))
}

/// Moves an error position from `"/" + s` back to `s`.
fn shift_back(kind: PathErrorKind) -> PathErrorKind {
    let back = |at: usize| at.saturating_sub(1);
    match kind {
        PathErrorKind::EmptyNodeName { at } => PathErrorKind::EmptyNodeName { at: back(at) },
        PathErrorKind::RelativePath { at } => PathErrorKind::RelativePath { at: back(at) },
        PathErrorKind::NullChar { at } => PathErrorKind::NullChar { at: back(at) },
        PathErrorKind::InvalidChar { at, ch } => PathErrorKind::InvalidChar { at: back(at), ch },
        other => other,
    }
}

/// ZooKeeper's character blacklist. Rust strings hold no lone surrogates,
/// but every character above U+FFFF is a surrogate pair in Java, whose
/// first half ZooKeeper refuses.
fn is_invalid_char(c: char) -> bool {
    let u = u32::from(c);
    (0x01..=0x1F).contains(&u)
        || (0x7F..=0x9F).contains(&u)
        || (0xD800..=0xF8FF).contains(&u)
        || u >= 0xFFF0
}

fn check_path(path: &str) -> Result<(), PathErrorKind> {
    if path.is_empty() {
        return Err(PathErrorKind::Empty);
    }
    if !path.starts_with(PATH_SEPARATOR) {
        return Err(PathErrorKind::NoLeadingSlash);
    }
    if path.len() == 1 {
        return Ok(());
    }
    if path.ends_with(PATH_SEPARATOR) {
        return Err(PathErrorKind::TrailingSlash);
    }
    let bytes = path.as_bytes();
    let mut prev = PATH_SEPARATOR;
    for (at, c) in path.char_indices().skip(1) {
        if c == '\0' {
            return Err(PathErrorKind::NullChar { at });
        }
        if c == PATH_SEPARATOR && prev == PATH_SEPARATOR {
            return Err(PathErrorKind::EmptyNodeName { at });
        }
        if c == '.' {
            // Both '.' and '/' are ASCII, so neighbouring bytes tell whether
            // this dot ends a "." or ".." segment.
            let segment_ends = matches!(bytes.get(at + 1), None | Some(b'/'));
            let segment_starts = match prev {
                '/' => true,
                '.' => at.checked_sub(2).and_then(|i| bytes.get(i)) == Some(&b'/'),
                _ => false,
            };
            if segment_starts && segment_ends {
                return Err(PathErrorKind::RelativePath { at });
            }
        } else if is_invalid_char(c) {
            return Err(PathErrorKind::InvalidChar { at, ch: c });
        }
        prev = c;
    }
    Ok(())
}

/// Joins a parent path and a child with exactly one `/`; Curator's
/// `ZKPaths.makePath`.
///
/// A missing leading `/` on the parent is added; one trailing `/` of the
/// parent and one leading and one trailing `/` of the child are dropped.
/// An empty child (or `/`) gives the parent alone; all empty gives `/`.
///
/// ```
/// use latchkey_framework::paths::make_path;
///
/// assert_eq!(make_path("/foo", "bar"), "/foo/bar");
/// assert_eq!(make_path("foo", "/bar/"), "/foo/bar");
/// assert_eq!(make_path("/", "bar"), "/bar");
/// assert_eq!(make_path("/foo/", ""), "/foo");
/// assert_eq!(make_path("", ""), "/");
/// ```
pub fn make_path(parent: &str, child: &str) -> String {
    let mut out = String::with_capacity(parent.len() + child.len() + 2);
    join_path(&mut out, parent, child);
    out
}

/// Joins a parent path and several children, each as by [`make_path`]
/// (Curator's `ZKPaths.makePath(parent, first, rest...)`); empty children
/// are skipped.
///
/// ```
/// use latchkey_framework::paths::make_path_all;
///
/// assert_eq!(make_path_all("foo", &["bar", "baz"]), "/foo/bar/baz");
/// assert_eq!(make_path_all("/foo/", &["/bar/", "", "/baz/"]), "/foo/bar/baz");
/// assert_eq!(make_path_all("/foo", &[]), "/foo");
/// ```
pub fn make_path_all(parent: &str, children: &[&str]) -> String {
    let capacity = parent.len() + 2 + children.iter().map(|c| c.len() + 1).sum::<usize>();
    let mut out = String::with_capacity(capacity);
    let mut rest = children.iter();
    join_path(&mut out, parent, rest.next().copied().unwrap_or(""));
    for child in rest {
        join_path(&mut out, "", child);
    }
    out
}

fn join_path(out: &mut String, parent: &str, child: &str) {
    if !parent.is_empty() {
        if !parent.starts_with(PATH_SEPARATOR) {
            out.push(PATH_SEPARATOR);
        }
        out.push_str(parent.strip_suffix(PATH_SEPARATOR).unwrap_or(parent));
    }
    if child.is_empty() || child == "/" {
        if out.is_empty() {
            out.push(PATH_SEPARATOR);
        }
        return;
    }
    out.push(PATH_SEPARATOR);
    let child = child.strip_prefix(PATH_SEPARATOR).unwrap_or(child);
    out.push_str(child.strip_suffix(PATH_SEPARATOR).unwrap_or(child));
}

/// The last segment of a path: `/one/two/three` gives `three`, the root
/// gives `""`, a string without `/` is returned whole; Curator's
/// `ZKPaths.getNodeFromPath`.
///
/// ```
/// use latchkey_framework::paths::get_node_from_path;
///
/// assert_eq!(get_node_from_path("/one/two/three"), "three");
/// assert_eq!(get_node_from_path("/"), "");
/// ```
pub fn get_node_from_path(path: &str) -> &str {
    path.rsplit_once(PATH_SEPARATOR)
        .map_or(path, |(_, node)| node)
}

/// A path split into its parent and its last segment; Curator's
/// `ZKPaths.getPathAndNode`.
///
/// `/one/two` gives `("/one", "two")`, `/one` gives `("/", "one")` and the
/// root gives `("/", "")`. A string without `/` (not a valid path) gives
/// `("", path)`.
///
/// ```
/// use latchkey_framework::paths::path_and_node;
///
/// assert_eq!(path_and_node("/one/two/three"), ("/one/two", "three"));
/// assert_eq!(path_and_node("/one"), ("/", "one"));
/// ```
pub fn path_and_node(path: &str) -> (&str, &str) {
    match path.rsplit_once(PATH_SEPARATOR) {
        None => ("", path),
        Some(("", node)) => ("/", node),
        Some((parent, node)) => (parent, node),
    }
}

/// The parent of a path, or `None` for the root (and for a string without
/// `/`).
///
/// ```
/// use latchkey_framework::paths::parent;
///
/// assert_eq!(parent("/one/two"), Some("/one"));
/// assert_eq!(parent("/one"), Some("/"));
/// assert_eq!(parent("/"), None);
/// ```
pub fn parent(path: &str) -> Option<&str> {
    if path == "/" || !path.contains(PATH_SEPARATOR) {
        return None;
    }
    Some(path_and_node(path).0)
}

/// The segments of a path without the slashes; the root gives none;
/// Curator's `ZKPaths.split`.
///
/// ```
/// use latchkey_framework::paths::split;
///
/// assert_eq!(split("/test/one/two"), ["test", "one", "two"]);
/// assert!(split("/").is_empty());
/// ```
pub fn split(path: &str) -> Vec<&str> {
    path.split(PATH_SEPARATOR)
        .filter(|segment| !segment.is_empty())
        .collect()
}

/// The server path for a client path under `namespace`; Curator's
/// `ZKPaths.fixForNamespace` (without its validation: check `path` with
/// [`validate_path`] or [`validate_path_sequential`], and the namespace
/// with [`validate_namespace`], first).
///
/// The namespace is joined as by [`make_path`], except that a trailing `/`
/// on a path other than the root is kept: such a path is only valid for a
/// sequential create, and `/queue/` must stay "a child of `/queue`"
/// (Curator drops the slash and would create `/app/queue0000000001`). For
/// a sequential create at the root itself use
/// [`fix_for_namespace_sequential`].
///
/// ```
/// use latchkey_framework::paths::fix_for_namespace;
///
/// assert_eq!(fix_for_namespace(Some("app"), "/a"), "/app/a");
/// assert_eq!(fix_for_namespace(Some("app/sub"), "/"), "/app/sub");
/// assert_eq!(fix_for_namespace(Some("app"), "/queue/"), "/app/queue/");
/// assert_eq!(fix_for_namespace(None, "/a"), "/a");
/// ```
pub fn fix_for_namespace(namespace: Option<&str>, path: &str) -> String {
    match namespace {
        Some(namespace) => {
            let mut server_path = make_path(namespace, path);
            if path.len() > 1 && path.ends_with(PATH_SEPARATOR) && server_path != "/" {
                server_path.push(PATH_SEPARATOR);
            }
            server_path
        }
        None => path.to_owned(),
    }
}

/// [`fix_for_namespace`] for the path of a sequential create: a path
/// ending in `/`, the root included, keeps its trailing `/`, so that `/`
/// under namespace `app` becomes `/app/` (and the server creates
/// `/app/0000000001`, as it would create `/0000000001` without a
/// namespace).
///
/// ```
/// use latchkey_framework::paths::fix_for_namespace_sequential;
///
/// assert_eq!(fix_for_namespace_sequential(Some("app"), "/"), "/app/");
/// assert_eq!(fix_for_namespace_sequential(Some("app"), "/q/"), "/app/q/");
/// assert_eq!(fix_for_namespace_sequential(Some("app"), "/q/job-"), "/app/q/job-");
/// assert_eq!(fix_for_namespace_sequential(None, "/"), "/");
/// ```
pub fn fix_for_namespace_sequential(namespace: Option<&str>, path: &str) -> String {
    let mut server_path = fix_for_namespace(namespace, path);
    if path.ends_with(PATH_SEPARATOR) && !server_path.ends_with(PATH_SEPARATOR) {
        server_path.push(PATH_SEPARATOR);
    }
    server_path
}

/// The client path for a server path: the inverse of
/// [`fix_for_namespace`] (Curator's `NamespaceImpl.unfixForNamespace`).
///
/// The namespace node itself maps to `/`. A path outside the namespace is
/// returned unchanged. Unlike Curator, which tests a plain string prefix,
/// the namespace must match whole segments: under namespace `app` the path
/// `/application/x` stays as it is instead of becoming `lication/x`.
///
/// ```
/// use latchkey_framework::paths::strip_namespace;
///
/// assert_eq!(strip_namespace(Some("app"), "/app/a"), "/a");
/// assert_eq!(strip_namespace(Some("app"), "/app"), "/");
/// assert_eq!(strip_namespace(Some("app"), "/other"), "/other");
/// assert_eq!(strip_namespace(None, "/app/a"), "/app/a");
/// ```
pub fn strip_namespace(namespace: Option<&str>, server_path: &str) -> String {
    let Some(namespace) = namespace else {
        return server_path.to_owned();
    };
    let namespace_path = make_path(namespace, "");
    if namespace_path == "/" {
        return server_path.to_owned();
    }
    match server_path.strip_prefix(namespace_path.as_str()) {
        Some("") => "/".to_owned(),
        Some(rest) if rest.starts_with(PATH_SEPARATOR) => rest.to_owned(),
        _ => server_path.to_owned(),
    }
}

/// A new protection id: a random (version 4) UUID in lowercase hyphenated
/// form, 36 characters, as Java's `UUID.randomUUID().toString()`.
///
/// ```
/// let id = latchkey_framework::paths::new_protection_id();
/// assert_eq!(id.len(), 36);
/// ```
pub fn new_protection_id() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

/// The prefix of every node a protected create with id `uuid` makes:
/// `_c_<uuid>-` (Curator's `ProtectedUtils.getProtectedPrefix`). After a
/// lost reply, the child that starts with it is ours.
///
/// ```
/// use latchkey_framework::paths::protected_prefix;
///
/// assert_eq!(protected_prefix("0f2e"), "_c_0f2e-");
/// ```
pub fn protected_prefix(uuid: &str) -> String {
    let mut prefix = String::with_capacity(PROTECTED_PREFIX.len() + uuid.len() + 1);
    prefix.push_str(PROTECTED_PREFIX);
    prefix.push_str(uuid);
    prefix.push(PROTECTED_SEPARATOR);
    prefix
}

/// A node name in protected form, `_c_<uuid>-<node_name>` (Curator's
/// `ProtectedUtils.toProtectedZNode`).
///
/// ```
/// use latchkey_framework::paths::protected_name;
///
/// let id = "53345f98-9423-4e0c-a7b5-9f819e3ec2e1";
/// assert_eq!(protected_name("lock-", id), format!("_c_{id}-lock-"));
/// ```
pub fn protected_name(node_name: &str, uuid: &str) -> String {
    let mut name = protected_prefix(uuid);
    name.push_str(node_name);
    name
}

/// A path with its last segment in protected form (Curator's
/// `ProtectedUtils.toProtectedZNodePath`): `/root/path1` becomes
/// `/root/_c_<uuid>-path1`.
///
/// A sequential path ending in `/` gets a last segment of the prefix alone:
/// `/queue/` becomes `/queue/_c_<uuid>-`.
///
/// ```
/// use latchkey_framework::paths::protected_path;
///
/// let id = "53345f98-9423-4e0c-a7b5-9f819e3ec2e1";
/// assert_eq!(protected_path("/root/path1", id), format!("/root/_c_{id}-path1"));
/// assert_eq!(protected_path("/top", id), format!("/_c_{id}-top"));
/// ```
pub fn protected_path(path: &str, uuid: &str) -> String {
    let (parent, node) = path_and_node(path);
    make_path(parent, &protected_name(node, uuid))
}

/// Whether `s` is a UUID in canonical text form: 36 characters, hex digits
/// (either case) with `-` at positions 8, 13, 18 and 23.
fn is_canonical_uuid(s: &str) -> bool {
    s.len() == UUID_LEN
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// The protection id in a protected node name, if the name is one
/// (Curator's `ProtectedUtils.extractProtectedId`).
///
/// As in Curator, a name is protected when it is longer than 40
/// characters, starts with `_c_`, has `-` at position 39 and a UUID in
/// between. The name after the prefix must not be empty, so the sequential
/// `/queue/` form (whose node is `_c_<uuid>-0000000001`) still counts.
///
/// ```
/// use latchkey_framework::paths::protected_uuid;
///
/// let id = "53345f98-9423-4e0c-a7b5-9f819e3ec2e1";
/// assert_eq!(protected_uuid(&format!("_c_{id}-lock-0000000007")), Some(id));
/// assert_eq!(protected_uuid("lock-0000000007"), None);
/// ```
pub fn protected_uuid(name: &str) -> Option<&str> {
    if name.len() <= PROTECTED_PREFIX_WITH_UUID_LEN || !name.starts_with(PROTECTED_PREFIX) {
        return None;
    }
    let separator = name.as_bytes().get(PROTECTED_PREFIX_WITH_UUID_LEN - 1)?;
    if *separator != PROTECTED_SEPARATOR as u8 {
        return None;
    }
    let id = name.get(PROTECTED_PREFIX.len()..PROTECTED_PREFIX_WITH_UUID_LEN - 1)?;
    is_canonical_uuid(id).then_some(id)
}

/// Whether a node name is in protected form (Curator's
/// `ProtectedUtils.isProtectedZNode`); see [`protected_uuid`].
///
/// ```
/// use latchkey_framework::paths::is_protected;
///
/// assert!(is_protected("_c_53345f98-9423-4e0c-a7b5-9f819e3ec2e1-lock-0000000007"));
/// assert!(!is_protected("_c_not-a-uuid-lock-0000000007"));
/// ```
pub fn is_protected(name: &str) -> bool {
    protected_uuid(name).is_some()
}

/// A node name without its protected prefix, or unchanged when it is not
/// protected (Curator's `ProtectedUtils.normalize`).
///
/// ```
/// use latchkey_framework::paths::strip_protection;
///
/// let name = "_c_53345f98-9423-4e0c-a7b5-9f819e3ec2e1-lock-0000000007";
/// assert_eq!(strip_protection(name), "lock-0000000007");
/// assert_eq!(strip_protection("lock-0000000007"), "lock-0000000007");
/// ```
pub fn strip_protection(name: &str) -> &str {
    if is_protected(name) {
        name.get(PROTECTED_PREFIX_WITH_UUID_LEN..).unwrap_or(name)
    } else {
        name
    }
}

/// The first child made by the protected create with id `uuid`: the first
/// that starts with `_c_<uuid>-` (Curator's `CreateBuilderImpl.findNode`).
///
/// ```
/// use latchkey_framework::paths::find_protected;
///
/// let id = "53345f98-9423-4e0c-a7b5-9f819e3ec2e1";
/// let children = vec![
///     "lock-0000000001".to_string(),
///     format!("_c_{id}-lock-0000000002"),
/// ];
/// assert_eq!(find_protected(&children, id), Some(children[1].as_str()));
/// assert_eq!(find_protected(&children, "another"), None);
/// ```
pub fn find_protected<'a, S: AsRef<str>>(children: &'a [S], uuid: &str) -> Option<&'a str> {
    let prefix = protected_prefix(uuid);
    children
        .iter()
        .map(AsRef::as_ref)
        .find(|child| child.starts_with(prefix.as_str()))
}

/// The part of a lock node's name that Curator sorts on: what follows the
/// last occurrence of `lock_name`, or the whole name when `lock_name` does
/// not occur (Curator's `StandardLockInternalsDriver.fixForSorting`).
///
/// ```
/// use latchkey_framework::paths::fix_for_sorting;
///
/// let name = "_c_53345f98-9423-4e0c-a7b5-9f819e3ec2e1-lock-0000000007";
/// assert_eq!(fix_for_sorting(name, "lock-"), "0000000007");
/// assert_eq!(fix_for_sorting("0000000007", "lock-"), "0000000007");
/// ```
pub fn fix_for_sorting<'a>(name: &'a str, lock_name: &str) -> &'a str {
    match name.rfind(lock_name) {
        Some(i) => name.get(i + lock_name.len()..).unwrap_or(""),
        None => name,
    }
}

/// Parses a sequence suffix: an optional `-` and one or more ASCII
/// digits, as ZooKeeper's `%010d` writes its signed 32-bit counter
/// (`0000000007`, and after wrap-around `-2147483648` or `-000000005`).
fn parse_sequence(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The sequence number after the last occurrence of `lock_name` (or of
/// the whole name when `lock_name` does not occur), as a signed integer.
///
/// `None` when that part is not an optionally negative decimal number that
/// fits in an `i64`.
///
/// ```
/// use latchkey_framework::paths::sequence_after;
///
/// let name = "_c_53345f98-9423-4e0c-a7b5-9f819e3ec2e1-lock-0000000007";
/// assert_eq!(sequence_after(name, "lock-"), Some(7));
/// assert_eq!(sequence_after("lock--2147483648", "lock-"), Some(-2_147_483_648));
/// assert_eq!(sequence_after("lock-x", "lock-"), None);
/// ```
pub fn sequence_after(name: &str, lock_name: &str) -> Option<i64> {
    parse_sequence(fix_for_sorting(name, lock_name))
}

/// The sequence number of a node in a directory shared by several kinds
/// of lock node, such as the read/write lock's `__READ__` and `__WRIT__`.
///
/// Applies [`fix_for_sorting`] for each lock name in turn, as Curator's
/// read/write lock does (first `__READ__`, then `__WRIT__`). For real node
/// names, where a lock name occurs once, this is the number after whichever
/// lock name the node carries.
///
/// ```
/// use latchkey_framework::paths::sequence_after_any;
///
/// let names = ["__READ__", "__WRIT__"];
/// let id = "53345f98-9423-4e0c-a7b5-9f819e3ec2e1";
/// assert_eq!(sequence_after_any(&format!("_c_{id}-__READ__0000000004"), &names), Some(4));
/// assert_eq!(sequence_after_any(&format!("_c_{id}-__WRIT__0000000005"), &names), Some(5));
/// ```
pub fn sequence_after_any(name: &str, lock_names: &[&str]) -> Option<i64> {
    parse_sequence(fix_for_sorting_any(name, lock_names))
}

fn fix_for_sorting_any<'a>(name: &'a str, lock_names: &[&str]) -> &'a str {
    lock_names
        .iter()
        .fold(name, |rest, lock_name| fix_for_sorting(rest, lock_name))
}

/// Sorts the children of a lock path into queue order: by the sequence
/// number after the last occurrence of `lock_name`, compared as signed
/// integers (see [`sequence_after`]).
///
/// Ties are broken by the sorting suffix and then by the whole name, and
/// children without a sequence number come last in that same order, so the
/// result does not depend on the input order.
///
/// Curator compares the suffixes as strings. For ZooKeeper's 10-digit
/// non-negative suffixes that is the same order; after the server's
/// counter wraps to negative numbers it is not (as strings `-2147483647`
/// sorts before `-2147483648`), and the numeric order keeps those nodes in
/// creation order among themselves.
///
/// ```
/// use latchkey_framework::paths::sort_children;
///
/// let mut children = vec![
///     "lease-0000000010".to_string(),
///     "lease-0000000002".to_string(),
///     "lease-0000000009".to_string(),
/// ];
/// sort_children(&mut children, "lease-");
/// assert_eq!(children, ["lease-0000000002", "lease-0000000009", "lease-0000000010"]);
/// ```
pub fn sort_children(children: &mut [String], lock_name: &str) {
    sort_children_any(children, &[lock_name]);
}

/// Sorts the children of a path shared by several kinds of lock node (the
/// read/write lock's `__READ__` and `__WRIT__`) into queue order, with the
/// key of [`sequence_after_any`] and the tie-breaking of [`sort_children`].
///
/// ```
/// use latchkey_framework::paths::sort_children_any;
///
/// let mut children = vec![
///     "_c_53345f98-9423-4e0c-a7b5-9f819e3ec2e1-__WRIT__0000000002".to_string(),
///     "_c_0c2e5a9f-1b7d-4e3a-8f6c-5d4b3a291807-__READ__0000000001".to_string(),
/// ];
/// sort_children_any(&mut children, &["__READ__", "__WRIT__"]);
/// assert!(children[0].ends_with("__READ__0000000001"));
/// ```
pub fn sort_children_any(children: &mut [String], lock_names: &[&str]) {
    children.sort_by(|a, b| compare_lock_nodes(a, b, lock_names));
}

/// The queue-order comparison behind [`sort_children_any`].
fn compare_lock_nodes(a: &str, b: &str, lock_names: &[&str]) -> Ordering {
    sort_key(a, lock_names).cmp(&sort_key(b, lock_names))
}

/// `(no sequence?, sequence, suffix, name)`: numbered nodes first in
/// numeric order, then the rest; the strings make the order total.
fn sort_key<'a>(name: &'a str, lock_names: &[&str]) -> (bool, i64, &'a str, &'a str) {
    let suffix = fix_for_sorting_any(name, lock_names);
    match parse_sequence(suffix) {
        Some(sequence) => (false, sequence, suffix, name),
        None => (true, 0, suffix, name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "2b1c6a4e-8f3d-4c2a-9b7e-1d5f0a3c9e21";
    const ID2: &str = "0c2e5a9f-1b7d-4e3a-8f6c-5d4b3a291807";
    const ID3: &str = "f47ac10b-58cc-4372-a567-0e02b2c3d479";

    fn kind(path: &str) -> PathErrorKind {
        match validate_path(path) {
            Err(e) => *e.kind(),
            Ok(()) => panic!("{path:?} should be invalid"),
        }
    }

    /// ZooKeeper's PathUtils.validatePath, transcribed over UTF-16 code
    /// units the way Java sees the string; answers only valid or not.
    fn zookeeper_reference(path: &str) -> bool {
        let chars: Vec<u16> = path.encode_utf16().collect();
        let slash = u16::from(b'/');
        let dot = u16::from(b'.');
        if chars.is_empty() || chars[0] != slash {
            return false;
        }
        if chars.len() == 1 {
            return true;
        }
        if chars[chars.len() - 1] == slash {
            return false;
        }
        let mut lastc = slash;
        for i in 1..chars.len() {
            let c = chars[i];
            if c == 0 || (c == slash && lastc == slash) {
                return false;
            }
            if c == dot && lastc == dot {
                if chars[i - 2] == slash && (i + 1 == chars.len() || chars[i + 1] == slash) {
                    return false;
                }
            } else if c == dot {
                if chars[i - 1] == slash && (i + 1 == chars.len() || chars[i + 1] == slash) {
                    return false;
                }
            } else if (c > 0 && c <= 0x1f)
                || (0x7f..=0x9f).contains(&c)
                || (0xd800..=0xf8ff).contains(&c)
                || c >= 0xfff0
            {
                return false;
            }
            lastc = c;
        }
        true
    }

    /// A small deterministic generator of awkward strings.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 33
        }

        fn string(&mut self) -> String {
            const ALPHABET: &str = "///...abz09-_ \0\u{1}\u{1f}\u{20}\u{7e}\u{7f}\u{80}\u{9f}\u{a0}\
                éß日\u{d7ff}\u{e000}\u{f8ff}\u{f900}\u{ffef}\u{fff0}\u{fffd}\u{ffff}\u{10000}😀\u{10ffff}";
            const COMMON: &str = "//.ab-_é日";
            let alphabet: Vec<char> = ALPHABET.chars().collect();
            let common: Vec<char> = COMMON.chars().collect();
            // Mostly characters ZooKeeper accepts, so both outcomes occur.
            let mut out = String::new();
            if self.next() & 3 != 0 {
                out.push('/');
            }
            let len = self.next() % 12;
            for _ in 0..len {
                let pick = usize::try_from(self.next()).unwrap_or(0);
                let c = if self.next() & 7 == 0 {
                    alphabet[pick % alphabet.len()]
                } else {
                    common[pick % common.len()]
                };
                out.push(c);
            }
            out
        }
    }

    #[test]
    fn valid_paths() {
        for path in [
            "/",
            "/a",
            "/a/b/c",
            "/zookeeper",
            "/a.b",
            "/.a",
            "/a.",
            "/..a",
            "/a..",
            "/...",
            "/a/.../b",
            "/a/.b/..c",
            "/a b",
            "/-_~!@#$%^&*()",
            "/\u{20}",
            "/\u{7e}",
            "/\u{a0}",
            "/é/ß/日本",
            "/\u{d7ff}",
            "/\u{f900}",
            "/\u{ffef}",
            "/lock-0000000001",
            "/locks/_c_2b1c6a4e-8f3d-4c2a-9b7e-1d5f0a3c9e21-lock-0000000003",
        ] {
            assert_eq!(validate_path(path), Ok(()), "{path:?}");
            assert!(zookeeper_reference(path), "{path:?}");
        }
    }

    #[test]
    fn empty_and_leading_slash() {
        assert_eq!(kind(""), PathErrorKind::Empty);
        assert_eq!(kind("a"), PathErrorKind::NoLeadingSlash);
        assert_eq!(kind("a/b"), PathErrorKind::NoLeadingSlash);
        assert_eq!(kind(" /a"), PathErrorKind::NoLeadingSlash);
        assert_eq!(kind("\0"), PathErrorKind::NoLeadingSlash);
    }

    #[test]
    fn trailing_slash() {
        assert_eq!(kind("/a/"), PathErrorKind::TrailingSlash);
        assert_eq!(kind("//"), PathErrorKind::TrailingSlash);
        assert_eq!(kind("/a/b/"), PathErrorKind::TrailingSlash);
        // The trailing slash is checked before any character.
        assert_eq!(kind("/a\0/"), PathErrorKind::TrailingSlash);
    }

    #[test]
    fn empty_segments() {
        assert_eq!(kind("//a"), PathErrorKind::EmptyNodeName { at: 1 });
        assert_eq!(kind("/a//b"), PathErrorKind::EmptyNodeName { at: 3 });
        assert_eq!(kind("/a/b///c"), PathErrorKind::EmptyNodeName { at: 5 });
    }

    #[test]
    fn relative_segments() {
        assert_eq!(kind("/."), PathErrorKind::RelativePath { at: 1 });
        assert_eq!(kind("/.."), PathErrorKind::RelativePath { at: 2 });
        assert_eq!(kind("/./a"), PathErrorKind::RelativePath { at: 1 });
        assert_eq!(kind("/../a"), PathErrorKind::RelativePath { at: 2 });
        assert_eq!(kind("/a/."), PathErrorKind::RelativePath { at: 3 });
        assert_eq!(kind("/a/.."), PathErrorKind::RelativePath { at: 4 });
        assert_eq!(kind("/a/./b"), PathErrorKind::RelativePath { at: 3 });
        assert_eq!(kind("/a/../b"), PathErrorKind::RelativePath { at: 4 });
        assert_eq!(kind("/é/.."), PathErrorKind::RelativePath { at: 5 });
    }

    #[test]
    fn null_character() {
        assert_eq!(kind("/\0"), PathErrorKind::NullChar { at: 1 });
        assert_eq!(kind("/a\0b"), PathErrorKind::NullChar { at: 2 });
        // The first problem from the left wins.
        assert_eq!(kind("/\0//x"), PathErrorKind::NullChar { at: 1 });
        assert_eq!(kind("/a//\0"), PathErrorKind::EmptyNodeName { at: 3 });
    }

    #[test]
    fn invalid_character_ranges() {
        for ch in [
            '\u{1}',
            '\u{9}',
            '\n',
            '\u{1f}',
            '\u{7f}',
            '\u{80}',
            '\u{9f}',
            '\u{e000}',
            '\u{f8ff}',
            '\u{fff0}',
            '\u{fffd}',
            '\u{ffff}',
            '\u{10000}',
            '😀',
            '\u{10ffff}',
        ] {
            let path = format!("/a{ch}b");
            assert_eq!(
                kind(&path),
                PathErrorKind::InvalidChar { at: 2, ch },
                "{path:?}"
            );
            assert!(!zookeeper_reference(&path), "{path:?}");
        }
        // Boundaries just outside the ranges are fine.
        for ch in [
            '\u{20}', '\u{7e}', '\u{a0}', '\u{d7ff}', '\u{f900}', '\u{ffef}',
        ] {
            assert_eq!(validate_path(&format!("/a{ch}b")), Ok(()), "{ch:?}");
        }
        // Positions are byte offsets.
        assert_eq!(
            kind("/日\u{7}"),
            PathErrorKind::InvalidChar { at: 4, ch: '\u{7}' }
        );
    }

    #[test]
    fn error_messages_name_path_and_reason() {
        let err = validate_path("/a//b").expect_err("invalid");
        assert_eq!(err.path(), "/a//b");
        let shown = err.to_string();
        assert!(shown.contains("\"/a//b\""), "{shown}");
        assert!(shown.contains("empty node name"), "{shown}");
        assert!(!err.kind().to_string().contains("/a//b"));
        let err = validate_path("/a\u{1}").expect_err("invalid");
        assert!(err.to_string().contains("U+0001"), "{err}");
        let boxed: Box<dyn std::error::Error> = Box::new(err);
        assert!(boxed.to_string().starts_with("invalid path"));
        for k in [
            PathErrorKind::Empty,
            PathErrorKind::NoLeadingSlash,
            PathErrorKind::TrailingSlash,
            PathErrorKind::NullChar { at: 1 },
            PathErrorKind::RelativePath { at: 1 },
            PathErrorKind::NamespaceLeadingSlash,
        ] {
            assert!(!k.to_string().is_empty());
        }
    }

    #[test]
    fn sequential_paths_may_end_with_slash() {
        assert_eq!(validate_path_sequential("/a/"), Ok(()));
        assert_eq!(validate_path_sequential("/a/b-"), Ok(()));
        assert_eq!(validate_path_sequential("/"), Ok(()));
        // "." and ".." become ".1" and "..1".
        assert_eq!(validate_path_sequential("/a/."), Ok(()));
        assert_eq!(validate_path_sequential("/a/.."), Ok(()));
        let err = validate_path_sequential("/a//").expect_err("invalid");
        assert_eq!(*err.kind(), PathErrorKind::EmptyNodeName { at: 3 });
        assert_eq!(err.path(), "/a//");
        let err = validate_path_sequential("").expect_err("invalid");
        assert_eq!(*err.kind(), PathErrorKind::NoLeadingSlash);
        assert_eq!(err.path(), "");
        assert!(validate_path_sequential("/./").is_err());
        assert!(validate_path_sequential("a/").is_err());
        assert!(validate_path_sequential("/a\0/").is_err());
    }

    #[test]
    fn namespaces() {
        for ok in ["app", "app/sub", "a.b", "", "x/y/z"] {
            assert_eq!(validate_namespace(ok), Ok(()), "{ok:?}");
        }
        let e = |ns: &str| *validate_namespace(ns).expect_err(ns).kind();
        assert_eq!(e("/app"), PathErrorKind::NamespaceLeadingSlash);
        assert_eq!(e("/"), PathErrorKind::NamespaceLeadingSlash);
        assert_eq!(e("app/"), PathErrorKind::TrailingSlash);
        assert_eq!(e("app//x"), PathErrorKind::EmptyNodeName { at: 4 });
        assert_eq!(e("."), PathErrorKind::RelativePath { at: 0 });
        assert_eq!(e("app/.."), PathErrorKind::RelativePath { at: 5 });
        assert_eq!(
            e("a\u{1}"),
            PathErrorKind::InvalidChar { at: 1, ch: '\u{1}' }
        );
        assert_eq!(e("\0"), PathErrorKind::NullChar { at: 0 });
        assert_eq!(validate_namespace("/app").expect_err("bad").path(), "/app");
    }

    #[test]
    fn make_path_matches_curator_tests() {
        // Curator's TestZKPaths.testMakePath, with null as "".
        let cases = [
            ("", "/", "/"),
            ("", "", "/"),
            ("/", "", "/"),
            ("/", "/", "/"),
            ("foo", "", "/foo"),
            ("foo", "/", "/foo"),
            ("/foo", "", "/foo"),
            ("/foo", "/", "/foo"),
            ("", "bar", "/bar"),
            ("/", "bar", "/bar"),
            ("", "/bar", "/bar"),
            ("/", "/bar", "/bar"),
            ("foo", "bar", "/foo/bar"),
            ("/foo", "bar", "/foo/bar"),
            ("foo", "/bar", "/foo/bar"),
            ("/foo", "/bar", "/foo/bar"),
            ("/foo", "bar/", "/foo/bar"),
            ("/foo/", "/bar/", "/foo/bar"),
        ];
        for (parent, child, want) in cases {
            assert_eq!(make_path(parent, child), want, "{parent:?} + {child:?}");
        }
        assert_eq!(make_path_all("foo", &["bar", "baz"]), "/foo/bar/baz");
        assert_eq!(
            make_path_all("foo", &["bar", "baz", "qux"]),
            "/foo/bar/baz/qux"
        );
        assert_eq!(make_path_all("/foo", &["/bar", "/baz"]), "/foo/bar/baz");
        assert_eq!(make_path_all("/foo/", &["/bar/", "/baz/"]), "/foo/bar/baz");
        assert_eq!(make_path_all("foo", &["", ""]), "/foo");
        assert_eq!(make_path_all("foo", &["bar", ""]), "/foo/bar");
        assert_eq!(make_path_all("foo", &["", "baz"]), "/foo/baz");
        assert_eq!(make_path_all("", &[]), "/");
    }

    #[test]
    fn make_path_only_strips_one_slash() {
        // Curator removes a single separator at each end, no more.
        assert_eq!(make_path("//", "a"), "//a");
        assert_eq!(make_path("/a", "//"), "/a/");
        assert_eq!(make_path("/a", "b//"), "/a/b/");
        assert_eq!(make_path("/a", "b/c"), "/a/b/c");
        assert_eq!(make_path("/é", "日"), "/é/日");
    }

    #[test]
    fn split_matches_curator_tests() {
        assert!(split("/").is_empty());
        assert_eq!(split("/test"), ["test"]);
        assert_eq!(split("/test/one"), ["test", "one"]);
        assert_eq!(split("/test/one/two"), ["test", "one", "two"]);
        assert!(split("").is_empty());
    }

    #[test]
    fn node_parent_and_path_and_node() {
        assert_eq!(get_node_from_path("/one/two/three"), "three");
        assert_eq!(get_node_from_path("/one"), "one");
        assert_eq!(get_node_from_path("/"), "");
        assert_eq!(get_node_from_path("one"), "one");
        assert_eq!(get_node_from_path(""), "");
        assert_eq!(get_node_from_path("/one/"), "");

        assert_eq!(path_and_node("/one/two/three"), ("/one/two", "three"));
        assert_eq!(path_and_node("/one"), ("/", "one"));
        assert_eq!(path_and_node("/"), ("/", ""));
        assert_eq!(path_and_node("one"), ("", "one"));
        assert_eq!(path_and_node(""), ("", ""));

        assert_eq!(parent("/one/two/three"), Some("/one/two"));
        assert_eq!(parent("/one"), Some("/"));
        assert_eq!(parent("/"), None);
        assert_eq!(parent("one"), None);
        assert_eq!(parent(""), None);
    }

    #[test]
    fn namespace_fix_and_strip() {
        assert_eq!(fix_for_namespace(Some("app"), "/a"), "/app/a");
        assert_eq!(fix_for_namespace(Some("app"), "/a/b"), "/app/a/b");
        assert_eq!(fix_for_namespace(Some("app"), "/"), "/app");
        assert_eq!(fix_for_namespace(Some("app/sub"), "/x/y"), "/app/sub/x/y");
        assert_eq!(fix_for_namespace(None, "/a"), "/a");
        assert_eq!(fix_for_namespace(None, "/"), "/");
        assert_eq!(fix_for_namespace(Some(""), "/a"), "/a");
        // A sequential path's trailing slash keeps its meaning (Curator
        // would give "/app/q").
        assert_eq!(fix_for_namespace(Some("app"), "/q/"), "/app/q/");
        assert_eq!(fix_for_namespace(Some("app"), "/q/r/"), "/app/q/r/");
        assert_eq!(fix_for_namespace(None, "/q/"), "/q/");
        assert_eq!(fix_for_namespace(Some(""), "/q/"), "/q/");
        assert_eq!(fix_for_namespace_sequential(Some("app"), "/"), "/app/");
        assert_eq!(fix_for_namespace_sequential(Some("app"), "/q/"), "/app/q/");
        assert_eq!(fix_for_namespace_sequential(Some("app"), "/q"), "/app/q");
        assert_eq!(fix_for_namespace_sequential(Some(""), "/"), "/");
        assert_eq!(fix_for_namespace_sequential(None, "/q/"), "/q/");
        assert_eq!(strip_namespace(Some("app"), "/app/q/"), "/q/");
        assert_eq!(
            strip_namespace(Some("app"), "/app/0000000001"),
            "/0000000001"
        );

        assert_eq!(strip_namespace(Some("app"), "/app/a"), "/a");
        assert_eq!(strip_namespace(Some("app"), "/app/a/b"), "/a/b");
        assert_eq!(strip_namespace(Some("app"), "/app"), "/");
        assert_eq!(strip_namespace(Some("app/sub"), "/app/sub/x"), "/x");
        assert_eq!(strip_namespace(Some("app/sub"), "/app/sub"), "/");
        assert_eq!(strip_namespace(Some("app/sub"), "/app"), "/app");
        assert_eq!(strip_namespace(Some("app"), "/other/a"), "/other/a");
        // Whole segments only (Curator would give "lication/x").
        assert_eq!(
            strip_namespace(Some("app"), "/application/x"),
            "/application/x"
        );
        assert_eq!(strip_namespace(None, "/app/a"), "/app/a");
        assert_eq!(strip_namespace(Some(""), "/app/a"), "/app/a");
        assert_eq!(strip_namespace(Some("app"), ""), "");

        for ns in ["app", "app/sub"] {
            for path in ["/", "/a", "/a/b", "/app", "/_c_x-lock-0000000001"] {
                let server = fix_for_namespace(Some(ns), path);
                assert_eq!(strip_namespace(Some(ns), &server), path, "{ns} {path}");
            }
        }
    }

    #[test]
    fn protection_ids_look_like_java_uuids() {
        let a = new_protection_id();
        let b = new_protection_id();
        assert_ne!(a, b);
        for id in [&a, &b] {
            assert_eq!(id.len(), 36);
            assert!(is_canonical_uuid(id), "{id}");
            assert_eq!(id.to_lowercase(), *id);
            assert_eq!(id.as_bytes()[14], b'4', "version 4: {id}");
            assert!(
                matches!(id.as_bytes()[19], b'8' | b'9' | b'a' | b'b'),
                "{id}"
            );
        }
    }

    #[test]
    fn protected_names_and_paths() {
        assert_eq!(protected_prefix(ID), format!("_c_{ID}-"));
        assert_eq!(protected_prefix(ID).len(), PROTECTED_PREFIX_WITH_UUID_LEN);
        assert_eq!(protected_name("lock-", ID), format!("_c_{ID}-lock-"));
        assert_eq!(
            protected_path("/locks/mutex/lock-", ID),
            format!("/locks/mutex/_c_{ID}-lock-")
        );
        assert_eq!(protected_path("/top", ID), format!("/_c_{ID}-top"));
        // A sequential path ending in '/' gets the bare prefix.
        assert_eq!(protected_path("/queue/", ID), format!("/queue/_c_{ID}-"));
        assert_eq!(protected_path("/", ID), format!("/_c_{ID}-"));
        let created = format!("/locks/mutex/_c_{ID}-lock-0000000003");
        assert_eq!(
            parent(&protected_path("/locks/mutex/lock-", ID)),
            parent(&created)
        );
        assert!(validate_path_sequential(&protected_path("/locks/mutex/lock-", ID)).is_ok());
    }

    #[test]
    fn protected_round_trip() {
        let id = new_protection_id();
        for node in ["lock-", "lease-", "__READ__", "__WRIT__", "data", ""] {
            let name = format!("{}0000000042", protected_name(node, &id));
            assert!(is_protected(&name), "{name}");
            assert_eq!(protected_uuid(&name), Some(id.as_str()));
            assert_eq!(strip_protection(&name), format!("{node}0000000042"));
            let path = format!("{}0000000042", protected_path(&format!("/p/{node}"), &id));
            assert_eq!(get_node_from_path(&path), name);
        }
    }

    #[test]
    fn protected_detection_follows_curator() {
        let good = format!("_c_{ID}-lock-0000000003");
        assert_eq!(protected_uuid(&good), Some(ID));
        // Uppercase hex parses as a UUID in Java too.
        let upper = format!("_c_{}-x", ID.to_uppercase());
        assert!(is_protected(&upper));
        // Exactly 40 characters: nothing after the prefix, not protected.
        assert!(!is_protected(&format!("_c_{ID}-")));
        assert!(is_protected(&format!("_c_{ID}-0")));
        // Wrong prefix, wrong separator, not a UUID.
        assert!(!is_protected(&format!("_C_{ID}-lock-")));
        assert!(!is_protected(&format!("c__{ID}-lock-")));
        assert!(!is_protected(&format!("_c_{ID}_lock-")));
        assert!(!is_protected(
            "_c_2b1c6a4e-8f3d-4c2a-9b7e-1d5f0a3c9e2g-lock-"
        ));
        assert!(!is_protected(
            "_c_2b1c6a4e08f3d-4c2a-9b7e-1d5f0a3c9e21-lock-"
        ));
        assert!(!is_protected(
            "_c_2b1c6a4e-8f3d-4c2a-9b7e-1d5f0a3c9e2-lock-"
        ));
        assert!(!is_protected("lock-0000000003"));
        assert!(!is_protected(""));
        // Multi-byte characters where the UUID should be: no panic.
        let odd = format!("_c_{}-lock-", "é".repeat(18));
        assert!(!is_protected(&odd));
        let odd = format!("_c_{}é{}", &ID[..35], "-lock-");
        assert!(!is_protected(&odd));
        assert_eq!(strip_protection(&odd), odd);
        assert_eq!(strip_protection("lock-1"), "lock-1");
    }

    #[test]
    fn find_protected_uses_the_prefix() {
        let children = vec![
            format!("_c_{ID2}-lock-0000000001"),
            "lock-0000000002".to_string(),
            format!("_c_{ID}-lock-0000000003"),
        ];
        assert_eq!(find_protected(&children, ID), Some(children[2].as_str()));
        assert_eq!(find_protected(&children, ID2), Some(children[0].as_str()));
        assert_eq!(find_protected(&children, ID3), None);
        let empty: Vec<String> = Vec::new();
        assert_eq!(find_protected(&empty, ID), None);
        let strs = ["lock-1", "_c_x-lock-2"];
        assert_eq!(find_protected(&strs, "x"), Some("_c_x-lock-2"));
    }

    #[test]
    fn fix_for_sorting_follows_curator() {
        let name = format!("_c_{ID}-lock-0000000003");
        assert_eq!(fix_for_sorting(&name, "lock-"), "0000000003");
        assert_eq!(fix_for_sorting("lock-0000000003", "lock-"), "0000000003");
        // The last occurrence counts.
        assert_eq!(
            fix_for_sorting("lock-lock-0000000003", "lock-"),
            "0000000003"
        );
        assert_eq!(fix_for_sorting("lock-x-lock-7", "lock-"), "7");
        // Absent: the whole name.
        assert_eq!(fix_for_sorting("0000000003", "lock-"), "0000000003");
        // Empty lock name: Java's lastIndexOf("") is the length.
        assert_eq!(fix_for_sorting("abc", ""), "");
        assert_eq!(fix_for_sorting("", "lock-"), "");
        assert_eq!(fix_for_sorting("lock-", "lock-"), "");
    }

    #[test]
    fn sequence_numbers() {
        assert_eq!(
            sequence_after(&format!("_c_{ID}-lock-0000000003"), "lock-"),
            Some(3)
        );
        assert_eq!(
            sequence_after("lease-2147483647", "lease-"),
            Some(2_147_483_647)
        );
        assert_eq!(
            sequence_after("lock--2147483648", "lock-"),
            Some(-2_147_483_648)
        );
        assert_eq!(sequence_after("lock--000000005", "lock-"), Some(-5));
        assert_eq!(sequence_after("0000000009", "lock-"), Some(9));
        for bad in [
            "lock-",
            "lock-x",
            "lock-+5",
            "lock-1 ",
            "lock--",
            "lock-١٢",
            "lock-1e3",
        ] {
            assert_eq!(sequence_after(bad, "lock-"), None, "{bad}");
        }
        assert_eq!(sequence_after("lock-99999999999999999999", "lock-"), None);
        let names = ["__READ__", "__WRIT__"];
        assert_eq!(
            sequence_after_any(&format!("_c_{ID}-__READ__0000000004"), &names),
            Some(4)
        );
        assert_eq!(
            sequence_after_any(&format!("_c_{ID}-__WRIT__0000000005"), &names),
            Some(5)
        );
        assert_eq!(sequence_after_any("0000000006", &names), Some(6));
        assert_eq!(sequence_after_any("__READ__x__WRIT__7", &names), Some(7));
        assert_eq!(sequence_after_any("x", &[]), None);
        assert_eq!(sequence_after_any("8", &[]), Some(8));
    }

    #[test]
    fn sorts_mutex_nodes_by_sequence_not_by_uuid() {
        let mut children = vec![
            format!("_c_{ID3}-lock-0000000003"),
            format!("_c_{ID}-lock-0000000001"),
            format!("_c_{ID2}-lock-0000000002"),
            format!("_c_{ID}-lock-0000000010"),
        ];
        sort_children(&mut children, "lock-");
        let seqs: Vec<_> = children
            .iter()
            .map(|c| sequence_after(c, "lock-"))
            .collect();
        assert_eq!(seqs, [Some(1), Some(2), Some(3), Some(10)]);
        // A plain string sort would put the ID2 node ("_c_0c2e...") first.
        let mut plain = children.clone();
        plain.sort();
        assert_ne!(plain, children);
    }

    #[test]
    fn sorts_read_write_lock_nodes_together() {
        let names = ["__READ__", "__WRIT__"];
        let mut children = vec![
            format!("_c_{ID}-__WRIT__0000000002"),
            format!("_c_{ID2}-__READ__0000000004"),
            format!("_c_{ID3}-__READ__0000000000"),
            format!("_c_{ID}-__READ__0000000003"),
            format!("_c_{ID2}-__WRIT__0000000001"),
        ];
        sort_children_any(&mut children, &names);
        let order: Vec<_> = children
            .iter()
            .map(|c| (c.contains("__WRIT__"), sequence_after_any(c, &names)))
            .collect();
        assert_eq!(
            order,
            [
                (false, Some(0)),
                (true, Some(1)),
                (true, Some(2)),
                (false, Some(3)),
                (false, Some(4)),
            ]
        );
    }

    #[test]
    fn sorts_semaphore_leases() {
        let mut children = vec![
            format!("_c_{ID}-lease-0000000012"),
            "lease-0000000002".to_string(),
            format!("_c_{ID2}-lease-0000000007"),
        ];
        sort_children(&mut children, "lease-");
        assert_eq!(
            children,
            [
                "lease-0000000002".to_string(),
                format!("_c_{ID2}-lease-0000000007"),
                format!("_c_{ID}-lease-0000000012"),
            ]
        );
    }

    #[test]
    fn negative_sequences_sort_as_signed_integers() {
        let mut children = vec![
            format!("_c_{ID}-lock-0000000001"),
            format!("_c_{ID}-lock--2147483647"),
            format!("_c_{ID2}-lock--2147483648"),
            format!("_c_{ID3}-lock-2147483647"),
            format!("_c_{ID}-lock--000000005"),
        ];
        sort_children(&mut children, "lock-");
        let seqs: Vec<_> = children
            .iter()
            .filter_map(|c| sequence_after(c, "lock-"))
            .collect();
        assert_eq!(seqs, [-2_147_483_648, -2_147_483_647, -5, 1, 2_147_483_647]);
        // Curator's string comparison orders the wrapped ones differently.
        assert!("-2147483647" < "-2147483648");
    }

    #[test]
    fn unparseable_children_go_last_in_string_order() {
        let mut children = vec![
            "zzz".to_string(),
            "lock-0000000002".to_string(),
            "lock-abc".to_string(),
            "aaa".to_string(),
            "lock-0000000001".to_string(),
        ];
        sort_children(&mut children, "lock-");
        // Unnumbered ones order by their sorting suffix: "aaa", "abc", "zzz".
        assert_eq!(
            children,
            [
                "lock-0000000001",
                "lock-0000000002",
                "aaa",
                "lock-abc",
                "zzz"
            ]
        );
    }

    #[test]
    fn equal_sequences_tie_break_deterministically() {
        let base = vec![
            format!("_c_{ID3}-lock-0000000005"),
            format!("_c_{ID}-lock-0000000005"),
            "x-lock-05".to_string(),
            format!("_c_{ID2}-lock-0000000005"),
            "lock-5".to_string(),
            "junk".to_string(),
        ];
        let mut want = base.clone();
        sort_children(&mut want, "lock-");
        assert_eq!(want.last().map(String::as_str), Some("junk"));
        // Every rotation and the reverse sort to the same order.
        for shift in 0..base.len() {
            let mut v = base.clone();
            v.rotate_left(shift);
            sort_children(&mut v, "lock-");
            assert_eq!(v, want);
            v.reverse();
            sort_children(&mut v, "lock-");
            assert_eq!(v, want);
        }
    }

    #[test]
    fn sort_handles_empty_and_single() {
        let mut empty: Vec<String> = Vec::new();
        sort_children(&mut empty, "lock-");
        assert!(empty.is_empty());
        let mut one = vec!["lock-0000000001".to_string()];
        sort_children_any(&mut one, &[]);
        assert_eq!(one, ["lock-0000000001"]);
    }

    #[test]
    fn generated_strings_never_panic_and_match_zookeeper() {
        let mut gen = Gen(0x1a7c_4b3e);
        let mut valid = 0;
        let mut invalid = 0;
        let mut batch: Vec<String> = Vec::new();
        for _ in 0..30_000 {
            let s = gen.string();
            let t = gen.string();

            let result = validate_path(&s);
            assert_eq!(result.is_ok(), zookeeper_reference(&s), "{s:?}");
            if let Err(e) = &result {
                assert_eq!(e.path(), s);
                assert!(!e.to_string().is_empty());
                invalid += 1;
            } else {
                valid += 1;
                assert!(s.starts_with('/'));
                // A valid path is rebuilt from its parts.
                if s != "/" {
                    let (p, n) = path_and_node(&s);
                    assert_eq!(make_path(p, n), s);
                    assert_eq!(parent(&s), Some(p));
                    assert_eq!(get_node_from_path(&s), n);
                    assert_eq!(format!("/{}", split(&s).join("/")), s);
                    assert_eq!(validate_path(p), Ok(()));
                }
                for ns in ["app", "app/sub"] {
                    let server = fix_for_namespace(Some(ns), &s);
                    assert_eq!(validate_path(&server), Ok(()), "{server:?}");
                    assert_eq!(strip_namespace(Some(ns), &server), s);
                }
            }
            let seq = validate_path_sequential(&s);
            assert_eq!(seq.is_ok(), zookeeper_reference(&format!("{s}1")), "{s:?}");
            if seq.is_ok() {
                // Namespacing then appending a sequence number is the same as
                // appending it then namespacing.
                for ns in ["app", "app/sub"] {
                    let server = fix_for_namespace_sequential(Some(ns), &s);
                    assert_eq!(
                        format!("{server}0000000001"),
                        fix_for_namespace(Some(ns), &format!("{s}0000000001")),
                        "{s:?}"
                    );
                }
            }
            let ns = validate_namespace(&s);
            assert_eq!(
                ns.is_ok(),
                !s.starts_with('/') && zookeeper_reference(&format!("/{s}")),
                "{s:?}"
            );

            // Everything else just has to return.
            let _ = make_path(&s, &t);
            let _ = make_path_all(&s, &[&t, &s]);
            let _ = get_node_from_path(&s);
            let _ = parent(&s);
            let _ = path_and_node(&s);
            let _ = split(&s);
            let _ = fix_for_namespace(Some(&t), &s);
            let _ = fix_for_namespace_sequential(Some(&t), &s);
            let _ = strip_namespace(Some(&t), &s);
            let _ = protected_path(&s, &t);
            let _ = protected_uuid(&s);
            let _ = strip_protection(&s);
            let _ = is_protected(&format!("_c_{s}{t}"));
            let _ = protected_uuid(&format!("_c_{t}{s}{t}{s}"));
            let _ = fix_for_sorting(&s, &t);
            let _ = sequence_after(&s, &t);
            let _ = sequence_after_any(&s, &[&t, "lock-"]);
            batch.push(s);
            if batch.len() == 50 {
                sort_children(&mut batch, "-");
                sort_children_any(&mut batch, &[".", "/"]);
                let _ = find_protected(&batch, &t);
                batch.clear();
            }
        }
        // The generator exercises both outcomes.
        assert!(
            valid > 1000 && invalid > 1000,
            "{valid} valid, {invalid} invalid"
        );
    }
}
