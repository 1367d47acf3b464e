//! Jute, ZooKeeper's big-endian record encoding: just the primitives the
//! protocol records need.

use crate::error::Error;

/// Appends jute-encoded values to a byte buffer.
#[derive(Default)]
pub(crate) struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// Starts a frame: four bytes reserved for the length prefix.
    pub(crate) fn frame() -> Writer {
        Writer { buf: vec![0; 4] }
    }

    pub(crate) fn i32(&mut self, v: i32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn bool(&mut self, v: bool) -> &mut Self {
        self.buf.push(u8::from(v));
        self
    }

    pub(crate) fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.i32(len_i32(v.len()));
        self.buf.extend_from_slice(v);
        self
    }

    pub(crate) fn string(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }

    pub(crate) fn strings<S: AsRef<str>>(&mut self, v: &[S]) -> &mut Self {
        self.i32(len_i32(v.len()));
        for s in v {
            self.string(s.as_ref());
        }
        self
    }

    /// Appends bytes already jute-encoded.
    pub(crate) fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }

    /// The bytes written so far.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Fills in the length prefix reserved by [`Writer::frame`] and returns the frame.
    pub(crate) fn finish_frame(mut self) -> Vec<u8> {
        let len = len_i32(self.buf.len() - 4);
        self.buf[..4].copy_from_slice(&len.to_be_bytes());
        self.buf
    }
}

fn len_i32(len: usize) -> i32 {
    // Requests are bounded by jute.maxbuffer (1 MiB) long before this matters.
    i32::try_from(len).unwrap_or(i32::MAX)
}

/// Reads jute-encoded values; every read checks bounds and fails with
/// [`Error::Marshalling`] instead of panicking on a short or hostile buffer.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if self.buf.len() < n {
            return Err(Error::Marshalling("record shorter than its fields"));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(crate) fn i32(&mut self) -> Result<i32, Error> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, Error> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    pub(crate) fn bool(&mut self) -> Result<bool, Error> {
        Ok(self.take(1)?[0] != 0)
    }

    /// A buffer; jute encodes null as length -1, which reads as empty.
    pub(crate) fn bytes(&mut self) -> Result<Vec<u8>, Error> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(Vec::new());
        }
        Ok(self.take(len as usize)?.to_vec())
    }

    pub(crate) fn string(&mut self) -> Result<String, Error> {
        String::from_utf8(self.bytes()?).map_err(|_| Error::Marshalling("string is not UTF-8"))
    }

    pub(crate) fn strings(&mut self) -> Result<Vec<String>, Error> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(Vec::new());
        }
        // Each string needs at least its 4-byte length: refuse counts the buffer cannot hold.
        if n as usize > self.buf.len() / 4 {
            return Err(Error::Marshalling("vector longer than its record"));
        }
        (0..n).map(|_| self.string()).collect()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The bytes not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut w = Writer::frame();
        w.i32(-7)
            .i64(1 << 40)
            .bool(true)
            .string("/a")
            .strings(&["x", "yz"]);
        let frame = w.finish_frame();
        assert_eq!(&frame[..4], &((frame.len() - 4) as i32).to_be_bytes());
        let mut r = Reader::new(&frame[4..]);
        assert_eq!(r.i32().unwrap(), -7);
        assert_eq!(r.i64().unwrap(), 1 << 40);
        assert!(r.bool().unwrap());
        assert_eq!(r.string().unwrap(), "/a");
        assert_eq!(r.strings().unwrap(), vec!["x", "yz"]);
        assert!(r.is_empty());
    }

    #[test]
    fn short_and_hostile_input_errs_not_panics() {
        assert!(Reader::new(&[0, 0]).i32().is_err());
        assert!(Reader::new(&[0, 0, 0, 9, 1]).bytes().is_err());
        assert!(Reader::new(&[0x7f, 0xff, 0xff, 0xff]).strings().is_err());
        assert_eq!(Reader::new(&[0xff, 0xff, 0xff, 0xff]).bytes().unwrap(), b"");
        assert!(Reader::new(&[0, 0, 0, 1, 0xff]).string().is_err());
    }

    #[test]
    fn null_and_empty_vectors_and_counts_beyond_the_record() {
        // Null (-1) and empty (0) read as empty, for buffers and vectors.
        for n in [-1i32, 0] {
            assert!(Reader::new(&n.to_be_bytes()).bytes().unwrap().is_empty());
            assert!(Reader::new(&n.to_be_bytes()).strings().unwrap().is_empty());
        }
        // Vectors of empty and of two-byte strings, exactly filling the record.
        for v in [&[""][..], &["ab", "cd"]] {
            let mut w = Writer::frame();
            w.strings(v);
            let frame = w.finish_frame();
            assert_eq!(Reader::new(&frame[4..]).strings().unwrap(), v);
        }
        // More strings than the bytes left can hold: refused before reading.
        let mut w = Writer::frame();
        w.i32(2).string("");
        let frame = w.finish_frame();
        match Reader::new(&frame[4..]).strings() {
            Err(Error::Marshalling(why)) => assert_eq!(why, "vector longer than its record"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn raw_bytes_go_in_as_they_are() {
        let mut w = Writer::frame();
        w.i32(1).raw(&[9, 8]).i32(2);
        assert_eq!(w.finish_frame()[4..], [0, 0, 0, 1, 9, 8, 0, 0, 0, 2]);
    }
}
