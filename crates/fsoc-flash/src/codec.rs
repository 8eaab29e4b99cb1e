//! The one byte codec of the on-media formats: CRC-32C, a bounds-checked little-endian
//! cursor (`Reader`, which returns `DecodeError` instead of panicking) and a `Writer`.
#![deny(clippy::indexing_slicing)]

use alloc::vec::Vec;

/// Slice-by-16 tables (16 KiB of constants): about eight times the bytewise table's speed.
/// Without std only: with std the `crc32c` crate uses the CPU's CRC instruction where there
/// is one (both give the same value; `crc32c_matches_the_standard_check_value`).
#[cfg(not(feature = "std"))]
const CRC32C: crc::Crc<u32, crc::Table<16>> = crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);

/// CRC-32C (Castagnoli) of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c_append(0, bytes)
}

/// CRC-32C of the bytes checksummed so far (`crc`, 0 at the start) followed by `bytes`.
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    #[cfg(feature = "std")]
    {
        crc32c::crc32c_append(crc, bytes)
    }
    #[cfg(not(feature = "std"))]
    {
        // The table digest resumes from a finished CRC: undo the final xor, and give the
        // register bit-reversed (the crc crate reflects the initial value of a reflected CRC).
        let mut digest = CRC32C.digest_with_initial((crc ^ 0xFFFF_FFFF).reverse_bits());
        digest.update(bytes);
        digest.finalize()
    }
}

/// CRC-32C of `bytes` with the four bytes at `field_offset` taken as zero (for structures that
/// carry their own checksum).
pub fn crc32c_excluding(bytes: &[u8], field_offset: usize) -> u32 {
    let end = field_offset.min(bytes.len());
    let mut crc = crc32c_append(0, bytes.get(..end).unwrap_or(&[]));
    if bytes.len() > end {
        let zeros = [0u8; 4];
        crc = crc32c_append(crc, zeros.get(..(bytes.len() - end).min(4)).unwrap_or(&zeros));
    }
    crc32c_append(crc, bytes.get(field_offset + 4..).unwrap_or(&[]))
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{structure}: need {needed_bytes} bytes, got {actual_bytes}")]
    Truncated { structure: &'static str, needed_bytes: usize, actual_bytes: usize },
    #[error("{structure}: checksum stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch { structure: &'static str, stored: u32, computed: u32 },
    #[error("{structure}: bad magic {found:#x}")]
    BadMagic { structure: &'static str, found: u64 },
    #[error("{structure}: invalid {field} = {value}")]
    InvalidField { structure: &'static str, field: &'static str, value: u64 },
    /// Well-formed (magic and checksum good) but of a format version this build does not read.
    #[error("{structure}: format version {found}, this build reads versions {oldest} to {newest}")]
    UnsupportedVersion { structure: &'static str, found: u32, oldest: u32, newest: u32 },
}

/// A cursor over untrusted bytes.
pub struct Reader<'a> {
    structure: &'static str,
    remaining: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(structure: &'static str, bytes: &'a [u8]) -> Self {
        Reader { structure, remaining: bytes }
    }
    fn truncated(&self, needed_bytes: usize) -> DecodeError {
        DecodeError::Truncated { structure: self.structure, needed_bytes, actual_bytes: self.remaining.len() }
    }
    pub fn remaining_bytes(&self) -> usize {
        self.remaining.len()
    }
    pub fn bytes(&mut self, count: usize) -> Result<&'a [u8], DecodeError> {
        if count > self.remaining.len() {
            return Err(self.truncated(count));
        }
        let (head, rest) = self.remaining.split_at(count);
        self.remaining = rest;
        Ok(head)
    }
    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let (head, rest) = self.remaining.split_first_chunk::<N>().ok_or_else(|| self.truncated(N))?;
        self.remaining = rest;
        Ok(*head)
    }
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let (head, rest) = self.remaining.split_first().ok_or_else(|| self.truncated(1))?;
        self.remaining = rest;
        Ok(*head)
    }
    pub fn u16_le(&mut self) -> Result<u16, DecodeError> {
        let (head, rest) = self.remaining.split_first_chunk::<2>().ok_or_else(|| self.truncated(2))?;
        self.remaining = rest;
        Ok(u16::from_le_bytes(*head))
    }
    pub fn u32_le(&mut self) -> Result<u32, DecodeError> {
        let (head, rest) = self.remaining.split_first_chunk::<4>().ok_or_else(|| self.truncated(4))?;
        self.remaining = rest;
        Ok(u32::from_le_bytes(*head))
    }
    pub fn u64_le(&mut self) -> Result<u64, DecodeError> {
        let (head, rest) = self.remaining.split_first_chunk::<8>().ok_or_else(|| self.truncated(8))?;
        self.remaining = rest;
        Ok(u64::from_le_bytes(*head))
    }
    pub fn u64_be(&mut self) -> Result<u64, DecodeError> {
        let (head, rest) = self.remaining.split_first_chunk::<8>().ok_or_else(|| self.truncated(8))?;
        self.remaining = rest;
        Ok(u64::from_be_bytes(*head))
    }
    pub fn invalid(&self, field: &'static str, value: u64) -> DecodeError {
        DecodeError::InvalidField { structure: self.structure, field, value }
    }
}

/// Little-endian writer into a growable buffer.
#[derive(Default)]
pub struct Writer {
    pub bytes: Vec<u8>,
}

impl Writer {
    pub fn with_capacity(capacity: usize) -> Self {
        Writer { bytes: Vec::with_capacity(capacity) }
    }
    pub fn u8(&mut self, value: u8) {
        self.bytes.push(value);
    }
    pub fn u16_le(&mut self, value: u16) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }
    pub fn u32_le(&mut self, value: u32) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }
    pub fn u64_le(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }
    pub fn u64_be(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_be_bytes());
    }
    pub fn raw(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        // CRC-32C check value for "123456789" (RFC 3720 appendix B.4).
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    // Both implementations (the CPU's instruction with std, the table without) resume a CRC:
    // `cargo test -p fsoc-flash` and `cargo test -p fsoc-flash --no-default-features`.
    #[test]
    fn crc32c_append_resumes_a_finished_crc() {
        let bytes: Vec<u8> = (0..3000u32).map(|index| (index * 7 % 251) as u8).collect();
        for split in [0, 1, 7, 8, 9, 100, 2048, 2999, 3000] {
            let (head, tail) = bytes.split_at(split);
            assert_eq!(crc32c_append(crc32c(head), tail), crc32c(&bytes), "split at {split}");
        }
        assert_eq!(crc32c(&[]), 0);
    }

    #[test]
    fn crc_excluding_field_equals_crc_with_zeroed_field() {
        let mut bytes = [7u8; 32];
        bytes[8..12].copy_from_slice(&[1, 2, 3, 4]);
        let mut zeroed = bytes;
        zeroed[8..12].fill(0);
        assert_eq!(crc32c_excluding(&bytes, 8), crc32c(&zeroed));
    }

    #[test]
    fn reader_reports_truncation_instead_of_panicking() {
        let mut reader = Reader::new("test", &[1, 2, 3]);
        assert_eq!(reader.u16_le(), Ok(0x0201));
        assert!(matches!(reader.u32_le(), Err(DecodeError::Truncated { needed_bytes: 4, .. })));
    }
}
