//! Lab crate: one fuzz entry point per decoder that reads bytes from flash or from a user
//! (issue 12 point 6). Each `pub fn <target>(data: &[u8])` decodes `data` and, when that
//! succeeds, checks that the value encodes back to the input's canonical form and decodes again
//! to itself; it panics only when a property breaks. "Never panics, never hangs, never
//! allocates without bound" is the decoder's side of the contract, which the fuzzer's crash,
//! timeout and memory limits check.
//!
//! The same functions run three ways: under libFuzzer (`fuzz/`, one one-line target each, by
//! `scripts/fuzz.sh`), over the committed corpora `fuzz/corpus/<target>/` in the normal test
//! suite (tests/replay_corpora.rs), and from `TARGETS` for anything that wants them all.
//! README.md says which fuzzer was chosen and why, and what each target's input is.
//!
//! Targets behind a CRC-32C (superblock, metaroot, node, image header) run each input twice: as
//! it is, and with its checksum field made good, since a mutation almost never keeps a CRC
//! valid and the structural checks behind it would otherwise go unfuzzed.
// The storage crates' lint set (see fsoc-flash): the targets read untrusted bytes too. Their
// property checks are `assert!`s: a failing one is what the fuzzer is looking for.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::cast_possible_truncation
    )
)]

mod input;
mod media;
mod storage;
mod wire;

pub use media::decode_image_header;
pub use storage::{
    decode_compact_delta, decode_delta, decode_directory_value, decode_extent, decode_inode_record, decode_metaroot,
    decode_node, decode_page_tag, decode_segment_table_index_page, decode_segment_table_page, decode_superblock,
    parse_allocation_key, parse_directory_key, parse_node_page, rebuild_parity_row,
};
pub use wire::{decode_9p_reply, decode_9p_request, decode_raw_reply, decode_raw_request, parse_9p_directory};

/// A fuzz target: decodes its input and checks what it got; panics only on a broken property.
pub type Target = fn(&[u8]);

/// Every target by name; the name is also its libFuzzer target (`fuzz/fuzz_targets/<name>.rs`)
/// and its corpus directory (`fuzz/corpus/<name>/`).
pub const TARGETS: &[(&str, Target)] = &[
    ("decode_superblock", decode_superblock),
    ("decode_metaroot", decode_metaroot),
    ("decode_delta", decode_delta),
    ("decode_compact_delta", decode_compact_delta),
    ("decode_node", decode_node),
    ("parse_node_page", parse_node_page),
    ("decode_segment_table_page", decode_segment_table_page),
    ("decode_segment_table_index_page", decode_segment_table_index_page),
    ("decode_page_tag", decode_page_tag),
    ("rebuild_parity_row", rebuild_parity_row),
    ("decode_inode_record", decode_inode_record),
    ("decode_directory_value", decode_directory_value),
    ("decode_extent", decode_extent),
    ("parse_allocation_key", parse_allocation_key),
    ("parse_directory_key", parse_directory_key),
    ("decode_image_header", decode_image_header),
    ("decode_9p_request", decode_9p_request),
    ("decode_9p_reply", decode_9p_reply),
    ("parse_9p_directory", parse_9p_directory),
    ("decode_raw_request", decode_raw_request),
    ("decode_raw_reply", decode_raw_reply),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every target survives the inputs a fuzzer starts from: nothing, and short runs of the
    /// byte values decoders treat specially (zero, erased flash).
    #[test]
    fn targets_take_empty_and_uniform_inputs() {
        for (name, target) in TARGETS {
            for length in [0, 1, 7, 16, 64, 256, 2048] {
                for byte in [0x00, 0xFF] {
                    target(&vec![byte; length]);
                }
            }
            assert!(!name.is_empty());
        }
    }

    #[test]
    fn target_names_are_unique() {
        let mut names: Vec<&str> = TARGETS.iter().map(|(name, _)| *name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TARGETS.len());
    }
}
