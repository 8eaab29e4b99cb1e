//! The B+tree node format (one node per flash page) and its codec; decoding never panics.
//!
//! # Node format, version 1
//!
//! All integers are little-endian; checksums are CRC-32C. A node fills exactly one page of
//! `node_size_bytes` (2048, 4096 or 8192 on the supported chips; the codec accepts 256..=65536).
//!
//! | offset | size | field         | rule                                                  |
//! |-------:|-----:|---------------|-------------------------------------------------------|
//! |      0 |    2 | `magic`       | `0x4E42` (bytes `42 4E`, "BN")                        |
//! |      2 |    1 | `tree_id`     | the tree owning the node; equals the parent's         |
//! |      3 |    1 | `level`       | 0 = leaf; parent's level - 1; root: `height - 1`      |
//! |      4 |    2 | `entry_count` | leaf: any (0 only in a root); internal: at least 2    |
//! |      6 |    2 | `reserved`    | 0                                                     |
//! |      8 |    4 | `checksum`    | CRC-32C of the whole page with this field taken as 0  |
//! |     12 |  var | entries       | `entry_count` entries back to back, keys increasing   |
//! |    var |  var | padding       | zero bytes up to `node_size_bytes`                    |
//!
//! Leaf entry (level 0):
//!
//! | offset | size        | field       | rule                                      |
//! |-------:|------------:|-------------|-------------------------------------------|
//! |      0 |           2 | `key_len`   | `key_len + value_len <= max_entry_bytes`  |
//! |      2 |           2 | `value_len` |                                           |
//! |      4 |   `key_len` | `key`       | greater than the previous entry's key     |
//! |    var | `value_len` | `value`     |                                           |
//!
//! Internal entry (level >= 1), one per child:
//!
//! | offset | size      | field            | rule                                         |
//! |-------:|----------:|------------------|----------------------------------------------|
//! |      0 |         2 | `key_len`        | `<= max_entry_bytes`; entry 0: 0             |
//! |      2 | `key_len` | `key`            | separator, greater than the previous one     |
//! |    var |         4 | `child_address`  | log address of the child; not `0xFFFF_FFFF`  |
//! |    var |         4 | `child_checksum` | the child's `checksum` field                 |
//!
//! Key 0 of an internal node is empty and stands for minus infinity. Child `i` holds the keys
//! `k` with `key[i] <= k < key[i + 1]`, within the range the node's own parent gives it. Keys
//! compare as unsigned bytes, a proper prefix first. Leaf split separators are the shortest
//! prefix of the right node's first key that exceeds the left node's last key.
//!
//! `max_entry_bytes = (node_size_bytes - 12) / 4 - 10` (499, 1011 and 2035 bytes for 2048,
//! 4096 and 8192-byte nodes), so any node holds four entries of the largest size, leaf or
//! internal. Because a parent pointer carries the child's `checksum`, following it checks both
//! the page's content and that it is the page the parent meant: a stale or misdirected write
//! has another checksum.
//!
//! Example (tested below): a 256-byte leaf of tree 1 holding the key "k" with the value "v"
//! starts with these 18 bytes; the remaining 238 are zero.
//!
//! ```text
//! 42 4e 01 00 01 00 00 00  fd e2 96 ad 01 00 01 00  6b 76
//! magic tr lv count  rsvd  checksum    klen  vlen   k  v
//! ```
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::host_endian_bytes)]

use alloc::vec::Vec;

use crate::address::PagePointer;
use crate::address::{ReadPointer, WritePointer};
use crate::btree::page::NodePage;
use fsoc_flash::codec::{crc32c_excluding, DecodeError, Reader, Writer};
use fsoc_flash::convert::u16_from_usize;

/// `magic` of every node: the bytes "BN" read as a little-endian u16.
pub const NODE_MAGIC: u16 = 0x4E42;
/// Bytes before the first entry.
pub const NODE_HEADER_BYTES: usize = 12;
/// Offset of the `checksum` field, which the checksum itself covers as zero.
pub(crate) const CHECKSUM_OFFSET: usize = 8;
/// Bytes of a leaf entry besides key and value: `key_len`, `value_len`.
pub const LEAF_ENTRY_OVERHEAD_BYTES: usize = 4;
/// Bytes of an internal entry besides the key: `key_len` and the child pointer.
pub const BRANCH_OVERHEAD_BYTES: usize = 2 + PagePointer::ENCODED_BYTES;
/// Smallest and largest node the codec accepts.
pub const NODE_SIZE_BYTES_MIN: usize = 256;
pub const NODE_SIZE_BYTES_MAX: usize = 65536;
/// Entries of the largest allowed size that must fit one node, so that an overflowing node can
/// always be split in two and two underfull siblings always merge or rebalance.
const LARGEST_ENTRIES_PER_NODE: usize = 4;
const STRUCTURE: &str = "btree node";

/// The key-plus-value limit for `node_size_bytes` (see the module documentation).
pub const fn max_entry_bytes(node_size_bytes: usize) -> usize {
    (node_size_bytes - NODE_HEADER_BYTES) / LARGEST_ENTRIES_PER_NODE - BRANCH_OVERHEAD_BYTES
}

// The limit must cover the costlier of the two entry kinds, and must fit a u16 length field.
const _: () = assert!(BRANCH_OVERHEAD_BYTES >= LEAF_ENTRY_OVERHEAD_BYTES);
const _: () = assert!(max_entry_bytes(NODE_SIZE_BYTES_MAX) <= u16::MAX as usize);
const _: () =
    assert!(NODE_HEADER_BYTES + LARGEST_ENTRIES_PER_NODE * (max_entry_bytes(2048) + BRANCH_OVERHEAD_BYTES) <= 2048);
const _: () = assert!(max_entry_bytes(NODE_SIZE_BYTES_MIN) > 16);

/// Encoded bytes of a leaf entry.
pub const fn leaf_entry_bytes(key_bytes: usize, value_bytes: usize) -> usize {
    LEAF_ENTRY_OVERHEAD_BYTES + key_bytes + value_bytes
}

/// Encoded bytes of an internal entry.
pub const fn branch_bytes(key_bytes: usize) -> usize {
    BRANCH_OVERHEAD_BYTES + key_bytes
}

/// Index of a node in the tree's dirty-node arena (in memory only, never encoded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DirtyId(pub u32);

/// Where an internal node's child is: on flash (a clean node) or in the dirty-node arena.
/// Only `OnFlash` children can be encoded; the tree writes children before parents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Child {
    OnFlash(PagePointer),
    Dirty(DirtyId),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafEntry {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// One child of an internal node and the smallest key it may hold (empty for child 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Branch {
    pub key: Vec<u8>,
    pub child: Child,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEntries {
    Leaf(Vec<LeafEntry>),
    Internal(Vec<Branch>),
}

/// A decoded node. `level == 0` exactly when `entries` is `Leaf`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub tree_id: u8,
    pub level: u8,
    pub entries: NodeEntries,
}

/// A node as it goes to flash: the whole page and its checksum (which the parent pointer
/// records).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedNode {
    pub bytes: Vec<u8>,
    pub checksum: u32,
}

impl Node {
    pub fn empty_leaf(tree_id: u8) -> Node {
        Node { tree_id, level: 0, entries: NodeEntries::Leaf(Vec::new()) }
    }

    pub fn is_leaf(&self) -> bool {
        matches!(self.entries, NodeEntries::Leaf(_))
    }

    pub fn entry_count(&self) -> usize {
        match &self.entries {
            NodeEntries::Leaf(entries) => entries.len(),
            NodeEntries::Internal(branches) => branches.len(),
        }
    }

    /// Bytes the node would take encoded, before padding. May exceed the node size while the
    /// tree is between an update and the split that follows it.
    pub fn encoded_bytes(&self) -> usize {
        let entry_bytes: usize = match &self.entries {
            NodeEntries::Leaf(entries) => {
                entries.iter().map(|entry| leaf_entry_bytes(entry.key.len(), entry.value.len())).sum()
            }
            NodeEntries::Internal(branches) => branches.iter().map(|branch| branch_bytes(branch.key.len())).sum(),
        };
        NODE_HEADER_BYTES + entry_bytes
    }

    /// For an internal node, the index of the child whose key range holds `key`: the last
    /// separator at or below `key` (separator 0 is minus infinity). Zero for a leaf.
    pub fn child_index(&self, key: &[u8]) -> usize {
        match &self.entries {
            NodeEntries::Leaf(_) => 0,
            NodeEntries::Internal(branches) => {
                // Separator 0 is empty, so at least one separator is <= key and this is >= 1.
                let at_or_below = branches.partition_point(|branch| branch.key.as_slice() <= key);
                at_or_below.saturating_sub(1)
            }
        }
    }

    /// Encodes the node into one page of `node_size_bytes`. Panics if the node breaks a format
    /// rule: the tree only encodes nodes it keeps valid, so a violation is a bug, and writing it
    /// would corrupt the volume.
    pub fn encode(&self, node_size_bytes: usize) -> EncodedNode {
        self.encode_reserving(node_size_bytes, 0)
    }

    /// `encode`, with room for `spare_bytes` more in the buffer (for the offset table a
    /// `NodePage` appends, so building one does not reallocate).
    // Invariant: the tree encodes only nodes whose children it wrote first (`flush_node`); a
    // dirty child here is a bug, and writing the node would corrupt the volume.
    #[allow(clippy::panic)]
    pub(crate) fn encode_reserving(&self, node_size_bytes: usize, spare_bytes: usize) -> EncodedNode {
        assert!(
            (NODE_SIZE_BYTES_MIN..=NODE_SIZE_BYTES_MAX).contains(&node_size_bytes),
            "node size {node_size_bytes} outside {NODE_SIZE_BYTES_MIN}..={NODE_SIZE_BYTES_MAX}"
        );
        let encoded_bytes = self.encoded_bytes();
        assert!(
            encoded_bytes <= node_size_bytes,
            "node of {encoded_bytes} bytes does not fit a {node_size_bytes}-byte page"
        );
        let entry_count = self.entry_count();
        // At most (node size - header) / 4 entries fit, below 2^16 for the largest node.
        let entry_count_field = u16_from_usize(entry_count);
        assert_eq!(self.level == 0, self.is_leaf(), "level {} with the wrong entry kind", self.level);
        let limit_bytes = max_entry_bytes(node_size_bytes);

        let mut writer = Writer::with_capacity(node_size_bytes + spare_bytes);
        writer.u16_le(NODE_MAGIC);
        writer.u8(self.tree_id);
        writer.u8(self.level);
        writer.u16_le(entry_count_field);
        writer.u16_le(0); // reserved
        writer.u32_le(0); // checksum, filled in below
        match &self.entries {
            NodeEntries::Leaf(entries) => {
                let mut previous_key: Option<&[u8]> = None;
                for entry in entries {
                    let (key_bytes, value_bytes) = (entry.key.len(), entry.value.len());
                    assert!(
                        key_bytes + value_bytes <= limit_bytes,
                        "leaf entry of {key_bytes}+{value_bytes} bytes exceeds {limit_bytes}"
                    );
                    assert!(
                        previous_key.iter().all(|previous| *previous < entry.key.as_slice()),
                        "leaf keys out of order at {:?}",
                        entry.key
                    );
                    previous_key = Some(&entry.key);
                    // Both at most `limit_bytes` (checked just above), which fits 16 bits.
                    writer.u16_le(u16_from_usize(key_bytes));
                    writer.u16_le(u16_from_usize(value_bytes));
                    writer.raw(&entry.key);
                    writer.raw(&entry.value);
                }
            }
            NodeEntries::Internal(branches) => {
                assert!(branches.len() >= 2, "internal node with {} children", branches.len());
                let mut previous_key: Option<&[u8]> = None;
                for (index, branch) in branches.iter().enumerate() {
                    let key_bytes = branch.key.len();
                    assert!(key_bytes <= limit_bytes, "separator of {key_bytes} bytes exceeds {limit_bytes}");
                    assert!(index > 0 || branch.key.is_empty(), "separator 0 must be empty");
                    assert!(
                        previous_key.iter().all(|previous| *previous < branch.key.as_slice()),
                        "separators out of order at {:?}",
                        branch.key
                    );
                    previous_key = Some(&branch.key);
                    let pointer = match branch.child {
                        Child::OnFlash(pointer) => pointer,
                        Child::Dirty(id) => {
                            panic!("encoding a node whose child {index} is dirty ({id:?})")
                        }
                    };
                    assert!(!pointer.address.is_null(), "child {index} has the null address");
                    writer.u16_le(u16_from_usize(key_bytes));
                    writer.raw(&branch.key);
                    writer.pointer(pointer);
                }
            }
        }
        let mut bytes = writer.bytes;
        assert_eq!(bytes.len(), encoded_bytes, "encoded_bytes disagrees with the encoder");
        bytes.resize(node_size_bytes, 0);
        let checksum = crc32c_excluding(&bytes, CHECKSUM_OFFSET);
        bytes.splice(CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4, checksum.to_le_bytes());
        assert_eq!(bytes.len(), node_size_bytes, "checksum splice changed the page length");
        EncodedNode { bytes, checksum }
    }

    /// Decodes one whole node page (its length is the node size) into the owned form and
    /// returns it with its checksum. Every rule of the format is checked, so a node that
    /// decodes re-encodes to the same bytes. The tree itself reads clean nodes in place
    /// (`NodePage`); this owned form is for dirty copies and for tools.
    pub fn decode(bytes: &[u8]) -> Result<(Node, u32), DecodeError> {
        let page = NodePage::parse(bytes.to_vec())?;
        Ok((page.to_node(), page.checksum()))
    }
}

/// What `validate` learnt from a node page's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NodeHeader {
    pub tree_id: u8,
    pub level: u8,
    pub entry_count: usize,
    pub checksum: u32,
}

/// Checks every rule of the node format on one whole page (its length is the node size)
/// without building anything: magic, reserved field, checksum, entry sizes against the limit,
/// key order, internal-node shape, null children and zero padding.
pub(crate) fn validate(bytes: &[u8]) -> Result<NodeHeader, DecodeError> {
    let node_size_bytes = bytes.len();
    let mut reader = Reader::new(STRUCTURE, bytes);
    if !(NODE_SIZE_BYTES_MIN..=NODE_SIZE_BYTES_MAX).contains(&node_size_bytes) {
        return Err(reader.invalid("node size out of range", node_size_bytes as u64));
    }
    let magic = reader.u16_le()?;
    if magic != NODE_MAGIC {
        return Err(DecodeError::BadMagic { structure: STRUCTURE, found: u64::from(magic) });
    }
    let tree_id = reader.u8()?;
    let level = reader.u8()?;
    let entry_count = usize::from(reader.u16_le()?);
    let reserved = reader.u16_le()?;
    if reserved != 0 {
        return Err(reader.invalid("reserved header field not zero", u64::from(reserved)));
    }
    let stored = reader.u32_le()?;
    let computed = crc32c_excluding(bytes, CHECKSUM_OFFSET);
    if stored != computed {
        return Err(DecodeError::ChecksumMismatch { structure: STRUCTURE, stored, computed });
    }
    let limit_bytes = max_entry_bytes(node_size_bytes);
    let mut previous_key: Option<&[u8]> = None;
    if level == 0 {
        for _ in 0..entry_count {
            let key_bytes = usize::from(reader.u16_le()?);
            let value_bytes = usize::from(reader.u16_le()?);
            if key_bytes + value_bytes > limit_bytes {
                return Err(reader.invalid("entry larger than the limit", (key_bytes + value_bytes) as u64));
            }
            let key = reader.bytes(key_bytes)?;
            reader.bytes(value_bytes)?;
            if previous_key.is_some_and(|previous| previous >= key) {
                return Err(reader.invalid("leaf keys out of order", key_bytes as u64));
            }
            previous_key = Some(key);
        }
    } else {
        if entry_count < 2 {
            return Err(reader.invalid("internal node with fewer than two children", entry_count as u64));
        }
        for index in 0..entry_count {
            let key_bytes = usize::from(reader.u16_le()?);
            if key_bytes > limit_bytes {
                return Err(reader.invalid("separator larger than the limit", key_bytes as u64));
            }
            if index == 0 && key_bytes != 0 {
                return Err(reader.invalid("first separator not empty", key_bytes as u64));
            }
            let key = reader.bytes(key_bytes)?;
            let pointer = reader.pointer()?;
            if pointer.address.is_null() {
                return Err(reader.invalid("null child address", index as u64));
            }
            if previous_key.is_some_and(|previous| previous >= key) {
                return Err(reader.invalid("separators out of order", index as u64));
            }
            previous_key = Some(key);
        }
    }
    let padding = reader.bytes(reader.remaining_bytes())?;
    if let Some(position) = padding.iter().position(|byte| *byte != 0) {
        return Err(reader.invalid("padding not zero", position as u64));
    }
    Ok(NodeHeader { tree_id, level, entry_count, checksum: stored })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::indexing_slicing, clippy::unwrap_used)]
    use super::*;
    use crate::address::LogAddress;
    use alloc::vec;
    use fsoc_flash::codec::crc32c;

    fn leaf(entries: &[(&[u8], &[u8])]) -> Node {
        Node {
            tree_id: 1,
            level: 0,
            entries: NodeEntries::Leaf(
                entries.iter().map(|(key, value)| LeafEntry { key: key.to_vec(), value: value.to_vec() }).collect(),
            ),
        }
    }

    fn pointer(address: u32, checksum: u32) -> Child {
        Child::OnFlash(PagePointer { address: LogAddress(address), checksum })
    }

    fn internal(level: u8, branches: &[(&[u8], u32)]) -> Node {
        Node {
            tree_id: 2,
            level,
            entries: NodeEntries::Internal(
                branches
                    .iter()
                    .map(|(key, address)| Branch { key: key.to_vec(), child: pointer(*address, address ^ 0xA5A5) })
                    .collect(),
            ),
        }
    }

    /// Rewrites the checksum field so a mutated page reaches the structural checks.
    fn fix_checksum(bytes: &mut [u8]) {
        let checksum = crc32c_excluding(bytes, CHECKSUM_OFFSET);
        bytes[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&checksum.to_le_bytes());
    }

    /// The fuzz property (style guide section 9): decoding either fails or yields a node that
    /// re-encodes to exactly the input.
    fn assert_decode_is_exact(bytes: &[u8]) {
        if let Ok((node, checksum)) = Node::decode(bytes) {
            let encoded = node.encode(bytes.len());
            assert_eq!(encoded.checksum, checksum, "checksum of re-encoded node");
            assert_eq!(encoded.bytes, bytes, "node {node:?} re-encodes differently");
        }
    }

    /// fsoc-media's seeded generator, to pick bytes and bit positions.
    struct Rng(fsoc_media::rng::SeededRng);
    impl Rng {
        fn new(seed: u64) -> Self {
            Rng(fsoc_media::rng::SeededRng::new(seed))
        }
        fn next(&mut self) -> u64 {
            self.0.next_u64()
        }
        fn below(&mut self, bound: usize) -> usize {
            (self.next() % bound as u64) as usize
        }
    }

    #[test]
    fn leaf_and_internal_nodes_round_trip() {
        for node in [
            leaf(&[]),
            leaf(&[(b"", b"empty key"), (b"a", b""), (b"ab", b"value")]),
            internal(1, &[(b"", 7), (b"m", 9)]),
            internal(3, &[(b"", 1), (b"b", 2), (b"ba", 3), (b"z", 4)]),
        ] {
            for node_size_bytes in [256, 2048, 4096, 8192] {
                let encoded = node.encode(node_size_bytes);
                assert_eq!(encoded.bytes.len(), node_size_bytes);
                assert_eq!(encoded.checksum, crc32c_excluding(&encoded.bytes, CHECKSUM_OFFSET));
                let (decoded, checksum) = Node::decode(&encoded.bytes).unwrap();
                assert_eq!(decoded, node);
                assert_eq!(checksum, encoded.checksum);
            }
        }
    }

    /// The example of docs/FORMAT.md: a 256-byte leaf of tree 1 holding "k" -> "v".
    #[test]
    fn header_layout_matches_the_documented_example() {
        let encoded = leaf(&[(b"k", b"v")]).encode(256);
        let expected_prefix: [u8; 18] = [
            0x42, 0x4E, // magic "BN"
            0x01, // tree_id
            0x00, // level
            0x01, 0x00, // entry_count
            0x00, 0x00, // reserved
            0xFD, 0xE2, 0x96, 0xAD, // checksum
            0x01, 0x00, 0x01, 0x00, b'k', b'v',
        ];
        assert_eq!(encoded.bytes[..18], expected_prefix);
        assert_eq!(encoded.checksum, 0xAD96_E2FD);
        assert!(encoded.bytes[18..].iter().all(|byte| *byte == 0), "padding is zero");
        let mut zeroed = encoded.bytes.clone();
        zeroed[8..12].fill(0);
        let checksum = u32::from_le_bytes(encoded.bytes[8..12].try_into().unwrap());
        assert_eq!(checksum, crc32c(&zeroed), "checksum covers the page with the field as zero");
        assert_eq!(checksum, encoded.checksum);
    }

    #[test]
    fn four_largest_entries_fit_every_node_size() {
        for node_size_bytes in [NODE_SIZE_BYTES_MIN, 2048, 4096, 8192, NODE_SIZE_BYTES_MAX] {
            let limit_bytes = max_entry_bytes(node_size_bytes);
            let leaf_bytes = NODE_HEADER_BYTES + 4 * leaf_entry_bytes(limit_bytes, 0);
            let internal_bytes = NODE_HEADER_BYTES + 4 * branch_bytes(limit_bytes);
            assert!(leaf_bytes <= node_size_bytes, "{node_size_bytes}: leaf {leaf_bytes}");
            assert!(internal_bytes <= node_size_bytes, "{node_size_bytes}: internal {internal_bytes}");
            // The limit is tight: one more byte per entry would not fit four internal entries.
            assert!(NODE_HEADER_BYTES + 4 * branch_bytes(limit_bytes + 1) > node_size_bytes);
        }
        assert_eq!(max_entry_bytes(2048), 499);
        assert_eq!(max_entry_bytes(4096), 1011);
        assert_eq!(max_entry_bytes(8192), 2035);
    }

    #[test]
    fn child_index_routes_by_separator() {
        let node = internal(1, &[(b"", 1), (b"d", 2), (b"g", 3)]);
        assert_eq!(node.child_index(b""), 0);
        assert_eq!(node.child_index(b"c"), 0);
        assert_eq!(node.child_index(b"d"), 1, "a separator belongs to its own child");
        assert_eq!(node.child_index(b"dz"), 1);
        assert_eq!(node.child_index(b"g"), 2);
        assert_eq!(node.child_index(b"zzz"), 2);
    }

    /// Builds a page with the given header fields and raw entry bytes and a valid checksum.
    fn raw_page(level: u8, entry_count: u16, reserved: u16, entries: &[u8]) -> Vec<u8> {
        let mut bytes = vec![0u8; 256];
        bytes[0..2].copy_from_slice(&NODE_MAGIC.to_le_bytes());
        bytes[2] = 1;
        bytes[3] = level;
        bytes[4..6].copy_from_slice(&entry_count.to_le_bytes());
        bytes[6..8].copy_from_slice(&reserved.to_le_bytes());
        bytes[12..12 + entries.len()].copy_from_slice(entries);
        fix_checksum(&mut bytes);
        bytes
    }

    fn decode_error_field(bytes: &[u8]) -> &'static str {
        match Node::decode(bytes) {
            Err(DecodeError::InvalidField { field, .. }) => field,
            other => panic!("expected an invalid field, got {other:?}"),
        }
    }

    #[test]
    fn decode_rejects_each_rule_violation() {
        let good = leaf(&[(b"a", b"1"), (b"b", b"2")]).encode(256).bytes;
        assert!(Node::decode(&good).is_ok());

        let mut bad_magic = good.clone();
        bad_magic[0] ^= 1;
        fix_checksum(&mut bad_magic);
        assert!(matches!(Node::decode(&bad_magic), Err(DecodeError::BadMagic { found: 0x4E43, .. })));

        let mut bad_checksum = good.clone();
        bad_checksum[100] = 1;
        assert!(matches!(Node::decode(&bad_checksum), Err(DecodeError::ChecksumMismatch { .. })));

        assert!(matches!(Node::decode(&good[..255]), Err(DecodeError::InvalidField { .. })));
        assert!(matches!(Node::decode(&[]), Err(DecodeError::InvalidField { .. })));

        assert_eq!(decode_error_field(&raw_page(0, 0, 1, &[])), "reserved header field not zero");
        // Two leaf entries "b" then "a".
        let unsorted = [1, 0, 0, 0, b'b', 1, 0, 0, 0, b'a'];
        assert_eq!(decode_error_field(&raw_page(0, 2, 0, &unsorted)), "leaf keys out of order");
        let duplicate = [1, 0, 0, 0, b'a', 1, 0, 0, 0, b'a'];
        assert_eq!(decode_error_field(&raw_page(0, 2, 0, &duplicate)), "leaf keys out of order");
        // One leaf entry with key_len + value_len = 52 > max_entry_bytes(256) = 51.
        let mut oversized = vec![26, 0, 26, 0];
        oversized.extend_from_slice(&[b'x'; 52]);
        assert_eq!(decode_error_field(&raw_page(0, 1, 0, &oversized)), "entry larger than the limit");
        let trailing_garbage = [1, 0, 0, 0, b'a', 0, 0, 7];
        assert_eq!(decode_error_field(&raw_page(0, 1, 0, &trailing_garbage)), "padding not zero");
        assert!(matches!(
            Node::decode(&raw_page(0, 3, 0, &[1, 0, 0, 0, b'a'])),
            Ok(_) | Err(DecodeError::InvalidField { .. }) | Err(DecodeError::Truncated { .. })
        ));
        // An entry count running past the page end is truncation, not a panic.
        assert!(Node::decode(&raw_page(0, u16::MAX, 0, &[])).is_err());

        let child = |key: &[u8], address: u32| {
            let mut bytes = (key.len() as u16).to_le_bytes().to_vec();
            bytes.extend_from_slice(key);
            bytes.extend_from_slice(&address.to_le_bytes());
            bytes.extend_from_slice(&0u32.to_le_bytes());
            bytes
        };
        let one_child = child(b"", 5);
        assert_eq!(decode_error_field(&raw_page(1, 1, 0, &one_child)), "internal node with fewer than two children");
        let nonempty_first = [child(b"a", 5), child(b"b", 6)].concat();
        assert_eq!(decode_error_field(&raw_page(1, 2, 0, &nonempty_first)), "first separator not empty");
        let null_child = [child(b"", 5), child(b"b", u32::MAX)].concat();
        assert_eq!(decode_error_field(&raw_page(1, 2, 0, &null_child)), "null child address");
        let unsorted_separators = [child(b"", 5), child(b"c", 6), child(b"b", 7)].concat();
        assert_eq!(decode_error_field(&raw_page(1, 3, 0, &unsorted_separators)), "separators out of order");
        let valid_internal = [child(b"", 5), child(b"b", 6)].concat();
        assert!(Node::decode(&raw_page(1, 2, 0, &valid_internal)).is_ok());
    }

    /// Random pages (raw, and with magic and checksum made valid so the body parser runs) never
    /// panic, and whatever decodes re-encodes to the same bytes.
    #[test]
    fn random_pages_never_panic() {
        let mut rng = Rng::new(0x5EED_0001);
        for round in 0..3000 {
            let node_size_bytes = [256, 2048][round % 2];
            let mut bytes: Vec<u8> = (0..node_size_bytes).map(|_| rng.next() as u8).collect();
            assert_decode_is_exact(&bytes);
            // Plausible header: magic, small entry count, short entries, zero tail.
            bytes[0..2].copy_from_slice(&NODE_MAGIC.to_le_bytes());
            bytes[3] = (rng.next() % 3) as u8;
            bytes[4..6].copy_from_slice(&((rng.next() % 6) as u16).to_le_bytes());
            bytes[6..8].fill(0);
            for byte in bytes[12..].iter_mut() {
                // Mostly small numbers so length fields stay in range now and then.
                *byte = if rng.below(4) == 0 { rng.next() as u8 } else { (rng.next() % 3) as u8 };
            }
            let cut = 12 + rng.below(64);
            bytes[cut..].fill(0);
            fix_checksum(&mut bytes);
            assert_decode_is_exact(&bytes);
        }
    }

    /// Single-bit flips of valid nodes: with the stored checksum they must all fail (CRC-32C
    /// detects every single-bit error); with the checksum recomputed they reach the structural
    /// rules and must fail or re-encode identically.
    #[test]
    fn mutated_valid_nodes_never_panic() {
        let mut rng = Rng::new(0x5EED_0002);
        let nodes = [
            leaf(&[(b"", b""), (b"alpha", b"1"), (b"beta", b"22"), (b"gamma", &[7u8; 40])]),
            internal(2, &[(b"", 11), (b"k", 12), (b"kk", 13), (b"q", 14)]),
        ];
        for node in &nodes {
            let valid = node.encode(256).bytes;
            for bit_index in 0..valid.len() * 8 {
                let mut mutated = valid.clone();
                mutated[bit_index / 8] ^= 1 << (bit_index % 8);
                assert!(Node::decode(&mutated).is_err(), "bit {bit_index} flip went undetected");
                fix_checksum(&mut mutated);
                assert_decode_is_exact(&mutated);
            }
            for _ in 0..2000 {
                let mut mutated = valid.clone();
                for _ in 0..1 + rng.below(4) {
                    let position = rng.below(64);
                    mutated[position] = rng.next() as u8;
                }
                fix_checksum(&mut mutated);
                assert_decode_is_exact(&mutated);
            }
        }
    }

    #[test]
    #[should_panic(expected = "is dirty")]
    fn encoding_a_dirty_child_is_a_bug() {
        let node = Node {
            tree_id: 1,
            level: 1,
            entries: NodeEntries::Internal(vec![
                Branch { key: vec![], child: pointer(1, 1) },
                Branch { key: b"m".to_vec(), child: Child::Dirty(DirtyId(0)) },
            ]),
        };
        node.encode(2048);
    }
}
