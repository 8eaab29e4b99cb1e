//! The copy-on-write B+tree: the types and the arena here; `read` (lookups, cursor, seeks),
//! `update` (copy-on-write upserts and removals, splits and merges, the dirty budget), `flush`
//! (writing the arena out, relocation for the cleaner) and `check` (the fsck walk).
//!
//! Working state = the committed nodes on flash plus an arena of dirty in-memory copies. A dirty
//! node's parent is always dirty too (path copy), so the root is dirty exactly when any node is,
//! and flushing writes children before parents. Every loop that follows child pointers is
//! bounded by the height: a child's level must be its parent's minus one, so a cycle of corrupt
//! pointers ends in `TreeError::Corrupt`.

use alloc::vec::Vec;

use crate::address::PagePointer;
use crate::btree::cache::NodeCache;
use crate::btree::node::{max_entry_bytes, Child, DirtyId, Node};
use crate::btree::page::{NodePage, NodeRef};
use crate::btree::{TreeConfig, TreeError, TreeRoot};
use fsoc_flash::convert::u32_from_usize;
use fsoc_flash::sync::Mutex;
use portable_atomic::{AtomicU64, Ordering};

mod check;
mod flush;
mod read;
mod update;

/// An entry returned by the range queries: key, then value.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// Called by `Tree::check` for every leaf entry, in key order.
type EntryVisitor<'a, E> = dyn FnMut(&[u8], &[u8]) -> Result<(), TreeError<E>> + 'a;

/// A node at or below this fraction of the node size is merged with or refilled from a sibling.
const UNDERFLOW_DIVISOR: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RootRef {
    Clean(PagePointer),
    Dirty(DirtyId),
}

/// Dirty nodes by `DirtyId`. Slots are reused; the arena is emptied by every flush.
#[derive(Default)]
struct DirtyArena {
    slots: Vec<Option<Node>>,
    free_slots: Vec<u32>,
    count: usize,
}

// Invariant (for the panics of the arena's methods): a `DirtyId` is made only by `insert` and
// lives only in the tree's root and dirty parents, which drop it when `remove` frees its slot;
// no input from flash or a caller names a slot.
impl DirtyArena {
    fn insert(&mut self, node: Node) -> DirtyId {
        self.count += 1;
        if let Some(slot_index) = self.free_slots.pop() {
            let slot = self.slots.get_mut(slot_index as usize);
            assert!(slot.as_ref().is_some_and(|slot| slot.is_none()), "free dirty slot {slot_index} is not free");
            if let Some(slot) = slot {
                *slot = Some(node);
            }
            return DirtyId(slot_index);
        }
        // At most one dirty node per node page a transaction writes: far below u32::MAX.
        let slot_index = u32_from_usize(self.slots.len());
        self.slots.push(Some(node));
        DirtyId(slot_index)
    }

    #[allow(clippy::panic)] // Invariant: see the impl.
    fn get(&self, id: DirtyId) -> &Node {
        match self.slots.get(id.0 as usize) {
            Some(Some(node)) => node,
            _ => panic!("dirty node {id:?} does not exist"),
        }
    }

    #[allow(clippy::panic)] // Invariant: see the impl.
    fn get_mut(&mut self, id: DirtyId) -> &mut Node {
        match self.slots.get_mut(id.0 as usize) {
            Some(Some(node)) => node,
            _ => panic!("dirty node {id:?} does not exist"),
        }
    }

    #[allow(clippy::panic)] // Invariant: see the impl.
    fn remove(&mut self, id: DirtyId) -> Node {
        let node = match self.slots.get_mut(id.0 as usize).and_then(Option::take) {
            Some(node) => node,
            None => panic!("removing dirty node {id:?}, which does not exist"),
        };
        self.free_slots.push(id.0);
        self.count -= 1;
        if self.count == 0 {
            // Give the memory of a large transaction back once it is flushed.
            self.slots = Vec::new();
            self.free_slots = Vec::new();
        }
        node
    }

    fn clear(&mut self) {
        *self = DirtyArena::default();
    }
}

/// A node being read: a dirty one stays in the arena; a clean one is its page, shared with the
/// cache and read in place.
enum NodeHandle {
    Dirty(DirtyId),
    Clean(NodePage),
}

/// One node of a descent from the root: the reference to it (from its parent, or the root),
/// the node, and the index of the child taken from it (0 at the last step).
struct DescentStep {
    reference: Child,
    handle: NodeHandle,
    child_index: usize,
}

/// Which entry a range search wants.
#[derive(Clone, Copy, Debug)]
enum Seek {
    /// The first with key >= the search key (> when not inclusive).
    Forward { inclusive: bool },
    /// The last with key <= the search key.
    Backward,
}

/// An internal node of a range search with the children still to try.
struct SeekFrame {
    handle: NodeHandle,
    next_index: usize,
    remaining: usize,
}

/// One step of a path from the root: a dirty node and the index of the child taken from it.
#[derive(Clone, Debug)]
struct PathStep {
    node: DirtyId,
    child_index: usize,
    /// The keys the parent routes to `node`.
    range: KeyRange,
}

/// The keys a node may hold: `lower <= key < upper` (`upper == None`: no bound; the empty key
/// is the smallest key, so an empty `lower` is no bound either).
#[derive(Clone, Debug, Default)]
struct KeyRange {
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
}

impl KeyRange {
    /// The range of child `child_index` of `parent`, a node with this range.
    fn child(&self, parent: NodeRef<'_>, child_index: usize) -> KeyRange {
        assert!(!parent.is_leaf(), "range of child {child_index} of a leaf requested");
        let lower = match child_index {
            0 => self.lower.clone(),
            _ => parent.key(child_index).to_vec(),
        };
        let upper = if child_index + 1 < parent.entry_count() {
            Some(parent.key(child_index + 1).to_vec())
        } else {
            self.upper.clone()
        };
        KeyRange { lower, upper }
    }

    fn below_upper(&self, key: &[u8]) -> bool {
        self.upper.as_deref().is_none_or(|upper| key < upper)
    }

    /// Whether the node's keys lie in the range. Keys inside a node are in order (the decoder
    /// checks), so the first and last key decide; for an internal node, separators 1 and last.
    fn holds(&self, node: NodeRef<'_>) -> bool {
        let count = node.entry_count();
        if count == 0 {
            return true;
        }
        let last_below_upper = self.below_upper(node.key(count - 1));
        if node.is_leaf() {
            node.key(0) >= self.lower.as_slice() && last_below_upper
        } else {
            (count < 2 || node.key(1) > self.lower.as_slice()) && last_below_upper
        }
    }
}

/// What a tree has done since it was created or opened (for tests and benchmarks). Nodes are
/// counted per level kind so tests can see that every structural change really happens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeCounters {
    pub leaf_splits: u64,
    pub internal_splits: u64,
    pub leaf_merges: u64,
    pub internal_merges: u64,
    /// Two siblings too full to merge that had their entries split evenly instead.
    pub leaf_redistributions: u64,
    pub internal_redistributions: u64,
    pub root_grows: u64,
    pub root_shrinks: u64,
    /// Clean nodes copied into dirty ones (each releases one page).
    pub nodes_copied: u64,
    pub nodes_written: u64,
    /// Pages read through the store, cache misses and `check` included.
    pub pages_read: u64,
    /// Of those, leaves.
    pub leaf_pages_read: u64,
    /// The most dirty nodes the tree held when an update returned (before any flush the dirty
    /// budget called for).
    pub dirty_nodes_peak: u64,
    /// Flushes an update made to keep the tree within `TreeConfig::dirty_nodes_max`.
    pub budget_flushes: u64,
}

/// A copy-on-write B+tree of byte keys and byte values (see the `btree` module documentation).
pub struct Tree {
    config: TreeConfig,
    root: RootRef,
    /// Levels, 1 when the root is a leaf. Trusted: it comes from the metaroot or from this tree.
    height: u8,
    dirty: DirtyArena,
    /// Clean nodes, shared by concurrent readers (locked only to look up or insert, never
    /// across a flash read).
    cache: Mutex<NodeCache>,
    counters: TreeCounters,
    /// Node pages read (kept apart from `counters` because readers count through `&self`).
    pages_read: AtomicU64,
    /// Of those, leaves.
    leaf_pages_read: AtomicU64,
}
impl Tree {
    /// A tree whose root is a dirty empty leaf; the first flush writes it.
    pub fn new_empty(config: TreeConfig) -> Tree {
        let mut dirty = DirtyArena::default();
        let root = dirty.insert(Node::empty_leaf(config.tree_id));
        Tree {
            config,
            root: RootRef::Dirty(root),
            height: 1,
            dirty,
            cache: Mutex::new(NodeCache::new(config.cache_bytes_max)),
            counters: TreeCounters::default(),
            pages_read: AtomicU64::new(0),
            leaf_pages_read: AtomicU64::new(0),
        }
    }

    /// The tree committed at `root`. Nothing is read until the tree is used.
    pub fn open(config: TreeConfig, root: TreeRoot) -> Tree {
        Tree {
            config,
            root: RootRef::Clean(root.pointer),
            height: root.height,
            dirty: DirtyArena::default(),
            cache: Mutex::new(NodeCache::new(config.cache_bytes_max)),
            counters: TreeCounters::default(),
            pages_read: AtomicU64::new(0),
            leaf_pages_read: AtomicU64::new(0),
        }
    }

    /// The largest key length plus value length an entry may have with `node_size_bytes`
    /// nodes: any node holds at least four such entries (docs/FORMAT.md, "B+tree node").
    pub fn max_entry_bytes(node_size_bytes: usize) -> usize {
        max_entry_bytes(node_size_bytes)
    }

    pub fn config(&self) -> TreeConfig {
        self.config
    }

    /// How many dirty nodes the tree may hold before an update flushes: a volume remounted
    /// read-write takes back the bound its read-only mount lifted.
    pub fn set_dirty_nodes_max(&mut self, dirty_nodes_max: usize) {
        self.config.dirty_nodes_max = dirty_nodes_max;
    }

    /// Levels of the working tree (1 = the root is a leaf).
    pub fn height(&self) -> u8 {
        self.height
    }

    /// Dirty nodes held in memory; the next flush writes exactly this many pages.
    pub fn dirty_node_count(&self) -> usize {
        self.dirty.count
    }

    /// What this tree has done since `new_empty` or `open`.
    pub fn counters(&self) -> TreeCounters {
        TreeCounters {
            pages_read: self.pages_read.load(Ordering::Relaxed),
            leaf_pages_read: self.leaf_pages_read.load(Ordering::Relaxed),
            ..self.counters
        }
    }

    /// Clean nodes held in the cache.
    pub fn cached_node_count(&self) -> usize {
        self.cache.lock().len()
    }

    /// Bytes the cache charges for them (at most `cache_bytes_max`).
    pub fn cached_bytes(&self) -> usize {
        self.cache.lock().used_bytes()
    }

    /// Whether anything changed since the last flush (equivalently: the root is dirty).
    pub fn is_dirty(&self) -> bool {
        let dirty = matches!(self.root, RootRef::Dirty(_));
        // Path copy: a dirty node makes its root dirty, and a dirty root is itself counted.
        assert_eq!(dirty, self.dirty.count > 0, "root dirty = {dirty} with {} dirty nodes", self.dirty.count);
        dirty
    }

    /// The committed location of the working tree; `None` while the root is dirty.
    pub fn root(&self) -> Option<TreeRoot> {
        match self.root {
            RootRef::Clean(pointer) => Some(TreeRoot { pointer, height: self.height }),
            RootRef::Dirty(_) => None,
        }
    }

    /// Drops the clean nodes the cache holds (they are read again from flash when next
    /// needed); dirty nodes stay.
    pub fn clear_cache(&mut self) {
        self.cache.get_mut().clear();
    }

    /// Drops all dirty state and the cache and returns to `root` (after a failed commit). The
    /// store's own accounting of released pages is the caller's to roll back.
    pub fn reset_to(&mut self, root: TreeRoot) {
        self.dirty.clear();
        self.cache.get_mut().clear();
        self.root = RootRef::Clean(root.pointer);
        self.height = root.height;
        assert_eq!(self.dirty_node_count(), 0, "reset left dirty nodes");
    }
}
