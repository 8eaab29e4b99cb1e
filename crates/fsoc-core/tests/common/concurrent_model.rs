//! Parallel readers against a model, shared by fsoc-core's test (RAM simulator) and
//! fsoc-array's (threaded chip files): one writer thread changes the volume (creates, writes,
//! truncates, renames, unlinks, mkdirs, commits) while reader threads look names up, stat,
//! read and list through `&FileSystem`, and check every answer against a model of the files
//! that the writer updates in the same exclusive section as the volume. So whatever a reader
//! sees, it must be exactly the model's state at the moment it took the shared lock. A commit's
//! flush is waited for after the writer releases the volume, as the engine does, so readers
//! also run while the flash makes a commit durable.
//!
//! The seed is printed on failure (the writer's operations replay from it; the interleaving
//! with the readers is the threads' own).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, RwLock};

use fsoc_core::fs::FileKind;
use fsoc_core::{FileSystem, FlushWait, FsError};
use fsoc_media::rng::SeededRng;
use fsoc_media::Flash;

const ROOT: u64 = 1;
const DIRECTORIES: [&[u8]; 3] = [b"alpha", b"beta", b"gamma"];
const NAMES: [&[u8]; 6] = [b"a", b"b", b"c", b"d", b"e", b"f"];

/// What the writer has made: directory name -> file name -> contents.
type Model = BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>>;

struct Shared<F: Flash> {
    fs: FileSystem<F>,
    model: Model,
}

fn pattern(length: usize, seed: u8) -> Vec<u8> {
    (0..length).map(|index| seed.wrapping_add((index % 251) as u8)).collect()
}

fn directory_inode<F: Flash>(fs: &FileSystem<F>, name: &[u8]) -> Result<u64, FsError> {
    fs.lookup(ROOT, name).map(|(inode, _)| inode)
}

/// One seeded change, applied to the volume and the model together; a commit's flush is left
/// running and returned, for the caller to wait for after releasing the volume.
fn change<F: Flash>(shared: &mut Shared<F>, rng: &mut SeededRng, step: u64) -> FlushWait {
    let Shared { fs, model } = shared;
    fs.now_ns = step as i64;
    let directory = DIRECTORIES[rng.below(DIRECTORIES.len() as u64) as usize];
    let name = NAMES[rng.below(NAMES.len() as u64) as usize];
    if !model.contains_key(directory) {
        fs.create(ROOT, directory, FileKind::Directory, 0o755, 0, 0, None).expect("mkdir");
        model.insert(directory.to_vec(), BTreeMap::new());
        return FlushWait::done();
    }
    let parent = directory_inode(fs, directory).expect("directory exists");
    let files = model.get_mut(directory).expect("model directory");
    match (rng.below(6), files.contains_key(name)) {
        (0 | 1, false) => {
            let inode = fs.create(parent, name, FileKind::File, 0o644, 0, 0, None).expect("create");
            let length = rng.below(3 * 4096) as usize;
            let data = pattern(length, step as u8);
            fs.write(inode, 0, &data).expect("write");
            files.insert(name.to_vec(), data);
        }
        (0 | 1, true) => {
            let (inode, _) = fs.lookup(parent, name).expect("lookup");
            let contents = files.get_mut(name).expect("model file");
            let offset = rng.below(contents.len() as u64 + 1) as usize;
            let data = pattern(rng.below(6000) as usize, step as u8 ^ 0x5a);
            fs.write(inode, offset as u64, &data).expect("overwrite");
            if contents.len() < offset + data.len() {
                contents.resize(offset + data.len(), 0);
            }
            contents[offset..offset + data.len()].copy_from_slice(&data);
        }
        (2, true) => {
            let (inode, _) = fs.lookup(parent, name).expect("lookup");
            let size = rng.below(5000);
            fs.truncate(inode, size).expect("truncate");
            files.get_mut(name).expect("model file").resize(size as usize, 0);
        }
        (3, true) => {
            let target_directory = DIRECTORIES[rng.below(DIRECTORIES.len() as u64) as usize];
            let target_name = NAMES[rng.below(NAMES.len() as u64) as usize];
            if let Ok(target_parent) = directory_inode(fs, target_directory) {
                if (target_directory, target_name) != (directory, name) {
                    fs.rename(parent, name, target_parent, target_name).expect("rename");
                    let contents = model.get_mut(directory).expect("source").remove(name).expect("model file");
                    model.get_mut(target_directory).expect("target").insert(target_name.to_vec(), contents);
                }
            }
        }
        (4, true) => {
            fs.remove(parent, name, false).expect("unlink");
            files.remove(name);
        }
        (5, _) => return fs.begin_commit_for_sync().expect("commit"),
        _ => {}
    }
    FlushWait::done()
}

/// Checks one reader's view against the model (both seen under the same shared lock).
/// Returns how many answers were compared.
fn check<F: Flash>(shared: &Shared<F>, rng: &mut SeededRng) -> Result<u64, String> {
    let Shared { fs, model } = shared;
    let directory = DIRECTORIES[rng.below(DIRECTORIES.len() as u64) as usize];
    let Some(files) = model.get(directory) else {
        return match fs.lookup(ROOT, directory) {
            Err(FsError::NotFound) => Ok(1),
            other => Err(format!("lookup of missing directory {:?}: {other:?}", String::from_utf8_lossy(directory))),
        };
    };
    let parent = directory_inode(fs, directory).map_err(|error| format!("directory lookup: {error:?}"))?;
    // The listing, in name order, exactly the model's names.
    let listed: Vec<Vec<u8>> = fs
        .readdir(parent, None, usize::MAX)
        .map_err(|error| format!("readdir: {error:?}"))?
        .into_iter()
        .map(|entry| entry.name)
        .collect();
    let expected: Vec<Vec<u8>> = files.keys().cloned().collect();
    if listed != expected {
        return Err(format!("readdir of {:?}: {listed:?}, model {expected:?}", String::from_utf8_lossy(directory)));
    }
    let name = NAMES[rng.below(NAMES.len() as u64) as usize];
    match (fs.lookup(parent, name), files.get(name)) {
        (Err(FsError::NotFound), None) => Ok(2),
        (Ok((inode, FileKind::File)), Some(contents)) => {
            let record = fs.getattr(inode).map_err(|error| format!("getattr: {error:?}"))?;
            if record.size != contents.len() as u64 {
                return Err(format!("size {} but the model has {}", record.size, contents.len()));
            }
            let offset = rng.below(contents.len() as u64 + 1);
            let length = rng.below(8192) as usize;
            let read = fs.read(inode, offset, length).map_err(|error| format!("read: {error:?}"))?;
            let end = contents.len().min(offset as usize + length);
            if read != contents[offset as usize..end] {
                return Err(format!("read of {length} bytes at {offset} differs from the model"));
            }
            Ok(4)
        }
        (found, model_has) => {
            Err(format!("lookup {:?}: {found:?}, model has it: {}", String::from_utf8_lossy(name), model_has.is_some()))
        }
    }
}

/// Runs `steps` seeded changes on `fs` (one writer, which waits for each commit's flush after
/// releasing the volume) while `readers` threads check answers against the model; then checks
/// the volume clean and returns it with the number of answers compared.
pub fn run<F: Flash + Send + Sync>(fs: FileSystem<F>, seed: u64, steps: u64, readers: usize) -> (FileSystem<F>, u64) {
    let shared = RwLock::new(Shared { fs, model: Model::new() });
    let done = AtomicBool::new(false);
    let failure: RwLock<Option<String>> = RwLock::new(None);
    let compared = AtomicU64::new(0);
    let inside = AtomicUsize::new(0);
    let overlap_max = AtomicUsize::new(0);
    let start = Barrier::new(readers + 1);
    std::thread::scope(|scope| {
        for reader in 0..readers {
            let (shared, done, failure, compared, inside, overlap_max, start) =
                (&shared, &done, &failure, &compared, &inside, &overlap_max, &start);
            scope.spawn(move || {
                let mut rng = SeededRng::new(seed ^ (0x1000 + reader as u64));
                start.wait();
                while !done.load(Ordering::Acquire) {
                    let guard = shared.read().expect("lock");
                    let now_inside = inside.fetch_add(1, Ordering::AcqRel) + 1;
                    overlap_max.fetch_max(now_inside, Ordering::AcqRel);
                    let result = check(&guard, &mut rng);
                    inside.fetch_sub(1, Ordering::AcqRel);
                    drop(guard);
                    match result {
                        Ok(count) => {
                            compared.fetch_add(count, Ordering::Relaxed);
                        }
                        Err(message) => {
                            failure.write().expect("lock").get_or_insert(format!("reader {reader}: {message}"));
                            done.store(true, Ordering::Release);
                        }
                    }
                }
            });
        }
        let mut rng = SeededRng::new(seed);
        start.wait();
        for step in 0..steps {
            if done.load(Ordering::Acquire) {
                break;
            }
            let flush = change(&mut shared.write().expect("lock"), &mut rng, step);
            flush.wait().expect("the commit's flush");
            // Let the readers in between changes.
            std::thread::yield_now();
        }
        done.store(true, Ordering::Release);
    });
    if let Some(message) = failure.into_inner().expect("lock") {
        panic!("seed {seed}: {message} (replay the writer with FSOC_CONCURRENT_SEED={seed})");
    }
    let mut shared = shared.into_inner().expect("lock");
    let report = shared.fs.fsck(false).expect("fsck runs");
    assert!(report.is_clean(), "seed {seed}: fsck violations: {:?}", report.violations);
    let compared = compared.into_inner();
    println!(
        "seed {seed}: {steps} changes, {compared} answers compared, at most {} readers at once",
        overlap_max.into_inner()
    );
    assert!(compared > steps, "seed {seed}: the readers compared only {compared} answers");
    (shared.fs, compared)
}
