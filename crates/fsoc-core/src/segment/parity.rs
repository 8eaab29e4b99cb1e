//! Parity rows (format version 7, `Redundancy::Parity`): the XOR of a row's data pages and
//! spare tags, built as its pages are programmed and programmed into the row's parity page
//! when the row is full or sealed; and the inverse, a lost page rebuilt from the rest of its
//! row (docs/DESIGN.md, "Redundancy across chips"; bytes in docs/FORMAT.md, "Parity page").
//!
//! Invariants: a row's parity covers exactly the data pages programmed into it before the
//! parity page, and nothing is programmed into a row after its parity (the log moves to the
//! next row when it seals); the parity of a row holding committed pages is programmed before
//! the transaction point that commits them, so no power cut leaves committed pages under a
//! stale parity.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use alloc::vec;
use alloc::vec::Vec;

use crate::segment::device::SPARE_TAG_BYTES;

/// Spare-tag kind of a parity page.
pub const TAG_PARITY: u8 = 6;

/// The XOR of the data pages programmed so far into one row of a segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenRow {
    pub segment: u32,
    pub row: u32,
    /// XOR of the programmed pages' data.
    pub data: Vec<u8>,
    /// XOR of their 16-byte spare tags.
    pub tag: [u8; SPARE_TAG_BYTES],
    /// Data pages programmed into the row.
    pub programmed: u32,
}

impl OpenRow {
    pub fn new(segment: u32, row: u32, page_bytes: usize) -> Self {
        OpenRow { segment, row, data: vec![0; page_bytes], tag: [0; SPARE_TAG_BYTES], programmed: 0 }
    }

    /// Adds a programmed data page (its data and the first 16 bytes of its spare area).
    pub fn add(&mut self, data: &[u8], spare: &[u8]) {
        xor_into(&mut self.data, data);
        xor_into(&mut self.tag, spare);
        self.programmed += 1;
    }

    /// The parity page's spare area: kind 6, then tag bytes 0, 1, 2 and 4..16 of the XOR (byte
    /// 3 of every tag is 0), then 0xFF.
    pub fn parity_spare(&self, spare_bytes: usize) -> Vec<u8> {
        let mut spare = vec![0xFF; spare_bytes];
        let folded = fold_tag(&self.tag);
        for (to, from) in spare.iter_mut().zip(folded) {
            *to = from;
        }
        spare
    }
}

/// `to ^= from`, over the shorter of the two.
pub fn xor_into(to: &mut [u8], from: &[u8]) {
    for (to, from) in to.iter_mut().zip(from) {
        *to ^= from;
    }
}

/// A tag XOR in the parity page's spare layout: [6, t0, t1, t2, t4..t16].
fn fold_tag(tag: &[u8; SPARE_TAG_BYTES]) -> [u8; SPARE_TAG_BYTES] {
    let [t0, t1, t2, _t3, rest @ ..] = *tag;
    let mut folded = [0u8; SPARE_TAG_BYTES];
    let [kind, f0, f1, f2, folded_rest @ ..] = &mut folded;
    *kind = TAG_PARITY;
    (*f0, *f1, *f2) = (t0, t1, t2);
    *folded_rest = rest;
    folded
}

/// The inverse of `fold_tag` for a parity page's spare bytes; `None` if they are not a
/// parity tag (a row whose parity page holds something else cannot be rebuilt).
pub fn unfold_tag(spare: &[u8]) -> Option<[u8; SPARE_TAG_BYTES]> {
    let folded: &[u8; SPARE_TAG_BYTES] = spare.first_chunk()?;
    let [kind, f0, f1, f2, rest @ ..] = *folded;
    if kind != TAG_PARITY {
        return None;
    }
    let mut tag = [0u8; SPARE_TAG_BYTES];
    let [t0, t1, t2, t3, tag_rest @ ..] = &mut tag;
    (*t0, *t1, *t2, *t3) = (f0, f1, f2, 0);
    *tag_rest = rest;
    Some(tag)
}

/// Rebuilds a page from the other pages of its row, each `(is parity, data, spare)` as read
/// (erased pages left out by the caller). Returns the data and the 16-byte tag, or `None` when
/// the row has no parity page (it was never sealed: its pages were never committed).
pub fn rebuild(page_bytes: usize, others: &[(bool, &[u8], &[u8])]) -> Option<(Vec<u8>, [u8; SPARE_TAG_BYTES])> {
    let mut data = vec![0u8; page_bytes];
    let mut tag = [0u8; SPARE_TAG_BYTES];
    let mut parity_seen = false;
    for &(is_parity, page, spare) in others {
        xor_into(&mut data, page);
        if is_parity {
            parity_seen = true;
            xor_into(&mut tag, &unfold_tag(spare)?);
        } else {
            xor_into(&mut tag, spare.get(..SPARE_TAG_BYTES)?);
        }
    }
    parity_seen.then_some((data, tag))
}

/// Whether a rebuilt page is an unprogrammed slot (every byte and the tag zero: a programmed
/// page's tag never is, its kind being 1 to 5).
pub fn is_empty_slot(data: &[u8], tag: &[u8; SPARE_TAG_BYTES]) -> bool {
    tag.iter().all(|&byte| byte == 0) && data.iter().all(|&byte| byte == 0)
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn any_one_page_of_a_row_is_rebuilt_from_the_others() {
        let pages: Vec<Vec<u8>> = (0..3u8).map(|i| (0..32u8).map(|b| b.wrapping_mul(7) ^ i).collect()).collect();
        let tags: Vec<[u8; 16]> = (0..3u8).map(|i| [1 + i, i, 2, 0, 9, 8, 7, 6, 5, 4, 3, 2, 1, i, 0, 255]).collect();
        let mut row = OpenRow::new(4, 0, 32);
        for (page, tag) in pages.iter().zip(&tags) {
            row.add(page, tag);
        }
        let parity_spare = row.parity_spare(64);
        assert_eq!(parity_spare[0], TAG_PARITY);
        for lost in 0..3 {
            let others: Vec<(bool, &[u8], &[u8])> = (0..3)
                .filter(|&i| i != lost)
                .map(|i| (false, pages[i].as_slice(), tags[i].as_slice()))
                .chain([(true, row.data.as_slice(), parity_spare.as_slice())])
                .collect();
            let (data, tag) = rebuild(32, &others).unwrap();
            assert_eq!(data, pages[lost]);
            assert_eq!(tag, tags[lost]);
        }
        // Without its parity page a row cannot be rebuilt.
        let others: Vec<(bool, &[u8], &[u8])> = vec![(false, pages[0].as_slice(), tags[0].as_slice())];
        assert!(rebuild(32, &others).is_none());
        // An unprogrammed slot rebuilds to zeros.
        let mut single = OpenRow::new(4, 1, 32);
        single.add(&pages[0], &tags[0]);
        let spare = single.parity_spare(64);
        let others =
            vec![(false, pages[0].as_slice(), tags[0].as_slice()), (true, single.data.as_slice(), spare.as_slice())];
        let (data, tag) = rebuild(32, &others).unwrap();
        assert!(is_empty_slot(&data, &tag));
    }
}
