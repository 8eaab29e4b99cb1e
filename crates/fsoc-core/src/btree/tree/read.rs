//! Reading the tree: node loads through the cache, lookups, the cursor (`scan_from`) and
//! the ordered seeks.

use alloc::vec::Vec;

use crate::address::{LogAddress, PagePointer};
use crate::btree::node::{Child, NODE_SIZE_BYTES_MAX, NODE_SIZE_BYTES_MIN};
use crate::btree::page::{NodePage, NodeRef};
use crate::btree::{NodeReader, TreeError};
use portable_atomic::Ordering;

use super::*;

impl Tree {
    pub(super) fn node_size_bytes<E>(store: &dyn NodeReader<Error = E>) -> usize {
        let node_size_bytes = store.node_size_bytes();
        assert!(
            (NODE_SIZE_BYTES_MIN..=NODE_SIZE_BYTES_MAX).contains(&node_size_bytes),
            "store node size {node_size_bytes} outside \
             {NODE_SIZE_BYTES_MIN}..={NODE_SIZE_BYTES_MAX}"
        );
        node_size_bytes
    }

    pub(super) fn root_address(&self) -> LogAddress {
        match self.root {
            RootRef::Clean(pointer) => pointer.address,
            RootRef::Dirty(_) => LogAddress::NULL,
        }
    }

    pub(super) fn root_level<E>(&self) -> Result<u8, TreeError<E>> {
        self.height
            .checked_sub(1)
            .ok_or(TreeError::Corrupt { address: self.root_address(), reason: "tree height zero" })
    }

    /// `descend` returned no node: it always returns the root at least, so this is a bug; an
    /// error (the caller poisons the volume) rather than a panic.
    pub(super) fn empty_descent<E>(&self) -> TreeError<E> {
        TreeError::Corrupt { address: self.root_address(), reason: "descent returned no node" }
    }

    pub(super) fn too_deep<E>(&self) -> TreeError<E> {
        TreeError::Corrupt { address: self.root_address(), reason: "descent deeper than the recorded height" }
    }

    pub(super) fn node<'a>(&'a self, handle: &'a NodeHandle) -> NodeRef<'a> {
        match handle {
            NodeHandle::Dirty(id) => NodeRef::Owned(self.dirty.get(*id)),
            NodeHandle::Clean(page) => NodeRef::Page(page),
        }
    }

    /// Reads the page at `address` into a fresh buffer (one node's worth), counting the read.
    pub(super) fn read_page<E>(
        &self,
        store: &dyn NodeReader<Error = E>,
        address: LogAddress,
    ) -> Result<Vec<u8>, TreeError<E>> {
        let node_size_bytes = Self::node_size_bytes(store);
        self.pages_read.fetch_add(1, Ordering::Relaxed);
        let mut page = Vec::with_capacity(node_size_bytes);
        store.read_page(address, &mut page).map_err(|error| TreeError::Store { address, error })?;
        assert_eq!(page.len(), node_size_bytes, "store returned a short page for {address:?}");
        Ok(page)
    }

    /// Reads and verifies the node `pointer` refers to, bypassing the cache.
    pub(super) fn read_node<E>(
        &self,
        store: &dyn NodeReader<Error = E>,
        pointer: PagePointer,
        level: u8,
    ) -> Result<NodePage, TreeError<E>> {
        let address = pointer.address;
        if address.is_null() {
            return Err(TreeError::Corrupt { address, reason: "null child pointer" });
        }
        let page = self.read_page(store, address)?;
        let page = match self.verified(page, pointer, level) {
            Ok(page) => page,
            Err(error) => {
                // Bytes the ECC passed but the pointer refuses: the volume's redundancy may
                // still hold the node (parity, or mirror-meta's second copy).
                let mut copy = Vec::with_capacity(Self::node_size_bytes(store));
                let found = store
                    .read_redundant_copy(address, &mut copy)
                    .map_err(|error| TreeError::Store { address, error })?;
                match found.then(|| self.verified::<E>(copy, pointer, level)) {
                    Some(Ok(page)) => page,
                    _ => return Err(error),
                }
            }
        };
        if page.is_leaf() {
            self.leaf_pages_read.fetch_add(1, Ordering::Relaxed);
        }
        Ok(page)
    }

    /// `bytes` as the node `pointer` promises at `level`, or why not.
    fn verified<E>(&self, bytes: Vec<u8>, pointer: PagePointer, level: u8) -> Result<NodePage, TreeError<E>> {
        let address = pointer.address;
        let page = NodePage::parse(bytes).map_err(|error| TreeError::from_decode(address, &error))?;
        if page.checksum() != pointer.checksum {
            return Err(TreeError::Corrupt { address, reason: "checksum differs from the parent pointer" });
        }
        if page.tree_id() != self.config.tree_id {
            return Err(TreeError::Corrupt { address, reason: "node of another tree" });
        }
        if page.level() != level {
            return Err(TreeError::Corrupt { address, reason: "level differs from what the parent implies" });
        }
        Ok(page)
    }

    /// The clean node `pointer` refers to, from the cache or from flash. Two readers missing
    /// the same node both read it; the second insert replaces the first with equal content.
    pub(super) fn load<E>(
        &self,
        store: &dyn NodeReader<Error = E>,
        pointer: PagePointer,
        level: u8,
    ) -> Result<NodePage, TreeError<E>> {
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

    pub(super) fn open_root<E>(&self, store: &dyn NodeReader<Error = E>) -> Result<NodeHandle, TreeError<E>> {
        let level = self.root_level()?;
        match self.root {
            RootRef::Dirty(id) => Ok(NodeHandle::Dirty(id)),
            RootRef::Clean(pointer) => Ok(NodeHandle::Clean(self.load(store, pointer, level)?)),
        }
    }

    /// The reference to the root, as a parent would hold it.
    pub(super) fn root_reference(&self) -> Child {
        match self.root {
            RootRef::Clean(pointer) => Child::OnFlash(pointer),
            RootRef::Dirty(id) => Child::Dirty(id),
        }
    }

    /// Opens child `child_index` of `parent`, one level down.
    pub(super) fn open_child<E>(
        &self,
        store: &dyn NodeReader<Error = E>,
        parent: &NodeHandle,
        child_index: usize,
    ) -> Result<NodeHandle, TreeError<E>> {
        let node = self.node(parent);
        let (child, level) = Self::child_of(node, child_index);
        self.open_reference(store, child, level)
    }

    /// Opens the node `child` refers to, which must be at `level`.
    pub(super) fn open_reference<E>(
        &self,
        store: &dyn NodeReader<Error = E>,
        child: Child,
        level: u8,
    ) -> Result<NodeHandle, TreeError<E>> {
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
    pub(super) fn child_of(node: NodeRef<'_>, child_index: usize) -> (Child, u8) {
        // Internal nodes have level >= 1: the decoder ties level 0 to leaves.
        let level = node.level().checked_sub(1).unwrap_or_else(|| panic!("internal node at level 0"));
        (node.child(child_index), level)
    }

    pub fn get<E>(&self, store: &dyn NodeReader<Error = E>, key: &[u8]) -> Result<Option<Vec<u8>>, TreeError<E>> {
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
    pub(super) fn descend<E>(
        &self,
        store: &dyn NodeReader<Error = E>,
        key: &[u8],
        stop_level: u8,
    ) -> Result<Vec<DescentStep>, TreeError<E>> {
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
    pub fn first_at_or_after<E>(
        &self,
        store: &dyn NodeReader<Error = E>,
        key: &[u8],
    ) -> Result<Option<KeyValue>, TreeError<E>> {
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
    pub fn scan_from<E>(
        &self,
        store: &dyn NodeReader<Error = E>,
        key: &[u8],
        inclusive: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), TreeError<E>> {
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
    pub fn first_after<E>(
        &self,
        store: &dyn NodeReader<Error = E>,
        key: &[u8],
    ) -> Result<Option<KeyValue>, TreeError<E>> {
        let root = self.open_root(store)?;
        self.seek_forward(store, root, key, false)
    }

    /// The last entry with key <= `key`.
    pub fn last_at_or_before<E>(
        &self,
        store: &dyn NodeReader<Error = E>,
        key: &[u8],
    ) -> Result<Option<KeyValue>, TreeError<E>> {
        let root = self.open_root(store)?;
        self.seek_backward(store, root, key)
    }

    /// First entry with key >= `key` (or > when not `inclusive`), searching from `root`.
    pub(super) fn seek_forward<E>(
        &self,
        store: &dyn NodeReader<Error = E>,
        root: NodeHandle,
        key: &[u8],
        inclusive: bool,
    ) -> Result<Option<KeyValue>, TreeError<E>> {
        self.seek(store, root, key, Seek::Forward { inclusive })
    }

    /// Last entry with key <= `key`, searching from `root`.
    pub(super) fn seek_backward<E>(
        &self,
        store: &dyn NodeReader<Error = E>,
        root: NodeHandle,
        key: &[u8],
    ) -> Result<Option<KeyValue>, TreeError<E>> {
        self.seek(store, root, key, Seek::Backward)
    }

    /// The range search behind `seek_forward` and `seek_backward`. Iterative: the stack holds
    /// one internal node per level with the children still to try, so its depth is at most the
    /// height. In a valid tree the answer is found within two descents: if the subtree the key
    /// falls in has no answer, the neighbouring subtree's nearest leaf has it (separators bound
    /// the keys, and non-root leaves are not empty). So a search opening more than twice the
    /// height of nodes is on a corrupt tree (a shared or misordered child), and is an error
    /// rather than a walk whose length crafted pointers could multiply.
    pub(super) fn seek<E>(
        &self,
        store: &dyn NodeReader<Error = E>,
        root: NodeHandle,
        key: &[u8],
        direction: Seek,
    ) -> Result<Option<KeyValue>, TreeError<E>> {
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
}
