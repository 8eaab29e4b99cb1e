//! Delta commits (seed 003's "Delta-Block"): the logical changes since the last full commit,
//! kept compact in RAM and written inside one metaroot page at fsync, so a small durable change
//! costs its data pages plus one page program. Mount replays the newest delta onto the full
//! commit's trees (docs/FORMAT.md, "Delta payload").
//!
//! Invariant: the delta is cumulative since the last full commit — replaying only the newest one
//! reproduces the committed state — and its encoded size never exceeds `capacity_bytes` (past
//! that it is dropped and the next commit is a full one).
//!
//! On a volume with an NVRAM, a transaction point is usually an NVRAM record holding only the
//! *increment*: the keys and segment counts changed since the previous transaction point
//! (`encode_increment`, `mark_point`); the cumulative view stays for the flash delta commit the
//! tier falls back to when the log is full.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;

use fsoc_flash::codec::{DecodeError, Reader, Writer};
use fsoc_flash::convert::{u16_from_usize, u32_from_usize};

use super::delta_compact;
use crate::txn::ChainLink;

const OPERATION_PUT: u8 = 1;
const OPERATION_REMOVE: u8 = 2;
const HEADER_BYTES: usize = 8;
const SEGMENT_ENTRY_BYTES: usize = 12;

/// The final state of one key: `Some(value)` after a put, `None` after a remove.
type Entries = BTreeMap<(u8, Vec<u8>), Option<Vec<u8>>>;
/// A (tree id, key) and its final state, borrowed from `Entries`.
type EntryRef<'a> = (&'a (u8, Vec<u8>), &'a Option<Vec<u8>>);

#[derive(Clone, Debug, Default)]
pub struct DeltaLog {
    entries: Entries,
    /// Data pages appended / released per segment since the full commit.
    segments: BTreeMap<u32, (u32, u32)>,
    encoded_bytes: usize,
    /// Too big for a metaroot: the next commit must be full.
    overflowed: bool,
    /// Changes recorded since the last commit of either kind.
    pub changed: bool,
    capacity_bytes: usize,
    /// Format version 11 on: payloads in the compact encoding (`delta_compact`); the plain
    /// size `encoded_bytes` then bounds only the memory the log keeps.
    compact: bool,
    /// On a volume with NVRAM the cumulative view stops at the capacity, as with the plain
    /// encoding (`memory_bytes_max`).
    nvram: bool,
    /// Keys changed since the last transaction point (their values are in `entries`).
    increment_keys: BTreeSet<(u8, Vec<u8>)>,
    /// Data pages appended / released per segment since the last transaction point.
    increment_segments: BTreeMap<u32, (u32, u32)>,
    /// Format version 12: the delta commit the next records extend (`start_chain`), and the
    /// keys and segment counts changed since it.
    chain: Option<ChainLink>,
    chain_keys: BTreeSet<(u8, Vec<u8>)>,
    chain_segments: BTreeMap<u32, (u32, u32)>,
}

fn entry_bytes(key: &[u8], value: Option<&Vec<u8>>) -> usize {
    6 + key.len() + value.map_or(0, Vec::len)
}

/// A decoded delta payload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecodedDelta {
    /// (tree id, key, value or None for a removal), in key order per tree.
    pub entries: Vec<(u8, Vec<u8>, Option<Vec<u8>>)>,
    /// (segment, data pages allocated, data pages released).
    pub segments: Vec<(u32, u32, u32)>,
}

impl DeltaLog {
    /// A log whose payloads use the plain encoding (format versions 1 to 10).
    pub fn new(capacity_bytes: usize) -> Self {
        DeltaLog { capacity_bytes, encoded_bytes: HEADER_BYTES, ..DeltaLog::default() }
    }

    /// A log whose payloads use the compact encoding (format version 11 on) when `compact`.
    pub fn with_encoding(capacity_bytes: usize, compact: bool) -> Self {
        DeltaLog { compact, ..DeltaLog::new(capacity_bytes) }
    }

    /// The log of a volume with NVRAM: its cumulative view is dropped past the capacity (the
    /// NVRAM's size) in plain bytes whatever the encoding, so a full commit follows.
    pub fn for_nvram(self) -> Self {
        DeltaLog { nvram: true, ..self }
    }

    pub fn is_compact(&self) -> bool {
        self.compact
    }

    /// Whether the plain size bounds the cumulative view by the capacity: with the plain
    /// encoding, and on a volume with NVRAM whatever the encoding.
    fn bounded_by_plain_size(&self) -> bool {
        !self.compact || self.nvram
    }

    /// Plain-encoded bytes past which the log stops keeping changes (the next commit is full):
    /// the capacity itself when `bounded_by_plain_size`; else (compact, without NVRAM: a file
    /// create in about a quarter of the plain bytes) sixteen times it, at most 1 MiB more.
    fn memory_bytes_max(&self) -> usize {
        if !self.bounded_by_plain_size() {
            self.capacity_bytes.saturating_mul(16).min(self.capacity_bytes.saturating_add(1 << 20))
        } else {
            self.capacity_bytes
        }
    }

    /// Bytes `encode` would produce.
    pub fn encoded_bytes(&self) -> usize {
        self.encoded_bytes
    }

    /// Whether the next sync may be a delta commit: the changes are kept, and (plain encoding)
    /// fit the capacity. With the compact encoding only `encode_within` tells for sure.
    pub fn fits(&self) -> bool {
        !self.overflowed && (!self.bounded_by_plain_size() || self.encoded_bytes <= self.capacity_bytes)
    }

    fn check_capacity(&mut self) {
        if self.encoded_bytes > self.memory_bytes_max() {
            // Keeping it would cost memory for nothing: the next commit is full anyway.
            self.overflowed = true;
            self.entries.clear();
            self.segments.clear();
            self.increment_keys.clear();
            self.increment_segments.clear();
            self.end_chain();
            self.encoded_bytes = HEADER_BYTES;
        }
    }

    fn record(&mut self, tree_id: u8, key: &[u8], value: Option<&[u8]>) {
        self.changed = true;
        if self.overflowed {
            return;
        }
        self.increment_keys.insert((tree_id, key.to_vec()));
        if self.chain.is_some() {
            self.chain_keys.insert((tree_id, key.to_vec()));
        }
        let value = value.map(<[u8]>::to_vec);
        self.encoded_bytes += entry_bytes(key, value.as_ref());
        if let Some(old) = self.entries.insert((tree_id, key.to_vec()), value) {
            self.encoded_bytes -= entry_bytes(key, old.as_ref());
        }
        self.check_capacity();
    }

    pub fn record_put(&mut self, tree_id: u8, key: &[u8], value: &[u8]) {
        self.record(tree_id, key, Some(value));
    }

    pub fn record_remove(&mut self, tree_id: u8, key: &[u8]) {
        self.record(tree_id, key, None);
    }

    fn segment_entry(&mut self, segment_index: u32) -> Option<&mut (u32, u32)> {
        self.changed = true;
        if self.overflowed {
            return None;
        }
        if !self.segments.contains_key(&segment_index) {
            self.encoded_bytes += SEGMENT_ENTRY_BYTES;
        }
        let entry = self.segments.entry(segment_index).or_insert((0, 0));
        Some(entry)
    }

    pub fn data_page_allocated(&mut self, segment_index: u32) {
        self.record_segment(segment_index, 1, 0);
    }

    pub fn data_page_released(&mut self, segment_index: u32) {
        self.record_segment(segment_index, 0, 1);
    }

    /// Adds to a segment's counts (and re-records a replayed segment entry at mount, so the
    /// next delta stays cumulative).
    pub fn record_segment(&mut self, segment_index: u32, allocated: u32, released: u32) {
        if let Some(entry) = self.segment_entry(segment_index) {
            entry.0 += allocated;
            entry.1 += released;
            let increment = self.increment_segments.entry(segment_index).or_insert((0, 0));
            increment.0 += allocated;
            increment.1 += released;
            if self.chain.is_some() {
                let since_base = self.chain_segments.entry(segment_index).or_insert((0, 0));
                since_base.0 += allocated;
                since_base.1 += released;
            }
        }
        self.check_capacity();
    }

    /// After a full commit: nothing is pending relative to the new base.
    pub fn clear(&mut self) {
        *self = DeltaLog { nvram: self.nvram, ..DeltaLog::with_encoding(self.capacity_bytes, self.compact) };
    }

    /// After a transaction point that is not a full commit (an NVRAM record, a delta commit):
    /// the increment starts again; the cumulative view stays.
    pub fn mark_point(&mut self) {
        self.increment_keys.clear();
        self.increment_segments.clear();
        self.changed = false;
    }

    /// Records every change of a decoded payload, in its order (the last change to a key wins,
    /// a segment's counts add up), as replay does.
    pub fn record_decoded(&mut self, decoded: &DecodedDelta) {
        for (tree_id, key, value) in &decoded.entries {
            match value {
                Some(value) => self.record_put(*tree_id, key, value),
                None => self.record_remove(*tree_id, key),
            }
        }
        for &(segment_index, allocated, released) in &decoded.segments {
            self.record_segment(segment_index, allocated, released);
        }
    }

    /// Starts a chain at `base`, the delta commit made at the last transaction point: what
    /// changed since it is the increment.
    pub fn start_chain(&mut self, base: ChainLink) {
        assert!(self.compact && !self.nvram, "chained delta commits need compact payloads and no NVRAM");
        self.chain_keys = self.increment_keys.clone();
        self.chain_segments = self.increment_segments.clone();
        self.chain = Some(base);
    }

    /// Ends the chain (a delta commit holding every change since the full commit was written).
    pub fn end_chain(&mut self) {
        self.chain = None;
        self.chain_keys.clear();
        self.chain_segments.clear();
    }

    /// The delta commit the chain extends, if one was started.
    pub fn chain(&self) -> Option<ChainLink> {
        self.chain
    }

    /// The changes since the chain's base as a compact payload of at most `bytes`, or `None`
    /// (no chain, overflowed, or larger): replayed after the base's payload, they give the
    /// same state as the cumulative one.
    pub fn encode_chain_within(&self, bytes: usize) -> Option<Vec<u8>> {
        if self.overflowed || self.chain.is_none() {
            return None;
        }
        let entries = self.entries_of(&self.chain_keys);
        let payload = Self::encode_entries(true, entries.iter().copied(), entries.len(), &self.chain_segments);
        (payload.len() <= bytes && self.decodable(&payload, entries.iter().copied())).then_some(payload)
    }

    /// Whether the cumulative delta may fit `bytes` (a metaroot page's room): certainly not
    /// when this is false; `encode_within` decides.
    pub fn may_fit_within(&self, bytes: usize) -> bool {
        !self.overflowed && (self.compact || self.encoded_bytes <= bytes)
    }

    /// The cumulative payload if it takes at most `bytes` (a metaroot page's room), else `None`
    /// (then only a full commit makes the changes durable).
    pub fn encode_within(&self, bytes: usize) -> Option<Vec<u8>> {
        if !self.may_fit_within(bytes) {
            return None;
        }
        let payload = self.encode();
        (payload.len() <= bytes && self.decodable(&payload, self.entries.iter())).then_some(payload)
    }

    /// The changes since the last transaction point as a payload of at most `bytes` (replayed
    /// after the previous points' payloads, they give the same state as the cumulative one);
    /// `None` once overflowed or when they take more.
    pub fn encode_increment_within(&self, bytes: usize) -> Option<Vec<u8>> {
        if self.overflowed {
            return None;
        }
        let entries = self.entries_of(&self.increment_keys);
        // NVRAM records keep the plain encoding (docs/FORMAT.md, "NVRAM log"), whose size is
        // known before encoding.
        let size = HEADER_BYTES
            + entries.iter().map(|(key, value)| entry_bytes(&key.1, value.as_ref())).sum::<usize>()
            + self.increment_segments.len() * SEGMENT_ENTRY_BYTES;
        (size <= bytes)
            .then(|| Self::encode_entries(false, entries.iter().copied(), entries.len(), &self.increment_segments))
    }

    /// The final values of `keys` (the increment's or the chain's), in key order.
    // Invariant: every such key is in `entries` (`record` fills both, `check_capacity` and
    // `clear` empty them together).
    fn entries_of<'a>(&'a self, keys: &'a BTreeSet<(u8, Vec<u8>)>) -> Vec<EntryRef<'a>> {
        let entries: Vec<_> = keys.iter().filter_map(|key| self.entries.get(key).map(|value| (key, value))).collect();
        assert_eq!(entries.len(), keys.len(), "a key changed since a transaction point is missing from the delta");
        entries
    }

    /// The cumulative payload (at most the capacity with the plain encoding).
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.fits(), "encoding an overflowed delta");
        let bytes = Self::encode_entries(self.compact, self.entries.iter(), self.entries.len(), &self.segments);
        if !self.compact {
            assert_eq!(bytes.len(), self.encoded_bytes, "delta size bookkeeping drifted");
        }
        bytes
    }

    /// Whether a compact payload stays within the decoder's bound on what it may expand to
    /// (always true for the plain encoding, which stores every byte).
    fn decodable<'a>(&self, payload: &[u8], entries: impl Iterator<Item = EntryRef<'a>>) -> bool {
        !self.compact
            || delta_compact::decoded_bytes(entries.map(|((_, key), value)| (key.as_slice(), value.as_deref())))
                <= payload
                    .len()
                    .saturating_mul(delta_compact::DECODED_BYTES_PER_BYTE)
                    .saturating_add(delta_compact::DECODED_BYTES_SLACK)
    }

    fn encode_entries<'a>(
        compact: bool,
        entries: impl Iterator<Item = EntryRef<'a>>,
        entry_count: usize,
        segments: &BTreeMap<u32, (u32, u32)>,
    ) -> Vec<u8> {
        if compact {
            let entries = entries.map(|((tree_id, key), value)| (*tree_id, key.as_slice(), value.as_deref()));
            return delta_compact::encode(entries, entry_count, segments);
        }
        let mut writer = Writer::with_capacity(HEADER_BYTES);
        // Every count and length is below the delta's capacity (`fits`, asserted by the
        // callers): at most the NVRAM's size, 16 MiB; a key or value is one tree entry.
        writer.u32_le(u32_from_usize(entry_count));
        writer.u32_le(u32_from_usize(segments.len()));
        for ((tree_id, key), value) in entries {
            writer.u8(*tree_id);
            writer.u8(if value.is_some() { OPERATION_PUT } else { OPERATION_REMOVE });
            writer.u16_le(u16_from_usize(key.len()));
            writer.u16_le(u16_from_usize(value.as_ref().map_or(0, Vec::len)));
            writer.raw(key);
            if let Some(value) = value {
                writer.raw(value);
            }
        }
        for (segment_index, (allocated, released)) in segments {
            writer.u32_le(*segment_index);
            writer.u32_le(*allocated);
            writer.u32_le(*released);
        }
        writer.bytes
    }

    /// Decodes an untrusted payload (its CRC was checked with the metaroot).
    pub fn decode(bytes: &[u8]) -> Result<DecodedDelta, DecodeError> {
        let mut reader = Reader::new("delta", bytes);
        let entry_count = reader.u32_le()? as usize;
        let segment_count = reader.u32_le()? as usize;
        // Counts are bounded by the payload length, so a corrupt count cannot allocate much.
        if entry_count > bytes.len() / 6 || segment_count > bytes.len() / SEGMENT_ENTRY_BYTES {
            return Err(reader.invalid("count", entry_count.max(segment_count) as u64));
        }
        let mut decoded = DecodedDelta::default();
        for _ in 0..entry_count {
            let tree_id = reader.u8()?;
            let operation = reader.u8()?;
            let key_bytes = usize::from(reader.u16_le()?);
            let value_bytes = usize::from(reader.u16_le()?);
            let key = reader.bytes(key_bytes)?.to_vec();
            let value = match operation {
                OPERATION_PUT => Some(reader.bytes(value_bytes)?.to_vec()),
                OPERATION_REMOVE if value_bytes == 0 => None,
                other => return Err(reader.invalid("operation", u64::from(other))),
            };
            decoded.entries.push((tree_id, key, value));
        }
        for _ in 0..segment_count {
            decoded.segments.push((reader.u32_le()?, reader.u32_le()?, reader.u32_le()?));
        }
        if reader.remaining_bytes() != 0 {
            return Err(reader.invalid("trailing bytes", reader.remaining_bytes() as u64));
        }
        Ok(decoded)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn later_operations_on_a_key_replace_earlier_ones_and_sizes_stay_exact() {
        let mut delta = DeltaLog::new(4096);
        delta.record_put(1, b"key", b"one");
        delta.record_put(1, b"key", b"three");
        delta.record_remove(2, b"gone");
        delta.data_page_allocated(7);
        delta.data_page_allocated(7);
        delta.data_page_released(9);
        let bytes = delta.encode();
        let decoded = DeltaLog::decode(&bytes).unwrap();
        assert_eq!(decoded.entries, [(1, b"key".to_vec(), Some(b"three".to_vec())), (2, b"gone".to_vec(), None)]);
        assert_eq!(decoded.segments, [(7, 2, 0), (9, 0, 1)]);
    }

    #[test]
    fn overflow_forces_a_full_commit_and_frees_memory() {
        let mut delta = DeltaLog::new(64);
        delta.record_put(1, &[1; 40], &[2; 40]);
        assert!(!delta.fits());
        assert!(delta.entries.is_empty());
        delta.clear();
        assert!(delta.fits());
    }

    #[test]
    fn corrupt_payloads_are_errors() {
        let mut delta = DeltaLog::new(4096);
        delta.record_put(1, b"k", b"v");
        let bytes = delta.encode();
        for length in 0..bytes.len() {
            assert!(DeltaLog::decode(&bytes[..length]).is_err(), "truncation to {length} accepted");
        }
        let mut bad = bytes.clone();
        bad[9] = 7; // unknown operation
        assert!(DeltaLog::decode(&bad).is_err());
        let mut huge = bytes;
        huge[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(DeltaLog::decode(&huge).is_err());
    }
}
