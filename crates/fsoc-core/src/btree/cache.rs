//! Bounded LRU cache of clean nodes keyed by log address, so hot upper levels cost no page
//! reads. It is bounded in bytes: each node is charged its page and offset table
//! (`NodePage::memory_bytes`) plus `ENTRY_OVERHEAD_BYTES` of bookkeeping, and the total never
//! exceeds the capacity, whatever the size of the tree or its pages.

use alloc::collections::BTreeMap;

use crate::address::LogAddress;
use crate::btree::page::NodePage;

/// What one cached node costs besides its bytes: the `Arc` counts and the entries of the two
/// maps (about; the maps' own nodes are shared by up to eleven entries).
pub const ENTRY_OVERHEAD_BYTES: usize = 64;

struct CachedNode {
    // Shared with readers without copying; the clone lives only for one tree operation.
    page: NodePage,
    last_use: u64,
}

/// Clean nodes by address, least recently used evicted first.
pub struct NodeCache {
    capacity_bytes: usize,
    used_bytes: usize,
    nodes: BTreeMap<LogAddress, CachedNode>,
    /// `last_use` -> address; the first entry is the eviction victim.
    recency: BTreeMap<u64, LogAddress>,
    clock: u64,
}

fn cost_bytes(page: &NodePage) -> usize {
    page.memory_bytes() + ENTRY_OVERHEAD_BYTES
}

impl NodeCache {
    /// A cache of at most `capacity_bytes` (0 disables caching).
    pub fn new(capacity_bytes: usize) -> NodeCache {
        NodeCache { capacity_bytes, used_bytes: 0, nodes: BTreeMap::new(), recency: BTreeMap::new(), clock: 0 }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Bytes charged for the cached nodes (at most the capacity).
    pub fn used_bytes(&self) -> usize {
        self.used_bytes
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// The node cached for `address` (its checksum is the page's own field); marks it most
    /// recently used.
    pub fn get(&mut self, address: LogAddress) -> Option<NodePage> {
        let now = self.tick();
        let cached = self.nodes.get_mut(&address)?;
        let removed = self.recency.remove(&cached.last_use);
        assert_eq!(removed, Some(address), "recency index out of step for {address:?}");
        cached.last_use = now;
        self.recency.insert(now, address);
        Some(cached.page.clone())
    }

    /// Caches `page` as the content of `address`, replacing what was cached there and evicting
    /// the least recently used nodes until it fits. A node larger than the whole cache is not
    /// cached.
    pub fn insert(&mut self, address: LogAddress, page: NodePage) {
        self.remove(address);
        let cost = cost_bytes(&page);
        if cost > self.capacity_bytes {
            return;
        }
        while self.used_bytes + cost > self.capacity_bytes {
            // The recency index names every cached node, so it runs dry only once nothing is
            // charged (checked below).
            let Some((_, victim)) = self.recency.pop_first() else { break };
            let evicted = self.nodes.remove(&victim);
            assert!(evicted.is_some(), "recency index names uncached {victim:?}");
            self.used_bytes -= evicted.map_or(0, |evicted| cost_bytes(&evicted.page));
        }
        let now = self.tick();
        self.recency.insert(now, address);
        self.nodes.insert(address, CachedNode { page, last_use: now });
        self.used_bytes += cost;
        assert!(self.used_bytes <= self.capacity_bytes, "cache over capacity {}", self.capacity_bytes);
        assert_eq!(self.nodes.len(), self.recency.len(), "recency index out of step");
    }

    /// Forgets `address` (its page was released and may be rewritten with other content).
    pub fn remove(&mut self, address: LogAddress) {
        if let Some(cached) = self.nodes.remove(&address) {
            let removed = self.recency.remove(&cached.last_use);
            assert_eq!(removed, Some(address), "recency index out of step for {address:?}");
            self.used_bytes -= cost_bytes(&cached.page);
        }
    }

    pub fn clear(&mut self) {
        self.nodes.clear();
        self.recency.clear();
        self.used_bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btree::node::Node;

    fn leaf(tree_id: u8) -> NodePage {
        NodePage::encode(&Node::empty_leaf(tree_id), 256)
    }

    /// Room for `count` empty 256-byte leaves.
    fn capacity(count: usize) -> usize {
        count * cost_bytes(&leaf(0))
    }

    #[test]
    fn evicts_the_least_recently_used_node() {
        let mut cache = NodeCache::new(capacity(2));
        cache.insert(LogAddress(1), leaf(1));
        cache.insert(LogAddress(2), leaf(2));
        // Touch 1 so that 2 becomes the victim.
        assert_eq!(cache.get(LogAddress(1)).map(|page| page.tree_id()), Some(1));
        cache.insert(LogAddress(3), leaf(3));
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.used_bytes(), capacity(2));
        assert!(cache.get(LogAddress(2)).is_none(), "2 was least recently used");
        assert!(cache.get(LogAddress(1)).is_some());
        assert!(cache.get(LogAddress(3)).is_some());
    }

    #[test]
    fn reinserting_an_address_replaces_it() {
        let mut cache = NodeCache::new(capacity(2));
        cache.insert(LogAddress(1), leaf(1));
        cache.insert(LogAddress(1), leaf(5));
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get(LogAddress(1)).map(|page| page.tree_id()), Some(5));
        cache.remove(LogAddress(1));
        assert_eq!((cache.len(), cache.used_bytes()), (0, 0));
        cache.remove(LogAddress(1));
    }

    #[test]
    fn the_bound_is_in_bytes_whatever_the_node_size() {
        // Room for four small nodes holds one large one, and evicts what it must.
        let mut cache = NodeCache::new(capacity(4) + 100);
        for address in 1..=4 {
            cache.insert(LogAddress(address), leaf(1));
        }
        assert_eq!(cache.len(), 4);
        let large = NodePage::encode(&Node::empty_leaf(1), 512);
        cache.insert(LogAddress(9), large);
        assert!(cache.used_bytes() <= capacity(4) + 100);
        assert!(cache.get(LogAddress(9)).is_some());
        assert_eq!(cache.len(), 3, "the 512-byte node took the room of two 256-byte ones");
        // A node larger than the cache is not cached at all.
        let mut small = NodeCache::new(capacity(1));
        small.insert(LogAddress(1), NodePage::encode(&Node::empty_leaf(1), 2048));
        assert_eq!((small.len(), small.used_bytes()), (0, 0));
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let mut cache = NodeCache::new(0);
        cache.insert(LogAddress(1), leaf(1));
        assert!(cache.get(LogAddress(1)).is_none());
        assert_eq!(cache.len(), 0);
    }
}
