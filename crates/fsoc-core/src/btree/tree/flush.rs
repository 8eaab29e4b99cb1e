//! Writing the dirty arena out (children before parents) and relocating live nodes for the
//! cleaner.

use alloc::vec::Vec;

use crate::address::{LogAddress, PagePointer};
use crate::btree::node::{Child, DirtyId, NodeEntries};
use crate::btree::page::{NodePage, NodeRef};
use crate::btree::{NodeStore, NodeTag, TreeError, TreeRoot};
use portable_atomic::Ordering;

use super::*;

impl Tree {
    /// Writes every dirty node bottom-up (children before parents, so each parent records its
    /// children's final address and checksum) and returns the new root. The pages the dirty
    /// nodes replace were released when they were copied. On error the nodes not yet written
    /// stay dirty; the tree is still consistent.
    pub fn flush<E>(&mut self, store: &mut dyn NodeStore<Error = E>) -> Result<TreeRoot, TreeError<E>> {
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
    pub(super) fn flush_node<E>(
        &mut self,
        store: &mut dyn NodeStore<Error = E>,
        root: DirtyId,
        node_size_bytes: usize,
    ) -> Result<PagePointer, TreeError<E>> {
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
    pub(super) fn write_dirty_node<E>(
        &mut self,
        store: &mut dyn NodeStore<Error = E>,
        id: DirtyId,
        node_size_bytes: usize,
    ) -> Result<PagePointer, TreeError<E>> {
        let node = self.dirty.get(id);
        // `encode` refuses (panics on) a node with a dirty child.
        let page = NodePage::encode(node, node_size_bytes);
        let tag = NodeTag { tree_id: node.tree_id, level: node.level };
        let address = store
            .append_node(page.page_bytes(), tag)
            .map_err(|error| TreeError::Store { address: LogAddress::NULL, error })?;
        assert!(!address.is_null(), "store appended a node at the null address");
        self.dirty.remove(id);
        self.counters.nodes_written += 1;
        let checksum = page.checksum();
        // The fresh page is the likeliest to be read next.
        self.cache.get_mut().insert(address, page);
        Ok(PagePointer { address, checksum })
    }

    /// Cleaner support: if the working tree still references the node page at `address`, makes
    /// it and its path dirty (so the next flush rewrites it elsewhere) and returns true; returns
    /// false for a stale page or a node of another tree. Costs O(height) reads.
    ///
    /// A page that does not decode as a node is not live (false): the working tree only
    /// references pages whose append completed, and such a page decodes unless the flash lost
    /// it beyond ECC, which the store reports as `Io`. Torn programs from a power cut are the
    /// undecodable pages the cleaner meets, and they must not stop it.
    pub fn relocate_if_live<E>(
        &mut self,
        store: &mut dyn NodeStore<Error = E>,
        address: LogAddress,
    ) -> Result<bool, TreeError<E>> {
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
}
