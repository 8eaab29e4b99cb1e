//! Copy-on-write updates: path copies into the dirty arena, upserts and removals in one
//! descent, splits and merges, and the dirty budget kept inside an operation.

use alloc::vec::Vec;

use crate::address::{LogAddress, PagePointer};
use crate::btree::node::{
    branch_bytes, leaf_entry_bytes, max_entry_bytes, Branch, Child, DirtyId, LeafEntry, Node, NodeEntries,
    NODE_HEADER_BYTES,
};
use crate::btree::page::{NodePage, NodeRef};
use crate::btree::{NodeStore, TreeError};

use super::*;

impl Tree {
    /// Makes a dirty copy of the clean node at `address`. The working state stops referring to
    /// the page here, so this is where it is released, once; the committed state may still
    /// use it, which is the store's business. A release the store refuses changes nothing.
    pub(super) fn adopt<E>(
        &mut self,
        store: &mut dyn NodeStore<Error = E>,
        address: LogAddress,
        page: &NodePage,
    ) -> Result<DirtyId, TreeError<E>> {
        assert!(!address.is_null(), "adopting a node without an address");
        store.release(address).map_err(|error| TreeError::Store { address, error })?;
        let id = self.dirty.insert(page.to_node());
        self.counters.nodes_copied += 1;
        // The page may be erased and rewritten once released; never serve it from the cache.
        self.cache.get_mut().remove(address);
        Ok(id)
    }

    /// Makes child `child_index` of the dirty node `parent` dirty and returns it. `range` is
    /// the child's key range: a node copied from flash must lie inside it, or splits and merges
    /// of it could put separators out of order, which the encoder would refuse with a panic.
    pub(super) fn dirty_child<E>(
        &mut self,
        store: &mut dyn NodeStore<Error = E>,
        parent: DirtyId,
        child_index: usize,
        range: &KeyRange,
    ) -> Result<DirtyId, TreeError<E>> {
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
    pub(super) fn adopt_child<E>(
        &mut self,
        store: &mut dyn NodeStore<Error = E>,
        parent: DirtyId,
        child_index: usize,
        pointer: PagePointer,
        page: &NodePage,
        range: &KeyRange,
    ) -> Result<DirtyId, TreeError<E>> {
        if !range.holds(NodeRef::Page(page)) {
            let reason = "keys outside the parent's separators";
            return Err(TreeError::Corrupt { address: pointer.address, reason });
        }
        let id = self.adopt(store, pointer.address, page)?;
        self.set_child(parent, child_index, Child::Dirty(id));
        Ok(id)
    }

    /// Makes the root dirty (copying it if it is clean) and returns it.
    pub(super) fn dirty_root<E>(&mut self, store: &mut dyn NodeStore<Error = E>) -> Result<DirtyId, TreeError<E>> {
        match self.root {
            RootRef::Dirty(id) => Ok(id),
            RootRef::Clean(pointer) => {
                let level = self.root_level()?;
                let page = self.load(store, pointer, level)?;
                let id = self.adopt(store, pointer.address, &page)?;
                self.root = RootRef::Dirty(id);
                Ok(id)
            }
        }
    }

    // Invariant (set_child, branches_mut, leaf_entries_mut): the ids come from a path or flush
    // stack the tree built, whose steps name dirty nodes of the right kind and children
    // that exist.
    #[allow(clippy::panic)]
    pub(super) fn set_child(&mut self, parent: DirtyId, child_index: usize, child: Child) {
        let branch = self.branches_mut(parent).get_mut(child_index);
        let branch = branch.unwrap_or_else(|| panic!("no child {child_index} in {parent:?}"));
        branch.child = child;
    }

    #[allow(clippy::panic)]
    pub(super) fn branches_mut(&mut self, id: DirtyId) -> &mut Vec<Branch> {
        match &mut self.dirty.get_mut(id).entries {
            NodeEntries::Internal(branches) => branches,
            NodeEntries::Leaf(_) => {
                panic!("dirty node {id:?} is a leaf, expected an internal node")
            }
        }
    }

    #[allow(clippy::panic)]
    pub(super) fn leaf_entries_mut(&mut self, id: DirtyId) -> &mut Vec<LeafEntry> {
        match &mut self.dirty.get_mut(id).entries {
            NodeEntries::Leaf(entries) => entries,
            NodeEntries::Internal(_) => panic!("dirty node {id:?} is internal, expected a leaf"),
        }
    }

    /// Makes the nodes of `descent` (root first) dirty, copying each clean one from the page
    /// the descent already holds, and returns them as a path with each node's key range.
    // Invariant: `descend` pairs each reference with the node it opened, under `&mut self`.
    #[allow(clippy::panic)]
    pub(super) fn dirty_descent<E>(
        &mut self,
        store: &mut dyn NodeStore<Error = E>,
        descent: Vec<DescentStep>,
    ) -> Result<Vec<PathStep>, TreeError<E>> {
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
                    let id = self.adopt(store, pointer.address, page)?;
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

    /// Inserts or replaces the value of `key`; returns the previous value. One descent finds
    /// the leaf; the nodes on the way are copied only if the value changes.
    // Invariant: the leaf's dirty copy holds the entries of the leaf the descent searched.
    #[allow(clippy::panic)]
    pub fn insert<E>(
        &mut self,
        store: &mut dyn NodeStore<Error = E>,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<Vec<u8>>, TreeError<E>> {
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
        let changed_index = match found {
            Ok(index) | Err(index) => index,
        };
        // An added or grown entry leaves no node on the path smaller: nothing to refill.
        let shrank = previous.as_ref().is_some_and(|previous| value.len() < previous.len());
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
        self.restore_balance(store, &path, node_size_bytes, Some(changed_index), shrank)?;
        self.keep_dirty_budget(store)?;
        Ok(previous)
    }

    /// Removes `key`; returns its value if it was present. One descent, as for `insert`.
    pub fn remove<E>(
        &mut self,
        store: &mut dyn NodeStore<Error = E>,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, TreeError<E>> {
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
        self.restore_balance(store, &path, node_size_bytes, None, true)?;
        self.keep_dirty_budget(store)?;
        Ok(Some(removed.value))
    }

    /// After an update: records the dirty count and, if it is over `dirty_nodes_max`, writes
    /// every dirty node out (a flush, not a commit: the committed tree stays where it is), so
    /// one operation making many updates stays within the budget.
    pub(super) fn keep_dirty_budget<E>(&mut self, store: &mut dyn NodeStore<Error = E>) -> Result<(), TreeError<E>> {
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
    /// `changed_index`: the leaf entry an insert added or replaced, where a split may prefer to
    /// start the right half (`split_index`). `shrank`: the leaf lost bytes (a remove, a smaller
    /// value), so nodes below a quarter are refilled; after an update that only added bytes a
    /// small node is left as it is: it is the right half of an append's split, about to fill,
    /// and refilling it from its left sibling would undo that split.
    pub(super) fn restore_balance<E>(
        &mut self,
        store: &mut dyn NodeStore<Error = E>,
        path: &[PathStep],
        node_size_bytes: usize,
        changed_index: Option<usize>,
        shrank: bool,
    ) -> Result<(), TreeError<E>> {
        let underflow_bytes = node_size_bytes / UNDERFLOW_DIVISOR;
        // The entry of the node at the current level that changed: the leaf's, then the branch
        // a split below added (none once a level did not split).
        let mut changed_index = changed_index;
        for (depth, pair) in path.windows(2).enumerate().rev() {
            let [parent, node] = pair else { continue };
            let node = node.node;
            let (child, _) = Self::child_of(NodeRef::Owned(self.dirty.get(parent.node)), parent.child_index);
            assert_eq!(child, Child::Dirty(node), "path step {} is not its parent's child", depth + 1);
            let encoded_bytes = self.dirty.get(node).encoded_bytes();
            if encoded_bytes > node_size_bytes {
                self.split_child(parent.node, parent.child_index, node_size_bytes, changed_index);
                changed_index = Some(parent.child_index + 1);
            } else {
                changed_index = None;
                if shrank && encoded_bytes < underflow_bytes {
                    self.rebalance_child(store, parent, node_size_bytes)?;
                }
            }
        }
        let root = path.first().ok_or_else(|| self.empty_descent())?.node;
        assert_eq!(self.root, RootRef::Dirty(root), "path does not start at the root");
        self.fix_root(root, node_size_bytes, changed_index);
        Ok(())
    }

    /// Splits the dirty child `child_index` of `parent` in two by bytes and adds the new right
    /// half to `parent`; `changed_index` as for `split_index`.
    // Invariant: only a dirty child that overflows is split: more than a node's bytes, and an
    // entry takes at most a quarter node, so it holds at least four entries and both halves some.
    #[allow(clippy::panic)]
    pub(super) fn split_child(
        &mut self,
        parent: DirtyId,
        child_index: usize,
        node_size_bytes: usize,
        changed_index: Option<usize>,
    ) {
        let last_child = child_index + 1 == self.branches_mut(parent).len();
        // Only a parent's last child splits where it changed, so a node that may stay below a
        // quarter full is always the last child of its parent.
        let changed_index = changed_index.filter(|_| last_child);
        let (child, _) = Self::child_of(NodeRef::Owned(self.dirty.get(parent)), child_index);
        let Child::Dirty(left) = child else { panic!("splitting clean child {child_index} of {parent:?}") };
        let node = self.dirty.get_mut(left);
        let split_index = split_index(&node.entries, node_size_bytes, changed_index);
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
    pub(super) fn rebalance_child<E>(
        &mut self,
        store: &mut dyn NodeStore<Error = E>,
        parent_step: &PathStep,
        node_size_bytes: usize,
    ) -> Result<(), TreeError<E>> {
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
            self.split_child(parent, left_index, node_size_bytes, None);
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
    pub(super) fn fix_root(&mut self, root: DirtyId, node_size_bytes: usize, changed_index: Option<usize>) {
        let root_node = self.dirty.get(root);
        if root_node.encoded_bytes() > node_size_bytes {
            assert!(self.height < u8::MAX, "tree height overflows");
            let level = root_node.level + 1;
            let branches = alloc::vec![Branch { key: Vec::new(), child: Child::Dirty(root) }];
            let new_root = Node { tree_id: self.config.tree_id, level, entries: NodeEntries::Internal(branches) };
            let new_root = self.dirty.insert(new_root);
            self.split_child(new_root, 0, node_size_bytes, changed_index);
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
}

/// Where to split `entries` so that both halves fit `node_size_bytes` and the larger half is as
/// small as possible. Internal halves keep two children each (so no internal node ever has one
/// child), and the right half's first separator moves up to the parent. Four entries of the
/// largest size fit a node, so an overflow by one entry or one separator always has such a
/// point; not finding one is a bug.
///
/// Appends: when the entry that overflowed the node (`changed_index`) starts a right half of
/// at most half a node, no larger than the left one, the split is there instead. Keys added in
/// order (new inodes, a directory filled name by name) then leave full nodes behind them, not
/// half-full ones that every later commit rewrites: 1,000 fsync'd creates
/// (tests/durable_creates.rs) program 2,772 pages instead of 2,860.
#[allow(clippy::panic)] // Invariant: as just said, an overflow by one entry always has a split.
fn split_index(entries: &NodeEntries, node_size_bytes: usize, changed_index: Option<usize>) -> usize {
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
    if let Some(index) = changed_index.filter(|&index| index >= children_min && count - index >= children_min) {
        let left_entry_bytes = sizes.iter().take(index).sum::<usize>();
        let dropped_bytes = dropped_key_bytes.get(index).copied().unwrap_or(0);
        let left_bytes = NODE_HEADER_BYTES + left_entry_bytes;
        let right_bytes = NODE_HEADER_BYTES + total_bytes - left_entry_bytes - dropped_bytes;
        if left_bytes <= node_size_bytes && right_bytes <= node_size_bytes / 2 && right_bytes <= left_bytes {
            return index;
        }
    }
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
    pub(super) fn shortest_separator_is_between_its_keys() {
        assert_eq!(shortest_separator(b"abc", b"abd"), b"abd".to_vec());
        assert_eq!(shortest_separator(b"abc", b"b"), b"b".to_vec());
        assert_eq!(shortest_separator(b"ab", b"abzzz"), b"abz".to_vec());
        assert_eq!(shortest_separator(b"", b"\0"), b"\0".to_vec());
        assert_eq!(shortest_separator(b"apple", b"banana"), b"b".to_vec());
    }
}
