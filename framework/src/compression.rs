//! Curator's compressed node data: gzip, as its default
//! `GzipCompressionProvider` writes it (`create().compressed()`,
//! `setData().compressed()`), so Java and Rust processes read each other's
//! compressed nodes.

use std::io::{Read, Write};

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;

use crate::error::{Error, Result};

/// `data` gzipped, as Curator's `GzipCompressionProvider.compress`.
///
/// ```
/// use latchkey_framework::compression::{compress, decompress};
/// let packed = compress(b"hello hello hello");
/// assert_eq!(decompress("/a", &packed).unwrap(), b"hello hello hello");
/// ```
pub fn compress(data: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(
        Vec::with_capacity(data.len() / 2 + 32),
        Compression::default(),
    );
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(data);
    encoder.finish().unwrap_or_default()
}

/// The data of the node at `path` (named in the error), gunzipped, as
/// Curator's `getData().decompressed()`. Data that is not gzip fails with
/// [`Error::InvalidArgument`] naming the path; nothing is lost, the
/// caller still has the bytes.
pub fn decompress(path: &str, data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len() * 2);
    GzDecoder::new(data)
        .read_to_end(&mut out)
        .map_err(|e| Error::InvalidArgument(format!("decompress the data of {path}: {e}")))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_empty_and_large_data() {
        for data in [
            Vec::new(),
            vec![7u8; 1 << 20],
            (0..=255u8).cycle().take(70_000).collect(),
        ] {
            assert_eq!(decompress("/x", &compress(&data)).unwrap(), data);
        }
    }

    #[test]
    fn bytes_that_are_not_gzip_are_an_error_naming_the_path() {
        let e = decompress("/cfg/a", b"plain text").unwrap_err().to_string();
        assert!(e.contains("/cfg/a"), "{e}");
    }

    #[test]
    fn reads_what_java_gzip_writes() {
        // What Java 17's `GZIPOutputStream` (java.util.zip, which Curator's
        // GzipCompressionProvider uses) writes for "curator".
        let java: &[u8] = &[
            0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0x4b, 0x2e, 0x2d, 0x4a,
            0x2c, 0xc9, 0x2f, 0x02, 0x00, 0x49, 0x91, 0xc3, 0x73, 0x07, 0x00, 0x00, 0x00,
        ];
        assert_eq!(decompress("/j", java).unwrap(), b"curator");
    }
}
