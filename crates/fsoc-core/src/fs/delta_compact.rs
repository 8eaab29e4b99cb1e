//! The compact delta payload (format version 11 on; docs/FORMAT.md, "Compact delta payload"):
//! the payload of a delta commit. NVRAM records keep the plain encoding (an NVRAM log holds
//! only increments, and its fill sets when the cumulative changes are destaged).
//!
//! A delta commit must hold every change since the last full commit in one metaroot page, so
//! the number of small durable changes between two full commits is the page's room divided by
//! what one change costs. The plain payload spends about 170 bytes on a file create (its
//! directory entry, its 80-byte inode record, its extent, each with a 17-byte key); this
//! encoding spends about 40, by predicting each record from its neighbour:
//!
//! - a key is stored as the length it shares with the previous key of its tree, then the rest;
//! - a value is XORed with the previous value of its *class* (same tree; in the allocation tree,
//!   same record kind), so the fields that repeat from one file to the next (mode, owner, link
//!   count, the times' high bytes) become zeros;
//! - an inode record's modification, change and birth times are first turned into differences
//!   from its other times (a new file has them equal, or microseconds apart);
//! - an extent's address is predicted as the end of the previous extent (the log appends);
//! - the result, mostly zeros, is stored as runs: a control byte (zeros in its high nibble,
//!   literal bytes in its low one), the literals, and a 0 that ends a value's trailing zeros.
//!
//! Invariants: `decode(encode(x)) == x` for entries in strictly increasing (tree, key) order
//! and segments in increasing order; the decoder accepts only that order, so each state has one
//! encoding; a hostile payload is a `DecodeError`, and it cannot make the decoder allocate more
//! than `DECODED_BYTES_PER_BYTE` times its length plus `DECODED_BYTES_SLACK`.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use fsoc_flash::codec::{DecodeError, Reader};

use super::delta::DecodedDelta;
use super::records::{ALLOCATION_KEY_BYTES, INODE_RECORD_BYTES};
use crate::txn::volume::ALLOCATION_TREE_ID;

/// Entry flag bit 0: a put (a value follows); clear for a remove.
const FLAG_PUT: u8 = 1;
/// Entry flag bit 1: a tree id byte follows (the first entry, and each change of tree).
const FLAG_TREE: u8 = 2;
/// Entry flag bit 2: the value is as long as the previous value of its class (no length).
const FLAG_SAME_LENGTH: u8 = 4;
const FLAGS_KNOWN: u8 = FLAG_PUT | FLAG_TREE | FLAG_SAME_LENGTH;
/// Longest key or value (the plain payload's 16-bit lengths).
const FIELD_BYTES_MAX: usize = u16::MAX as usize;
/// The decoded keys and values together take at most this many bytes per payload byte, plus
/// `DECODED_BYTES_SLACK`; an encoder never writes a payload that decodes to more.
pub const DECODED_BYTES_PER_BYTE: usize = 64;
pub const DECODED_BYTES_SLACK: usize = 64 * 1024;
/// Allocation record kinds with a prediction of their own (docs/FORMAT.md, "Tree records").
const KIND_INODE: u8 = 0;
const KIND_EXTENT: u8 = 2;
/// Offsets of the times in an 80-byte inode record.
const ATIME: usize = 32;
const MTIME: usize = 40;
const CTIME: usize = 48;
const BTIME: usize = 64;

/// Values of one class predict each other: (tree id, record kind in the allocation tree).
fn class_of(tree_id: u8, key: &[u8]) -> (u8, u8) {
    match key.get(8) {
        Some(&kind) if tree_id == ALLOCATION_TREE_ID && key.len() == ALLOCATION_KEY_BYTES => (tree_id, kind),
        _ => (tree_id, 0),
    }
}

fn is_inode(class: (u8, u8), value: &[u8]) -> bool {
    class == (ALLOCATION_TREE_ID, KIND_INODE) && value.len() == INODE_RECORD_BYTES
}

fn word(bytes: &[u8], offset: usize) -> u64 {
    bytes.get(offset..offset + 8).and_then(|slice| slice.try_into().ok()).map_or(0, u64::from_le_bytes)
}

fn set_word(bytes: &mut [u8], offset: usize, value: u64) {
    if let Some(slice) = bytes.get_mut(offset..offset + 8) {
        slice.copy_from_slice(&value.to_le_bytes());
    }
}

fn half_word(bytes: &[u8], offset: usize) -> u32 {
    bytes.get(offset..offset + 4).and_then(|slice| slice.try_into().ok()).map_or(0, u32::from_le_bytes)
}

fn set_half_word(bytes: &mut [u8], offset: usize, value: u32) {
    if let Some(slice) = bytes.get_mut(offset..offset + 4) {
        slice.copy_from_slice(&value.to_le_bytes());
    }
}

/// An inode record with mtime − atime, ctime − mtime and btime − atime in place of those
/// times (wrapping arithmetic on the stored 64-bit words).
fn inode_times_forward(record: &mut [u8]) {
    let (atime, mtime, ctime, btime) =
        (word(record, ATIME), word(record, MTIME), word(record, CTIME), word(record, BTIME));
    set_word(record, MTIME, mtime.wrapping_sub(atime));
    set_word(record, CTIME, ctime.wrapping_sub(mtime));
    set_word(record, BTIME, btime.wrapping_sub(atime));
}

fn inode_times_inverse(record: &mut [u8]) {
    let atime = word(record, ATIME);
    let mtime = word(record, MTIME).wrapping_add(atime);
    let ctime = word(record, CTIME).wrapping_add(mtime);
    let btime = word(record, BTIME).wrapping_add(atime);
    set_word(record, MTIME, mtime);
    set_word(record, CTIME, ctime);
    set_word(record, BTIME, btime);
}

/// The reference a value is XORed with: the previous value of its class, its inode times
/// turned into differences as the value's are.
fn prepared_reference(class: (u8, u8), reference: &[u8]) -> Vec<u8> {
    let mut prepared = reference.to_vec();
    if is_inode(class, reference) {
        inode_times_forward(&mut prepared);
    }
    prepared
}

/// Where an extent after `reference` is expected to start: right after it.
fn predicted_extent_address(reference: &[u8]) -> u32 {
    half_word(reference, 0).wrapping_add(half_word(reference, 4))
}

fn predicts_extent(class: (u8, u8), value: &[u8], reference: &[u8]) -> bool {
    class == (ALLOCATION_TREE_ID, KIND_EXTENT) && value.len() >= 8 && reference.len() >= 8
}

/// What is stored of `value`: mostly zeros when `reference` predicts it well.
fn residual(class: (u8, u8), value: &[u8], reference: Option<&[u8]>) -> Vec<u8> {
    let mut residual = value.to_vec();
    if is_inode(class, value) {
        inode_times_forward(&mut residual);
    }
    if let Some(reference) = reference {
        for (byte, reference_byte) in residual.iter_mut().zip(prepared_reference(class, reference)) {
            *byte ^= reference_byte;
        }
        if predicts_extent(class, value, reference) {
            set_half_word(&mut residual, 0, half_word(value, 0).wrapping_sub(predicted_extent_address(reference)));
        }
    }
    residual
}

/// The inverse of `residual`.
fn restore(class: (u8, u8), mut value: Vec<u8>, reference: Option<&[u8]>) -> Vec<u8> {
    if let Some(reference) = reference {
        let address_difference = predicts_extent(class, &value, reference).then(|| half_word(&value, 0));
        for (byte, reference_byte) in value.iter_mut().zip(prepared_reference(class, reference)) {
            *byte ^= reference_byte;
        }
        if let Some(difference) = address_difference {
            set_half_word(&mut value, 0, difference.wrapping_add(predicted_extent_address(reference)));
        }
    }
    if is_inode(class, &value) {
        inode_times_inverse(&mut value);
    }
    value
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        // The low seven bits, with the continuation bit.
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push((value & 0x7f) as u8);
}

fn get_varint(reader: &mut Reader<'_>, field: &'static str) -> Result<u64, DecodeError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = reader.u8()?;
        let bits = u64::from(byte & 0x7f);
        // The tenth byte may carry only the top bit, and no byte but the first may be a bare
        // zero continuation (one encoding per number).
        if (shift == 63 && bits > 1) || (shift > 0 && byte == 0) {
            return Err(reader.invalid(field, u64::from(byte)));
        }
        value |= bits << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(reader.invalid(field, value))
}

fn get_length(reader: &mut Reader<'_>, field: &'static str, limit: usize) -> Result<usize, DecodeError> {
    let value = get_varint(reader, field)?;
    match usize::try_from(value) {
        Ok(length) if length <= limit => Ok(length),
        _ => Err(reader.invalid(field, value)),
    }
}

/// Runs of zeros and literal bytes: a control byte `zeros << 4 | literals` (each 0..=15, not
/// both 0) followed by the literals; a control byte 0 means "zeros to the end".
fn put_runs(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut rest = bytes;
    while !rest.is_empty() {
        if rest.iter().all(|&byte| byte == 0) {
            out.push(0);
            return;
        }
        let zeros = rest.iter().take(15).take_while(|&&byte| byte == 0).count();
        let after_zeros = rest.get(zeros..).unwrap_or_default();
        // Literals end before two zeros in a row (or a zero at the end): a run pays for them.
        let mut literals = 0;
        while literals < 15 && literals < after_zeros.len() {
            let zero_here = after_zeros.get(literals) == Some(&0);
            if zero_here && after_zeros.get(literals + 1).is_none_or(|&next| next == 0) {
                break;
            }
            literals += 1;
        }
        debug_assert!(zeros + literals > 0, "a run makes progress");
        // Both counts are at most 15.
        out.push(u8::try_from((zeros << 4) | literals).unwrap_or(u8::MAX));
        out.extend_from_slice(after_zeros.get(..literals).unwrap_or_default());
        rest = after_zeros.get(literals..).unwrap_or_default();
    }
}

fn get_runs(reader: &mut Reader<'_>, length: usize) -> Result<Vec<u8>, DecodeError> {
    let mut bytes = Vec::with_capacity(length.min(reader.remaining_bytes().saturating_mul(16)));
    while bytes.len() < length {
        let control = reader.u8()?;
        if control == 0 {
            bytes.resize(length, 0);
            break;
        }
        let zeros = usize::from(control >> 4);
        let literals = usize::from(control & 0x0f);
        if bytes.len() + zeros + literals > length {
            return Err(reader.invalid("run past the field's end", u64::from(control)));
        }
        bytes.resize(bytes.len() + zeros, 0);
        bytes.extend_from_slice(reader.bytes(literals)?);
    }
    Ok(bytes)
}

fn shared_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Encodes entries (strictly increasing (tree, key)) and segments (increasing index).
pub fn encode<'a>(
    entries: impl Iterator<Item = (u8, &'a [u8], Option<&'a [u8]>)>,
    entry_count: usize,
    segments: &BTreeMap<u32, (u32, u32)>,
) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, entry_count as u64);
    put_varint(&mut out, segments.len() as u64);
    let mut tree: Option<u8> = None;
    let mut previous_key: &[u8] = &[];
    let mut references: BTreeMap<(u8, u8), &[u8]> = BTreeMap::new();
    let mut written = 0;
    for (tree_id, key, value) in entries {
        written += 1;
        let new_tree = tree != Some(tree_id);
        if new_tree {
            previous_key = &[];
        }
        let class = class_of(tree_id, key);
        let reference = references.get(&class).copied();
        let same_length =
            matches!((value, reference), (Some(value), Some(reference)) if value.len() == reference.len());
        let mut flags = 0;
        if value.is_some() {
            flags |= FLAG_PUT;
        }
        if new_tree {
            flags |= FLAG_TREE;
        }
        if same_length {
            flags |= FLAG_SAME_LENGTH;
        }
        out.push(flags);
        if new_tree {
            out.push(tree_id);
        }
        let prefix = shared_prefix(previous_key, key);
        put_varint(&mut out, prefix as u64);
        put_varint(&mut out, (key.len() - prefix) as u64);
        put_runs(&mut out, key.get(prefix..).unwrap_or_default());
        if let Some(value) = value {
            if !same_length {
                put_varint(&mut out, value.len() as u64);
            }
            put_runs(&mut out, &residual(class, value, reference));
            references.insert(class, value);
        }
        tree = Some(tree_id);
        previous_key = key;
    }
    assert_eq!(written, entry_count, "entry count given to the compact encoder is wrong");
    let mut next_segment = 0u64;
    for (&segment_index, &(allocated, released)) in segments {
        put_varint(&mut out, u64::from(segment_index) - next_segment);
        put_varint(&mut out, u64::from(allocated));
        put_varint(&mut out, u64::from(released));
        next_segment = u64::from(segment_index) + 1;
    }
    out
}

/// Decodes an untrusted compact payload (its CRC was checked with the metaroot or NVRAM record).
pub fn decode(bytes: &[u8]) -> Result<DecodedDelta, DecodeError> {
    let mut reader = Reader::new("compact delta", bytes);
    // Each entry takes at least three bytes (flags, prefix, suffix length) and each segment three.
    let entry_count = get_length(&mut reader, "entry count", bytes.len() / 3)?;
    let segment_count = get_length(&mut reader, "segment count", bytes.len() / 3)?;
    let budget = bytes.len().saturating_mul(DECODED_BYTES_PER_BYTE).saturating_add(DECODED_BYTES_SLACK);
    let mut decoded_bytes = 0usize;
    let mut decoded = DecodedDelta::default();
    let mut tree: Option<u8> = None;
    let mut previous_key: Vec<u8> = Vec::new();
    let mut references: BTreeMap<(u8, u8), Vec<u8>> = BTreeMap::new();
    for _ in 0..entry_count {
        let flags = reader.u8()?;
        if flags & !FLAGS_KNOWN != 0 || (tree.is_none() && flags & FLAG_TREE == 0) {
            return Err(reader.invalid("entry flags", u64::from(flags)));
        }
        if flags & FLAG_TREE != 0 {
            let tree_id = reader.u8()?;
            if tree.is_some_and(|current| tree_id <= current) {
                return Err(reader.invalid("tree order", u64::from(tree_id)));
            }
            tree = Some(tree_id);
            previous_key.clear();
        }
        let tree_id = tree.unwrap_or_default();
        let prefix = get_length(&mut reader, "key prefix", previous_key.len())?;
        let suffix_bytes = get_length(&mut reader, "key suffix", FIELD_BYTES_MAX - prefix)?;
        let mut key = previous_key.get(..prefix).unwrap_or_default().to_vec();
        key.extend_from_slice(&get_runs(&mut reader, suffix_bytes)?);
        // Strictly increasing within a tree (the first key of a tree may be empty).
        if flags & FLAG_TREE == 0 && key <= previous_key {
            return Err(reader.invalid("key order", prefix as u64));
        }
        let class = class_of(tree_id, &key);
        let value = if flags & FLAG_PUT != 0 {
            let reference = references.get(&class).map(Vec::as_slice);
            let length = if flags & FLAG_SAME_LENGTH != 0 {
                reference.map(<[u8]>::len).ok_or_else(|| reader.invalid("length of no reference", u64::from(flags)))?
            } else {
                get_length(&mut reader, "value length", FIELD_BYTES_MAX)?
            };
            decoded_bytes = decoded_bytes.saturating_add(length);
            if decoded_bytes > budget {
                return Err(reader.invalid("decoded bytes", decoded_bytes as u64));
            }
            let value = restore(class, get_runs(&mut reader, length)?, reference);
            references.insert(class, value.clone());
            Some(value)
        } else if flags & FLAG_SAME_LENGTH != 0 {
            return Err(reader.invalid("entry flags", u64::from(flags)));
        } else {
            None
        };
        decoded_bytes = decoded_bytes.saturating_add(key.len());
        if decoded_bytes > budget {
            return Err(reader.invalid("decoded bytes", decoded_bytes as u64));
        }
        previous_key.clone_from(&key);
        decoded.entries.push((tree_id, key, value));
    }
    let mut next_segment = 0u64;
    for _ in 0..segment_count {
        let gap = get_varint(&mut reader, "segment gap")?;
        let segment_index = next_segment
            .checked_add(gap)
            .and_then(|index| u32::try_from(index).ok())
            .ok_or_else(|| reader.invalid("segment", gap))?;
        let allocated = get_varint(&mut reader, "allocated pages")?;
        let released = get_varint(&mut reader, "released pages")?;
        let (Ok(allocated), Ok(released)) = (u32::try_from(allocated), u32::try_from(released)) else {
            return Err(reader.invalid("segment page count", allocated.max(released)));
        };
        decoded.segments.push((segment_index, allocated, released));
        next_segment = u64::from(segment_index) + 1;
    }
    if reader.remaining_bytes() != 0 {
        return Err(reader.invalid("trailing bytes", reader.remaining_bytes() as u64));
    }
    Ok(decoded)
}

/// Keys and values the entries hold, the quantity `DECODED_BYTES_PER_BYTE` bounds.
pub fn decoded_bytes<'a>(entries: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>) -> usize {
    entries.map(|(key, value)| key.len() + value.map_or(0, <[u8]>::len)).sum()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::vec;

    type Entry = (u8, Vec<u8>, Option<Vec<u8>>);

    fn round_trip(entries: &[Entry], segments: &[(u32, u32, u32)]) -> Vec<u8> {
        let table: BTreeMap<u32, (u32, u32)> = segments.iter().map(|&(s, a, r)| (s, (a, r))).collect();
        let bytes = encode(
            entries.iter().map(|(tree, key, value)| (*tree, key.as_slice(), value.as_deref())),
            entries.len(),
            &table,
        );
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded.entries, entries);
        assert_eq!(decoded.segments, segments);
        bytes
    }

    fn inode_record(size: u64, atime: u64, mtime: u64) -> Vec<u8> {
        let mut record = vec![0u8; INODE_RECORD_BYTES];
        record[0] = 1;
        record[4..8].copy_from_slice(&0o100_644u32.to_le_bytes());
        record[16] = 1;
        set_word(&mut record, 24, size);
        set_word(&mut record, ATIME, atime);
        set_word(&mut record, MTIME, mtime);
        set_word(&mut record, CTIME, mtime);
        set_word(&mut record, BTIME, atime);
        record[72] = 2;
        record
    }

    fn allocation_key(inode: u64, kind: u8) -> Vec<u8> {
        let mut key = inode.to_be_bytes().to_vec();
        key.push(kind);
        key.extend_from_slice(&[0; 8]);
        key
    }

    #[test]
    fn file_creates_cost_a_fraction_of_the_plain_encoding() {
        let mut entries = Vec::new();
        let mut address = 400u32;
        for index in 0..40u64 {
            let mut key = 2u64.to_be_bytes().to_vec();
            key.extend_from_slice(format!("f{index:04}").as_bytes());
            let mut value = (30 + index).to_le_bytes().to_vec();
            value.push(1);
            entries.push((1, key, Some(value)));
        }
        for index in 0..40u64 {
            let time = 1_764_000_000_000_000_000 + index * 21_000_000 + (index * 7919 % 1000);
            entries.push((
                2,
                allocation_key(30 + index, KIND_INODE),
                Some(inode_record(2000 + index * 37, time, time + 3_000_123)),
            ));
            let pages = 1 + (index % 2) as u32;
            let mut extent = address.to_le_bytes().to_vec();
            extent.extend_from_slice(&pages.to_le_bytes());
            for page in 0..pages {
                extent.extend_from_slice(&(0x9e37_79b9u32.wrapping_mul(address + page)).to_le_bytes());
            }
            address += pages;
            entries.push((2, allocation_key(30 + index, KIND_EXTENT), Some(extent)));
        }
        entries.push((2, allocation_key(77, 1), None));
        let bytes = round_trip(&entries, &[(3, 60, 0), (9, 0, 4), (70_000, 1, 1)]);
        let plain: usize =
            entries.iter().map(|(_, key, value)| 6 + key.len() + value.as_ref().map_or(0, Vec::len)).sum();
        assert!(bytes.len() * 3 < plain, "compact {} bytes against plain {plain}", bytes.len());
        assert!(bytes.len() < 40 * 45, "{} bytes for 40 creates", bytes.len());
    }

    #[test]
    fn odd_shapes_round_trip() {
        round_trip(&[], &[]);
        round_trip(&[(1, vec![], Some(vec![])), (1, vec![0], None), (1, vec![0, 0], Some(vec![0; 300]))], &[(0, 0, 0)]);
        round_trip(
            &[
                (2, allocation_key(5, KIND_INODE), Some(vec![7; 64])),
                (2, allocation_key(5, KIND_EXTENT), Some(vec![0xff; 5])),
                (2, allocation_key(6, KIND_INODE), Some(inode_record(u64::MAX, u64::MAX, 3))),
                (2, allocation_key(6, KIND_EXTENT), Some(vec![0xff; 12])),
                (2, allocation_key(7, KIND_EXTENT), Some(vec![1; 40])),
                (3, vec![9; 16], Some((0..=255).collect())),
            ],
            &[(u32::MAX, u32::MAX, u32::MAX)],
        );
    }

    #[test]
    fn hostile_payloads_are_errors_not_panics() {
        let entries = vec![(1, b"key".to_vec(), Some(b"value".to_vec())), (2, b"k".to_vec(), None)];
        let bytes = round_trip(&entries, &[(4, 1, 0)]);
        for length in 0..bytes.len() {
            assert!(decode(&bytes[..length]).is_err(), "truncation to {length} accepted");
        }
        for position in 0..bytes.len() {
            for flip in [1u8, 0x80, 0xff] {
                let mut bad = bytes.clone();
                bad[position] ^= flip;
                let _ = decode(&bad);
            }
        }
        // Out of order: the second tree id not above the first.
        let unordered = round_trip(&[(2, b"a".to_vec(), None), (3, b"b".to_vec(), None)], &[]);
        let mut bad = unordered.clone();
        let position = bad.iter().rposition(|&byte| byte == 3).unwrap();
        bad[position] = 2;
        assert!(decode(&bad).is_err());
        // A value of 65,535 zeros costs four bytes: the budget stops a flood of them.
        let mut flood = Vec::new();
        put_varint(&mut flood, 2000);
        put_varint(&mut flood, 0);
        for index in 0..2000u32 {
            flood.push(if index == 0 { FLAG_PUT | FLAG_TREE } else { FLAG_PUT });
            if index == 0 {
                flood.push(1);
            }
            put_varint(&mut flood, 0);
            put_varint(&mut flood, 2);
            flood.extend_from_slice(&[0x02, (index >> 8) as u8, index as u8]);
            put_varint(&mut flood, 65_535);
            flood.push(0);
        }
        assert!(decode(&flood).is_err());
    }
}
