//! The fsck walk: every reachable node checked against its pointer, level, tree and key range,
//! going on past a violation, bounded by the height.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;

use crate::address::LogAddress;
use crate::btree::node::Child;
use crate::btree::{NodeStore, TreeError, TreeStats};

use super::*;

impl Tree {
    /// Full walk for fsck that stops at the first violation: `check_all` with the first
    /// violation as the error. Every node page is visited at most once (a page reached twice
    /// is a violation), so even a crafted tree whose pointers share nodes costs one read per page.
    pub fn check<E>(
        &mut self,
        store: &mut dyn NodeStore<Error = E>,
        visit_node: &mut dyn FnMut(LogAddress),
        visit_entry: &mut EntryVisitor<'_, E>,
    ) -> Result<TreeStats, TreeError<E>> {
        let mut seen: BTreeSet<u32> = BTreeSet::new();
        let mut first: Option<TreeError<E>> = None;
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
    pub fn check_all<E>(
        &mut self,
        store: &mut dyn NodeStore<Error = E>,
        visit_node: &mut dyn FnMut(LogAddress) -> bool,
        visit_entry: &mut EntryVisitor<'_, E>,
        visit_violation: &mut dyn FnMut(TreeError<E>) -> bool,
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
    pub(super) fn check_open<E>(
        &self,
        store: &mut dyn NodeStore<Error = E>,
        child: Child,
        level: u8,
        visit_node: &mut dyn FnMut(LogAddress) -> bool,
    ) -> Result<(NodeHandle, LogAddress), TreeError<E>> {
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
