//! Behaviour tests of `Tree` against a `BTreeMap` model over a `RamNodeStore`.
//!
//! Random tests take their seed from `FSOC_SEED` if set (replay), else from a fixed list; every
//! failure message starts with the seed and the step.
#![allow(clippy::unwrap_used)]

extern crate std;

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use crate::address::LogAddress;
use crate::btree::node::{Branch, Child, NodeEntries};
use crate::btree::ram_store::{RamNodeStore, RamStoreError};
use crate::btree::NodeReader;
use crate::btree::{Node, NodeStore, Tree, TreeConfig, TreeCounters, TreeError, TreeRoot, TreeStats};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const TREE_ID: u8 = 1;

/// A tree whose cache holds `cache_nodes_max` nodes of 2 KiB, with no dirty budget.
fn config(cache_nodes_max: usize) -> TreeConfig {
    config_for(cache_nodes_max, 2048)
}

/// Bytes that hold `node_count` nodes of `node_size_bytes` in the cache, whatever their entries:
/// the page, an offset table of at most half a page (entries take at least 4 bytes) and the
/// bookkeeping; and no more, since no node costs less than its page and the bookkeeping.
fn cache_bytes_for(node_count: usize, node_size_bytes: usize) -> usize {
    node_count * (node_size_bytes + node_size_bytes / 2 + crate::btree::cache::ENTRY_OVERHEAD_BYTES)
}

fn config_for(cache_nodes_max: usize, node_size_bytes: usize) -> TreeConfig {
    TreeConfig {
        tree_id: TREE_ID,
        cache_bytes_max: cache_bytes_for(cache_nodes_max, node_size_bytes),
        dirty_nodes_max: usize::MAX,
    }
}

/// fsoc-media's seeded generator with the helpers these tests need; deterministic across
/// platforms.
struct Rng(fsoc_media::rng::SeededRng);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(fsoc_media::rng::SeededRng::new(seed))
    }
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }
    fn bytes(&mut self, count: usize) -> Vec<u8> {
        (0..count).map(|_| self.next() as u8).collect()
    }
}

/// `FSOC_SEED` (decimal or 0x-hex) replaces the built-in seeds, to replay a failure.
fn seeds(defaults: &[u64]) -> Vec<u64> {
    match std::env::var("FSOC_SEED") {
        Ok(text) => {
            let parsed = match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => text.parse(),
            };
            vec![parsed.unwrap_or_else(|_| panic!("FSOC_SEED={text} is not a number"))]
        }
        Err(_) => defaults.to_vec(),
    }
}

/// The one whole-tree check: runs `Tree::check`, requires its entries to equal the model, the
/// on-flash nodes it reaches to be exactly the store's live pages of the tree (so every page
/// the working tree dropped was released and none it still uses was), and the node count to
/// add up with the dirty nodes.
fn check_tree(tree: &mut Tree, store: &mut RamNodeStore, model: &Model, context: &str) -> TreeStats {
    let mut nodes = BTreeSet::new();
    let mut entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let stats = tree
        .check(
            store,
            &mut |address| assert!(nodes.insert(address.0), "{context}: node {address:?} reached twice"),
            &mut |key, value| {
                entries.push((key.to_vec(), value.to_vec()));
                Ok(())
            },
        )
        .unwrap_or_else(|error| panic!("{context}: check failed: {error:?}"));
    assert_eq!(entries.len(), model.len(), "{context}: entry count");
    for ((key, value), (model_key, model_value)) in entries.iter().zip(model) {
        assert_eq!(key, model_key, "{context}: keys differ");
        assert_eq!(value, model_value, "{context}: value of {key:?}");
    }
    assert_eq!(stats.entry_count, model.len() as u64, "{context}: stats entry count");
    assert_eq!(stats.height, tree.height(), "{context}: stats height");
    assert_eq!(nodes, store.live_addresses(TREE_ID), "{context}: live pages != reachable pages");
    assert_eq!(stats.node_count, (nodes.len() + tree.dirty_node_count()) as u64, "{context}: nodes = on-flash + dirty");
    if let Some(root) = tree.root() {
        assert_fill(store, &nodes, root.pointer.address, context);
    }
    stats
}

/// Every non-root node of a flushed tree is at least a quarter full, except that the last
/// child of a parent may be less (the right half of an append's split, still filling):
/// removals merge or refill underfull nodes, and other splits and refills cut at the most even
/// point. Every node on flash is reached from the root exactly once (`check_tree`).
fn assert_fill(store: &RamNodeStore, nodes: &BTreeSet<u32>, root: LogAddress, context: &str) {
    let node_size_bytes = store.node_size_bytes();
    let mut last_children = BTreeSet::new();
    for address in nodes {
        let (node, _) = Node::decode(&store.pages[address]).unwrap();
        if let NodeEntries::Internal(branches) = &node.entries {
            if let Some(Branch { child: Child::OnFlash(pointer), .. }) = branches.last() {
                last_children.insert(pointer.address.0);
            }
        }
    }
    for address in nodes.iter().filter(|address| **address != root.0 && !last_children.contains(*address)) {
        let (node, _) = Node::decode(&store.pages[address]).unwrap();
        let fill_bytes = node.encoded_bytes();
        assert!(
            fill_bytes >= node_size_bytes / 4,
            "{context}: level-{} node {address} holds {fill_bytes} of {node_size_bytes} bytes",
            node.level
        );
    }
}

/// Adds `more` to `total` (a tree's counters restart when it is reopened).
fn accumulate(total: &mut TreeCounters, more: TreeCounters) {
    total.leaf_splits += more.leaf_splits;
    total.internal_splits += more.internal_splits;
    total.leaf_merges += more.leaf_merges;
    total.internal_merges += more.internal_merges;
    total.leaf_redistributions += more.leaf_redistributions;
    total.internal_redistributions += more.internal_redistributions;
    total.root_grows += more.root_grows;
    total.root_shrinks += more.root_shrinks;
    total.nodes_copied += more.nodes_copied;
    total.nodes_written += more.nodes_written;
    total.pages_read += more.pages_read;
    total.leaf_pages_read += more.leaf_pages_read;
    total.dirty_nodes_peak = total.dirty_nodes_peak.max(more.dirty_nodes_peak);
    total.budget_flushes += more.budget_flushes;
}

/// Flushes, checks that exactly `dirty_node_count` pages were written, and commits.
fn flush_and_commit(tree: &mut Tree, store: &mut RamNodeStore, context: &str) -> TreeRoot {
    let dirty_node_count = tree.dirty_node_count() as u64;
    let appends_before = store.append_count;
    let root = tree.flush(store).unwrap_or_else(|error| panic!("{context}: flush failed: {error:?}"));
    assert_eq!(store.append_count - appends_before, dirty_node_count, "{context}: pages written by flush");
    assert_eq!(tree.dirty_node_count(), 0, "{context}: dirty nodes after flush");
    assert_eq!(tree.root(), Some(root), "{context}: root after flush");
    store.commit();
    root
}

/// Shape of a random workload.
#[derive(Clone, Copy, Debug)]
struct Workload {
    node_size_bytes: usize,
    cache_nodes_max: usize,
    operation_count: usize,
    /// Distinct keys drawn from; small enough that removals and updates hit.
    key_space: usize,
    key_bytes_max: usize,
    /// Capped further by `Tree::max_entry_bytes`.
    value_bytes_max: usize,
    flush_every: usize,
    check_every: usize,
}

/// Key number `index`; the same index is always the same key. One in seven is at most four
/// bytes (prefixes of one another); the rest fall in four groups whose members share a prefix
/// of 0, 1/3, 2/3 or all of `key_bytes_max - 8` bytes, followed by the index and a random tail.
/// Long shared prefixes make long separators, so internal nodes split and merge often too.
fn key_for(index: usize, key_bytes_max: usize) -> Vec<u8> {
    let mut rng = Rng::new(index as u64 ^ 0xC0FF_EE00);
    let index_bytes = (index as u32).to_be_bytes();
    if rng.below(7) == 0 {
        return index_bytes[..rng.below(5).min(key_bytes_max)].to_vec();
    }
    let group = rng.below(4);
    let prefix_bytes = key_bytes_max.saturating_sub(8) * group / 3;
    let mut key = vec![b'p' + group as u8; prefix_bytes];
    key.extend_from_slice(&index_bytes);
    let tail_bytes = rng.below(key_bytes_max.saturating_sub(key.len()) + 1);
    key.extend(rng.bytes(tail_bytes));
    key.truncate(key_bytes_max);
    key
}

/// Runs random inserts, removals, lookups and range queries against the model, flushing
/// (and every other time reopening from the returned root with an empty cache) every
/// `flush_every` operations and running the whole-tree check every `check_every`. Returns what
/// the tree did, summed over reopenings.
fn run_workload(seed: u64, workload: Workload) -> TreeCounters {
    let Workload { node_size_bytes, cache_nodes_max, operation_count, key_space, key_bytes_max, .. } = workload;
    let mut rng = Rng::new(seed);
    let mut store = RamNodeStore::new(node_size_bytes);
    let mut tree = Tree::new_empty(config_for(cache_nodes_max, node_size_bytes));
    let mut model = Model::new();
    let limit_bytes = Tree::max_entry_bytes(node_size_bytes);
    let mut flush_count = 0;
    let mut counters = TreeCounters::default();
    for step in 0..operation_count {
        let context = format!("replay: FSOC_SEED={seed:#x} ({workload:?}) step {step}");
        let key = key_for(rng.below(key_space), key_bytes_max);
        // Alternate growing and shrinking phases, so the tree gains and loses levels.
        let growing = (step * 4 / operation_count) % 2 == 0;
        let (insert_percent, remove_percent) = if growing { (65, 15) } else { (15, 65) };
        let roll = rng.below(100);
        let kind = if roll < insert_percent {
            0
        } else if roll < insert_percent + remove_percent {
            45
        } else {
            75 + (roll - insert_percent - remove_percent) / 2
        };
        match kind {
            0..=44 => {
                let value_bytes_max = workload.value_bytes_max.min(limit_bytes - key.len());
                let value_bytes = if rng.below(4) == 0 { value_bytes_max } else { rng.below(value_bytes_max + 1) };
                let value = rng.bytes(value_bytes);
                let got = tree.insert(&mut store, &key, &value);
                assert_eq!(got, Ok(model.insert(key, value)), "{context}: insert");
            }
            45..=74 => {
                let got = tree.remove(&mut store, &key);
                assert_eq!(got, Ok(model.remove(&key)), "{context}: remove");
            }
            75..=84 => {
                let got = tree.get(&store, &key);
                assert_eq!(got, Ok(model.get(&key).cloned()), "{context}: get");
            }
            _ => check_ranges(&mut tree, &mut store, &model, &key, &context),
        }
        let cache_bytes_max = cache_bytes_for(cache_nodes_max, node_size_bytes);
        assert!(
            tree.cached_bytes() <= cache_bytes_max && tree.cached_node_count() <= cache_nodes_max * 3 / 2,
            "{context}: {} cached nodes of {} bytes over the limit of {cache_bytes_max} bytes",
            tree.cached_node_count(),
            tree.cached_bytes()
        );
        if (step + 1) % workload.check_every == 0 {
            check_tree(&mut tree, &mut store, &model, &context);
        }
        if (step + 1) % workload.flush_every == 0 {
            let root = flush_and_commit(&mut tree, &mut store, &context);
            flush_count += 1;
            if flush_count % 2 == 0 {
                accumulate(&mut counters, tree.counters());
                tree = Tree::open(config_for(cache_nodes_max, node_size_bytes), root);
                assert_eq!(tree.cached_node_count(), 0, "{context}: reopened with a warm cache");
            }
            check_tree(&mut tree, &mut store, &model, &context);
        }
    }
    let context = format!("replay: FSOC_SEED={seed:#x} ({workload:?}) end");
    let root = flush_and_commit(&mut tree, &mut store, &context);
    accumulate(&mut counters, tree.counters());
    let mut reopened = Tree::open(config_for(cache_nodes_max, node_size_bytes), root);
    check_tree(&mut reopened, &mut store, &model, &context);
    assert_eq!(scan(&mut reopened, &mut store), model, "{context}: forward scan");
    assert_eq!(counters.nodes_written, store.append_count, "{context}: nodes written = pages appended");
    assert_eq!(counters.nodes_copied, store.release_count, "{context}: nodes copied = pages released");
    counters
}

/// Every entry, by walking `first_after` from the smallest key.
fn scan(tree: &mut Tree, store: &mut RamNodeStore) -> Model {
    let mut found = Model::new();
    let mut next = tree.first_at_or_after(store, &[]).unwrap();
    while let Some((key, value)) = next {
        next = tree.first_after(store, &key).unwrap();
        assert!(found.insert(key, value).is_none(), "scan returned a key twice");
    }
    found
}

fn check_ranges(tree: &mut Tree, store: &mut RamNodeStore, model: &Model, key: &[u8], context: &str) {
    use core::ops::Bound::{Excluded, Included, Unbounded};
    let clone = |(key, value): (&Vec<u8>, &Vec<u8>)| (key.clone(), value.clone());
    let at_or_after = model.range::<[u8], _>((Included(key), Unbounded)).next().map(clone);
    let after = model.range::<[u8], _>((Excluded(key), Unbounded)).next().map(clone);
    let at_or_before = model.range::<[u8], _>((Unbounded, Included(key))).next_back().map(clone);
    assert_eq!(tree.first_at_or_after(store, key), Ok(at_or_after), "{context}: first_at_or_after {key:?}");
    assert_eq!(tree.first_after(store, key), Ok(after), "{context}: first_after {key:?}");
    assert_eq!(tree.last_at_or_before(store, key), Ok(at_or_before), "{context}: last_at_or_before {key:?}");
    // The cursor: the next few entries from `key`, inclusive and not, as the model has them.
    for (inclusive, lower) in [(true, Included(key)), (false, Excluded(key))] {
        let expected: Vec<(Vec<u8>, Vec<u8>)> = model.range::<[u8], _>((lower, Unbounded)).take(5).map(clone).collect();
        let mut found = Vec::new();
        tree.scan_from(store, key, inclusive, &mut |key, value| {
            found.push((key.to_vec(), value.to_vec()));
            found.len() < 5
        })
        .unwrap_or_else(|error| panic!("{context}: scan_from {key:?}: {error:?}"));
        assert_eq!(found, expected, "{context}: scan_from {key:?} inclusive {inclusive}");
    }
}

/// Builds a flushed and committed tree holding `count` entries of 8-byte keys (BE index * 2, so
/// odd numbers fall between keys) and `value_bytes`-byte values.
fn build(store: &mut RamNodeStore, cache_nodes_max: usize, count: u64, value_bytes: usize) -> (Tree, Model, TreeRoot) {
    let mut tree = Tree::new_empty(config(cache_nodes_max));
    let mut model = Model::new();
    let mut rng = Rng::new(count);
    for index in 0..count {
        // A multiplicative permutation, so inserts land all over the tree.
        let key = ((index * 0x9E37_79B9) % count * 2).to_be_bytes().to_vec();
        let value = rng.bytes(value_bytes);
        tree.insert(store, &key, &value).unwrap();
        model.insert(key, value);
    }
    let root = flush_and_commit(&mut tree, store, "build");
    (tree, model, root)
}

#[test]
fn empty_tree_is_one_empty_leaf() {
    let mut store = RamNodeStore::new(2048);
    let mut tree = Tree::new_empty(config(8));
    assert!(tree.is_dirty());
    assert_eq!(tree.dirty_node_count(), 1);
    assert_eq!(tree.root(), None, "a dirty root has no address");
    assert_eq!(tree.get(&store, b"x"), Ok(None));
    assert_eq!(tree.first_at_or_after(&store, b""), Ok(None));
    assert_eq!(tree.last_at_or_before(&store, b"\xff\xff"), Ok(None));
    assert_eq!(tree.remove(&mut store, b"x"), Ok(None));
    let root = flush_and_commit(&mut tree, &mut store, "empty");
    assert_eq!(root.height, 1);
    assert_eq!(store.append_count, 1);
    let stats = check_tree(&mut tree, &mut store, &Model::new(), "empty");
    assert_eq!(stats, TreeStats { node_count: 1, leaf_count: 1, entry_count: 0, height: 1 });
    // Flushing a clean tree writes nothing.
    assert_eq!(tree.flush(&mut store), Ok(root));
    assert_eq!(store.append_count, 1);
    let reopened = Tree::open(config(8), root);
    let reads_before = store.read_count.get();
    assert_eq!(reopened.get(&store, b"x"), Ok(None));
    assert_eq!(store.read_count.get() - reads_before, 1, "one read for the root leaf");
}

#[test]
fn agrees_with_model_small_entries() {
    for seed in seeds(&[1, 2, 3]) {
        for node_size_bytes in [2048, 4096] {
            run_workload(
                seed,
                Workload {
                    node_size_bytes,
                    cache_nodes_max: 32,
                    operation_count: 6000,
                    key_space: 1500,
                    key_bytes_max: 24,
                    value_bytes_max: 40,
                    flush_every: 400,
                    check_every: 997,
                },
            );
        }
    }
}

/// Keys up to 300 bytes and values up to the entry limit, so nodes hold four to a few entries
/// and splits and merges happen constantly, on every level.
#[test]
fn agrees_with_model_large_keys_and_values() {
    for seed in seeds(&[11, 12]) {
        let counters = run_workload(
            seed,
            Workload {
                node_size_bytes: 2048,
                cache_nodes_max: 16,
                operation_count: 4000,
                key_space: 600,
                key_bytes_max: 300,
                value_bytes_max: 2048,
                flush_every: 150,
                check_every: 97,
            },
        );
        assert!(counters.internal_splits > 0 && counters.root_grows >= 2, "seed {seed:#x}: {counters:?}");
        assert!(counters.leaf_merges > 0 && counters.leaf_redistributions > 0, "seed {seed:#x}: {counters:?}");
    }
}

/// Many flushes of few dirty nodes, mostly in a tree that keeps growing and shrinking through
/// the same few leaves: exercises releasing pages written by earlier flushes.
#[test]
fn agrees_with_model_with_frequent_flushes_and_8k_nodes() {
    for seed in seeds(&[21]) {
        run_workload(
            seed,
            Workload {
                node_size_bytes: 8192,
                cache_nodes_max: 8,
                operation_count: 3000,
                key_space: 400,
                key_bytes_max: 300,
                value_bytes_max: 1200,
                flush_every: 7,
                check_every: 301,
            },
        );
    }
}

/// A two-node cache still gives correct answers, and the cache never holds more than two nodes
/// (checked after every operation by `run_workload`).
#[test]
fn two_node_cache_is_correct_and_bounded() {
    for seed in seeds(&[31]) {
        run_workload(
            seed,
            Workload {
                node_size_bytes: 2048,
                cache_nodes_max: 2,
                operation_count: 3000,
                key_space: 1000,
                key_bytes_max: 40,
                value_bytes_max: 100,
                flush_every: 250,
                check_every: 499,
            },
        );
    }
}

#[test]
fn zero_node_cache_is_correct() {
    for seed in seeds(&[41]) {
        run_workload(
            seed,
            Workload {
                node_size_bytes: 2048,
                cache_nodes_max: 0,
                operation_count: 1500,
                key_space: 500,
                key_bytes_max: 30,
                value_bytes_max: 60,
                flush_every: 100,
                check_every: 301,
            },
        );
    }
}

/// Ascending inserts then removal of everything in descending order: the tree grows several
/// levels and shrinks back to a single empty leaf, and the store holds exactly that one page.
#[test]
fn grows_and_shrinks_back_to_one_empty_leaf() {
    let mut store = RamNodeStore::new(2048);
    let mut tree = Tree::new_empty(config(16));
    let mut model = Model::new();
    let value = [0xABu8; 200];
    for index in 0u32..3000 {
        let key = index.to_be_bytes();
        assert_eq!(tree.insert(&mut store, &key, &value), Ok(None));
        model.insert(key.to_vec(), value.to_vec());
        if index % 500 == 499 {
            flush_and_commit(&mut tree, &mut store, "ascending");
        }
    }
    let grown = check_tree(&mut tree, &mut store, &model, "grown");
    assert!(grown.height >= 3, "3000 entries of 208 bytes in 2 KiB nodes: height {}", grown.height);
    for index in (0u32..3000).rev() {
        let key = index.to_be_bytes();
        assert_eq!(tree.remove(&mut store, &key), Ok(Some(value.to_vec())), "remove {index}");
        model.remove(key.as_slice());
        if index % 500 == 0 {
            flush_and_commit(&mut tree, &mut store, "descending");
            check_tree(&mut tree, &mut store, &model, &format!("descending at {index}"));
        }
    }
    let root = flush_and_commit(&mut tree, &mut store, "emptied");
    assert_eq!(root.height, 1, "an empty tree is a single leaf");
    let stats = check_tree(&mut tree, &mut store, &model, "emptied");
    assert_eq!(stats, TreeStats { node_count: 1, leaf_count: 1, entry_count: 0, height: 1 });
    assert_eq!(store.pages.len(), 1, "only the empty root leaf remains on flash");
}

/// A deep tree of long keys (long shared prefixes make separators of up to 300 bytes, so
/// internal nodes hold few children) is built in random order and then emptied in another
/// random order, checked against the model as it goes: every kind of split, merge and refill
/// happens on internal levels too, and the root loses level after level down to one leaf.
#[test]
fn deep_tree_of_long_keys_shrinks_level_by_level() {
    for seed in seeds(&[51, 52, 53]) {
        let mut rng = Rng::new(seed);
        let mut store = RamNodeStore::new(2048);
        let mut tree = Tree::new_empty(config(16));
        let mut model = Model::new();
        let mut keys: Vec<Vec<u8>> = (0..2500).map(|index| key_for(index, 300)).collect();
        keys.sort();
        keys.dedup();
        // Fisher-Yates with the seeded generator.
        for index in (1..keys.len()).rev() {
            keys.swap(index, rng.below(index + 1));
        }
        let mut height_max = 0;
        for (step, key) in keys.iter().enumerate() {
            let value_bytes = rng.below(Tree::max_entry_bytes(2048) - key.len()).min(150);
            let value = rng.bytes(value_bytes);
            assert_eq!(tree.insert(&mut store, key, &value), Ok(model.insert(key.clone(), value)));
            if step % 250 == 249 {
                let context = format!("replay: FSOC_SEED={seed:#x} insert step {step}");
                flush_and_commit(&mut tree, &mut store, &context);
                check_tree(&mut tree, &mut store, &model, &context);
            }
            height_max = height_max.max(tree.height());
        }
        assert!(height_max >= 4, "seed {seed:#x}: height only reached {height_max}");
        for index in (1..keys.len()).rev() {
            keys.swap(index, rng.below(index + 1));
        }
        for (step, key) in keys.iter().enumerate() {
            let context = format!("replay: FSOC_SEED={seed:#x} remove step {step}");
            assert_eq!(tree.remove(&mut store, key), Ok(model.remove(key)), "{context}");
            if step % 97 == 0 {
                check_ranges(&mut tree, &mut store, &model, key, &context);
                check_tree(&mut tree, &mut store, &model, &context);
            }
            if step % 200 == 199 {
                flush_and_commit(&mut tree, &mut store, &context);
            }
        }
        let root = flush_and_commit(&mut tree, &mut store, "emptied");
        assert_eq!(root.height, 1);
        let counters = tree.counters();
        assert!(counters.internal_splits > 0, "seed {seed:#x}: {counters:?}");
        assert!(counters.internal_merges > 0, "seed {seed:#x}: {counters:?}");
        assert!(counters.leaf_redistributions > 0, "seed {seed:#x}: {counters:?}");
        assert!(counters.internal_redistributions > 0, "seed {seed:#x}: {counters:?}");
        assert_eq!(counters.root_shrinks, counters.root_grows, "seed {seed:#x}: back to one level");
        assert_eq!(store.pages.len(), 1, "seed {seed:#x}: one empty leaf left");
    }
}

/// Copy-on-write accounting on a known shape: updating one entry of a committed tree of height
/// h copies and releases exactly the h nodes of its path; a second update of the same leaf
/// copies nothing more; the flush writes exactly those h nodes.
#[test]
fn update_copies_and_releases_each_path_node_once() {
    let mut store = RamNodeStore::new(2048);
    let (mut tree, mut model, root) = build(&mut store, 64, 5000, 16);
    let height = u64::from(root.height);
    assert!(height >= 2, "height {height}");
    let releases_before = store.release_count;
    let key = 200u64.to_be_bytes().to_vec();
    let old = tree.insert(&mut store, &key, b"new value").unwrap();
    assert_eq!(old, model.insert(key.clone(), b"new value".to_vec()));
    assert_eq!(store.release_count - releases_before, height, "one release per path node");
    assert_eq!(tree.dirty_node_count() as u64, height, "one dirty copy per path node");
    tree.insert(&mut store, &key, b"newer value").unwrap();
    model.insert(key.clone(), b"newer value".to_vec());
    assert_eq!(store.release_count - releases_before, height, "a dirty node is not released again");
    assert_eq!(tree.dirty_node_count() as u64, height);
    check_tree(&mut tree, &mut store, &model, "dirty path");
    flush_and_commit(&mut tree, &mut store, "after update");
    // A page written by this transaction's flush is released the same way when rewritten.
    let releases_before = store.release_count;
    tree.insert(&mut store, &key, b"newest").unwrap();
    model.insert(key, b"newest".to_vec());
    assert_eq!(store.release_count - releases_before, height);
    check_tree(&mut tree, &mut store, &model, "second transaction");
}

#[test]
fn unchanged_upserts_and_absent_removals_copy_nothing() {
    let mut store = RamNodeStore::new(2048);
    let (mut tree, model, _) = build(&mut store, 64, 1000, 16);
    let (key, value) = model.iter().nth(500).unwrap();
    assert_eq!(tree.insert(&mut store, key, value), Ok(Some(value.clone())));
    assert_eq!(tree.remove(&mut store, &3u64.to_be_bytes()), Ok(None), "odd keys are absent");
    assert!(!tree.is_dirty());
    assert_eq!(tree.dirty_node_count(), 0);
    assert_eq!(store.release_count, 0);
}

#[test]
fn entries_over_the_limit_are_rejected() {
    let mut store = RamNodeStore::new(2048);
    let mut tree = Tree::new_empty(config(8));
    let limit_bytes = Tree::max_entry_bytes(2048);
    assert_eq!(limit_bytes, 499);
    let key = [7u8; 300];
    assert_eq!(
        tree.insert(&mut store, &key, &vec![1u8; limit_bytes - 299]),
        Err(TreeError::EntryTooLarge { key_bytes: 300, value_bytes: 200, limit_bytes })
    );
    assert_eq!(tree.insert(&mut store, &key, &vec![1u8; limit_bytes - 300]), Ok(None));
    assert_eq!(tree.dirty_node_count(), 1, "the rejected insert changed nothing");
}

/// 100,000 small entries in 2 KiB nodes: the tree stays at most 4 levels high and a lookup
/// with a cold cache reads exactly `height` pages. Then most entries go again.
#[test]
fn hundred_thousand_entries_stay_shallow() {
    let mut store = RamNodeStore::new(2048);
    let mut tree = Tree::new_empty(config(256));
    let count = 100_000u64;
    let key_of = |index: u64| ((index * 0x9E37_79B9) % count).to_be_bytes();
    for index in 0..count {
        tree.insert(&mut store, &key_of(index), &index.to_le_bytes()).unwrap();
        if index % 20_000 == 19_999 {
            flush_and_commit(&mut tree, &mut store, "100k");
        }
    }
    let root = flush_and_commit(&mut tree, &mut store, "100k");
    assert!(root.height <= 4, "height {} for 100k entries", root.height);
    // A full scan through the cursor on a cold tree reads every node exactly once.
    let stats = check_tree(
        &mut tree,
        &mut store,
        &(0..count).map(|index| (key_of(index).to_vec(), (index.to_le_bytes()).to_vec())).collect(),
        "100k",
    );
    let cold = Tree::open(config(0), root);
    let reads_before = store.read_count.get();
    let mut scanned = 0u64;
    let mut last: Option<Vec<u8>> = None;
    cold.scan_from(&store, &[], true, &mut |key, _| {
        assert!(last.as_deref().is_none_or(|last| last < key), "scan in key order");
        last = Some(key.to_vec());
        scanned += 1;
        true
    })
    .unwrap();
    assert_eq!(scanned, count, "the cursor visits every entry once");
    assert_eq!(store.read_count.get() - reads_before, stats.node_count, "the cursor reads each node once");
    assert_eq!(cold.counters().leaf_pages_read, stats.leaf_count, "each leaf once");
    assert_eq!(cold.counters().pages_read, stats.node_count);
    let mut rng = Rng::new(7);
    for _ in 0..200 {
        let index = rng.below(count as usize) as u64;
        let cold = Tree::open(config(0), root);
        let reads_before = store.read_count.get();
        assert_eq!(cold.get(&store, &key_of(index)), Ok(Some(index.to_le_bytes().to_vec())));
        assert_eq!(store.read_count.get() - reads_before, u64::from(root.height), "cold get of {index}");
    }
    // A warm cache holding the upper levels answers with one read (the leaf) or none.
    let warm = Tree::open(config(256), root);
    for index in 0..2000 {
        warm.get(&store, &key_of(index)).unwrap();
    }
    let reads_before = store.read_count.get();
    for index in 0..100 {
        warm.get(&store, &key_of(index + 50_000)).unwrap();
    }
    assert!(store.read_count.get() - reads_before <= 100, "warm gets read {}", store.read_count.get() - reads_before);

    for index in 0..count - 1000 {
        assert!(tree.remove(&mut store, &key_of(index)).unwrap().is_some());
        if index % 25_000 == 24_999 {
            flush_and_commit(&mut tree, &mut store, "100k removals");
        }
    }
    let model: Model =
        (count - 1000..count).map(|index| (key_of(index).to_vec(), index.to_le_bytes().to_vec())).collect();
    flush_and_commit(&mut tree, &mut store, "1k left");
    let stats = check_tree(&mut tree, &mut store, &model, "1k left");
    assert!(stats.height <= 2, "1000 entries left, height {}", stats.height);
}

/// Corrupting any reachable node page (one bit, in the header, the entries or the padding; or
/// replacing it with another valid node) is reported as `Corrupt` at that page by a lookup
/// through it and by `check`.
#[test]
fn corrupting_any_reachable_node_is_detected() {
    let mut store = RamNodeStore::new(2048);
    let (_, _, root) = build(&mut store, 64, 3000, 24);
    // For each node, the first key below it: a lookup of that key passes through the node.
    let mut first_key_below: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    let pending: core::cell::RefCell<Vec<u32>> = core::cell::RefCell::new(Vec::new());
    Tree::open(config(0), root)
        .check(&mut store, &mut |address| pending.borrow_mut().push(address.0), &mut |key, _| {
            for address in pending.borrow_mut().drain(..) {
                first_key_below.insert(address, key.to_vec());
            }
            Ok(())
        })
        .unwrap();
    assert!(first_key_below.len() > 20, "{} nodes", first_key_below.len());
    let some_other_page = *first_key_below.keys().next().unwrap();
    for (round, (&address, key)) in first_key_below.iter().enumerate() {
        let address = LogAddress(address);
        let original = store.pages[&address.0].clone();
        let bit_index = match round % 4 {
            0 => 3 * 8 + 1,  // level
            1 => 14 * 8 + 2, // first entry
            2 => 2040 * 8,   // padding
            _ => {
                // A misdirected write: a valid node, but not the one the parent points to.
                let other = if address.0 == some_other_page {
                    *first_key_below.keys().nth(1).unwrap()
                } else {
                    some_other_page
                };
                let replacement = store.pages[&other].clone();
                store.pages.insert(address.0, replacement);
                usize::MAX
            }
        };
        if bit_index != usize::MAX {
            store.flip_bit(address, bit_index);
        }
        let mut tree = Tree::open(config(64), root);
        let got = tree.get(&store, key);
        assert!(
            matches!(got, Err(TreeError::Corrupt { address: reported, .. }) if reported == address),
            "round {round}: get through corrupt {address:?} gave {got:?}"
        );
        let checked = tree.check(&mut store, &mut |_| {}, &mut |_, _| Ok(()));
        assert!(
            matches!(checked, Err(TreeError::Corrupt { address: at, .. }) if at == address),
            "round {round}: check of corrupt {address:?} gave {checked:?}"
        );
        store.pages.insert(address.0, original);
    }
    let mut tree = Tree::open(config(64), root);
    assert!(tree.check(&mut store, &mut |_| {}, &mut |_, _| Ok(())).is_ok(), "restored pages check clean");
}

/// The recorded height bounds every descent: a root that claims more or fewer levels than it
/// has, height zero, or a root of another tree, are `Corrupt`, never a hang or a panic.
#[test]
fn wrong_height_or_tree_id_is_corrupt() {
    let mut store = RamNodeStore::new(2048);
    let (_, _, root) = build(&mut store, 64, 3000, 24);
    assert!(root.height >= 2);
    for height in [0, root.height - 1, root.height + 1, u8::MAX] {
        let mut tree = Tree::open(config(8), TreeRoot { pointer: root.pointer, height });
        let key = 4u64.to_be_bytes();
        assert!(matches!(tree.get(&store, &key), Err(TreeError::Corrupt { .. })), "height {height}");
        assert!(matches!(tree.insert(&mut store, &key, b"v"), Err(TreeError::Corrupt { .. })), "height {height}");
        let checked = tree.check(&mut store, &mut |_| {}, &mut |_, _| Ok(()));
        assert!(matches!(checked, Err(TreeError::Corrupt { .. })), "height {height}: {checked:?}");
    }
    let other_tree = Tree::open(TreeConfig { tree_id: TREE_ID + 1, ..config(8) }, root);
    assert_eq!(
        other_tree.get(&store, b"k"),
        Err(TreeError::Corrupt { address: root.pointer.address, reason: "node of another tree" })
    );
    assert_eq!(store.release_count, 0, "failed operations released nothing");
}

#[test]
fn read_errors_propagate() {
    let mut store = RamNodeStore::new(2048);
    let missing = crate::address::PagePointer { address: LogAddress(5), checksum: 0 };
    let mut tree = Tree::open(config(8), TreeRoot { pointer: missing, height: 1 });
    let error = TreeError::Store { address: LogAddress(5), error: RamStoreError::NotWritten };
    assert_eq!(tree.get(&store, b"k"), Err(error.clone()));
    assert_eq!(tree.insert(&mut store, b"k", b"v"), Err(error.clone()));
    assert_eq!(tree.check(&mut store, &mut |_| {}, &mut |_, _| Ok(())), Err(error));
    let null_root = crate::address::PagePointer::NULL;
    let tree = Tree::open(config(8), TreeRoot { pointer: null_root, height: 1 });
    assert!(matches!(tree.get(&store, b"k"), Err(TreeError::Corrupt { .. })));
}

/// `check` passes errors from `visit_entry` through.
#[test]
fn check_stops_at_a_visitor_error() {
    let mut store = RamNodeStore::new(2048);
    let (mut tree, _, _) = build(&mut store, 64, 100, 8);
    let refusal = TreeError::Corrupt { address: LogAddress::NULL, reason: "visitor refused" };
    let mut visited = 0;
    let got = tree.check(&mut store, &mut |_| {}, &mut |_, _| {
        visited += 1;
        if visited == 10 {
            Err(refusal.clone())
        } else {
            Ok(())
        }
    });
    assert_eq!(got, Err(refusal.clone()));
    assert_eq!(visited, 10);
}

/// The cleaner's question: for every page in the store (live ones of this tree, stale ones,
/// another tree's), `relocate_if_live` answers whether the working tree references it; live
/// pages get dirtied, released, and written elsewhere by the next flush.
#[test]
fn relocate_if_live_moves_exactly_the_referenced_pages() {
    let mut store = RamNodeStore::new(2048);
    let (mut tree, mut model, _) = build(&mut store, 32, 4000, 24);
    // Another tree in the same store: its pages are never this tree's.
    let mut other = Tree::new_empty(TreeConfig { tree_id: TREE_ID + 1, ..config(8) });
    for index in 0u32..300 {
        other.insert(&mut store, &index.to_be_bytes(), &[1u8; 30]).unwrap();
    }
    other.flush(&mut store).unwrap();
    // Some updates flushed but not committed, so stale pages of this tree stay readable.
    for index in 0u64..40 {
        let key = (index * 97 * 2).to_be_bytes().to_vec();
        tree.insert(&mut store, &key, b"updated").unwrap();
        model.insert(key, b"updated".to_vec());
    }
    tree.flush(&mut store).unwrap();
    let stale_count = store.pages.len() - store.live_addresses(TREE_ID).len() - store.live_addresses(TREE_ID + 1).len();
    assert!(stale_count > 10, "{stale_count} stale pages");
    let mut relocated = Vec::new();
    let mut reads_max = 0;
    let addresses: Vec<u32> = store.pages.keys().copied().collect();
    for address in addresses {
        let address = LogAddress(address);
        let ours = store.tags[&address.0].tree_id == TREE_ID;
        let expected = ours && store.is_live(address);
        let reads_before = store.read_count.get();
        let got = tree.relocate_if_live(&mut store, address).unwrap();
        reads_max = reads_max.max(store.read_count.get() - reads_before);
        assert_eq!(got, expected, "{address:?} (ours: {ours})");
        if got {
            assert!(!store.is_live(address), "relocated {address:?} still live");
            relocated.push(address);
        }
        assert!(!tree.relocate_if_live(&mut store, address).unwrap(), "{address:?} answered live twice");
    }
    assert!(reads_max <= 2 * u64::from(tree.height()) + 1, "relocation read {reads_max} pages");
    assert!(relocated.len() > 10, "{} relocated", relocated.len());
    let stats = check_tree(&mut tree, &mut store, &model, "relocated, dirty");
    flush_and_commit(&mut tree, &mut store, "relocated");
    let mut reachable = BTreeSet::new();
    tree.check(
        &mut store,
        &mut |address| {
            reachable.insert(address);
        },
        &mut |_, _| Ok(()),
    )
    .unwrap();
    assert_eq!(reachable.len() as u64, stats.node_count);
    for address in &relocated {
        assert!(!reachable.contains(address), "{address:?} still reachable after the flush");
    }
    check_tree(&mut tree, &mut store, &model, "relocated, flushed");
    assert_eq!(tree.relocate_if_live(&mut store, LogAddress::NULL), Ok(false));
    // A torn program: the page reads but does not decode. Not live, and no error.
    let torn = store.append_node(&vec![0x5Au8; 2048], crate::btree::NodeTag { tree_id: TREE_ID, level: 0 }).unwrap();
    assert_eq!(tree.relocate_if_live(&mut store, torn), Ok(false));
    assert!(!tree.is_dirty(), "a torn page dirtied nothing");
}

/// After a failed commit the caller drops the working state; the tree reads the committed state
/// again and carries on (the store's live set is rolled back alongside).
#[test]
fn reset_to_returns_to_the_committed_state() {
    let mut store = RamNodeStore::new(2048);
    let (mut tree, committed_model, root) = build(&mut store, 32, 2000, 24);
    let mut model = committed_model.clone();
    for index in 0u64..300 {
        let key = (index * 4).to_be_bytes().to_vec();
        tree.remove(&mut store, &key).unwrap();
        model.remove(&key);
    }
    // A flush without commit, then more changes.
    tree.flush(&mut store).unwrap();
    tree.insert(&mut store, b"uncommitted", b"x").unwrap();
    assert!(tree.is_dirty());
    tree.reset_to(root);
    store.rollback();
    assert!(!tree.is_dirty());
    assert_eq!(tree.dirty_node_count(), 0);
    assert_eq!(tree.cached_node_count(), 0);
    assert_eq!(tree.root(), Some(root));
    assert_eq!(tree.get(&store, b"uncommitted"), Ok(None));
    check_tree(&mut tree, &mut store, &committed_model, "after reset");
    model = committed_model;
    tree.insert(&mut store, b"after reset", b"y").unwrap();
    model.insert(b"after reset".to_vec(), b"y".to_vec());
    flush_and_commit(&mut tree, &mut store, "after reset");
    check_tree(&mut tree, &mut store, &model, "after reset, flushed");
}

/// `NoSpace` from the store comes back from flush; the unwritten nodes stay dirty, so a later
/// flush with space finishes the job; or the caller resets to the committed root.
#[test]
fn no_space_propagates_and_flush_can_resume() {
    let mut store = RamNodeStore::new(2048);
    let (mut tree, mut model, root) = build(&mut store, 32, 3000, 24);
    for index in 0u64..200 {
        let key = (index * 30 + 1).to_be_bytes().to_vec();
        tree.insert(&mut store, &key, b"new").unwrap();
        model.insert(key, b"new".to_vec());
    }
    let dirty_before = tree.dirty_node_count();
    assert!(dirty_before > 5, "{dirty_before} dirty");
    store.append_budget = Some(3);
    assert_eq!(tree.flush(&mut store), Err(TreeError::Store { address: LogAddress::NULL, error: RamStoreError::Full }));
    assert_eq!(tree.dirty_node_count(), dirty_before - 3, "three nodes were written");
    assert!(tree.is_dirty());
    assert_eq!(tree.root(), None);
    check_tree(&mut tree, &mut store, &model, "after NoSpace");
    store.append_budget = None;
    flush_and_commit(&mut tree, &mut store, "resumed");
    check_tree(&mut tree, &mut store, &model, "resumed");
    // And the other way out: reset to the committed root.
    let committed_model = model.clone();
    let committed_root = tree.root().unwrap();
    assert_ne!(committed_root, root);
    tree.insert(&mut store, b"doomed", b"x").unwrap();
    store.append_budget = Some(0);
    assert_eq!(tree.flush(&mut store), Err(TreeError::Store { address: LogAddress::NULL, error: RamStoreError::Full }));
    tree.reset_to(committed_root);
    store.rollback();
    check_tree(&mut tree, &mut store, &committed_model, "reset after NoSpace");
}

/// Memory stays bounded by the cache and the dirty nodes: a long read-only scan of a large tree
/// with a tiny cache never holds more than the cache size of clean nodes.
#[test]
fn scans_with_a_tiny_cache_hold_few_nodes() {
    let mut store = RamNodeStore::new(2048);
    let (_, model, root) = build(&mut store, 2, 5000, 24);
    let tree = Tree::open(config(2), root);
    let mut next = tree.first_at_or_after(&store, &[]).unwrap();
    let mut count = 0;
    while let Some((key, _)) = next {
        assert!(tree.cached_node_count() <= 2);
        assert_eq!(tree.dirty_node_count(), 0);
        count += 1;
        next = tree.first_after(&store, &key).unwrap();
    }
    assert_eq!(count, model.len());
    let mut backwards = 0;
    let mut previous = tree.last_at_or_before(&store, &[0xFF; 9]).unwrap();
    while let Some((key, _)) = previous {
        backwards += 1;
        let mut below = key.clone();
        // The key just below an 8-byte big-endian key: decrement.
        let value = u64::from_be_bytes(below.as_slice().try_into().unwrap());
        if value == 0 {
            break;
        }
        below = (value - 1).to_be_bytes().to_vec();
        previous = tree.last_at_or_before(&store, &below).unwrap();
    }
    assert_eq!(backwards, model.len());
}

/// An update descends once: on a cold tree (no cache) an insert, an unchanged upsert and an
/// absent removal each read exactly the `height` nodes of the path (two descents read twice
/// that), and a removal at most one sibling more.
#[test]
fn updates_descend_once() {
    let mut store = RamNodeStore::new(2048);
    let (_, model, root) = build(&mut store, 64, 5000, 200);
    let height = u64::from(root.height);
    assert!(height >= 3, "height {height}");
    let mut rng = Rng::new(61);
    for round in 0..50 {
        let present = (rng.below(5000) as u64 * 2).to_be_bytes().to_vec();
        let absent = (rng.below(5000) as u64 * 2 + 1).to_be_bytes().to_vec();
        let context = format!("round {round}");
        let reads = |store: &RamNodeStore, before: u64| store.read_count.get() - before;
        // Each update on a fresh cold tree of the committed state, so every node is read.
        let cold = |store: &mut RamNodeStore| {
            store.rollback();
            Tree::open(config(0), root)
        };
        let mut tree = cold(&mut store);
        let before = store.read_count.get();
        assert_eq!(tree.insert(&mut store, &absent, b"new"), Ok(None), "{context}");
        assert_eq!(reads(&store, before), height, "{context}: insert");
        let mut tree2 = cold(&mut store);
        let value = model[&present].clone();
        let before = store.read_count.get();
        assert_eq!(tree2.insert(&mut store, &present, &value), Ok(Some(value.clone())), "{context}");
        assert_eq!(reads(&store, before), height, "{context}: unchanged upsert");
        assert!(!tree2.is_dirty(), "{context}: an unchanged upsert copies nothing");
        let before = store.read_count.get();
        assert_eq!(tree2.remove(&mut store, &absent), Ok(None), "{context}");
        assert_eq!(reads(&store, before), height, "{context}: absent removal");
        let mut tree3 = cold(&mut store);
        let before = store.read_count.get();
        assert_eq!(tree3.remove(&mut store, &present), Ok(Some(value)), "{context}");
        assert!(reads(&store, before) <= height + 1, "{context}: removal read {}", reads(&store, before));
        assert!(tree.is_dirty() && tree3.is_dirty(), "{context}: changes copy their paths");
    }
    store.rollback();
    let mut tree = Tree::open(config(8), root);
    check_tree(&mut tree, &mut store, &model, "committed state untouched");
}

/// The dirty budget holds inside one long run of updates with no flush from the caller: the
/// tree writes its dirty nodes out (without committing) whenever an update leaves more than
/// `dirty_nodes_max`, so it never holds more than the budget plus one update's worth, and the
/// committed state stays as it was until the caller commits.
#[test]
fn one_long_run_of_updates_stays_within_the_dirty_budget() {
    const BUDGET: usize = 16;
    let mut store = RamNodeStore::new(2048);
    let mut tree = Tree::new_empty(TreeConfig { dirty_nodes_max: BUDGET, ..config(8) });
    let committed = flush_and_commit(&mut tree, &mut store, "empty");
    let mut model = Model::new();
    let mut rng = Rng::new(71);
    let mut keys: Vec<u64> = (0..4000).collect();
    for index in (1..keys.len()).rev() {
        keys.swap(index, rng.below(index + 1));
    }
    let mut height_max = 1;
    for (step, key) in keys.iter().enumerate() {
        let key = key.to_be_bytes();
        let value_bytes = 20 + rng.below(40);
        let value = rng.bytes(value_bytes);
        tree.insert(&mut store, &key, &value).unwrap();
        model.insert(key.to_vec(), value);
        assert!(tree.dirty_node_count() <= BUDGET, "step {step}: {} dirty", tree.dirty_node_count());
        height_max = height_max.max(usize::from(tree.height()));
    }
    for (step, key) in keys.iter().enumerate().filter(|(step, _)| step % 3 != 0) {
        let key = key.to_be_bytes();
        assert!(tree.remove(&mut store, &key).unwrap().is_some());
        model.remove(key.as_slice());
        assert!(tree.dirty_node_count() <= BUDGET, "removal {step}: {} dirty", tree.dirty_node_count());
    }
    let counters = tree.counters();
    assert!(counters.budget_flushes > 10, "{counters:?}");
    let one_update_max = 2 * height_max + 1;
    assert!(counters.dirty_nodes_peak as usize <= BUDGET + one_update_max, "{counters:?}");
    assert_eq!(counters.nodes_written, store.append_count, "every flushed node went through the store");
    check_tree(&mut tree, &mut store, &model, "after the run");
    // Nothing was committed: the committed tree is still the empty one.
    let old = Tree::open(config(8), committed);
    assert_eq!(old.first_at_or_after(&store, &[]), Ok(None));
    flush_and_commit(&mut tree, &mut store, "committed");
    check_tree(&mut tree, &mut store, &model, "committed");
}

/// Range queries at the edges: empty key, keys between leaves, past the end.
#[test]
fn range_queries_at_the_edges() {
    let mut store = RamNodeStore::new(2048);
    let (mut tree, model, _) = build(&mut store, 8, 3000, 24);
    let mut probes: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0xFF; 9], vec![0xFF; 300]];
    for index in (0u64..6000).step_by(37) {
        let key = index.to_be_bytes().to_vec();
        probes.push(key[..7].to_vec());
        probes.push(key);
    }
    for probe in probes {
        check_ranges(&mut tree, &mut store, &model, &probe, "edges");
    }
}

/// Re-encodes the node at `target` after `mutate` and every ancestor after it with the new child
/// pointer, so checksums are valid all the way up and only the tree's meaning is broken (as a
/// bug in an earlier version could leave it). Returns the new root.
fn rewrite_with_valid_checksums(
    store: &mut RamNodeStore,
    pointer: crate::address::PagePointer,
    target: LogAddress,
    mutate: &mut dyn FnMut(&mut Node),
) -> Option<crate::address::PagePointer> {
    use crate::btree::{Child, NodeEntries, NodeTag};
    let (mut node, _) = Node::decode(&store.pages[&pointer.address.0]).unwrap();
    let mut changed = false;
    if pointer.address == target {
        mutate(&mut node);
        changed = true;
    } else if let NodeEntries::Internal(branches) = &mut node.entries {
        for branch in branches.iter_mut() {
            let Child::OnFlash(child) = branch.child else { unreachable!("clean tree") };
            if let Some(new_child) = rewrite_with_valid_checksums(store, child, target, mutate) {
                branch.child = Child::OnFlash(new_child);
                changed = true;
                break;
            }
        }
    }
    if !changed {
        return None;
    }
    let encoded = node.encode(2048);
    let tag = NodeTag { tree_id: node.tree_id, level: node.level };
    let address = store.append_node(&encoded.bytes, tag).unwrap();
    Some(crate::address::PagePointer { address, checksum: encoded.checksum })
}

/// The keys in the subtree at `address` of a clean tree.
fn subtree_keys(store: &RamNodeStore, address: LogAddress) -> Vec<Vec<u8>> {
    use crate::btree::{Child, NodeEntries};
    let (node, _) = Node::decode(&store.pages[&address.0]).unwrap();
    match node.entries {
        NodeEntries::Leaf(entries) => entries.into_iter().map(|entry| entry.key).collect(),
        NodeEntries::Internal(branches) => branches
            .iter()
            .flat_map(|branch| match branch.child {
                Child::OnFlash(pointer) => subtree_keys(store, pointer.address),
                Child::Dirty(_) => unreachable!("clean tree"),
            })
            .collect(),
    }
}

/// Trees whose checksums are all valid but whose keys break the separator rules (a key or a
/// separator replaced, children swapped or pointed at a node of another subtree): random
/// operations and flushes on them return `Ok` or `Corrupt`, never panic, and `check` reports
/// the damage whenever a node's keys leave its range.
#[test]
fn semantically_corrupt_trees_give_errors_not_panics() {
    use crate::btree::{Child, NodeEntries};
    for seed in seeds(&[61]) {
        let mut rng = Rng::new(seed);
        let mut build_store = RamNodeStore::new(2048);
        let (mut built, _, root) = build(&mut build_store, 8, 4000, 150);
        let mut by_level: BTreeMap<u32, u8> = BTreeMap::new();
        // Nodes of the original tree; each case starts from a copy of its pages.
        let mut addresses = Vec::new();
        built.check(&mut build_store, &mut |address| addresses.push(address), &mut |_, _| Ok(())).unwrap();
        for address in &addresses {
            by_level.insert(address.0, build_store.tags[&address.0].level);
        }
        assert!(root.height >= 3, "height {}", root.height);
        let mut corrupt_found = 0;
        for case in 0..80 {
            let context = format!("replay: FSOC_SEED={seed:#x} case {case}");
            let mut store = RamNodeStore::new(2048);
            store.pages = build_store.pages.clone();
            store.mark_live(&addresses);
            store.tags = build_store.tags.clone();
            let target = addresses[rng.below(addresses.len())];
            // For the pointer mutations: a valid node one level below the target's, usually in
            // another subtree.
            let child_level = by_level[&target.0].saturating_sub(1);
            let donors: Vec<LogAddress> =
                addresses.iter().copied().filter(|address| by_level[&address.0] == child_level).collect();
            let donor = donors[rng.below(donors.len())];
            let donor_checksum = u32::from_le_bytes(store.pages[&donor.0][8..12].try_into().unwrap());
            let choice = rng.below(4);
            let random_key_bytes = 1 + rng.below(12);
            let random_key = rng.bytes(random_key_bytes);
            let mut mutate = |node: &mut Node| match (&mut node.entries, choice) {
                (NodeEntries::Leaf(entries), _) => {
                    // Replace one key, keeping the leaf itself sorted.
                    let index = random_key.len() % entries.len().max(1);
                    if let Some(entry) = entries.get_mut(index) {
                        entry.key = random_key.clone();
                    }
                    entries.sort_by(|a, b| a.key.cmp(&b.key));
                    entries.dedup_by(|a, b| a.key == b.key);
                }
                (NodeEntries::Internal(branches), 0) => {
                    // Replace one separator, keeping the node's separators sorted.
                    let index = 1 + random_key.len() % (branches.len() - 1);
                    branches[index].key = random_key.clone();
                    let mut keys: Vec<Vec<u8>> = branches.iter().skip(1).map(|b| b.key.clone()).collect();
                    keys.sort();
                    keys.dedup();
                    if keys.len() == branches.len() - 1 {
                        for (branch, key) in branches.iter_mut().skip(1).zip(keys) {
                            branch.key = key;
                        }
                    }
                }
                (NodeEntries::Internal(branches), 1) => {
                    let last = branches.len() - 1;
                    let (first, second) = (branches[0].child, branches[last].child);
                    branches[0].child = second;
                    branches[last].child = first;
                }
                (NodeEntries::Internal(branches), _) => {
                    // A valid node of the right level, in the wrong place.
                    let index = random_key.len() % branches.len();
                    let pointer = crate::address::PagePointer { address: donor, checksum: donor_checksum };
                    branches[index].child = Child::OnFlash(pointer);
                }
            };
            let new_root_pointer = rewrite_with_valid_checksums(&mut store, root.pointer, target, &mut mutate).unwrap();
            let new_root = TreeRoot { pointer: new_root_pointer, height: root.height };
            let mut tree = Tree::open(config(8), new_root);
            let checked = tree.check(&mut store, &mut |_| {}, &mut |_, _| Ok(()));
            match &checked {
                Ok(_) => {}
                Err(TreeError::Corrupt { .. }) => corrupt_found += 1,
                Err(other) => panic!("{context}: check gave {other:?}"),
            }
            // Everything may fail from here on, but only with Corrupt. Most operations hit the
            // damaged subtree, so its nodes get split, merged and refilled.
            let near_keys = subtree_keys(&build_store, target);
            for step in 0..300 {
                let key = match rng.below(4) {
                    0 => ((rng.below(4000) as u64) * 2).to_be_bytes().to_vec(),
                    _ => near_keys[rng.below(near_keys.len())].clone(),
                };
                let value_bytes = rng.below(300);
                let value = rng.bytes(value_bytes);
                let result = match rng.below(5) {
                    0 => tree.insert(&mut store, &key, &value).map(|_| ()),
                    1..=3 => tree.remove(&mut store, &key).map(|_| ()),
                    _ => tree.first_after(&store, &key).map(|_| ()),
                };
                if step % 40 == 39 {
                    if let Err(error) = tree.flush(&mut store) {
                        panic!("{context} step {step}: flush gave {error:?}");
                    }
                }
                match result {
                    Ok(()) | Err(TreeError::Corrupt { .. }) => {}
                    Err(other) => panic!("{context} step {step}: {other:?}"),
                }
            }
            if checked.is_ok() {
                // An undamaged-looking tree stays checkable after the operations.
                let after = tree.check(&mut store, &mut |_| {}, &mut |_, _| Ok(()));
                assert!(matches!(after, Ok(_) | Err(TreeError::Corrupt { .. })), "{context}: {after:?}");
            }
        }
        assert!(corrupt_found > 20, "seed {seed:#x}: only {corrupt_found} of 80 cases were corrupt");
    }
}
