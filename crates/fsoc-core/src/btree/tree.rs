//! The copy-on-write B+tree: lookups, upserts and removals (with splits and merges), flush,
//! cleaner relocation and the fsck walk.
//!
//! Working state = the committed nodes on flash plus an arena of dirty in-memory copies. A dirty
//! node's parent is always dirty too (path copy), so the root is dirty exactly when any node is,
//! and flushing writes children before parents. Every loop that follows child pointers is
//! bounded by the height: a child's level must be its parent's minus one, so a cycle of corrupt
//! pointers ends in `TreeError::Corrupt`.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;

use crate::address::{LogAddress, PagePointer};
use crate::btree::cache::NodeCache;
use crate::btree::node::{
    branch_bytes, leaf_entry_bytes, max_entry_bytes, Branch, Child, DirtyId, LeafEntry, Node, NodeEntries,
    NODE_HEADER_BYTES, NODE_SIZE_BYTES_MAX, NODE_SIZE_BYTES_MIN,
};
use crate::btree::page::{NodePage, NodeRef};
use crate::btree::{NodeReader, NodeStore, NodeTag, TreeConfig, TreeError, TreeRoot, TreeStats};
use fsoc_flash::convert::u32_from_usize;
use fsoc_flash::sync::Mutex;
use portable_atomic::{AtomicU64, Ordering};

/// An entry returned by the range queries: key, then value.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// Called by `Tree::check` for every leaf entry, in key order.
type EntryVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), TreeError> + 'a;

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

    /// Drops all dirty state and the cache and returns to `root` (after a failed commit). The
    /// store's own accounting of released pages is the caller's to roll back.
    pub fn reset_to(&mut self, root: TreeRoot) {
        self.dirty.clear();
        self.cache.get_mut().clear();
        self.root = RootRef::Clean(root.pointer);
        self.height = root.height;
        assert_eq!(self.dirty_node_count(), 0, "reset left dirty nodes");
    }

    // ----- reading -------------------------------------------------------------------------

    fn node_size_bytes(store: &dyn NodeReader) -> usize {
        let node_size_bytes = store.node_size_bytes();
        assert!(
            (NODE_SIZE_BYTES_MIN..=NODE_SIZE_BYTES_MAX).contains(&node_size_bytes),
            "store node size {node_size_bytes} outside \
             {NODE_SIZE_BYTES_MIN}..={NODE_SIZE_BYTES_MAX}"
        );
        node_size_bytes
    }

    fn root_address(&self) -> LogAddress {
        match self.root {
            RootRef::Clean(pointer) => pointer.address,
            RootRef::Dirty(_) => LogAddress::NULL,
        }
    }

    fn root_level(&self) -> Result<u8, TreeError> {
        self.height
            .checked_sub(1)
            .ok_or(TreeError::Corrupt { address: self.root_address(), reason: "tree height zero" })
    }

    /// `descend` returned no node: it always returns the root at least, so this is a bug; an
    /// error (the caller poisons the volume) rather than a panic.
    fn empty_descent(&self) -> TreeError {
        TreeError::Corrupt { address: self.root_address(), reason: "descent returned no node" }
    }

    fn too_deep(&self) -> TreeError {
        TreeError::Corrupt { address: self.root_address(), reason: "descent deeper than the recorded height" }
    }

    fn node<'a>(&'a self, handle: &'a NodeHandle) -> NodeRef<'a> {
        match handle {
            NodeHandle::Dirty(id) => NodeRef::Owned(self.dirty.get(*id)),
            NodeHandle::Clean(page) => NodeRef::Page(page),
        }
    }

    /// Reads the page at `address` into a fresh buffer (one node's worth), counting the read.
    fn read_page(&self, store: &dyn NodeReader, address: LogAddress) -> Result<Vec<u8>, TreeError> {
        let node_size_bytes = Self::node_size_bytes(store);
        self.pages_read.fetch_add(1, Ordering::Relaxed);
        let mut page = Vec::with_capacity(node_size_bytes);
        store.read_page(address, &mut page)?;
        assert_eq!(page.len(), node_size_bytes, "store returned a short page for {address:?}");
        Ok(page)
    }

    /// Reads and verifies the node `pointer` refers to, bypassing the cache.
    fn read_node(&self, store: &dyn NodeReader, pointer: PagePointer, level: u8) -> Result<NodePage, TreeError> {
        let address = pointer.address;
        if address.is_null() {
            return Err(TreeError::Corrupt { address, reason: "null child pointer" });
        }
        let page = self.read_page(store, address)?;
        let page = NodePage::parse(page).map_err(|error| TreeError::from_decode(address, &error))?;
        if page.checksum() != pointer.checksum {
            return Err(TreeError::Corrupt { address, reason: "checksum differs from the parent pointer" });
        }
        if page.tree_id() != self.config.tree_id {
            return Err(TreeError::Corrupt { address, reason: "node of another tree" });
        }
        if page.level() != level {
            return Err(TreeError::Corrupt { address, reason: "level differs from what the parent implies" });
        }
        if page.is_leaf() {
            self.leaf_pages_read.fetch_add(1, Ordering::Relaxed);
        }
        Ok(page)
    }

    /// The clean node `pointer` refers to, from the cache or from flash. Two readers missing
    /// the same node both read it; the second insert replaces the first with equal content.
    fn load(&self, store: &dyn NodeReader, pointer: PagePointer, level: u8) -> Result<NodePage, TreeError> {
        {
            let mut cache = self.cache.lock();
            if let Some(page) = cache.get(pointer.address) {
                if page.checksum() == pointer.checksum && page.level() == level && page.tree_id() == self.config.tree_id
                {
                    return Ok(page);
                }
                // The cached copy disagrees with the pointer: let the flash decide.
                cache.remove(pointer.address);
            }
        }
        let page = self.read_node(store, pointer, level)?;
        self.cache.lock().insert(pointer.address, page.clone());
        Ok(page)
    }

    fn open_root(&self, store: &dyn NodeReader) -> Result<NodeHandle, TreeError> {
        let level = self.root_level()?;
        match self.root {
            RootRef::Dirty(id) => Ok(NodeHandle::Dirty(id)),
            RootRef::Clean(pointer) => Ok(NodeHandle::Clean(self.load(store, pointer, level)?)),
        }
    }

    /// The reference to the root, as a parent would hold it.
    fn root_reference(&self) -> Child {
        match self.root {
            RootRef::Clean(pointer) => Child::OnFlash(pointer),
            RootRef::Dirty(id) => Child::Dirty(id),
        }
    }

    /// Opens child `child_index` of `parent`, one level down.
    fn open_child(
        &self,
        store: &dyn NodeReader,
        parent: &NodeHandle,
        child_index: usize,
    ) -> Result<NodeHandle, TreeError> {
        let node = self.node(parent);
        let (child, level) = Self::child_of(node, child_index);
        self.open_reference(store, child, level)
    }

    /// Opens the node `child` refers to, which must be at `level`.
    fn open_reference(&self, store: &dyn NodeReader, child: Child, level: u8) -> Result<NodeHandle, TreeError> {
        match child {
            Child::Dirty(id) => {
                assert_eq!(self.dirty.get(id).level, level, "dirty child {id:?} at the wrong level");
                Ok(NodeHandle::Dirty(id))
            }
            Child::OnFlash(pointer) => Ok(NodeHandle::Clean(self.load(store, pointer, level)?)),
        }
    }

    /// Child `child_index` of internal node `node` and the level it must have.
    // Invariant: callers pass internal nodes only, and level 0 means a leaf (the decoder checks
    // it for pages; dirty nodes keep the level of the node they copy or split).
    #[allow(clippy::panic)]
    fn child_of(node: NodeRef<'_>, child_index: usize) -> (Child, u8) {
        // Internal nodes have level >= 1: the decoder ties level 0 to leaves.
        let level = node.level().checked_sub(1).unwrap_or_else(|| panic!("internal node at level 0"));
        (node.child(child_index), level)
    }

    pub fn get(&self, store: &dyn NodeReader, key: &[u8]) -> Result<Option<Vec<u8>>, TreeError> {
        let mut handle = self.open_root(store)?;
        // Bounded by the height: every step goes one level down, checked by `load`.
        for _level in 0..self.height {
            let node = self.node(&handle);
            if node.is_leaf() {
                return Ok(node.search(key).ok().map(|index| node.value(index).to_vec()));
            }
            let child_index = node.child_index(key);
            handle = self.open_child(store, &handle, child_index)?;
        }
        Err(self.too_deep())
    }

    /// The path from the root to the node at `stop_level` whose range holds `key`, read once
    /// (from the cache or flash): the one descent of an update, which then copies the nodes it
    /// found (`dirty_descent`) only if something changes.
    fn descend(&self, store: &dyn NodeReader, key: &[u8], stop_level: u8) -> Result<Vec<DescentStep>, TreeError> {
        // Opening the root first turns a height of zero into an error.
        let mut handle = self.open_root(store)?;
        assert!(stop_level < self.height, "stop level {stop_level} not below height {}", self.height);
        let mut steps: Vec<DescentStep> = Vec::with_capacity(usize::from(self.height));
        let mut reference = self.root_reference();
        // Bounded by the height: every step goes one level down (checked when a child is opened).
        for _level in 0..self.height {
            let node = self.node(&handle);
            if node.level() == stop_level {
                steps.push(DescentStep { reference, handle, child_index: 0 });
                return Ok(steps);
            }
            let child_index = node.child_index(key);
            let (child, level) = Self::child_of(node, child_index);
            let next = self.open_reference(store, child, level)?;
            steps.push(DescentStep { reference, handle, child_index });
            reference = child;
            handle = next;
        }
        Err(self.too_deep())
    }

    /// The first entry with key >= `key`.
    pub fn first_at_or_after(&self, store: &dyn NodeReader, key: &[u8]) -> Result<Option<KeyValue>, TreeError> {
        let root = self.open_root(store)?;
        self.seek_forward(store, root, key, true)
    }

    /// Visits the entries with key >= `key` (> when not `inclusive`) in key order, calling
    /// `visit(key, value)` until it returns false or the tree ends: a cursor that reads each
    /// node of the range once (a leaf's successor is found through the internal nodes kept on
    /// a stack of at most `height` frames), instead of one descent per entry. Keys and values
    /// are handed out in place, from the page.
    ///
    /// On a corrupt tree it stops with an error rather than loop: every step goes one level
    /// down (checked when a child is opened), a non-root leaf must hold entries, and keys must
    /// increase strictly across the walk (inside a node the decoder checked it; across leaves
    /// it is checked here), so the visits are bounded by the entries visited.
    pub fn scan_from(
        &self,
        store: &dyn NodeReader,
        key: &[u8],
        inclusive: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), TreeError> {
        // (internal node, index of the next child to descend into)
        let mut stack: Vec<(NodeHandle, usize)> = Vec::with_capacity(usize::from(self.height));
        let mut current = self.open_root(store)?;
        // The last key visited, kept to check the order across leaves.
        let mut previous: Option<Vec<u8>> = None;
        let mut first_leaf = true;
        loop {
            // Down to a leaf: along `key` the first time, leftmost afterwards.
            loop {
                let node = self.node(&current);
                if node.is_leaf() {
                    break;
                }
                let child_index = if first_leaf { node.child_index(key) } else { 0 };
                if stack.len() >= usize::from(self.height) {
                    return Err(self.too_deep());
                }
                let child = self.open_child(store, &current, child_index)?;
                stack.push((current, child_index + 1));
                current = child;
            }
            let node = self.node(&current);
            let count = node.entry_count();
            if count == 0 && !stack.is_empty() {
                return Err(TreeError::Corrupt { address: self.root_address(), reason: "empty leaf below the root" });
            }
            let start = match (first_leaf, inclusive) {
                (false, _) => 0,
                (true, true) => node.partition_point(|entry_key| entry_key < key),
                (true, false) => node.partition_point(|entry_key| entry_key <= key),
            };
            first_leaf = false;
            if start < count {
                if previous.as_deref().is_some_and(|previous| node.key(start) <= previous) {
                    return Err(TreeError::Corrupt {
                        address: self.root_address(),
                        reason: "keys out of order across leaves",
                    });
                }
                for index in start..count {
                    if !visit(node.key(index), node.value(index)) {
                        return Ok(());
                    }
                }
                let last = previous.get_or_insert_with(Vec::new);
                last.clear();
                last.extend_from_slice(node.key(count - 1));
            }
            // Up to the nearest ancestor with a child left, then into that child.
            current = loop {
                let Some((parent, next_index)) = stack.pop() else { return Ok(()) };
                if next_index < self.node(&parent).entry_count() {
                    let child = self.open_child(store, &parent, next_index)?;
                    stack.push((parent, next_index + 1));
                    break child;
                }
            };
        }
    }

    /// The first entry with key > `key`.
    pub fn first_after(&self, store: &dyn NodeReader, key: &[u8]) -> Result<Option<KeyValue>, TreeError> {
        let root = self.open_root(store)?;
        self.seek_forward(store, root, key, false)
    }

    /// The last entry with key <= `key`.
    pub fn last_at_or_before(&self, store: &dyn NodeReader, key: &[u8]) -> Result<Option<KeyValue>, TreeError> {
        let root = self.open_root(store)?;
        self.seek_backward(store, root, key)
    }

    /// First entry with key >= `key` (or > when not `inclusive`), searching from `root`.
    fn seek_forward(
        &self,
        store: &dyn NodeReader,
        root: NodeHandle,
        key: &[u8],
        inclusive: bool,
    ) -> Result<Option<KeyValue>, TreeError> {
        self.seek(store, root, key, Seek::Forward { inclusive })
    }

    /// Last entry with key <= `key`, searching from `root`.
    fn seek_backward(
        &self,
        store: &dyn NodeReader,
        root: NodeHandle,
        key: &[u8],
    ) -> Result<Option<KeyValue>, TreeError> {
        self.seek(store, root, key, Seek::Backward)
    }

    /// The range search behind `seek_forward` and `seek_backward`. Iterative: the stack holds
    /// one internal node per level with the children still to try, so its depth is at most the
    /// height. In a valid tree the answer is found within two descents: if the subtree the key
    /// falls in has no answer, the neighbouring subtree's nearest leaf has it (separators bound
    /// the keys, and non-root leaves are not empty). So a search opening more than twice the
    /// height of nodes is on a corrupt tree (a shared or misordered child), and is an error
    /// rather than a walk whose length crafted pointers could multiply.
    fn seek(
        &self,
        store: &dyn NodeReader,
        root: NodeHandle,
        key: &[u8],
        direction: Seek,
    ) -> Result<Option<KeyValue>, TreeError> {
        let opens_max = 2 * usize::from(self.height);
        let mut opens = 1usize;
        let mut stack: Vec<SeekFrame> = Vec::with_capacity(usize::from(self.height));
        let mut current = root;
        loop {
            let node = self.node(&current);
            if node.is_leaf() {
                let found = match direction {
                    Seek::Forward { inclusive: true } => Some(node.partition_point(|entry_key| entry_key < key)),
                    Seek::Forward { inclusive: false } => Some(node.partition_point(|entry_key| entry_key <= key)),
                    Seek::Backward => node.partition_point(|entry_key| entry_key <= key).checked_sub(1),
                };
                if let Some(index) = found.filter(|&index| index < node.entry_count()) {
                    return Ok(Some((node.key(index).to_vec(), node.value(index).to_vec())));
                }
            } else {
                let start = node.child_index(key);
                // Forward: children start.. in order; backward: ..=start in reverse.
                let (next_index, remaining) = match direction {
                    Seek::Forward { .. } => (start, node.entry_count().saturating_sub(start)),
                    Seek::Backward => (start, start + 1),
                };
                stack.push(SeekFrame { handle: current, next_index, remaining });
                assert!(stack.len() <= usize::from(self.height), "search stack deeper than the height {}", self.height);
            }
            // The next child to try, backing up past exhausted nodes.
            current = loop {
                let Some(frame) = stack.last_mut() else { return Ok(None) };
                if frame.remaining == 0 {
                    stack.pop();
                    continue;
                }
                let child_index = frame.next_index;
                frame.remaining -= 1;
                frame.next_index = match direction {
                    Seek::Forward { .. } => child_index + 1,
                    Seek::Backward => child_index.saturating_sub(1),
                };
                opens += 1;
                if opens > opens_max {
                    return Err(TreeError::Corrupt {
                        address: self.root_address(),
                        reason: "search opened more nodes than a valid tree needs",
                    });
                }
                let handle = &frame.handle;
                let child = self.open_child(store, handle, child_index)?;
                break child;
            };
        }
    }

    // ----- copy-on-write ---------------------------------------------------------------------

    /// Makes a dirty copy of the clean node at `address`. The working state stops referring to
    /// the page here, so this is where it is released, once; the committed state may still
    /// use it, which is the store's business.
    fn adopt(&mut self, store: &mut dyn NodeStore, address: LogAddress, page: &NodePage) -> DirtyId {
        assert!(!address.is_null(), "adopting a node without an address");
        let id = self.dirty.insert(page.to_node());
        self.counters.nodes_copied += 1;
        // The page may be erased and rewritten once released; never serve it from the cache.
        self.cache.get_mut().remove(address);
        store.release(address);
        id
    }

    /// Makes child `child_index` of the dirty node `parent` dirty and returns it. `range` is
    /// the child's key range: a node copied from flash must lie inside it, or splits and merges
    /// of it could put separators out of order, which the encoder would refuse with a panic.
    fn dirty_child(
        &mut self,
        store: &mut dyn NodeStore,
        parent: DirtyId,
        child_index: usize,
        range: &KeyRange,
    ) -> Result<DirtyId, TreeError> {
        let (child, level) = Self::child_of(NodeRef::Owned(self.dirty.get(parent)), child_index);
        match child {
            Child::Dirty(id) => Ok(id),
            Child::OnFlash(pointer) => {
                let page = self.load(store, pointer, level)?;
                Ok(self.adopt_child(store, parent, child_index, pointer, &page, range)?)
            }
        }
    }

    /// Copies the clean child `child_index` of the dirty node `parent`, already read as `page`,
    /// into a dirty node and links it in its parent (see `dirty_child` for `range`).
    fn adopt_child(
        &mut self,
        store: &mut dyn NodeStore,
        parent: DirtyId,
        child_index: usize,
        pointer: PagePointer,
        page: &NodePage,
        range: &KeyRange,
    ) -> Result<DirtyId, TreeError> {
        if !range.holds(NodeRef::Page(page)) {
            let reason = "keys outside the parent's separators";
            return Err(TreeError::Corrupt { address: pointer.address, reason });
        }
        let id = self.adopt(store, pointer.address, page);
        self.set_child(parent, child_index, Child::Dirty(id));
        Ok(id)
    }

    /// Makes the root dirty (copying it if it is clean) and returns it.
    fn dirty_root(&mut self, store: &mut dyn NodeStore) -> Result<DirtyId, TreeError> {
        match self.root {
            RootRef::Dirty(id) => Ok(id),
            RootRef::Clean(pointer) => {
                let level = self.root_level()?;
                let page = self.load(store, pointer, level)?;
                let id = self.adopt(store, pointer.address, &page);
                self.root = RootRef::Dirty(id);
                Ok(id)
            }
        }
    }

    // Invariant (set_child, branches_mut, leaf_entries_mut): the ids come from a path or flush
    // stack the tree built, whose steps name dirty nodes of the right kind and children
    // that exist.
    #[allow(clippy::panic)]
    fn set_child(&mut self, parent: DirtyId, child_index: usize, child: Child) {
        let branch = self.branches_mut(parent).get_mut(child_index);
        let branch = branch.unwrap_or_else(|| panic!("no child {child_index} in {parent:?}"));
        branch.child = child;
    }

    #[allow(clippy::panic)]
    fn branches_mut(&mut self, id: DirtyId) -> &mut Vec<Branch> {
        match &mut self.dirty.get_mut(id).entries {
            NodeEntries::Internal(branches) => branches,
            NodeEntries::Leaf(_) => {
                panic!("dirty node {id:?} is a leaf, expected an internal node")
            }
        }
    }

    #[allow(clippy::panic)]
    fn leaf_entries_mut(&mut self, id: DirtyId) -> &mut Vec<LeafEntry> {
        match &mut self.dirty.get_mut(id).entries {
            NodeEntries::Leaf(entries) => entries,
            NodeEntries::Internal(_) => panic!("dirty node {id:?} is internal, expected a leaf"),
        }
    }

    /// Makes the nodes of `descent` (root first) dirty, copying each clean one from the page
    /// the descent already holds, and returns them as a path with each node's key range.
    // Invariant: `descend` pairs each reference with the node it opened, under `&mut self`.
    #[allow(clippy::panic)]
    fn dirty_descent(
        &mut self,
        store: &mut dyn NodeStore,
        descent: Vec<DescentStep>,
    ) -> Result<Vec<PathStep>, TreeError> {
        let mut path: Vec<PathStep> = Vec::with_capacity(descent.len());
        let mut range = KeyRange::default();
        let last_index = descent.len().saturating_sub(1);
        for (depth, step) in descent.into_iter().enumerate() {
            let id = match (step.reference, &step.handle, path.last()) {
                (Child::Dirty(id), NodeHandle::Dirty(handle_id), _) => {
                    assert_eq!(id, *handle_id, "descent step {depth} names two nodes");
                    id
                }
                (Child::OnFlash(pointer), NodeHandle::Clean(page), None) => {
                    let id = self.adopt(store, pointer.address, page);
                    self.root = RootRef::Dirty(id);
                    id
                }
                (Child::OnFlash(pointer), NodeHandle::Clean(page), Some(parent)) => {
                    let (parent, child_index) = (parent.node, parent.child_index);
                    self.adopt_child(store, parent, child_index, pointer, page, &range)?
                }
                // A dirty node's parent is dirty (path copy), and copying the parent keeps its
                // clean children's pointers, so the reference and the node agree.
                (reference, _, _) => panic!("descent step {depth}: reference {reference:?} disagrees with its node"),
            };
            let child_range = match depth < last_index {
                true => range.child(NodeRef::Owned(self.dirty.get(id)), step.child_index),
                false => KeyRange::default(),
            };
            path.push(PathStep { node: id, child_index: step.child_index, range });
            range = child_range;
        }
        Ok(path)
    }

    // ----- updates ---------------------------------------------------------------------------

    /// Inserts or replaces the value of `key`; returns the previous value. One descent finds
    /// the leaf; the nodes on the way are copied only if the value changes.
    // Invariant: the leaf's dirty copy holds the entries of the leaf the descent searched.
    #[allow(clippy::panic)]
    pub fn insert(
        &mut self,
        store: &mut dyn NodeStore,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<Vec<u8>>, TreeError> {
        let node_size_bytes = Self::node_size_bytes(store);
        let limit_bytes = max_entry_bytes(node_size_bytes);
        if key.len() + value.len() > limit_bytes {
            return Err(TreeError::EntryTooLarge { key_bytes: key.len(), value_bytes: value.len(), limit_bytes });
        }
        let descent = self.descend(store, key, 0)?;
        let leaf = descent.last().ok_or_else(|| self.empty_descent())?;
        let leaf = self.node(&leaf.handle);
        let found = leaf.search(key);
        let previous = found.ok().map(|index| leaf.value(index).to_vec());
        if previous.as_deref() == Some(value) {
            // Nothing changes, so nothing is copied (and no page is rewritten at the flush).
            return Ok(previous);
        }
        let path = self.dirty_descent(store, descent)?;
        let leaf = path.last().ok_or_else(|| self.empty_descent())?.node;
        let entries = self.leaf_entries_mut(leaf);
        match found {
            Ok(index) => {
                let entry = entries.get_mut(index).unwrap_or_else(|| panic!("leaf copy lost entry {index}"));
                assert_eq!(entry.key, key, "leaf copy differs from the leaf read");
                entry.value = value.to_vec();
            }
            Err(index) => {
                assert!(
                    entries.get(index).is_none_or(|entry| entry.key.as_slice() > key),
                    "leaf copy differs from the leaf read"
                );
                entries.insert(index, LeafEntry { key: key.to_vec(), value: value.to_vec() });
            }
        }
        self.restore_balance(store, &path, node_size_bytes)?;
        self.keep_dirty_budget(store)?;
        Ok(previous)
    }

    /// Removes `key`; returns its value if it was present. One descent, as for `insert`.
    pub fn remove(&mut self, store: &mut dyn NodeStore, key: &[u8]) -> Result<Option<Vec<u8>>, TreeError> {
        let node_size_bytes = Self::node_size_bytes(store);
        let descent = self.descend(store, key, 0)?;
        let leaf = descent.last().ok_or_else(|| self.empty_descent())?;
        let leaf = self.node(&leaf.handle);
        let Ok(index) = leaf.search(key) else {
            // Removing an absent key changes nothing, so nothing is copied.
            return Ok(None);
        };
        let path = self.dirty_descent(store, descent)?;
        let leaf = path.last().ok_or_else(|| self.empty_descent())?.node;
        let entries = self.leaf_entries_mut(leaf);
        assert!(index < entries.len(), "leaf copy lost entry {index}");
        let removed = entries.remove(index);
        assert_eq!(removed.key, key, "leaf copy differs from the leaf read");
        self.restore_balance(store, &path, node_size_bytes)?;
        self.keep_dirty_budget(store)?;
        Ok(Some(removed.value))
    }

    /// After an update: records the dirty count and, if it is over `dirty_nodes_max`, writes
    /// every dirty node out (a flush, not a commit: the committed tree stays where it is), so
    /// one operation making many updates stays within the budget.
    fn keep_dirty_budget(&mut self, store: &mut dyn NodeStore) -> Result<(), TreeError> {
        let dirty_count = self.dirty.count;
        self.counters.dirty_nodes_peak = self.counters.dirty_nodes_peak.max(dirty_count as u64);
        if dirty_count > self.config.dirty_nodes_max {
            self.flush(store)?;
            self.counters.budget_flushes += 1;
        }
        Ok(())
    }

    /// After the leaf at the end of `path` changed: splits nodes that overflow and merges or
    /// refills nodes that fell below a quarter, bottom-up, then grows or shrinks the root.
    fn restore_balance(
        &mut self,
        store: &mut dyn NodeStore,
        path: &[PathStep],
        node_size_bytes: usize,
    ) -> Result<(), TreeError> {
        let underflow_bytes = node_size_bytes / UNDERFLOW_DIVISOR;
        for (depth, pair) in path.windows(2).enumerate().rev() {
            let [parent, node] = pair else { continue };
            let node = node.node;
            let (child, _) = Self::child_of(NodeRef::Owned(self.dirty.get(parent.node)), parent.child_index);
            assert_eq!(child, Child::Dirty(node), "path step {} is not its parent's child", depth + 1);
            let encoded_bytes = self.dirty.get(node).encoded_bytes();
            if encoded_bytes > node_size_bytes {
                self.split_child(parent.node, parent.child_index, node_size_bytes);
            } else if encoded_bytes < underflow_bytes {
                self.rebalance_child(store, parent, node_size_bytes)?;
            }
        }
        let root = path.first().ok_or_else(|| self.empty_descent())?.node;
        assert_eq!(self.root, RootRef::Dirty(root), "path does not start at the root");
        self.fix_root(root, node_size_bytes);
        Ok(())
    }

    /// Splits the dirty child `child_index` of `parent` in two by bytes and adds the new right
    /// half to `parent`.
    // Invariant: only a dirty child that overflows is split: more than a node's bytes, and an
    // entry takes at most a quarter node, so it holds at least four entries and both halves some.
    #[allow(clippy::panic)]
    fn split_child(&mut self, parent: DirtyId, child_index: usize, node_size_bytes: usize) {
        let (child, _) = Self::child_of(NodeRef::Owned(self.dirty.get(parent)), child_index);
        let Child::Dirty(left) = child else { panic!("splitting clean child {child_index} of {parent:?}") };
        let node = self.dirty.get_mut(left);
        let split_index = split_index(&node.entries, node_size_bytes);
        let (separator, right_entries) = match &mut node.entries {
            NodeEntries::Leaf(entries) => {
                let right = entries.split_off(split_index);
                let (Some(left_last), Some(right_first)) = (entries.last(), right.first()) else {
                    panic!("leaf split at {split_index} left an empty half");
                };
                (shortest_separator(&left_last.key, &right_first.key), NodeEntries::Leaf(right))
            }
            NodeEntries::Internal(branches) => {
                let mut right = branches.split_off(split_index);
                let first = right.first_mut().unwrap_or_else(|| panic!("internal split left an empty half"));
                // The right node's first separator moves up; in the node it becomes minus infinity.
                (core::mem::take(&mut first.key), NodeEntries::Internal(right))
            }
        };
        let right = Node { tree_id: node.tree_id, level: node.level, entries: right_entries };
        let is_leaf = right.is_leaf();
        let left_bytes = node.encoded_bytes();
        let right_bytes = right.encoded_bytes();
        assert!(left_bytes <= node_size_bytes, "left half of {left_bytes} bytes overflows");
        assert!(right_bytes <= node_size_bytes, "right half of {right_bytes} bytes overflows");
        let right_id = self.dirty.insert(right);
        if is_leaf {
            self.counters.leaf_splits += 1;
        } else {
            self.counters.internal_splits += 1;
        }
        self.branches_mut(parent).insert(child_index + 1, Branch { key: separator, child: Child::Dirty(right_id) });
    }

    /// The dirty child `child_index` of `parent` fell below a quarter: merges it with a sibling,
    /// or, if both do not fit one node, splits their entries evenly between them.
    // Invariant: siblings are at the same level, so of the same kind, and internal nodes have
    // children (the decoder and `fix_root` see to it).
    #[allow(clippy::panic)]
    fn rebalance_child(
        &mut self,
        store: &mut dyn NodeStore,
        parent_step: &PathStep,
        node_size_bytes: usize,
    ) -> Result<(), TreeError> {
        let (parent, child_index) = (parent_step.node, parent_step.child_index);
        let child_count = self.branches_mut(parent).len();
        // Internal nodes have two children or more (the decoder and `fix_root` see to it), and
        // the parent has not changed yet at this level.
        assert!(child_count >= 2, "parent {parent:?} of an underfull node has {child_count} children");
        let left_index = if child_index + 1 < child_count { child_index } else { child_index - 1 };
        let right_index = left_index + 1;
        let parent_node = NodeRef::Owned(self.dirty.get(parent));
        let left_range = parent_step.range.child(parent_node, left_index);
        let right_range = parent_step.range.child(parent_node, right_index);
        let left = self.dirty_child(store, parent, left_index, &left_range)?;
        let right = self.dirty_child(store, parent, right_index, &right_range)?;
        let removed = self.branches_mut(parent).remove(right_index);
        assert_eq!(removed.child, Child::Dirty(right), "removed the wrong branch");
        let right_node = self.dirty.remove(right);
        let left_node = self.dirty.get_mut(left);
        match (&mut left_node.entries, right_node.entries) {
            (NodeEntries::Leaf(left_entries), NodeEntries::Leaf(right_entries)) => {
                left_entries.extend(right_entries);
            }
            (NodeEntries::Internal(left_branches), NodeEntries::Internal(mut right_branches)) => {
                // The separator comes down as the key of the right node's first child.
                let first = right_branches.first_mut().unwrap_or_else(|| panic!("internal node without children"));
                assert!(first.key.is_empty(), "first separator of {right:?} not empty");
                first.key = removed.key;
                left_branches.extend(right_branches);
            }
            _ => panic!("siblings {left:?} and {right:?} of different kinds"),
        }
        let is_leaf = self.dirty.get(left).is_leaf();
        if self.dirty.get(left).encoded_bytes() > node_size_bytes {
            // Too much for one node: split the combined entries at the most even point.
            self.split_child(parent, left_index, node_size_bytes);
            // Counted as a redistribution, not as a merge and a split.
            if is_leaf {
                self.counters.leaf_splits -= 1;
                self.counters.leaf_redistributions += 1;
            } else {
                self.counters.internal_splits -= 1;
                self.counters.internal_redistributions += 1;
            }
        } else if is_leaf {
            self.counters.leaf_merges += 1;
        } else {
            self.counters.internal_merges += 1;
        }
        Ok(())
    }

    /// Adds a level when the root overflowed; removes levels while the root is an internal
    /// node with one child.
    fn fix_root(&mut self, root: DirtyId, node_size_bytes: usize) {
        let root_node = self.dirty.get(root);
        if root_node.encoded_bytes() > node_size_bytes {
            assert!(self.height < u8::MAX, "tree height overflows");
            let level = root_node.level + 1;
            let branches = alloc::vec![Branch { key: Vec::new(), child: Child::Dirty(root) }];
            let new_root = Node { tree_id: self.config.tree_id, level, entries: NodeEntries::Internal(branches) };
            let new_root = self.dirty.insert(new_root);
            self.split_child(new_root, 0, node_size_bytes);
            self.root = RootRef::Dirty(new_root);
            self.height += 1;
            self.counters.root_grows += 1;
            assert_eq!(self.height - 1, level, "new root level {level} with height {}", self.height);
            return;
        }
        let mut root = root;
        // Bounded by the height, which drops by one per step.
        while let NodeEntries::Internal(branches) = &self.dirty.get(root).entries {
            let [only] = branches.as_slice() else { break };
            let only = only.child;
            self.dirty.remove(root);
            self.height -= 1;
            self.counters.root_shrinks += 1;
            match only {
                Child::Dirty(child) => {
                    root = child;
                    self.root = RootRef::Dirty(child);
                }
                Child::OnFlash(pointer) => {
                    // Unreachable in practice (merging dirties the survivor), but consistent.
                    self.root = RootRef::Clean(pointer);
                    assert_eq!(self.dirty.count, 0, "clean root above dirty nodes");
                    return;
                }
            }
        }
        assert_eq!(self.dirty.get(root).level + 1, self.height, "root level disagrees with height");
    }

    // ----- flush -----------------------------------------------------------------------------

    /// Writes every dirty node bottom-up (children before parents, so each parent records its
    /// children's final address and checksum) and returns the new root. The pages the dirty
    /// nodes replace were released when they were copied. On error the nodes not yet written
    /// stay dirty; the tree is still consistent.
    pub fn flush(&mut self, store: &mut dyn NodeStore) -> Result<TreeRoot, TreeError> {
        let node_size_bytes = Self::node_size_bytes(store);
        let pointer = match self.root {
            RootRef::Clean(pointer) => pointer,
            RootRef::Dirty(root) => {
                let dirty_before = self.dirty.count;
                let pointer = self.flush_node(store, root, node_size_bytes)?;
                self.root = RootRef::Clean(pointer);
                assert_eq!(
                    self.dirty.count, 0,
                    "{} of {dirty_before} dirty nodes unreachable at flush",
                    self.dirty.count
                );
                pointer
            }
        };
        assert!(!self.is_dirty(), "tree dirty after flush");
        Ok(TreeRoot { pointer, height: self.height })
    }

    /// Writes the dirty subtree at `root` children first. Iterative: the explicit stack holds
    /// one dirty node per level (each child is one level below its parent), so its depth is at
    /// most the height whatever the tree holds.
    // Invariant: the stack holds the root until the root is written, and then the loop returns.
    #[allow(clippy::panic)]
    fn flush_node(
        &mut self,
        store: &mut dyn NodeStore,
        root: DirtyId,
        node_size_bytes: usize,
    ) -> Result<PagePointer, TreeError> {
        // (dirty node, index of the next branch to look at for a dirty child)
        let mut stack: Vec<(DirtyId, usize)> = Vec::with_capacity(usize::from(self.height));
        stack.push((root, 0));
        loop {
            let Some(&(id, next_index)) = stack.last() else {
                panic!("flush stack emptied before the root was written");
            };
            let dirty_child = match &self.dirty.get(id).entries {
                NodeEntries::Leaf(_) => None,
                NodeEntries::Internal(branches) => {
                    branches.iter().enumerate().skip(next_index).find_map(|(index, branch)| match branch.child {
                        Child::Dirty(child) => Some((index, child)),
                        Child::OnFlash(_) => None,
                    })
                }
            };
            if let Some((child_index, child)) = dirty_child {
                if let Some(top) = stack.last_mut() {
                    top.1 = child_index + 1;
                }
                stack.push((child, 0));
                assert!(stack.len() <= usize::from(self.height), "dirty nodes deeper than the height {}", self.height);
                continue;
            }
            // Every child is on flash now: write this node and record it in its parent.
            let pointer = self.write_dirty_node(store, id, node_size_bytes)?;
            stack.pop();
            match stack.last() {
                None => return Ok(pointer),
                Some(&(parent, next_index)) => {
                    assert!(next_index > 0, "child written before its parent chose it");
                    self.set_child(parent, next_index - 1, Child::OnFlash(pointer));
                }
            }
        }
    }

    /// Writes one dirty node whose children are all on flash and moves it to the cache.
    fn write_dirty_node(
        &mut self,
        store: &mut dyn NodeStore,
        id: DirtyId,
        node_size_bytes: usize,
    ) -> Result<PagePointer, TreeError> {
        let node = self.dirty.get(id);
        // `encode` refuses (panics on) a node with a dirty child.
        let page = NodePage::encode(node, node_size_bytes);
        let tag = NodeTag { tree_id: node.tree_id, level: node.level };
        let address = store.append_node(page.page_bytes(), tag)?;
        assert!(!address.is_null(), "store appended a node at the null address");
        self.dirty.remove(id);
        self.counters.nodes_written += 1;
        let checksum = page.checksum();
        // The fresh page is the likeliest to be read next.
        self.cache.get_mut().insert(address, page);
        Ok(PagePointer { address, checksum })
    }

    // ----- cleaner support -------------------------------------------------------------------

    /// Cleaner support: if the working tree still references the node page at `address`, makes
    /// it and its path dirty (so the next flush rewrites it elsewhere) and returns true; returns
    /// false for a stale page or a node of another tree. Costs O(height) reads.
    ///
    /// A page that does not decode as a node is not live (false): the working tree only
    /// references pages whose append completed, and such a page decodes unless the flash lost
    /// it beyond ECC, which the store reports as `Io`. Torn programs from a power cut are the
    /// undecodable pages the cleaner meets, and they must not stop it.
    pub fn relocate_if_live(&mut self, store: &mut dyn NodeStore, address: LogAddress) -> Result<bool, TreeError> {
        if address.is_null() {
            return Ok(false);
        }
        if let RootRef::Clean(root) = self.root {
            if root.address == address {
                self.dirty_root(store)?;
                return Ok(true);
            }
        }
        let page = self.read_page(store, address)?;
        let Ok(page) = NodePage::parse(page) else {
            return Ok(false);
        };
        if page.is_leaf() {
            self.leaf_pages_read.fetch_add(1, Ordering::Relaxed);
        }
        let level = page.level();
        if page.tree_id() != self.config.tree_id || level.saturating_add(1) >= self.height {
            // Another tree's node, or at the root's level but not the root.
            return Ok(false);
        }
        // A key inside the node's range: if the working tree references the page, the search
        // for that key passes through it, because the nodes of one level partition the keys.
        // Only a root leaf is empty, and the root was handled above; separator 1 of an internal
        // node is above everything in child 0 and at most everything in child 1.
        let probe = match (page.is_leaf(), page.entry_count()) {
            (true, 0) => return Ok(false),
            (true, _) => page.key(0).to_vec(),
            (false, count) if count >= 2 => page.key(1).to_vec(),
            (false, _) => return Err(TreeError::Corrupt { address, reason: "internal node with one child" }),
        };
        // One descent to the parent; the node itself is the page just read.
        let descent = self.descend(store, &probe, level + 1)?;
        let parent = self.node(&descent.last().ok_or_else(|| self.empty_descent())?.handle);
        let child_index = parent.child_index(&probe);
        let Child::OnFlash(pointer) = parent.child(child_index) else {
            return Ok(false); // already copied: the working tree no longer references a page
        };
        if pointer.address != address {
            return Ok(false);
        }
        if pointer.checksum != page.checksum() {
            return Err(TreeError::Corrupt { address, reason: "checksum differs from the parent pointer" });
        }
        let path = self.dirty_descent(store, descent)?;
        let parent = path.last().ok_or_else(|| self.empty_descent())?;
        let range = parent.range.child(NodeRef::Owned(self.dirty.get(parent.node)), child_index);
        let parent = parent.node;
        self.adopt_child(store, parent, child_index, pointer, &page, &range)?;
        self.keep_dirty_budget(store)?;
        Ok(true)
    }

    // ----- fsck ------------------------------------------------------------------------------

    /// Full walk for fsck that stops at the first violation: `check_all` with the first
    /// violation as the error. Every node page is visited at most once (a page reached twice
    /// is a violation), so even a crafted tree whose pointers share nodes costs one read per page.
    pub fn check(
        &mut self,
        store: &mut dyn NodeStore,
        visit_node: &mut dyn FnMut(LogAddress),
        visit_entry: &mut EntryVisitor<'_>,
    ) -> Result<TreeStats, TreeError> {
        let mut seen: BTreeSet<u32> = BTreeSet::new();
        let mut first: Option<TreeError> = None;
        let stats = self.check_all(
            store,
            &mut |address| {
                visit_node(address);
                seen.insert(address.0)
            },
            visit_entry,
            &mut |violation| {
                first.get_or_insert(violation);
                false
            },
        );
        match first {
            Some(violation) => Err(violation),
            None => Ok(stats),
        }
    }

    /// Full walk for fsck: verifies every checksum, magic, tree id, levels consistent with the
    /// height, key order inside nodes and across leaves, keys within the parent's separator
    /// bounds, no empty non-root nodes, and reports every violation to `visit_violation`,
    /// going on past it while that returns true: an unreadable or misplaced subtree is skipped, an out-of-place entry
    /// is skipped, and an error from `visit_entry` is reported too.
    ///
    /// `visit_node(address)` is called for each on-flash node before it is read and returns
    /// whether the page is met for the first time; a page met again is reported and not
    /// descended into (shared children cannot multiply the work). `visit_entry(key, value)` is
    /// called for each leaf entry in key order. Dirty nodes are walked too. On-flash nodes are
    /// read from the store, never from the cache.
    ///
    /// Iterative: the explicit stack holds one node per level, and each child must be one level
    /// below its parent, so its depth is bounded by the height and a cycle of pointers ends in
    /// a level violation.
    pub fn check_all(
        &mut self,
        store: &mut dyn NodeStore,
        visit_node: &mut dyn FnMut(LogAddress) -> bool,
        visit_entry: &mut EntryVisitor<'_>,
        visit_violation: &mut dyn FnMut(TreeError) -> bool,
    ) -> TreeStats {
        let mut stats = TreeStats { node_count: 0, leaf_count: 0, entry_count: 0, height: self.height };
        let root_level = match self.root_level() {
            Ok(level) => level,
            Err(violation) => {
                let _ = visit_violation(violation);
                return stats;
            }
        };
        let mut previous_key: Option<Vec<u8>> = None;
        let mut stack: Vec<CheckFrame> = Vec::with_capacity(usize::from(self.height));
        let mut pending = Some((self.root_reference(), root_level, Vec::new(), None::<Vec<u8>>));
        // Cleared when `visit_violation` asks to stop.
        let go_on = core::cell::Cell::new(true);
        let mut report = |violation| {
            if go_on.get() && !visit_violation(violation) {
                go_on.set(false);
            }
        };
        // Each pass opens at most one node or pops one frame; nodes are opened once per
        // reference and each page at most once, so the walk ends.
        while go_on.get() {
            if let Some((child, level, lower, upper)) = pending.take() {
                let is_root = stats.node_count == 0 && stack.is_empty();
                match self.check_open(store, child, level, visit_node) {
                    Err(violation) => report(violation),
                    Ok((handle, address)) => {
                        stats.node_count += 1;
                        let corrupt = |reason| TreeError::Corrupt { address, reason };
                        let node = self.node(&handle);
                        let count = node.entry_count();
                        if node.is_leaf() {
                            stats.leaf_count += 1;
                            if count == 0 && !is_root {
                                report(corrupt("empty non-root leaf"));
                            }
                            for index in 0..count {
                                if !go_on.get() {
                                    break;
                                }
                                let key = node.key(index);
                                let misplaced = if key < lower.as_slice() {
                                    Some("key below its parent's separator")
                                } else if upper.as_deref().is_some_and(|upper| key >= upper) {
                                    Some("key at or above the next separator")
                                } else if previous_key.as_deref().is_some_and(|previous| previous >= key) {
                                    Some("keys out of order across leaves")
                                } else {
                                    None
                                };
                                if let Some(reason) = misplaced {
                                    // A search cannot reach it: it is not part of the tree.
                                    report(corrupt(reason));
                                    continue;
                                }
                                if let Err(violation) = visit_entry(key, node.value(index)) {
                                    report(violation);
                                }
                                let previous = previous_key.get_or_insert_with(Vec::new);
                                previous.clear();
                                previous.extend_from_slice(key);
                                stats.entry_count += 1;
                            }
                        } else if count < 2 {
                            report(corrupt("internal node with fewer than two children"));
                        } else if let Some(child_level) = level.checked_sub(1) {
                            stack.push(CheckFrame { handle, address, child_level, lower, upper, next_index: 0 });
                            assert!(
                                stack.len() <= usize::from(self.height),
                                "check stack deeper than the height {}",
                                self.height
                            );
                        } else {
                            report(corrupt("internal node at level 0"));
                        }
                    }
                }
            }
            // The next child of the deepest open internal node, or back up one level.
            let Some(frame) = stack.last_mut() else { break };
            let index = frame.next_index;
            let node = self.node(&frame.handle);
            if index >= node.entry_count() {
                stack.pop();
                continue;
            }
            frame.next_index += 1;
            let corrupt = |reason| TreeError::Corrupt { address: frame.address, reason };
            let key = node.key(index);
            if index > 0 && key <= frame.lower.as_slice() {
                report(corrupt("separator not above its parent's separator"));
                continue;
            }
            if index > 0 && frame.upper.as_deref().is_some_and(|upper| key >= upper) {
                report(corrupt("separator at or above the next separator"));
                continue;
            }
            let child_lower = if index == 0 { frame.lower.clone() } else { key.to_vec() };
            let child_upper =
                if index + 1 < node.entry_count() { Some(node.key(index + 1).to_vec()) } else { frame.upper.clone() };
            pending = Some((node.child(index), frame.child_level, child_lower, child_upper));
        }
        stats
    }

    /// Opens a node for `check_all`; a page met before is a violation, and is not read again.
    fn check_open(
        &self,
        store: &mut dyn NodeStore,
        child: Child,
        level: u8,
        visit_node: &mut dyn FnMut(LogAddress) -> bool,
    ) -> Result<(NodeHandle, LogAddress), TreeError> {
        let (handle, address) = match child {
            Child::OnFlash(pointer) => {
                if !pointer.address.is_null() && !visit_node(pointer.address) {
                    return Err(TreeError::Corrupt {
                        address: pointer.address,
                        reason: "node page reached twice (a shared or cyclic child pointer)",
                    });
                }
                (NodeHandle::Clean(self.read_node(store, pointer, level)?), pointer.address)
            }
            Child::Dirty(id) => (NodeHandle::Dirty(id), LogAddress::NULL),
        };
        let node = self.node(&handle);
        if node.level() != level || node.tree_id() != self.config.tree_id {
            return Err(TreeError::Corrupt { address, reason: "dirty node at the wrong level or of another tree" });
        }
        Ok((handle, address))
    }
}

/// One open internal node of a `check_all` walk.
struct CheckFrame {
    handle: NodeHandle,
    address: LogAddress,
    child_level: u8,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    next_index: usize,
}

/// Where to split `entries` so that both halves fit `node_size_bytes` and the larger half is as
/// small as possible. Internal halves keep two children each (so no internal node ever has one
/// child), and the right half's first separator moves up to the parent. Four entries of the
/// largest size fit a node, so an overflow by one entry or one separator always has such a
/// point; not finding one is a bug.
#[allow(clippy::panic)] // Invariant: as just said, an overflow by one entry always has a split.
fn split_index(entries: &NodeEntries, node_size_bytes: usize) -> usize {
    let (sizes, dropped_key_bytes, children_min): (Vec<usize>, Vec<usize>, usize) = match entries {
        NodeEntries::Leaf(entries) => (
            entries.iter().map(|entry| leaf_entry_bytes(entry.key.len(), entry.value.len())).collect(),
            alloc::vec![0; entries.len()],
            1,
        ),
        NodeEntries::Internal(branches) => (
            branches.iter().map(|branch| branch_bytes(branch.key.len())).collect(),
            branches.iter().map(|branch| branch.key.len()).collect(),
            2,
        ),
    };
    let count = sizes.len();
    let total_bytes: usize = sizes.iter().sum();
    let mut left_entry_bytes = 0;
    let mut best: Option<(usize, usize)> = None;
    // Split point `index`: entries ..index on the left; entry `index` starts the right half.
    for (index, (left_last_bytes, dropped_bytes)) in
        sizes.iter().zip(dropped_key_bytes.iter().skip(1)).enumerate().map(|(at, pair)| (at + 1, pair))
    {
        left_entry_bytes += left_last_bytes;
        if index < children_min || count - index < children_min {
            continue;
        }
        let left_bytes = NODE_HEADER_BYTES + left_entry_bytes;
        let right_bytes = NODE_HEADER_BYTES + total_bytes - left_entry_bytes - dropped_bytes;
        let larger_bytes = left_bytes.max(right_bytes);
        if larger_bytes <= node_size_bytes && best.iter().all(|&(_, best_bytes)| larger_bytes < best_bytes) {
            best = Some((index, larger_bytes));
        }
    }
    match best {
        Some((index, _)) => index,
        None => panic!("no split of {count} entries ({total_bytes} bytes) fits two nodes of {node_size_bytes}"),
    }
}

/// The shortest key `s` with `left < s <= right` (suffix truncation): it routes exactly like
/// `right` between the two leaves but costs fewer bytes in the parent.
fn shortest_separator(left: &[u8], right: &[u8]) -> Vec<u8> {
    assert!(left < right, "separator between unordered keys {left:?} and {right:?}");
    let common_bytes = left.iter().zip(right).take_while(|(a, b)| a == b).count();
    // Either `left` is a proper prefix of `right` or they differ at `common_bytes`; both ways
    // one more byte of `right` exceeds `left`.
    let separator = right.get(..common_bytes + 1).unwrap_or(right).to_vec();
    assert!(left < separator.as_slice() && separator.as_slice() <= right, "bad separator {separator:?}");
    separator
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortest_separator_is_between_its_keys() {
        assert_eq!(shortest_separator(b"abc", b"abd"), b"abd".to_vec());
        assert_eq!(shortest_separator(b"abc", b"b"), b"b".to_vec());
        assert_eq!(shortest_separator(b"ab", b"abzzz"), b"abz".to_vec());
        assert_eq!(shortest_separator(b"", b"\0"), b"\0".to_vec());
        assert_eq!(shortest_separator(b"apple", b"banana"), b"b".to_vec());
    }
}
