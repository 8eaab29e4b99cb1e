//! Proptest strategies: `operation_strategy` draws single operations without looking at
//! any state (so proptest can shrink each one freely), `operation_sequence_strategy`
//! draws whole model-aware sequences from the seeded generator (shrinking their length).

use std::ops::Range;

use proptest::prelude::*;
use proptest::strategy::Union;

use crate::generator::{GeneratorConfig, OperationGenerator};
use crate::model::ModelConfig;
use crate::operation::{Operation, OperationKind};
use crate::types::{Fd, OpenFlags, Whence, NAME_SIZE_MAX_BYTES};
use fsoc_media::rng::SeededRng;

/// Single operations with the configured weights, over the configured alphabet and depth.
/// Descriptors are drawn from 0..=12 (3..=6 most often), so a sequence opens files and
/// then really uses them.
pub fn operation_strategy(config: &GeneratorConfig) -> BoxedStrategy<Operation> {
    use OperationKind as K;
    let path = path_strategy(config);
    let fd = fd_strategy();
    let data = data_strategy(config);
    let offset = offset_strategy(config);
    let size = size_strategy(config);
    let mode = mode_strategy();
    let arms: Vec<(u32, BoxedStrategy<Operation>)> = OperationKind::ALL
        .iter()
        .map(|&kind| {
            let strategy = match kind {
                K::Open => (path.clone(), flags_strategy(), mode.clone())
                    .prop_map(|(path, flags, mode)| Operation::Open { path, flags, mode })
                    .boxed(),
                K::Read => {
                    (fd.clone(), size.clone()).prop_map(|(fd, size_bytes)| Operation::Read { fd, size_bytes }).boxed()
                }
                K::Write => (fd.clone(), data.clone()).prop_map(|(fd, data)| Operation::Write { fd, data }).boxed(),
                K::Pread => (fd.clone(), offset.clone(), size.clone())
                    .prop_map(|(fd, offset, size_bytes)| Operation::Pread { fd, offset, size_bytes })
                    .boxed(),
                K::Pwrite => (fd.clone(), offset.clone(), data.clone())
                    .prop_map(|(fd, offset, data)| Operation::Pwrite { fd, offset, data })
                    .boxed(),
                K::Seek => (fd.clone(), -70_000i64..70_000, whence_strategy())
                    .prop_map(|(fd, offset, whence)| Operation::Seek { fd, offset, whence })
                    .boxed(),
                K::Ftruncate => (fd.clone(), offset.clone())
                    .prop_map(|(fd, size_bytes)| Operation::Ftruncate { fd, size_bytes })
                    .boxed(),
                K::Fsync => fd.clone().prop_map(|fd| Operation::Fsync { fd }).boxed(),
                K::Close => fd.clone().prop_map(|fd| Operation::Close { fd }).boxed(),
                K::Fstat => fd.clone().prop_map(|fd| Operation::Fstat { fd }).boxed(),
                K::Stat => path.clone().prop_map(|path| Operation::Stat { path }).boxed(),
                K::Truncate => (path.clone(), offset.clone())
                    .prop_map(|(path, size_bytes)| Operation::Truncate { path, size_bytes })
                    .boxed(),
                K::Mkdir => {
                    (path.clone(), mode.clone()).prop_map(|(path, mode)| Operation::Mkdir { path, mode }).boxed()
                }
                K::Rmdir => path.clone().prop_map(|path| Operation::Rmdir { path }).boxed(),
                K::Unlink => path.clone().prop_map(|path| Operation::Unlink { path }).boxed(),
                K::Rename => (path.clone(), path.clone())
                    .prop_map(|(source_path, target_path)| Operation::Rename { source_path, target_path })
                    .boxed(),
                K::Readdir => path.clone().prop_map(|path| Operation::Readdir { path }).boxed(),
                K::Link => (path.clone(), path.clone())
                    .prop_map(|(existing_path, new_path)| Operation::Link { existing_path, new_path })
                    .boxed(),
                K::Symlink => (path.clone(), path.clone())
                    .prop_map(|(target, link_path)| Operation::Symlink { target, link_path })
                    .boxed(),
                K::Readlink => path.clone().prop_map(|path| Operation::Readlink { path }).boxed(),
                K::Chmod => {
                    (path.clone(), mode.clone()).prop_map(|(path, mode)| Operation::Chmod { path, mode }).boxed()
                }
                K::Chown => (
                    path.clone(),
                    prop_oneof![Just(0u32), Just(1000), any::<u32>()],
                    prop_oneof![Just(0u32), Just(1000), any::<u32>()],
                )
                    .prop_map(|(path, uid, gid)| Operation::Chown { path, uid, gid })
                    .boxed(),
                K::Utimens => (path.clone(), -(1i64 << 62)..1 << 62, -(1i64 << 62)..1 << 62)
                    .prop_map(|(path, atime_ns, mtime_ns)| Operation::Utimens { path, atime_ns, mtime_ns })
                    .boxed(),
                K::Statfs => Just(Operation::Statfs).boxed(),
                K::Transact => Just(Operation::Transact).boxed(),
                K::Remount => Just(Operation::Remount).boxed(),
                K::PowerCut => Just(Operation::PowerCut).boxed(),
            };
            (config.effective_weight(kind), strategy)
        })
        .filter(|(weight, _)| *weight > 0)
        .collect();
    assert!(!arms.is_empty(), "every operation kind has weight 0");
    Union::new_weighted(arms).boxed()
}

/// Whole sequences from the seeded generator, replayable on a file system formatted like
/// `model_config`. Shrinking shortens the sequence (a prefix of the same seed) and moves
/// the seed.
pub fn operation_sequence_strategy(
    config: GeneratorConfig,
    model_config: ModelConfig,
    count: Range<usize>,
) -> impl Strategy<Value = Vec<Operation>> {
    (any::<u64>(), count)
        .prop_map(move |(seed, count)| OperationGenerator::generate(seed, config.clone(), model_config.clone(), count))
}

fn name_strategy(config: &GeneratorConfig) -> BoxedStrategy<Vec<u8>> {
    let short = proptest::sample::select(config.names.clone());
    let first_bytes: Vec<u8> = config.names.iter().map(|name| name[0]).collect();
    let long = (proptest::sample::select(first_bytes), prop_oneof![Just(200usize), Just(NAME_SIZE_MAX_BYTES)])
        .prop_map(|(byte, length)| vec![byte; length]);
    let long_weight = config.long_name_percent.min(100);
    if long_weight == 0 {
        return short.boxed();
    }
    prop_oneof![100 - long_weight => short, long_weight => long].boxed()
}

fn path_strategy(config: &GeneratorConfig) -> BoxedStrategy<Vec<u8>> {
    let valid = prop::collection::vec(name_strategy(config), 1..=config.depth_max).prop_map(|names| {
        let mut path = Vec::new();
        for name in names {
            path.push(b'/');
            path.extend_from_slice(&name);
        }
        path
    });
    let invalid = prop_oneof![
        Just(b"a".to_vec()),
        Just(b"/a/".to_vec()),
        Just(b"//a".to_vec()),
        Just(b"/a/.".to_vec()),
        Just(b"/..".to_vec()),
        Just(Vec::new()),
        Just([b"/".as_slice(), &[b'n'; NAME_SIZE_MAX_BYTES + 1]].concat()),
    ];
    let invalid_weight = config.invalid_path_percent.min(98);
    prop_oneof![
        2 => Just(b"/".to_vec()),
        98 - invalid_weight => valid,
        invalid_weight => invalid,
    ]
    .boxed()
}

fn fd_strategy() -> BoxedStrategy<Fd> {
    prop_oneof![8 => 3u32..=6, 2 => 0u32..=12].boxed()
}

fn flags_strategy() -> BoxedStrategy<OpenFlags> {
    (any::<[bool; 7]>(), 0u8..10)
        .prop_map(|(bits, read_fallback)| {
            let [read, write, create, exclusive, truncate, append, directory] = bits;
            // Mostly a valid access mode; sometimes neither (EINVAL).
            let read = read || (!write && read_fallback > 1);
            OpenFlags { read, write, create, exclusive, truncate, append, directory }
        })
        .boxed()
}

fn mode_strategy() -> BoxedStrategy<u32> {
    prop_oneof![4 => Just(0o644u32), 2 => Just(0o755), 1 => 0u32..0o10000, 1 => any::<u32>()].boxed()
}

fn whence_strategy() -> BoxedStrategy<Whence> {
    prop_oneof![Just(Whence::Set), Just(Whence::Current), Just(Whence::End)].boxed()
}

fn size_strategy(config: &GeneratorConfig) -> BoxedStrategy<u64> {
    let page = config.page_size_bytes;
    let size_max = config.write_size_max_bytes.max(1);
    prop_oneof![
        4 => 0..=100u64.min(size_max),
        3 => prop_oneof![Just(page / 2), Just(page), Just(2 * page), Just(page + 1)]
            .prop_map(move |size| size.min(size_max)),
        3 => 0..=size_max,
    ]
    .boxed()
}

fn offset_strategy(config: &GeneratorConfig) -> BoxedStrategy<u64> {
    let page = config.page_size_bytes;
    prop_oneof![
        3 => Just(0u64),
        4 => 0..8 * page,
        2 => (0u64..16).prop_map(move |pages| pages * page),
        1 => 0..config.file_size_soft_max_bytes.max(1),
    ]
    .boxed()
}

/// Write data of a generated size; the bytes come from a seed so shrinking works on the
/// size alone and a 40 KiB buffer costs one strategy value, not 40 Ki.
fn data_strategy(config: &GeneratorConfig) -> BoxedStrategy<Vec<u8>> {
    (size_strategy(config), any::<u64>()).prop_map(|(size, seed)| SeededRng::new(seed).bytes(size as usize)).boxed()
}
