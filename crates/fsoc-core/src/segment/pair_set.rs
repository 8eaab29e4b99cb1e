//! `PairSet`: an ordered set of (key, segment) pairs in about 4–6 bytes a pair, for the segment
//! table's indexes (free segments by erase count, used segments by valid pages and by erase
//! count). A `BTreeSet<(u32, u32)>` costs about 20 bytes a pair (half-full 104-byte leaves),
//! which on a 1 GiB, 4-chip volume was most of the library's RAM.
//!
//! Pairs are grouped by key (the keys are few: erase counts cluster, valid-page counts are at
//! most a segment's page count), and each key's segments are one sorted list cut into chunks of
//! at most `CHUNK_MAX`, so an insert or a remove moves at most `CHUNK_MAX` entries of a chunk
//! (and one chunk header per `CHUNK_MAX` pairs of the key), never the whole set. A key with one
//! segment holds it inline: the open segment, alone at its valid count as each page is
//! programmed, moves from key to key without an allocation. Iteration is in (key, segment)
//! order, exactly as the `BTreeSet` it replaces.

use alloc::collections::btree_map::Entry;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;

/// Segments per chunk at most: a chunk that would grow past it splits in two.
const CHUNK_MAX: usize = 128;

#[derive(Clone, Debug, Default)]
pub(crate) struct PairSet {
    groups: BTreeMap<u32, Group>,
    len: usize,
}

/// One key's segments.
#[derive(Clone, Debug)]
enum Group {
    One(u32),
    /// Two or more, ascending, as non-empty chunks, every segment of a chunk below every
    /// segment of the next.
    Chunks(Vec<Vec<u32>>),
}

impl Group {
    fn iter(&self) -> GroupIter<'_> {
        match self {
            Group::One(segment) => GroupIter::One(Some(*segment)),
            Group::Chunks(chunks) => GroupIter::Chunks(chunks.iter().flatten()),
        }
    }
}

enum GroupIter<'a> {
    One(Option<u32>),
    Chunks(core::iter::Flatten<core::slice::Iter<'a, Vec<u32>>>),
}

impl Iterator for GroupIter<'_> {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        match self {
            GroupIter::One(segment) => segment.take(),
            GroupIter::Chunks(segments) => segments.next().copied(),
        }
    }
}

impl PairSet {
    pub(crate) const fn new() -> PairSet {
        PairSet { groups: BTreeMap::new(), len: 0 }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `(key, segment)`; false if it was there already.
    pub(crate) fn insert(&mut self, (key, segment): (u32, u32)) -> bool {
        let group = match self.groups.entry(key) {
            Entry::Vacant(vacant) => {
                vacant.insert(Group::One(segment));
                self.len += 1;
                return true;
            }
            Entry::Occupied(occupied) => occupied.into_mut(),
        };
        let chunks = match group {
            Group::One(first) if *first == segment => return false,
            Group::One(first) => {
                let pair = alloc::vec![(*first).min(segment), (*first).max(segment)];
                *group = Group::Chunks(alloc::vec![pair]);
                self.len += 1;
                return true;
            }
            Group::Chunks(chunks) => chunks,
        };
        // The first chunk whose last segment is not below `segment`, or the last chunk.
        let at = chunks.partition_point(|chunk| chunk.last().is_some_and(|&last| last < segment));
        let at = at.min(chunks.len().saturating_sub(1));
        let Some(chunk) = chunks.get_mut(at) else {
            chunks.push(alloc::vec![segment]);
            self.len += 1;
            return true;
        };
        let Err(position) = chunk.binary_search(&segment) else { return false };
        chunk.insert(position, segment);
        if chunk.len() > CHUNK_MAX {
            let upper = chunk.split_off(chunk.len() / 2);
            chunk.shrink_to_fit();
            chunks.insert(at + 1, upper);
        }
        self.len += 1;
        true
    }

    /// Removes `(key, segment)`; false if it was not there.
    pub(crate) fn remove(&mut self, &(key, segment): &(u32, u32)) -> bool {
        let Some(group) = self.groups.get_mut(&key) else { return false };
        let chunks = match group {
            Group::One(only) if *only == segment => {
                self.groups.remove(&key);
                self.len -= 1;
                return true;
            }
            Group::One(_) => return false,
            Group::Chunks(chunks) => chunks,
        };
        let at = chunks.partition_point(|chunk| chunk.last().is_some_and(|&last| last < segment));
        let Some(chunk) = chunks.get_mut(at) else { return false };
        let Ok(position) = chunk.binary_search(&segment) else { return false };
        chunk.remove(position);
        if chunk.is_empty() {
            chunks.remove(at);
        } else if chunk.len() < chunk.capacity() / 4 {
            chunk.shrink_to_fit();
        }
        // Down to one segment: inline again, the chunks freed.
        if let [chunk] = chunks.as_slice() {
            if let [only] = chunk.as_slice() {
                *group = Group::One(*only);
            }
        }
        self.len -= 1;
        true
    }

    /// Every pair, in (key, segment) order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.groups.iter().flat_map(|(&key, group)| group.iter().map(move |segment| (key, segment)))
    }
}

/// Equal when they hold the same pairs, however those are cut into chunks.
impl PartialEq for PairSet {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for PairSet {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeSet;
    use proptest::prelude::*;

    proptest! {
        /// Any sequence of inserts and removes leaves the same pairs, in the same order, and
        /// answers the same, as a `BTreeSet` given the same sequence.
        #[test]
        fn behaves_as_a_btreeset(
            operations in prop_oneof![
                // Big groups: chunks split and empty.
                proptest::collection::vec((any::<bool>(), 0u32..4, 0u32..600), 0..3000),
                // Small groups: keys go between one inline segment and chunks all the time.
                proptest::collection::vec((any::<bool>(), 0u32..6, 0u32..4), 0..400),
            ]
        ) {
            let mut set = PairSet::new();
            let mut reference = BTreeSet::new();
            for (insert, key, segment) in operations {
                if insert {
                    prop_assert_eq!(set.insert((key, segment)), reference.insert((key, segment)));
                } else {
                    prop_assert_eq!(set.remove(&(key, segment)), reference.remove(&(key, segment)));
                }
                prop_assert_eq!(set.len(), reference.len());
            }
            prop_assert!(set.iter().eq(reference.iter().copied()));
            for group in set.groups.values() {
                if let Group::Chunks(chunks) = group {
                    prop_assert!(chunks.iter().all(|chunk| !chunk.is_empty() && chunk.len() <= CHUNK_MAX));
                    prop_assert!(chunks.iter().map(Vec::len).sum::<usize>() >= 2, "a lone segment is kept inline");
                }
            }
        }
    }

    #[test]
    fn one_key_of_many_segments_stays_in_bounded_chunks() {
        let mut set = PairSet::new();
        for segment in (0..10_000).rev() {
            assert!(set.insert((7, segment)));
        }
        assert!(!set.insert((7, 5_000)));
        assert_eq!(set.len(), 10_000);
        assert!(set.iter().map(|(_, segment)| segment).eq(0..10_000));
        let Some(Group::Chunks(chunks)) = set.groups.get(&7) else { panic!("key 7 in chunks") };
        assert!(chunks.iter().all(|chunk| chunk.len() <= CHUNK_MAX));
        for segment in 0..10_000 {
            assert!(set.remove(&(7, segment)));
        }
        assert!(set.is_empty() && set.groups.is_empty());
    }

    #[test]
    fn equality_ignores_how_pairs_are_chunked() {
        let (mut ascending, mut descending) = (PairSet::new(), PairSet::new());
        for segment in 0..1_000 {
            ascending.insert((1, segment));
            descending.insert((1, 999 - segment));
        }
        assert_eq!(ascending, descending);
        descending.remove(&(1, 0));
        assert_ne!(ascending, descending);
    }
}
