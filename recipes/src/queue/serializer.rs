//! How queue items become node data: a [`QueueSerializer`] turns one item
//! into bytes and back, and [`ItemSerializer`] frames one or more items
//! into a node's data as Curator's `ItemSerializer` does, so that Java and
//! Rust producers and consumers read each other's nodes.

use latchkey_framework::{Error, Result};

/// The error a [`QueueSerializer`] or a queue consumer returns.
pub type QueueError = Box<dyn std::error::Error + Send + Sync>;

/// Turns one item into bytes and back (Curator's `QueueSerializer`).
///
/// A Java peer must use a serializer that writes the same bytes; for
/// strings, [`StringSerializer`] matches `String.getBytes(UTF_8)` and
/// `new String(bytes, UTF_8)`.
///
/// ```
/// use latchkey_recipes::{QueueError, QueueSerializer};
///
/// /// A job number as 8 big-endian bytes.
/// struct JobId;
/// impl QueueSerializer<u64> for JobId {
///     fn serialize(&self, item: &u64) -> Vec<u8> {
///         item.to_be_bytes().to_vec()
///     }
///     fn deserialize(&self, bytes: &[u8]) -> Result<u64, QueueError> {
///         Ok(u64::from_be_bytes(bytes.try_into()?))
///     }
/// }
/// assert_eq!(JobId.deserialize(&JobId.serialize(&7)).unwrap(), 7);
/// ```
pub trait QueueSerializer<T>: Send + Sync + 'static {
    /// The item's bytes.
    fn serialize(&self, item: &T) -> Vec<u8>;
    /// The item these bytes stand for; an error marks the node corrupt
    /// (it is logged and removed, as Curator does).
    fn deserialize(&self, bytes: &[u8]) -> std::result::Result<T, QueueError>;
}

/// Items that are bytes already: stored as they are.
#[derive(Clone, Copy, Debug, Default)]
pub struct BytesSerializer;

impl QueueSerializer<Vec<u8>> for BytesSerializer {
    fn serialize(&self, item: &Vec<u8>) -> Vec<u8> {
        item.clone()
    }
    fn deserialize(&self, bytes: &[u8]) -> std::result::Result<Vec<u8>, QueueError> {
        Ok(bytes.to_vec())
    }
}

/// Strings as UTF-8 bytes; bytes that are not UTF-8 are a corrupt item.
#[derive(Clone, Copy, Debug, Default)]
pub struct StringSerializer;

impl QueueSerializer<String> for StringSerializer {
    fn serialize(&self, item: &String) -> Vec<u8> {
        item.as_bytes().to_vec()
    }
    fn deserialize(&self, bytes: &[u8]) -> std::result::Result<String, QueueError> {
        Ok(String::from_utf8(bytes.to_vec())?)
    }
}

/// The framing of a queue node's data (Curator's `ItemSerializer`): a
/// 4-byte big-endian version `0x00010001`, then for each item the byte
/// `0x01`, its length as a 4-byte big-endian signed int and its bytes,
/// and last the byte `0x02`.
///
/// ```
/// use latchkey_recipes::ItemSerializer;
///
/// let framed = ItemSerializer::serialize(&[b"a".as_slice(), b"bc"]);
/// assert_eq!(framed, [0, 1, 0, 1, 1, 0, 0, 0, 1, b'a', 1, 0, 0, 0, 2, b'b', b'c', 2]);
/// assert_eq!(ItemSerializer::deserialize(&framed).unwrap(), vec![b"a".to_vec(), b"bc".to_vec()]);
/// ```
#[derive(Debug)]
pub struct ItemSerializer;

/// The framing's version, as Curator writes it.
pub(crate) const VERSION: u32 = 0x0001_0001;
const ITEM_OPCODE: u8 = 0x01;
const EOF_OPCODE: u8 = 0x02;

impl ItemSerializer {
    /// Frames `items` (each already serialized) into one node's data.
    /// Items longer than `i32::MAX` bytes cannot be framed; ZooKeeper
    /// refuses far smaller nodes anyway (about 1 MiB by default).
    pub fn serialize<B: AsRef<[u8]>>(items: &[B]) -> Vec<u8> {
        let len = 5 + items.iter().map(|i| 5 + i.as_ref().len()).sum::<usize>();
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(&VERSION.to_be_bytes());
        for item in items {
            let item = item.as_ref();
            out.push(ITEM_OPCODE);
            // Saturates for what cannot be framed; the node is refused by
            // ZooKeeper long before (its data limit is far smaller).
            let n = i32::try_from(item.len()).unwrap_or(i32::MAX);
            out.extend_from_slice(&n.to_be_bytes());
            out.extend_from_slice(item);
        }
        out.push(EOF_OPCODE);
        out
    }

    /// The items framed in a node's data. Data that does not follow the
    /// framing (another version, an unknown marker, a bad or overlong
    /// length, a missing end marker) is an [`Error::InvalidArgument`]
    /// saying what was wrong and where.
    pub fn deserialize(bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        let bad = |what: String| Error::InvalidArgument(format!("corrupt queue item: {what}"));
        let mut at = 0usize;
        let version = read_u32(bytes, &mut at).ok_or_else(|| bad("no version".into()))?;
        if version != VERSION {
            return Err(bad(format!(
                "version {version:#010x}, expected {VERSION:#010x}"
            )));
        }
        let mut items = Vec::new();
        loop {
            let Some(&opcode) = bytes.get(at) else {
                return Err(bad(format!("no end marker after {} items", items.len())));
            };
            at += 1;
            match opcode {
                EOF_OPCODE => return Ok(items),
                ITEM_OPCODE => {}
                other => {
                    return Err(bad(format!("marker {other:#04x} at byte {}", at - 1)));
                }
            }
            let size = read_u32(bytes, &mut at)
                .ok_or_else(|| bad(format!("item {} has no length", items.len())))?
                as i32;
            let size = usize::try_from(size)
                .map_err(|_| bad(format!("item {} has length {size}", items.len())))?;
            let end = at
                .checked_add(size)
                .filter(|end| *end <= bytes.len())
                .ok_or_else(|| {
                    bad(format!(
                        "item {} has length {size}, only {} bytes left",
                        items.len(),
                        bytes.len() - at
                    ))
                })?;
            items.push(bytes[at..end].to_vec());
            at = end;
        }
    }
}

fn read_u32(bytes: &[u8], at: &mut usize) -> Option<u32> {
    let end = at.checked_add(4)?;
    let word: [u8; 4] = bytes.get(*at..end)?.try_into().ok()?;
    *at = end;
    Some(u32::from_be_bytes(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_none_one_and_many_items() {
        for items in [
            vec![],
            vec![vec![]],
            vec![b"x".to_vec(), vec![0; 5000], vec![]],
        ] {
            let framed = ItemSerializer::serialize(&items);
            assert_eq!(ItemSerializer::deserialize(&framed).unwrap(), items);
        }
        assert_eq!(ItemSerializer::serialize::<&[u8]>(&[]), [0, 1, 0, 1, 2]);
    }

    #[test]
    fn bad_data_is_an_error_never_a_panic() {
        let good = ItemSerializer::serialize(&[b"abc"]);
        // Every truncation is refused.
        for n in 0..good.len() {
            assert!(ItemSerializer::deserialize(&good[..n]).is_err(), "{n}");
        }
        let mut wrong_version = good.clone();
        wrong_version[3] = 2;
        let mut wrong_marker = good.clone();
        wrong_marker[4] = 7;
        let mut negative = good.clone();
        negative[5] = 0x80;
        let mut huge = good.clone();
        huge[5..9].copy_from_slice(&i32::MAX.to_be_bytes());
        for data in [wrong_version, wrong_marker, negative, huge] {
            let e = ItemSerializer::deserialize(&data).unwrap_err();
            assert!(e.to_string().contains("corrupt queue item"), "{e}");
        }
        // Trailing bytes after the end marker are ignored, as in Curator.
        let mut trailing = good;
        trailing.push(9);
        assert!(ItemSerializer::deserialize(&trailing).is_ok());
    }

    #[test]
    fn strings_that_are_not_utf8_are_corrupt() {
        assert!(StringSerializer.deserialize(&[0xff]).is_err());
        assert_eq!(StringSerializer.deserialize(b"hi").unwrap(), "hi");
    }
}
