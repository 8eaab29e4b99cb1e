//! Bounded LRU cache of clean decoded nodes keyed by log address, so hot upper levels cost no
//! page reads. It never holds more than `capacity` nodes, whatever the size of the tree.

use alloc::collections::BTreeMap;
use alloc::sync::Arc;

use crate::address::LogAddress;
use crate::btree::node::Node;

struct CachedNode {
    // Shared so a lookup hands the node out without copying it; the cache stays the owner of
    // record and the clone lives only for the length of one tree operation.
    node: Arc<Node>,
    checksum: u32,
    last_use: u64,
}

/// Clean nodes by address, least recently used evicted first.
pub struct NodeCache {
    capacity: usize,
    nodes: BTreeMap<LogAddress, CachedNode>,
    /// `last_use` -> address; the first entry is the eviction victim.
    recency: BTreeMap<u64, LogAddress>,
    clock: u64,
}

impl NodeCache {
    /// A cache of at most `capacity` nodes (0 disables caching).
    pub fn new(capacity: usize) -> NodeCache {
        NodeCache { capacity, nodes: BTreeMap::new(), recency: BTreeMap::new(), clock: 0 }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// The node cached for `address` and the checksum it was read or written with; marks it
    /// most recently used.
    pub fn get(&mut self, address: LogAddress) -> Option<(Arc<Node>, u32)> {
        let now = self.tick();
        let cached = self.nodes.get_mut(&address)?;
        let removed = self.recency.remove(&cached.last_use);
        assert_eq!(removed, Some(address), "recency index out of step for {address:?}");
        cached.last_use = now;
        self.recency.insert(now, address);
        Some((Arc::clone(&cached.node), cached.checksum))
    }

    /// Caches `node` as the content of `address`, replacing what was cached there and evicting
    /// the least recently used node if the cache is full.
    pub fn insert(&mut self, address: LogAddress, checksum: u32, node: Arc<Node>) {
        if self.capacity == 0 {
            return;
        }
        self.remove(address);
        while self.nodes.len() >= self.capacity {
            let (_, victim) = self
                .recency
                .pop_first()
                .unwrap_or_else(|| panic!("cache holds {} nodes but no recency entries", self.nodes.len()));
            let evicted = self.nodes.remove(&victim);
            assert!(evicted.is_some(), "recency index names uncached {victim:?}");
        }
        let now = self.tick();
        self.recency.insert(now, address);
        self.nodes.insert(address, CachedNode { node, checksum, last_use: now });
        assert!(self.nodes.len() <= self.capacity, "cache over capacity {}", self.capacity);
        assert_eq!(self.nodes.len(), self.recency.len(), "recency index out of step");
    }

    /// Forgets `address` (its page was released and may be rewritten with other content).
    pub fn remove(&mut self, address: LogAddress) {
        if let Some(cached) = self.nodes.remove(&address) {
            let removed = self.recency.remove(&cached.last_use);
            assert_eq!(removed, Some(address), "recency index out of step for {address:?}");
        }
    }

    pub fn clear(&mut self) {
        self.nodes.clear();
        self.recency.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(tree_id: u8) -> Arc<Node> {
        Arc::new(Node::empty_leaf(tree_id))
    }

    #[test]
    fn evicts_the_least_recently_used_node() {
        let mut cache = NodeCache::new(2);
        cache.insert(LogAddress(1), 11, leaf(1));
        cache.insert(LogAddress(2), 22, leaf(2));
        // Touch 1 so that 2 becomes the victim.
        assert_eq!(cache.get(LogAddress(1)).map(|(node, checksum)| (node.tree_id, checksum)), Some((1, 11)));
        cache.insert(LogAddress(3), 33, leaf(3));
        assert_eq!(cache.len(), 2);
        assert!(cache.get(LogAddress(2)).is_none(), "2 was least recently used");
        assert!(cache.get(LogAddress(1)).is_some());
        assert!(cache.get(LogAddress(3)).is_some());
    }

    #[test]
    fn reinserting_an_address_replaces_it() {
        let mut cache = NodeCache::new(2);
        cache.insert(LogAddress(1), 11, leaf(1));
        cache.insert(LogAddress(1), 12, leaf(5));
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get(LogAddress(1)).map(|(node, checksum)| (node.tree_id, checksum)), Some((5, 12)));
        cache.remove(LogAddress(1));
        assert_eq!(cache.len(), 0);
        cache.remove(LogAddress(1));
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let mut cache = NodeCache::new(0);
        cache.insert(LogAddress(1), 11, leaf(1));
        assert!(cache.get(LogAddress(1)).is_none());
        assert_eq!(cache.len(), 0);
    }
}
