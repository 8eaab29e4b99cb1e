//! A clean node read in place: its page and a table of where each entry starts, in one
//! allocation that the node cache and its readers share. Keys, values and child pointers are
//! read from the page bytes when asked for; nothing is built per entry (the owned `Node` is
//! only for dirty copies).
//!
//! A page is checked against every rule of the format once, when it is parsed
//! (`node::validate`), so the accessors' bounds checks cannot fail on a parsed page; one that
//! does is a bug, and panics.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::host_endian_bytes)]

use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::address::{LogAddress, PagePointer};
use crate::btree::node::{
    self, branch_bytes, leaf_entry_bytes, Branch, Child, LeafEntry, Node, NodeEntries, CHECKSUM_OFFSET,
    NODE_HEADER_BYTES,
};
use fsoc_flash::codec::DecodeError;
use fsoc_flash::convert::u16_from_usize;

/// Bytes per entry of the offset table (a node is at most 65,536 bytes, so an entry starts
/// below 65,536).
const OFFSET_BYTES: usize = 2;
/// Offsets of the header fields the accessors read (docs/FORMAT.md, "B+tree node").
const TREE_ID_OFFSET: usize = 2;

/// A clean node: the page as it is on flash, followed by one little-endian u16 per entry giving
/// the entry's offset in the page. Cloning shares the bytes.
#[derive(Clone)]
pub struct NodePage {
    bytes: Arc<[u8]>,
    node_size_bytes: usize,
    entry_count: usize,
    level: u8,
}

impl core::fmt::Debug for NodePage {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        formatter
            .debug_struct("NodePage")
            .field("tree_id", &self.tree_id())
            .field("level", &self.level)
            .field("entry_count", &self.entry_count)
            .field("checksum", &self.checksum())
            .finish()
    }
}

/// The `length` bytes at `start` of a parsed node (page and offset table).
// Invariant: `parse` checked every entry of the page against its bounds (`node::validate`),
// `encode` wrote them, and the offset table has one entry per entry; the accessors ask only
// for fields of those entries, the header and the table.
#[allow(clippy::panic)]
fn field(bytes: &[u8], start: usize, length: usize) -> &[u8] {
    match bytes.get(start..start + length) {
        Some(field) => field,
        None => panic!("{length} bytes at {start} outside a parsed node of {} bytes", bytes.len()),
    }
}

/// The u16 at `offset` of a parsed node.
fn read_u16(bytes: &[u8], offset: usize) -> usize {
    match *field(bytes, offset, 2) {
        [low, high] => usize::from(u16::from_le_bytes([low, high])),
        _ => 0, // `field` returned two bytes
    }
}

/// The u32 at `offset` of a parsed node.
fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    match *field(bytes, offset, 4) {
        [b0, b1, b2, b3] => u32::from_le_bytes([b0, b1, b2, b3]),
        _ => 0, // `field` returned four bytes
    }
}

/// Appends an entry's offset to the offset table. An entry starts inside the node, and a node
/// is at most 65,536 bytes, so the offset fits 16 bits.
fn push_offset(bytes: &mut Vec<u8>, offset: usize) {
    bytes.extend_from_slice(&u16_from_usize(offset).to_le_bytes());
}

impl NodePage {
    /// Checks `page` (one whole node page: its length is the node size) against every rule of
    /// the format and builds its offset table in the same buffer.
    pub fn parse(mut page: Vec<u8>) -> Result<NodePage, DecodeError> {
        let header = node::validate(&page)?;
        let node_size_bytes = page.len();
        page.reserve_exact(OFFSET_BYTES * header.entry_count);
        let mut offset = NODE_HEADER_BYTES;
        for _ in 0..header.entry_count {
            let key_bytes = read_u16(&page, offset);
            let entry_bytes = if header.level == 0 {
                leaf_entry_bytes(key_bytes, read_u16(&page, offset + 2))
            } else {
                branch_bytes(key_bytes)
            };
            push_offset(&mut page, offset);
            offset += entry_bytes;
        }
        Ok(NodePage::from_parts(page, node_size_bytes, header.entry_count, header.level))
    }

    /// Encodes `node` (see `Node::encode`, which panics on a node that breaks a format rule)
    /// into a page of `node_size_bytes` with its offset table.
    pub fn encode(node: &Node, node_size_bytes: usize) -> NodePage {
        let entry_count = node.entry_count();
        let mut bytes = node.encode_reserving(node_size_bytes, OFFSET_BYTES * entry_count).bytes;
        let mut offset = NODE_HEADER_BYTES;
        match &node.entries {
            NodeEntries::Leaf(entries) => {
                for entry in entries {
                    push_offset(&mut bytes, offset);
                    offset += leaf_entry_bytes(entry.key.len(), entry.value.len());
                }
            }
            NodeEntries::Internal(branches) => {
                for branch in branches {
                    push_offset(&mut bytes, offset);
                    offset += branch_bytes(branch.key.len());
                }
            }
        }
        NodePage::from_parts(bytes, node_size_bytes, entry_count, node.level)
    }

    fn from_parts(bytes: Vec<u8>, node_size_bytes: usize, entry_count: usize, level: u8) -> NodePage {
        assert_eq!(bytes.len(), node_size_bytes + OFFSET_BYTES * entry_count, "offset table of the wrong size");
        NodePage { bytes: Arc::from(bytes), node_size_bytes, entry_count, level }
    }

    /// The page as it is on flash.
    pub fn page_bytes(&self) -> &[u8] {
        field(&self.bytes, 0, self.node_size_bytes)
    }

    /// Heap bytes the node holds (page and offset table), what the node cache charges for it.
    pub fn memory_bytes(&self) -> usize {
        self.bytes.len()
    }

    pub fn tree_id(&self) -> u8 {
        field(&self.bytes, TREE_ID_OFFSET, 1).first().copied().unwrap_or_default()
    }

    pub fn level(&self) -> u8 {
        self.level
    }

    pub fn is_leaf(&self) -> bool {
        self.level == 0
    }

    pub fn entry_count(&self) -> usize {
        self.entry_count
    }

    /// The page's `checksum` field (what the parent pointer records).
    pub fn checksum(&self) -> u32 {
        read_u32(&self.bytes, CHECKSUM_OFFSET)
    }

    fn entry_offset(&self, index: usize) -> usize {
        assert!(index < self.entry_count, "entry {index} of a node with {} entries", self.entry_count);
        read_u16(&self.bytes, self.node_size_bytes + OFFSET_BYTES * index)
    }

    fn slice(&self, start: usize, length: usize) -> &[u8] {
        field(&self.bytes, start, length)
    }

    /// The key of leaf entry `index`, or separator `index` of an internal node.
    pub fn key(&self, index: usize) -> &[u8] {
        let offset = self.entry_offset(index);
        let key_start = if self.is_leaf() { offset + 4 } else { offset + 2 };
        self.slice(key_start, read_u16(&self.bytes, offset))
    }

    /// The value of leaf entry `index`.
    pub fn value(&self, index: usize) -> &[u8] {
        assert!(self.is_leaf(), "value {index} of an internal node requested");
        let offset = self.entry_offset(index);
        let key_bytes = read_u16(&self.bytes, offset);
        self.slice(offset + 4 + key_bytes, read_u16(&self.bytes, offset + 2))
    }

    /// The child pointer of branch `index` of an internal node.
    pub fn child(&self, index: usize) -> PagePointer {
        assert!(!self.is_leaf(), "child {index} of a leaf requested");
        let offset = self.entry_offset(index);
        let pointer_start = offset + 2 + read_u16(&self.bytes, offset);
        PagePointer {
            address: LogAddress(read_u32(&self.bytes, pointer_start)),
            checksum: read_u32(&self.bytes, pointer_start + 4),
        }
    }

    /// The owned form, for a dirty copy.
    pub fn to_node(&self) -> Node {
        let entries = if self.is_leaf() {
            NodeEntries::Leaf(
                (0..self.entry_count)
                    .map(|index| LeafEntry { key: self.key(index).to_vec(), value: self.value(index).to_vec() })
                    .collect(),
            )
        } else {
            NodeEntries::Internal(
                (0..self.entry_count)
                    .map(|index| Branch { key: self.key(index).to_vec(), child: Child::OnFlash(self.child(index)) })
                    .collect(),
            )
        };
        Node { tree_id: self.tree_id(), level: self.level, entries }
    }
}

/// A node being read: clean (in place) or dirty (owned). The searches go through this, so they
/// are written once for both.
#[derive(Clone, Copy, Debug)]
pub enum NodeRef<'a> {
    Page(&'a NodePage),
    Owned(&'a Node),
}

impl<'a> NodeRef<'a> {
    pub fn level(self) -> u8 {
        match self {
            NodeRef::Page(page) => page.level(),
            NodeRef::Owned(node) => node.level,
        }
    }

    pub fn tree_id(self) -> u8 {
        match self {
            NodeRef::Page(page) => page.tree_id(),
            NodeRef::Owned(node) => node.tree_id,
        }
    }

    pub fn is_leaf(self) -> bool {
        match self {
            NodeRef::Page(page) => page.is_leaf(),
            NodeRef::Owned(node) => node.is_leaf(),
        }
    }

    pub fn entry_count(self) -> usize {
        match self {
            NodeRef::Page(page) => page.entry_count(),
            NodeRef::Owned(node) => node.entry_count(),
        }
    }

    /// Key `index` of a leaf, or separator `index` of an internal node.
    // Invariant (key, value, child): the tree asks only for entries below `entry_count`, values
    // of leaves and children of internal nodes, as it does of a page.
    #[allow(clippy::panic)]
    pub fn key(self, index: usize) -> &'a [u8] {
        match self {
            NodeRef::Page(page) => page.key(index),
            NodeRef::Owned(node) => match &node.entries {
                NodeEntries::Leaf(entries) => entries.get(index).map(|entry| entry.key.as_slice()),
                NodeEntries::Internal(branches) => branches.get(index).map(|branch| branch.key.as_slice()),
            }
            .unwrap_or_else(|| panic!("entry {index} of a node with {} entries", node.entry_count())),
        }
    }

    /// Value `index` of a leaf.
    #[allow(clippy::panic)]
    pub fn value(self, index: usize) -> &'a [u8] {
        match self {
            NodeRef::Page(page) => page.value(index),
            NodeRef::Owned(node) => match &node.entries {
                NodeEntries::Leaf(entries) => entries
                    .get(index)
                    .map(|entry| entry.value.as_slice())
                    .unwrap_or_else(|| panic!("entry {index} of a leaf with {} entries", entries.len())),
                NodeEntries::Internal(_) => panic!("value {index} of an internal node requested"),
            },
        }
    }

    /// Child `index` of an internal node.
    #[allow(clippy::panic)]
    pub fn child(self, index: usize) -> Child {
        match self {
            NodeRef::Page(page) => Child::OnFlash(page.child(index)),
            NodeRef::Owned(node) => match &node.entries {
                NodeEntries::Internal(branches) => branches
                    .get(index)
                    .map(|branch| branch.child)
                    .unwrap_or_else(|| panic!("child {index} of a node with {} children", branches.len())),
                NodeEntries::Leaf(_) => panic!("child {index} of a leaf requested"),
            },
        }
    }

    /// The number of leading entries whose key satisfies `below` (which must hold for a prefix
    /// of the entries: keys are in order).
    pub fn partition_point(self, mut below: impl FnMut(&[u8]) -> bool) -> usize {
        let (mut low, mut high) = (0, self.entry_count());
        while low < high {
            let middle = low + (high - low) / 2;
            if below(self.key(middle)) {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low
    }

    /// Where `key` is in a leaf: `Ok(index)` if present, else `Err(insertion index)`.
    pub fn search(self, key: &[u8]) -> Result<usize, usize> {
        let index = self.partition_point(|entry_key| entry_key < key);
        if index < self.entry_count() && self.key(index) == key {
            Ok(index)
        } else {
            Err(index)
        }
    }

    /// For an internal node, the index of the child whose key range holds `key`: the last
    /// separator at or below `key` (separator 0 is minus infinity). Zero for a leaf.
    pub fn child_index(self, key: &[u8]) -> usize {
        if self.is_leaf() {
            return 0;
        }
        // Separator 0 is empty, so at least one separator is <= key and this is >= 1.
        self.partition_point(|separator| separator <= key).saturating_sub(1)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::indexing_slicing, clippy::unwrap_used)]
    use super::*;
    use alloc::vec;

    fn leaf(entries: &[(&[u8], &[u8])]) -> Node {
        Node {
            tree_id: 3,
            level: 0,
            entries: NodeEntries::Leaf(
                entries.iter().map(|(key, value)| LeafEntry { key: key.to_vec(), value: value.to_vec() }).collect(),
            ),
        }
    }

    #[test]
    fn parsed_and_encoded_pages_read_the_same_entries_in_place() {
        let node = leaf(&[(b"", b"empty"), (b"a", b""), (b"ab", b"value"), (b"b", &[7u8; 40])]);
        let encoded = NodePage::encode(&node, 256);
        let parsed = NodePage::parse(node.encode(256).bytes).unwrap();
        for page in [&encoded, &parsed] {
            assert_eq!(page.page_bytes(), node.encode(256).bytes.as_slice());
            assert_eq!(page.memory_bytes(), 256 + 2 * 4, "one allocation: the page and 2 bytes per entry");
            assert_eq!((page.tree_id(), page.level(), page.entry_count()), (3, 0, 4));
            assert_eq!(page.checksum(), node.encode(256).checksum);
            assert_eq!(page.key(2), b"ab");
            assert_eq!(page.value(2), b"value");
            assert_eq!(page.value(3), &[7u8; 40]);
            assert_eq!(page.to_node(), node);
            let view = NodeRef::Page(page);
            assert_eq!(view.search(b"ab"), Ok(2));
            assert_eq!(view.search(b"aa"), Err(2));
            assert_eq!(view.search(b""), Ok(0));
            assert_eq!(view.search(b"z"), Err(4));
        }
    }

    #[test]
    fn internal_pages_route_like_owned_nodes() {
        let pointer = |address: u32| Child::OnFlash(PagePointer { address: LogAddress(address), checksum: !address });
        let node = Node {
            tree_id: 2,
            level: 1,
            entries: NodeEntries::Internal(vec![
                Branch { key: vec![], child: pointer(1) },
                Branch { key: b"d".to_vec(), child: pointer(2) },
                Branch { key: b"g".to_vec(), child: pointer(3) },
            ]),
        };
        let page = NodePage::encode(&node, 2048);
        for key in [&b""[..], b"c", b"d", b"dz", b"g", b"zzz"] {
            assert_eq!(NodeRef::Page(&page).child_index(key), NodeRef::Owned(&node).child_index(key), "{key:?}");
        }
        assert_eq!(NodeRef::Page(&page).child(2), pointer(3));
        assert_eq!(page.to_node(), node);
    }
}
