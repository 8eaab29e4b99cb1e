//! Layer 4: copy-on-write B+trees of variable-length byte keys and values, one node per page.
//!
//! The file system keeps two instances (seed 003): the directory tree (key: parent inode u64 BE,
//! then the name) and the allocation tree (key: inode u64 BE, record kind u8, offset u64 BE).
//! Keys compare as unsigned bytes, a proper prefix first, so big-endian integer prefixes sort
//! numerically.
//!
//! Invariants, all checked by [`Tree::check`]:
//! - A node read from flash is never changed in place; changing it makes a dirty in-memory copy,
//!   releases the old page exactly once and dirties every ancestor (path copy), so the committed
//!   tree stays intact on flash until the layer above moves its metaroot.
//! - Every child pointer carries the child's address and checksum; following it verifies both,
//!   plus the child's tree id and level.
//! - Heap use is the clean-node cache, bounded in bytes, plus the dirty nodes, which every update
//!   keeps within the tree's dirty budget by writing them out (not a commit); the tree is never
//!   loaded whole.
//! - A clean node is held as its page bytes, read in place (`NodePage`); only a dirty copy is
//!   decoded into owned entries.
//!
//! Files: `node` (the on-flash node format, its codec and the owned form of dirty nodes), `page`
//! (clean nodes read in place), `cache` (LRU of clean nodes bounded in bytes), `tree` (search,
//! cursor, update, split/merge, flush, relocation and the fsck walk).

mod cache;
mod node;
mod page;
#[cfg(test)]
pub(crate) mod ram_store;
#[cfg(test)]
mod tests;
mod tree;

pub use node::{
    Branch, Child, DirtyId, EncodedNode, LeafEntry, Node, NodeEntries, NODE_HEADER_BYTES, NODE_MAGIC,
    NODE_SIZE_BYTES_MAX, NODE_SIZE_BYTES_MIN,
};
pub use page::NodePage;
pub use tree::{KeyValue, Tree, TreeCounters};

/// Default byte bound of one tree's node cache: 64 nodes of the default 2 KiB page (the former
/// node-count default) with their offset tables and bookkeeping, rounded up.
pub const CACHE_BYTES_MAX_DEFAULT: usize = 160 * 1024;

use crate::address::{LogAddress, PagePointer};
use fsoc_flash::codec::DecodeError;

/// The tree's only way to the flash. The segment log implements it; tests use a RAM store.
/// Where a tree reads its node pages: shared by concurrent readers (`&self`).
pub trait NodeReader {
    /// The store's own error (the segment log's, with power loss and full-volume cases of its
    /// own), carried out of the tree unchanged in `TreeError::Store`.
    type Error;
    /// Bytes available for one node (the page data size).
    fn node_size_bytes(&self) -> usize;
    /// Reads the page at `address` into `out` (resized to `node_size_bytes`).
    fn read_page(&self, address: LogAddress, out: &mut alloc::vec::Vec<u8>) -> Result<(), Self::Error>;
    /// Reads the page at `address` again from the volume's redundancy (a parity row, or a
    /// mirror-meta second copy) into `out`, for a page that read but failed its checks: `false`
    /// when there is none. The caller checks the result again.
    fn read_redundant_copy(&self, _address: LogAddress, _out: &mut alloc::vec::Vec<u8>) -> Result<bool, Self::Error> {
        Ok(false)
    }
}

/// Where a tree reads and writes its node pages (one writer at a time).
pub trait NodeStore: NodeReader {
    /// Appends a node page to the log and returns where it went. `tag` goes in the page's spare
    /// area so the cleaner can tell what the page is.
    fn append_node(&mut self, bytes: &[u8], tag: NodeTag) -> Result<LogAddress, Self::Error>;
    /// The working state no longer references this page (the committed state may still).
    /// An error means the page was not the store's to release (a record on flash pointed at
    /// it wrongly): nothing changed, and the operation must fail.
    fn release(&mut self, address: LogAddress) -> Result<(), Self::Error>;
}

/// What a node page is, as recorded in the page's spare area for the cleaner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeTag {
    pub tree_id: u8,
    pub level: u8,
}

/// Where a tree lives on flash: its root node and the number of levels (1 = the root is a
/// leaf). The metaroot stores both; the height bounds every descent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeRoot {
    pub pointer: PagePointer,
    pub height: u8,
}

/// Per-tree settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeConfig {
    /// Written into every node and checked on every read, so a pointer into the other tree is
    /// detected.
    pub tree_id: u8,
    /// Bytes of clean nodes kept in memory (LRU; each node costs its page, 2 bytes per entry and
    /// `cache::ENTRY_OVERHEAD_BYTES`). Zero disables the cache.
    pub cache_bytes_max: usize,
    /// Dirty nodes the tree may hold when an update returns: an update that leaves more writes
    /// every dirty node out through the store (`Tree::flush`, not a commit). One update adds at
    /// most `2 × height + 1` on top. `usize::MAX`: no limit.
    pub dirty_nodes_max: usize,
}

/// What [`Tree::check`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeStats {
    /// Nodes walked: on-flash nodes plus dirty in-memory ones.
    pub node_count: u64,
    /// Of those, leaves.
    pub leaf_count: u64,
    /// Leaf entries.
    pub entry_count: u64,
    /// Levels (1 = the root is a leaf).
    pub height: u8,
}

/// What went wrong in a tree operation; `E` is the store's error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TreeError<E> {
    /// The store failed to read the page at `address`, or to append a node (`address` is
    /// `LogAddress::NULL` then); its own error says why (power loss, no space, ...).
    #[error("node at {address}: {error}")]
    Store { address: LogAddress, error: E },
    /// The page does not hold the node its parent (or the metaroot) says it holds.
    /// `address` is `LogAddress::NULL` for a dirty node that fails `Tree::check`.
    #[error("node at {address} corrupt: {reason}")]
    Corrupt { address: LogAddress, reason: &'static str },
    /// Key plus value exceed `Tree::max_entry_bytes` for the node size.
    #[error("entry of {key_bytes} key bytes and {value_bytes} value bytes exceeds {limit_bytes}")]
    EntryTooLarge { key_bytes: usize, value_bytes: usize, limit_bytes: usize },
}

impl<E> TreeError<E> {
    /// A node page that failed to decode.
    pub fn from_decode(address: LogAddress, error: &DecodeError) -> TreeError<E> {
        let reason = match error {
            DecodeError::Truncated { .. } => "node truncated",
            DecodeError::ChecksumMismatch { .. } => "node checksum mismatch",
            DecodeError::BadMagic { .. } => "bad node magic",
            // The decoder names the violated rule in `field`.
            DecodeError::InvalidField { field, .. } => field,
            // Nodes carry no version; only the superblock decoder reports one.
            DecodeError::UnsupportedVersion { .. } => "unsupported version",
        };
        TreeError::Corrupt { address, reason }
    }
}
