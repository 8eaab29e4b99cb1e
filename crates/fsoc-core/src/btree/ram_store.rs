//! Test-only `NodeStore` in RAM that counts reads, appends and releases and tracks which pages the
//! working state references, so tests can check copy-on-write bookkeeping exactly.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;

use crate::address::LogAddress;
use crate::btree::{NodeReader, NodeStore, NodeTag};

pub(crate) struct RamNodeStore {
    node_size_bytes: usize,
    /// Page contents by address. Released pages stay readable until `commit` (the committed
    /// state may still need them), like in the segment log.
    pub pages: BTreeMap<u32, Vec<u8>>,
    pub tags: BTreeMap<u32, NodeTag>,
    next_address: u32,
    /// Appended and not released since: the pages the working state references.
    live: BTreeSet<u32>,
    /// `live` at the last `commit`.
    committed: BTreeSet<u32>,
    pub read_count: core::cell::Cell<u64>,
    pub append_count: u64,
    pub release_count: u64,
    /// Appends left before `NoSpace`; `None` is unlimited.
    pub append_budget: Option<u64>,
}

impl RamNodeStore {
    pub fn new(node_size_bytes: usize) -> RamNodeStore {
        RamNodeStore {
            node_size_bytes,
            pages: BTreeMap::new(),
            tags: BTreeMap::new(),
            // Not zero, so a zeroed pointer never names a real page by accident.
            next_address: 100,
            live: BTreeSet::new(),
            committed: BTreeSet::new(),
            read_count: core::cell::Cell::new(0),
            append_count: 0,
            release_count: 0,
            append_budget: None,
        }
    }

    /// The working state becomes the committed state; pages neither references are erased.
    pub fn commit(&mut self) {
        self.committed = self.live.clone();
        let committed = &self.committed;
        self.pages.retain(|address, _| committed.contains(address));
        self.tags.retain(|address, _| committed.contains(address));
    }

    /// A failed commit: the working state returns to the committed one.
    pub fn rollback(&mut self) {
        self.live = self.committed.clone();
    }

    /// Live pages holding nodes of `tree_id`.
    pub fn live_addresses(&self, tree_id: u8) -> BTreeSet<u32> {
        let of_tree = |address: &&u32| self.tags.get(address).is_some_and(|tag| tag.tree_id == tree_id);
        self.live.iter().filter(of_tree).copied().collect()
    }

    /// Declares pages copied in from another store as referenced by the working state.
    pub fn mark_live(&mut self, addresses: &[LogAddress]) {
        self.live.extend(addresses.iter().map(|address| address.0));
        self.next_address = self.pages.keys().next_back().map_or(self.next_address, |last| last + 1);
    }

    pub fn is_live(&self, address: LogAddress) -> bool {
        self.live.contains(&address.0)
    }

    /// Flips bit `bit_index` of the page at `address`.
    pub fn flip_bit(&mut self, address: LogAddress, bit_index: usize) {
        let page = self.pages.get_mut(&address.0).unwrap_or_else(|| panic!("no page {address:?} to corrupt"));
        let byte = page.get_mut(bit_index / 8).unwrap_or_else(|| panic!("bit {bit_index} outside the page"));
        *byte ^= 1 << (bit_index % 8);
    }
}

/// Why the RAM store failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RamStoreError {
    #[error("page not written or erased")]
    NotWritten,
    #[error("append budget spent (no space)")]
    Full,
}

impl NodeReader for RamNodeStore {
    type Error = RamStoreError;

    fn node_size_bytes(&self) -> usize {
        self.node_size_bytes
    }

    fn read_page(&self, address: LogAddress, out: &mut Vec<u8>) -> Result<(), RamStoreError> {
        self.read_count.set(self.read_count.get() + 1);
        let page = self.pages.get(&address.0).ok_or(RamStoreError::NotWritten)?;
        out.clear();
        out.extend_from_slice(page);
        Ok(())
    }
}

impl NodeStore for RamNodeStore {
    fn append_node(&mut self, bytes: &[u8], tag: NodeTag) -> Result<LogAddress, RamStoreError> {
        assert_eq!(bytes.len(), self.node_size_bytes, "node page of the wrong size");
        if let Some(budget) = &mut self.append_budget {
            if *budget == 0 {
                return Err(RamStoreError::Full);
            }
            *budget -= 1;
        }
        let address = self.next_address;
        self.next_address += 1;
        self.append_count += 1;
        self.pages.insert(address, bytes.to_vec());
        self.tags.insert(address, tag);
        assert!(self.live.insert(address), "appended over live page {address}");
        Ok(LogAddress(address))
    }

    fn release(&mut self, address: LogAddress) -> Result<(), RamStoreError> {
        self.release_count += 1;
        // Each page leaves the working state once: a second release is a bookkeeping bug.
        assert!(self.live.remove(&address.0), "release of {address:?}, which is not live (released twice?)");
        Ok(())
    }
}
