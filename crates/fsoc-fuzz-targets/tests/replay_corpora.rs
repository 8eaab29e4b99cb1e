//! Replays every committed fuzz corpus (`fuzz/corpus/<target>/`) through its target on stable
//! Rust, so `cargo test --workspace` checks on every change that no decoder panics on, and every
//! property still holds for, the inputs the fuzzer kept (seeds, coverage-increasing mutations
//! and past crashes). A target whose corpus is missing or empty fails the test: it cannot pass
//! by replaying nothing.
use std::path::{Path, PathBuf};

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
}

/// Runs `target` on every file of `directory`; returns how many there were. A panic names the
/// file, so `cargo +nightly fuzz run <target> <file>` reproduces it under the fuzzer.
fn replay(name: &str, target: fsoc_fuzz_targets::Target, directory: &Path) -> usize {
    let entries = std::fs::read_dir(directory)
        .unwrap_or_else(|error| panic!("{name}: corpus {} missing: {error}", directory.display()));
    let mut files: Vec<PathBuf> = entries.map(|entry| entry.expect("corpus entry").path()).collect();
    files.sort();
    for file in &files {
        let bytes = std::fs::read(file).unwrap_or_else(|error| panic!("{}: {error}", file.display()));
        let outcome = std::panic::catch_unwind(|| target(&bytes));
        assert!(outcome.is_ok(), "{name} fails on {}", file.display());
    }
    files.len()
}

#[test]
fn every_target_replays_its_corpus() {
    let root = corpus_root();
    for (name, target) in fsoc_fuzz_targets::TARGETS {
        let count = replay(name, *target, &root.join(name));
        assert!(count > 0, "{name}: corpus {} is empty", root.join(name).display());
        println!("{name}: {count} inputs replayed");
    }
}

/// Every corpus directory belongs to a target, so a renamed target cannot leave its old corpus
/// behind unreplayed.
#[test]
fn every_corpus_has_a_target() {
    let names: Vec<&str> = fsoc_fuzz_targets::TARGETS.iter().map(|(name, _)| *name).collect();
    for entry in std::fs::read_dir(corpus_root()).expect("fuzz/corpus") {
        let entry = entry.expect("corpus directory entry");
        let name = entry.file_name().into_string().expect("UTF-8 target name");
        assert!(names.contains(&name.as_str()), "fuzz/corpus/{name} has no target in TARGETS");
    }
}

/// Every target has its one-line libFuzzer target in fuzz/fuzz_targets, calling it by name.
#[test]
fn every_target_has_a_libfuzzer_target() {
    let directory = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/fuzz_targets");
    for (name, _) in fsoc_fuzz_targets::TARGETS {
        let path = directory.join(format!("{name}.rs"));
        let source = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        assert!(
            source.contains(&format!("fsoc_fuzz_targets::{name}(data)")),
            "{} does not call {name}",
            path.display()
        );
    }
}
