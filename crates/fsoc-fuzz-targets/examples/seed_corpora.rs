//! Writes seed inputs for every fuzz target into `<corpus root>/<target>/seed-<label>`, made by
//! the crates' own encoders: the pages of two freshly formatted volumes (superblocks, metaroots
//! with and without a delta payload, B+tree nodes, segment-table pages, spare tags, and the
//! records inside the leaves), index pages, delta payloads, the headers of real image files,
//! fsoc-9p's sample messages, and one frame of every raw-protocol message.
//!
//! `cargo run --release -p fsoc-fuzz-targets --example seed_corpora -- fuzz/corpus`
//!
//! The committed corpora started from these and were grown by fuzzing and minimised with
//! `cargo fuzz cmin` (crates/fsoc-fuzz-targets/README.md).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fsoc_core::address::{LogAddress, PagePointer};
use fsoc_core::btree::NodePage;
use fsoc_core::fs::delta::DeltaLog;
use fsoc_core::fs::records::{self, RecordKind};
use fsoc_core::segment::{PageTag, Redundancy, SegmentTable};
use fsoc_core::txn::volume::{ALLOCATION_TREE_ID, DIRECTORY_TREE_ID};
use fsoc_core::{FileSystem, FsConfig, OpenFlags};
use fsoc_flash::{BlockAddress, Flash, Geometry, NandError, OperationKind, PageAddress, ReadStatus, Timing};
use fsoc_media::{Profile, SimConfig, SimFlash};
use fsoc_serve::raw_protocol::{encode_reply, encode_request, DeviceInfo, RawReply, RawRequest};

// fsoc-9p's own sample messages (every request and reply variant, edge values included).
#[path = "../../fsoc-9p/tests/common/mod.rs"]
mod samples_9p;

/// Seeds gathered per target, by label (a label written twice keeps the first).
#[derive(Default)]
struct Seeds {
    by_target: BTreeMap<&'static str, BTreeMap<String, Vec<u8>>>,
}

impl Seeds {
    fn add(&mut self, target: &'static str, label: impl Into<String>, bytes: &[u8]) {
        self.by_target.entry(target).or_default().entry(label.into()).or_insert_with(|| bytes.to_vec());
    }

    fn write(&self, root: &Path) -> std::io::Result<()> {
        for (name, _) in fsoc_fuzz_targets::TARGETS {
            assert!(self.by_target.get(name).is_some_and(|seeds| !seeds.is_empty()), "no seed for target {name}");
        }
        for (target, seeds) in &self.by_target {
            let directory = root.join(target);
            std::fs::create_dir_all(&directory)?;
            for (label, bytes) in seeds {
                std::fs::write(directory.join(format!("seed-{label}")), bytes)?;
            }
            println!("{target}: {} seeds", seeds.len());
        }
        Ok(())
    }
}

const CREATE: OpenFlags = OpenFlags {
    read: true,
    write: true,
    create: true,
    exclusive: false,
    truncate: true,
    append: false,
    directory: false,
};

/// Formats a volume, fills it a little (directories, an inline file, files of several pages,
/// a symlink), commits, then makes one small fsync'd change so the newest metaroot carries a
/// delta payload.
fn filled_volume(profile: Profile, chip_count: u32, block_count: u32, redundancy: Redundancy) -> FileSystem<SimFlash> {
    let flash = SimFlash::create(SimConfig::new(profile, chip_count, block_count, 7)).expect("simulator config");
    let mut config = FsConfig::default();
    config.volume.redundancy = redundancy;
    let mut fs = FileSystem::format(flash, config, 0x5EED).expect("format");
    fs.mkdir(b"/docs", 0o755).expect("mkdir");
    fs.mkdir(b"/docs/deeper", 0o700).expect("mkdir");
    let files: [(&[u8], usize); 4] =
        [(b"/small", 40), (b"/docs/one-page", 2000), (b"/docs/deeper/several-pages", 70_000), (b"/big", 300_000)];
    for (path, length) in files {
        let fd = fs.open(path, CREATE, 0o644).expect("create");
        let contents: Vec<u8> = (0..length).map(|index| (index % 251) as u8).collect();
        fs.pwrite(fd, 0, &contents).expect("write");
        fs.close(fd).expect("close");
    }
    fs.symlink_path(b"docs/one-page", b"/link").expect("symlink");
    for index in 0..40 {
        let path = format!("/docs/entry-{index:02}");
        let fd = fs.open(path.as_bytes(), CREATE, 0o600).expect("create");
        fs.close(fd).expect("close");
    }
    fs.commit().expect("commit");
    let fd = fs.open(b"/docs/after-commit", CREATE, 0o644).expect("create");
    fs.pwrite(fd, 0, b"a small change, made durable by a delta commit").expect("write");
    fs.fsync_fd(fd).expect("fsync");
    fs.close(fd).expect("close");
    assert!(!fs.committed().delta.is_empty(), "the fsync made a delta commit");
    fs
}

/// Every programmed page of the volume, classified by its spare tag.
fn seeds_from_volume(seeds: &mut Seeds, name: &str, fs: &FileSystem<SimFlash>) {
    let layout = fs.layout();
    let flash = fs.flash();
    let geometry = flash.geometry();
    let page_size_bytes = layout.page_size_bytes();
    let mut data = vec![0u8; page_size_bytes];
    let mut spare = vec![0u8; geometry.spare_bytes as usize];
    let format_version = fs.superblock().format_version;
    let segment_count = layout.segment_count();
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    for chip in 0..flash.chip_count() {
        for block in 0..geometry.block_count {
            for page_index in 0..geometry.pages_per_block {
                let page = PageAddress::new(chip, block, page_index);
                let status = flash.read_page(0, page, &mut data, &mut spare).expect("read").value;
                if matches!(status, ReadStatus::Erased | ReadStatus::Uncorrectable) {
                    continue;
                }
                let Some(tag) = PageTag::decode(&spare) else { continue };
                let kind = match tag {
                    PageTag::Node { .. } => "node",
                    PageTag::NodeCopy { .. } => "node-copy",
                    PageTag::Data { .. } => "data",
                    PageTag::SegmentTable { .. } => "table",
                    PageTag::SegmentTableCopy { .. } => "table-copy",
                    PageTag::Metaroot => "metaroot",
                    PageTag::Superblock => "superblock",
                    PageTag::Parity => "parity",
                };
                let count = counts.entry(kind).or_default();
                *count += 1;
                // A few of each kind are plenty: minimisation keeps what adds coverage.
                if *count > 6 {
                    continue;
                }
                let label = format!("{name}-{kind}-{count}");
                seeds.add("decode_page_tag", &label, &spare[..16]);
                match tag {
                    PageTag::Superblock => {
                        seeds.add("decode_superblock", &label, &data[..fsoc_core::txn::superblock::EXTENSION_BYTES])
                    }
                    PageTag::Parity | PageTag::NodeCopy { .. } | PageTag::SegmentTableCopy { .. } => {}
                    PageTag::Metaroot => {
                        let record_bytes = u32::from_le_bytes(data[16..20].try_into().expect("4 bytes")) as usize;
                        if record_bytes > data.len() {
                            continue; // an older record torn or not yet written over
                        }
                        let mut input = metaroot_parameters(format_version, segment_count, page_size_bytes);
                        input.extend_from_slice(&data[..record_bytes]);
                        seeds.add("decode_metaroot", &label, &input);
                    }
                    PageTag::Node { .. } => {
                        seeds.add("decode_node", &label, &data);
                        seeds.add("parse_node_page", &label, &data);
                        seeds_from_node(seeds, &label, &data);
                    }
                    PageTag::SegmentTable { page_index } => {
                        let mut input = vec![(segment_count - 1) as u8];
                        input.extend_from_slice(&((layout.pages_per_segment() - 1) as u16).to_le_bytes());
                        input.push((page_size_bytes / 512 - 1) as u8);
                        input.push(page_index as u8);
                        input.extend_from_slice(&data);
                        seeds.add("decode_segment_table_page", &label, &input);
                    }
                    PageTag::Data { .. } => {}
                }
            }
        }
    }
    let delta = &fs.committed().delta;
    // Format version 11 on: the payload is compact.
    seeds.add("decode_compact_delta", format!("{name}-fsync"), delta);
}

/// The parameter bytes `decode_metaroot` reads before the page.
fn metaroot_parameters(format_version: u32, segment_count: u32, page_size_bytes: usize) -> Vec<u8> {
    let mut input = vec![(format_version - 1) as u8];
    input.extend_from_slice(&segment_count.to_le_bytes());
    input.push((page_size_bytes / 512 - 1) as u8);
    input
}

/// The records in a leaf: keys and values of both trees.
fn seeds_from_node(seeds: &mut Seeds, label: &str, page_bytes: &[u8]) {
    let page = NodePage::parse(page_bytes.to_vec()).expect("a node the file system wrote");
    if !page.is_leaf() {
        return;
    }
    for index in 0..page.entry_count().min(24) {
        let (key, value) = (page.key(index), page.value(index));
        let label = format!("{label}-entry-{index}");
        match page.tree_id() {
            DIRECTORY_TREE_ID => {
                seeds.add("parse_directory_key", &label, key);
                seeds.add("decode_directory_value", &label, value);
            }
            ALLOCATION_TREE_ID => {
                seeds.add("parse_allocation_key", &label, key);
                let Some((_, kind, offset)) = records::parse_allocation_key(key) else { continue };
                if kind == RecordKind::Inode as u8 {
                    seeds.add("decode_inode_record", &label, value);
                } else if kind == RecordKind::Extent as u8 {
                    let mut input = offset.to_le_bytes().to_vec();
                    input.extend_from_slice(value);
                    seeds.add("decode_extent", &label, &input);
                }
            }
            _ => {}
        }
    }
}

/// Index pages of each table shape `decode_segment_table_index_page` offers (512-byte pages).
fn index_page_seeds(seeds: &mut Seeds) {
    for (choice, table_page_count) in [(2u8, 3u32), (4, 63), (6, 65), (13, 192)] {
        let segment_count = table_page_count * 64;
        let index_page_count = table_page_count.div_ceil(64);
        let mut table = SegmentTable::new(segment_count, 64, 512).with_index_pages(index_page_count);
        for (page_index, pointer) in table.directory.iter_mut().enumerate() {
            *pointer =
                PagePointer { address: LogAddress(1000 + page_index as u32), checksum: 0xC0FFEE ^ page_index as u32 };
        }
        for index_page in 0..index_page_count {
            let mut input = vec![0, choice, index_page as u8];
            input.extend_from_slice(&table.encode_index_page(index_page, 512));
            seeds.add("decode_segment_table_index_page", format!("{table_page_count}-pages-{index_page}"), &input);
        }
    }
}

fn delta_seeds(seeds: &mut Seeds) {
    let mut delta = DeltaLog::new(4096);
    delta.record_put(DIRECTORY_TREE_ID, &records::directory_key(1, b"name"), &[5, 0, 0, 0, 0, 0, 0, 0, 1]);
    delta.record_remove(ALLOCATION_TREE_ID, &records::allocation_key(5, RecordKind::Extent, 3));
    delta.record_segment(9, 4, 1);
    delta.record_segment(12, 0, 7);
    seeds.add("decode_delta", "synthetic", &delta.encode());
    seeds.add("decode_delta", "empty", &DeltaLog::new(64).encode());
    let mut compact = DeltaLog::with_encoding(4096, true);
    for inode in 5..9u64 {
        let mut name = b"name".to_vec();
        name.push(b'0' + inode as u8);
        compact.record_put(
            DIRECTORY_TREE_ID,
            &records::directory_key(1, &name),
            &[inode as u8, 0, 0, 0, 0, 0, 0, 0, 1],
        );
        compact.record_put(
            ALLOCATION_TREE_ID,
            &records::allocation_key(inode, RecordKind::Extent, 0),
            &[inode as u8 * 2, 0, 0, 0, 2, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
        );
    }
    compact.record_remove(ALLOCATION_TREE_ID, &records::allocation_key(9, RecordKind::Inline, 0));
    compact.record_segment(9, 4, 1);
    compact.record_segment(12, 0, 7);
    seeds.add("decode_compact_delta", "synthetic", &compact.encode());
    seeds.add("decode_compact_delta", "empty", &DeltaLog::with_encoding(64, true).encode());
}

/// The headers of real image files, one per profile.
fn image_header_seeds(seeds: &mut Seeds) {
    let directory = tempfile::tempdir().expect("temporary directory");
    for (index, profile) in Profile::ALL.into_iter().enumerate() {
        let path = directory.path().join(format!("{}.img", profile.name()));
        let config = SimConfig::new(profile, 1 + index as u32 % 3, 8 + 4 * index as u32, 11);
        drop(SimFlash::create_image(&path, config).expect("create image"));
        let bytes = std::fs::read(&path).expect("read image");
        seeds.add("decode_image_header", profile.name(), &bytes[..fsoc_media::image::HEADER_BYTES]);
    }
}

fn ninep_seeds(seeds: &mut Seeds) {
    use fsoc_media::rng::SeededRng;
    let mut buffer = vec![0u8; samples_9p::SAMPLE_BUFFER_BYTES];
    let mut scratch = vec![0u8; samples_9p::SAMPLE_BUFFER_BYTES];
    let pool: Vec<u8> = (0..600u32).map(|index| b"abcdefghij./-_"[index as usize % 14]).collect();
    for variant in 0..samples_9p::REQUEST_VARIANT_COUNT {
        let mut rng = SeededRng::new(100 + variant as u64);
        let request = samples_9p::sample_request(variant, &mut rng, &pool);
        let length = fsoc_9p::encode(fsoc_9p::Tag(1), &request, &mut buffer).expect("sample fits");
        seeds.add("decode_9p_request", format!("{variant:02}"), &buffer[..length]);
    }
    for variant in 0..samples_9p::REPLY_VARIANT_COUNT {
        let mut rng = SeededRng::new(200 + variant as u64);
        let reply = samples_9p::sample_reply(variant, &mut rng, &pool, &mut scratch);
        let length = fsoc_9p::encode(fsoc_9p::Tag(2), &reply, &mut buffer).expect("sample fits");
        seeds.add("decode_9p_reply", format!("{variant:02}"), &buffer[..length]);
    }
    for seed in 0..4 {
        let mut rng = SeededRng::new(300 + seed);
        let entries = samples_9p::sample_entries(&mut rng, &pool, &mut scratch);
        seeds.add("parse_9p_directory", format!("{seed}"), entries.as_bytes());
    }
}

fn raw_protocol_seeds(seeds: &mut Seeds) {
    let page = PageAddress::new(1, 17, 5);
    let block = BlockAddress::new(0, 3);
    let requests = [
        RawRequest::Hello { version: 1, secret: b"a shared secret" },
        RawRequest::Read { issue_ns: 1_000, page },
        RawRequest::Program { issue_ns: 2_000, page, data: &[0x5A; 64], spare: &[0xFF; 16] },
        RawRequest::Erase { issue_ns: 3_000, block },
        RawRequest::IsBad { block },
        RawRequest::MarkBad { block },
        RawRequest::EraseCount { block },
        RawRequest::BusyUntil { chip: 1 },
        RawRequest::Barrier,
        RawRequest::Flush,
    ];
    for (index, request) in requests.iter().enumerate() {
        seeds.add("decode_raw_request", format!("{index:02}"), &encode_request(index as u16, request));
    }
    let info = DeviceInfo {
        geometry: Geometry { page_data_bytes: 2048, spare_bytes: 64, pages_per_block: 64, block_count: 256 },
        chip_count: 4,
        timing: Timing {
            read_latency_ns: 25_000,
            program_latency_ns: 600_000,
            erase_latency_ns: 2_000_000,
            bus_ns_per_byte: 25,
        },
        paired_page_distance: 6,
    };
    let replies = [
        RawReply::Hello(info),
        RawReply::Read { done_ns: 9, status: ReadStatus::Clean, data: &[1; 32], spare: &[2; 16] },
        RawReply::Read {
            done_ns: 9,
            status: ReadStatus::Corrected { bits: 3, max_per_sector: 2 },
            data: &[],
            spare: &[],
        },
        RawReply::Read { done_ns: 9, status: ReadStatus::Erased, data: &[0xFF; 8], spare: &[0xFF; 8] },
        RawReply::Program { done_ns: 10 },
        RawReply::Erase { done_ns: 11 },
        RawReply::IsBad { bad: true },
        RawReply::MarkBad,
        RawReply::EraseCount { count: 1234 },
        RawReply::BusyUntil { done_ns: 12 },
        RawReply::Barrier,
        RawReply::Flush,
        RawReply::Error(NandError::PowerLost),
        RawReply::Error(NandError::NotErased { page }),
        RawReply::Error(NandError::OperationFailed { kind: OperationKind::Program, block }),
        RawReply::Error(NandError::Image("short read".to_string())),
    ];
    for (index, reply) in replies.iter().enumerate() {
        seeds.add("decode_raw_reply", format!("{index:02}"), &encode_reply(index as u16, reply));
    }
}

fn main() -> std::io::Result<()> {
    let root: PathBuf = std::env::args_os().nth(1).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("fuzz/corpus"));
    let mut seeds = Seeds::default();
    seeds_from_volume(&mut seeds, "mlc", &filled_volume(Profile::Mlc, 1, 64, Redundancy::None));
    seeds_from_volume(&mut seeds, "tlc-2chips", &filled_volume(Profile::Tlc, 2, 32, Redundancy::None));
    seeds_from_volume(&mut seeds, "mlc-3chips-parity", &filled_volume(Profile::Mlc, 3, 32, Redundancy::Parity));
    seeds_from_volume(&mut seeds, "mlc-3chips-mirror", &filled_volume(Profile::Mlc, 3, 32, Redundancy::MirrorMeta));
    // Parity rows: 2 to 4 pages of 64 bytes, each followed by a tag as the device writes one.
    for pages in 2..=4u8 {
        let mut row = Vec::new();
        for index in 0..pages {
            row.extend((0..64u8).map(|byte| byte ^ index.wrapping_mul(37)));
            let mut tag = [0xFFu8; 16];
            PageTag::Data { inode: u64::from(index) + 5, page_index: u64::from(index) }.encode(&mut tag);
            row.extend_from_slice(&tag);
        }
        seeds.add("rebuild_parity_row", format!("row-of-{pages}"), &row);
    }
    index_page_seeds(&mut seeds);
    delta_seeds(&mut seeds);
    image_header_seeds(&mut seeds);
    ninep_seeds(&mut seeds);
    raw_protocol_seeds(&mut seeds);
    // A metaroot of a version-1 volume, written by today's encoder in that version's format.
    let metaroot_v1 = fsoc_core::txn::Metaroot {
        commit_counter: 3,
        volume_id: 7,
        flags: 0,
        next_inode: 9,
        directory_root: fsoc_core::btree::TreeRoot {
            pointer: PagePointer { address: LogAddress(300), checksum: 1 },
            height: 1,
        },
        allocation_root: fsoc_core::btree::TreeRoot {
            pointer: PagePointer { address: LogAddress(301), checksum: 2 },
            height: 2,
        },
        segment_table: vec![PagePointer { address: LogAddress(302), checksum: 3 }],
        shape: fsoc_core::txn::MetarootShape::for_volume(1, 64, 2048),
        delta: Vec::new(),
        chain: None,
        nvram_lag: 0,
    };
    let mut input = metaroot_parameters(1, 64, 2048);
    input.extend_from_slice(&metaroot_v1.encode(2048)[..88]);
    seeds.add("decode_metaroot", "version-1", &input);
    seeds.write(&root)
}
