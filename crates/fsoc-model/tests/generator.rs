//! The generators: deterministic per seed, covering every kind and the error paths. (The
//! model itself is judged against the host's file system in posix_differential.rs.)

use std::collections::{BTreeMap, BTreeSet};

use fsoc_model::errno::*;
use fsoc_model::{
    Errno, GeneratorConfig, ModelConfig, ModelFs, Operation, OperationGenerator, OperationKind, OperationWeights,
    Output,
};

#[test]
fn same_seed_gives_the_same_operations() {
    let config = GeneratorConfig::default();
    let first = OperationGenerator::generate(7, config.clone(), ModelConfig::default(), 500);
    let again = OperationGenerator::generate(7, config.clone(), ModelConfig::default(), 500);
    assert_eq!(first, again);
    let other = OperationGenerator::generate(8, config, ModelConfig::default(), 500);
    assert_ne!(first, other);
}

#[test]
fn next_depends_only_on_seed_and_model_state() {
    let model = ModelFs::default();
    let mut first = OperationGenerator::new(99, GeneratorConfig::default());
    let mut second = OperationGenerator::new(99, GeneratorConfig::default());
    for _ in 0..50 {
        assert_eq!(first.next(&model), second.next(&model));
    }
}

/// Outcome statistics of a generated run: which kinds ran, which errnos came back.
struct Coverage {
    kinds: BTreeMap<OperationKind, usize>,
    errnos: BTreeMap<Errno, usize>,
    successes: BTreeMap<OperationKind, usize>,
    nonzero_reads: usize,
    hole_reads: usize,
}

fn coverage(seed: u64, config: GeneratorConfig, count: usize) -> Coverage {
    let operations = OperationGenerator::generate(seed, config, ModelConfig::default(), count);
    let mut model = ModelFs::default();
    let mut coverage = Coverage {
        kinds: BTreeMap::new(),
        errnos: BTreeMap::new(),
        successes: BTreeMap::new(),
        nonzero_reads: 0,
        hole_reads: 0,
    };
    for (step, operation) in operations.iter().enumerate() {
        let outcome = model.apply(operation, step as i64 + 1);
        *coverage.kinds.entry(operation.kind()).or_default() += 1;
        match outcome {
            Err(errno) => *coverage.errnos.entry(errno).or_default() += 1,
            Ok(output) => {
                *coverage.successes.entry(operation.kind()).or_default() += 1;
                if let (Output::Bytes(bytes), OperationKind::Read | OperationKind::Pread) = (&output, operation.kind())
                {
                    if bytes.iter().any(|&byte| byte != 0) {
                        coverage.nonzero_reads += 1;
                    }
                    if bytes.windows(64).any(|window| window.iter().all(|&byte| byte == 0)) {
                        coverage.hole_reads += 1;
                    }
                }
            }
        }
    }
    coverage
}

#[test]
fn generated_sequences_reach_every_kind_and_the_common_errors() {
    let coverage = coverage(0x5eed, GeneratorConfig::default(), 5_000);
    eprintln!("kinds {:?}\nsuccesses {:?}\nerrnos {:?}", coverage.kinds, coverage.successes, coverage.errnos);
    for kind in OperationKind::ALL {
        assert!(coverage.kinds.contains_key(&kind), "{kind:?} never generated");
    }
    let expected_errnos =
        [EPERM, ENOENT, EBADF, EEXIST, ENOTDIR, EISDIR, EINVAL, ENAMETOOLONG, ENOTEMPTY, ELOOP, EBUSY];
    for errno in expected_errnos {
        assert!(coverage.errnos.contains_key(&errno), "errno {errno} never returned: {:?}", coverage.errnos);
    }
    // Errors must not swamp the run: most namespace and data operations should succeed.
    for kind in [
        OperationKind::Open,
        OperationKind::Write,
        OperationKind::Pwrite,
        OperationKind::Mkdir,
        OperationKind::Rename,
        OperationKind::Unlink,
        OperationKind::Rmdir,
        OperationKind::Link,
    ] {
        let successes = coverage.successes.get(&kind).copied().unwrap_or(0);
        let total = coverage.kinds[&kind];
        assert!(successes * 5 >= total, "{kind:?}: {successes} of {total} succeed");
    }
    assert!(coverage.nonzero_reads >= 50, "reads returning data: {}", coverage.nonzero_reads);
    assert!(coverage.hole_reads >= 10, "reads crossing holes: {}", coverage.hole_reads);
}

#[test]
fn file_size_limit_probes_give_efbig() {
    let config = GeneratorConfig { file_size_limit_probe_percent: 20, ..GeneratorConfig::default() };
    let coverage = coverage(3, config, 3_000);
    assert!(coverage.errnos.contains_key(&EFBIG), "{:?}", coverage.errnos);
}

#[test]
fn harness_events_can_be_excluded_and_weights_restrict_kinds() {
    let config = GeneratorConfig::default().without_harness_events();
    let operations = OperationGenerator::generate(1, config, ModelConfig::default(), 3_000);
    assert!(operations.iter().all(|operation| !operation.kind().is_harness_event()));
    let only = [OperationKind::Open, OperationKind::Write, OperationKind::Close];
    let config = GeneratorConfig { weights: OperationWeights::only(&only), ..GeneratorConfig::default() };
    let operations = OperationGenerator::generate(1, config, ModelConfig::default(), 1_000);
    let kinds: BTreeSet<OperationKind> = operations.iter().map(Operation::kind).collect();
    assert_eq!(kinds, BTreeSet::from(only));
}

#[test]
fn names_stay_within_the_alphabet_and_depth() {
    let config = GeneratorConfig { invalid_path_percent: 0, long_name_percent: 0, ..GeneratorConfig::default() };
    let operations = OperationGenerator::generate(5, config, ModelConfig::default(), 3_000);
    let mut model = ModelFs::default();
    for (step, operation) in operations.iter().enumerate() {
        let _outcome = model.apply(operation, step as i64 + 1);
        for info in model.existing_paths() {
            let depth = fsoc_model::path::depth(&info.path);
            assert!(depth <= 5, "{}", fsoc_model::path::display_bytes(&info.path));
            if info.path != b"/" {
                let names = info.path[1..].split(|&byte| byte == b'/');
                assert!(names.into_iter().all(|name| [&b"a"[..], b"b", b"c", b"d"].contains(&name)));
            }
        }
    }
}

#[test]
fn write_sizes_mix_tiny_page_and_multi_page() {
    let config = GeneratorConfig::default();
    let operations = OperationGenerator::generate(11, config.clone(), ModelConfig::default(), 5_000);
    let sizes: Vec<usize> = operations
        .iter()
        .filter_map(|operation| match operation {
            Operation::Write { data, .. } | Operation::Pwrite { data, .. } => Some(data.len()),
            _ => None,
        })
        .collect();
    let page = config.page_size_bytes as usize;
    let count = |predicate: &dyn Fn(usize) -> bool| sizes.iter().filter(|&&size| predicate(size)).count();
    assert!(sizes.iter().all(|&size| size as u64 <= config.write_size_max_bytes));
    assert!(count(&|size| (1..=100).contains(&size)) >= sizes.len() / 4, "tiny");
    assert!(count(&|size| size == page) >= 15, "exactly one page");
    assert!(count(&|size| size > 2 * page) >= sizes.len() / 10, "multi-page");
    // Offsets beyond EOF leave holes: some pwrite starts past the current size.
    let mut model = ModelFs::default();
    let mut hole_writes = 0;
    for (step, operation) in operations.iter().enumerate() {
        if let Operation::Pwrite { fd, offset, .. } = operation {
            let size = model.open_files().iter().find(|file| file.fd == *fd).map(|file| file.size_bytes);
            if size.is_some_and(|size| *offset > size) {
                hole_writes += 1;
            }
        }
        let _outcome = model.apply(operation, step as i64 + 1);
    }
    assert!(hole_writes >= 30, "pwrites past EOF: {hole_writes}");
}
