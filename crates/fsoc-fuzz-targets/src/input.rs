//! What the targets share: a cursor that takes a target's parameters (a metaroot's shape, a
//! segment table's size) from the front of the fuzzer's bytes and never fails, and the copy of
//! an input with its checksum field made good, so the fuzzer reaches the checks behind a
//! CRC-32C that it could not forge by mutation alone.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::host_endian_bytes)]

use fsoc_flash::codec::{crc32c, crc32c_excluding};

/// Little-endian parameters from the front of the input; past its end every value reads as
/// zero, so each input names some parameters and the rest of it is the structure.
pub(crate) struct Parameters<'a> {
    remaining: &'a [u8],
}

impl<'a> Parameters<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Parameters { remaining: bytes }
    }

    fn take<const N: usize>(&mut self) -> [u8; N] {
        match self.remaining.split_first_chunk::<N>() {
            Some((head, rest)) => {
                self.remaining = rest;
                *head
            }
            None => {
                self.remaining = &[];
                [0; N]
            }
        }
    }

    pub(crate) fn u8(&mut self) -> u8 {
        u8::from_le_bytes(self.take::<1>())
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take::<2>())
    }

    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take::<4>())
    }

    pub(crate) fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take::<8>())
    }

    /// A page size the geometry allows: a multiple of 512 bytes, 512 to `512 × choices`.
    pub(crate) fn page_size_bytes(&mut self, choices: u8) -> usize {
        512 * (1 + usize::from(self.u8() % choices.max(1)))
    }

    /// The bytes after the parameters: the structure to decode.
    pub(crate) fn rest(self) -> &'a [u8] {
        self.remaining
    }
}

/// Runs `check` on `bytes` as they are and, when `fix` can make the checksum field good, on a
/// copy with that done: the fuzzer's mutations then reach the structural checks too.
pub(crate) fn with_and_without_checksum(bytes: &[u8], fix: impl Fn(&mut [u8]) -> bool, check: impl Fn(&[u8])) {
    check(bytes);
    let mut fixed = bytes.to_vec();
    if fix(&mut fixed) && fixed != bytes {
        check(&fixed);
    }
}

/// Stores the CRC-32C of `bytes[..covered_bytes]` (its own field taken as zero) as a
/// little-endian u32 at `field_offset`; false when the input is too short to hold both.
pub(crate) fn fix_checksum_excluding(bytes: &mut [u8], covered_bytes: usize, field_offset: usize) -> bool {
    let Some(covered) = bytes.get(..covered_bytes) else {
        return false;
    };
    let checksum = crc32c_excluding(covered, field_offset);
    store_u32(bytes, field_offset, checksum)
}

/// Stores the CRC-32C of `bytes[..covered_bytes]` at `field_offset` (a checksum that follows
/// what it covers, as in the image header).
pub(crate) fn fix_checksum_after(bytes: &mut [u8], covered_bytes: usize, field_offset: usize) -> bool {
    let Some(covered) = bytes.get(..covered_bytes) else {
        return false;
    };
    let checksum = crc32c(covered);
    store_u32(bytes, field_offset, checksum)
}

fn store_u32(bytes: &mut [u8], offset: usize, value: u32) -> bool {
    match bytes.get_mut(offset..).and_then(<[u8]>::first_chunk_mut::<4>) {
        Some(field) => {
            *field = value.to_le_bytes();
            true
        }
        None => false,
    }
}

/// The little-endian u32 at `offset`, if the input holds it.
pub(crate) fn u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    bytes.get(offset..)?.first_chunk::<4>().map(|field| u32::from_le_bytes(*field))
}

/// The little-endian u64 at `offset`, if the input holds it.
pub(crate) fn u64_at(bytes: &[u8], offset: usize) -> Option<u64> {
    bytes.get(offset..)?.first_chunk::<8>().map(|field| u64::from_le_bytes(*field))
}

/// `bytes` with the ranges a decoder ignores (reserved fields) set to zero, as the encoder
/// writes them.
pub(crate) fn zeroed(bytes: &[u8], ranges: &[core::ops::Range<usize>]) -> Vec<u8> {
    let mut canonical = bytes.to_vec();
    for range in ranges {
        if let Some(field) = canonical.get_mut(range.clone()) {
            field.fill(0);
        }
    }
    canonical
}
