//! The client against the host's own file system: a seeded random sequence of operations (write,
//! append, read, mkdir, mkdir -p, unlink, rmdir, rename, link, symlink, readlink, stat, lstat,
//! truncate, chmod, listing, exclusive create) is applied through the client to an in-process
//! `fsoc serve` and with std::fs to a temporary directory on the host; every result (values,
//! or the error's kind) must agree, and so must the whole trees at the end. A failure prints
//! the seed and the step, and `FSOC_SEED=N` replays one seed.

mod support;

use std::collections::BTreeMap;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use fsoc_client::{Client, OpenOptions};
use fsoc_media::rng::SeededRng;
use support::TestServer;

const NAMES: [&str; 4] = ["a", "b", "c", "d"];
const STEPS: usize = 400;

#[derive(Debug, Clone)]
enum Operation {
    Write(String, usize, u8),
    Append(String, usize, u8),
    Read(String),
    CreateDir(String),
    CreateDirAll(String),
    RemoveFile(String),
    RemoveDir(String),
    Rename(String, String),
    HardLink(String, String),
    Symlink(String, String),
    ReadLink(String),
    Metadata(String),
    SymlinkMetadata(String),
    SetLen(String, u64),
    SetPermissions(String, u32),
    ReadDir(String),
    CreateNew(String),
}

fn random_path(rng: &mut SeededRng) -> String {
    let depth = 1 + rng.below(3) as usize;
    (0..depth).map(|_| NAMES[rng.below(NAMES.len() as u64) as usize]).collect::<Vec<_>>().join("/")
}

fn random_operation(rng: &mut SeededRng) -> Operation {
    let path = random_path(rng);
    let byte = rng.below(256) as u8;
    match rng.below(20) {
        0..=2 => Operation::Write(path, rng.below(20_000) as usize, byte),
        3 => Operation::Append(path, rng.below(3000) as usize, byte),
        4..=5 => Operation::Read(path),
        6..=7 => Operation::CreateDir(path),
        8 => Operation::CreateDirAll(path),
        9 => Operation::RemoveFile(path),
        10 => Operation::RemoveDir(path),
        11 => Operation::Rename(path, random_path(rng)),
        12 => Operation::HardLink(path, random_path(rng)),
        13 => {
            // Relative targets without `..`: an absolute one, or `..` from a link renamed to the
            // top, would leave the host's directory, where the server's root has no parent
            // (tests/api.rs checks `..` in targets).
            Operation::Symlink(random_path(rng), path)
        }
        14 => Operation::ReadLink(path),
        15 => Operation::Metadata(path),
        16 => Operation::SymlinkMetadata(path),
        17 => Operation::SetLen(path, rng.below(30_000)),
        // Always owner rwx: the host side may run without root, and must keep using the tree.
        18 => Operation::SetPermissions(path, 0o700 | (rng.below(0o100) as u32)),
        _ => {
            if rng.below(2) == 0 {
                Operation::ReadDir(path)
            } else {
                Operation::CreateNew(path)
            }
        }
    }
}

/// What an operation gave, in a form both sides produce: a description, or the error's kind.
type Outcome = Result<String, ErrorKind>;

fn describe_metadata(is_dir: bool, is_file: bool, is_symlink: bool, len: u64, nlink: u64, mode: u32) -> String {
    // A directory's size and link count differ between file systems; a file's do not.
    if is_dir {
        format!("dir mode {:o}", mode & 0o7777)
    } else {
        format!("dir={is_dir} file={is_file} symlink={is_symlink} len={len} nlink={nlink} mode {:o}", mode & 0o7777)
    }
}

fn outcome<T>(result: std::io::Result<T>, describe: impl FnOnce(T) -> String) -> Outcome {
    result.map(describe).map_err(|error| error.kind())
}

fn apply_host(base: &Path, operation: &Operation) -> Outcome {
    let at = |path: &str| base.join(path);
    match operation {
        Operation::Write(path, length, byte) => {
            outcome(std::fs::write(at(path), vec![*byte; *length]), |()| "ok".into())
        }
        Operation::Append(path, length, byte) => outcome(
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(at(path))
                .and_then(|mut file| file.write_all(&vec![*byte; *length])),
            |()| "ok".into(),
        ),
        Operation::Read(path) => {
            outcome(std::fs::read(at(path)), |bytes| format!("{} bytes {:?}", bytes.len(), digest(&bytes)))
        }
        Operation::CreateDir(path) => outcome(std::fs::create_dir(at(path)), |()| "ok".into()),
        Operation::CreateDirAll(path) => outcome(std::fs::create_dir_all(at(path)), |()| "ok".into()),
        Operation::RemoveFile(path) => outcome(std::fs::remove_file(at(path)), |()| "ok".into()),
        Operation::RemoveDir(path) => outcome(std::fs::remove_dir(at(path)), |()| "ok".into()),
        Operation::Rename(from, to) => outcome(std::fs::rename(at(from), at(to)), |()| "ok".into()),
        Operation::HardLink(from, to) => outcome(std::fs::hard_link(at(from), at(to)), |()| "ok".into()),
        Operation::Symlink(target, link) => outcome(std::os::unix::fs::symlink(target, at(link)), |()| "ok".into()),
        Operation::ReadLink(path) => outcome(std::fs::read_link(at(path)), |target| target.display().to_string()),
        Operation::Metadata(path) => outcome(std::fs::metadata(at(path)), |m| {
            describe_metadata(m.is_dir(), m.is_file(), m.file_type().is_symlink(), m.len(), m.nlink(), m.mode())
        }),
        Operation::SymlinkMetadata(path) => outcome(std::fs::symlink_metadata(at(path)), |m| {
            describe_metadata(m.is_dir(), m.is_file(), m.file_type().is_symlink(), m.len(), m.nlink(), m.mode())
        }),
        Operation::SetLen(path, length) => outcome(
            std::fs::OpenOptions::new().write(true).open(at(path)).and_then(|file| file.set_len(*length)),
            |()| "ok".into(),
        ),
        Operation::SetPermissions(path, mode) => {
            outcome(std::fs::set_permissions(at(path), std::fs::Permissions::from_mode(*mode)), |()| "ok".into())
        }
        Operation::ReadDir(path) => outcome(
            std::fs::read_dir(at(path)).and_then(|entries| {
                entries
                    .map(|entry| {
                        let entry = entry?;
                        let kind = entry.file_type()?;
                        Ok(format!("{:?}:{}{}", entry.file_name(), kind.is_dir(), kind.is_symlink()))
                    })
                    .collect::<std::io::Result<Vec<String>>>()
            }),
            |mut names| {
                names.sort();
                names.join(" ")
            },
        ),
        Operation::CreateNew(path) => {
            outcome(std::fs::OpenOptions::new().write(true).create_new(true).mode_600().open(at(path)), |_| "ok".into())
        }
    }
}

/// std's OpenOptions with the mode the client's create uses, so both sides' modes agree.
trait Mode600 {
    fn mode_600(&mut self) -> &mut Self;
}

impl Mode600 for std::fs::OpenOptions {
    fn mode_600(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::mode(self, 0o600)
    }
}

fn apply_client(client: &Client, operation: &Operation) -> Outcome {
    match operation {
        Operation::Write(path, length, byte) => outcome(client.write(path, vec![*byte; *length]), |()| "ok".into()),
        Operation::Append(path, length, byte) => outcome(
            OpenOptions::new()
                .append(true)
                .create(true)
                .open(client, path)
                .and_then(|mut file| file.write_all(&vec![*byte; *length])),
            |()| "ok".into(),
        ),
        Operation::Read(path) => {
            outcome(client.read(path), |bytes| format!("{} bytes {:?}", bytes.len(), digest(&bytes)))
        }
        Operation::CreateDir(path) => outcome(client.create_dir(path), |()| "ok".into()),
        Operation::CreateDirAll(path) => outcome(client.create_dir_all(path), |()| "ok".into()),
        Operation::RemoveFile(path) => outcome(client.remove_file(path), |()| "ok".into()),
        Operation::RemoveDir(path) => outcome(client.remove_dir(path), |()| "ok".into()),
        Operation::Rename(from, to) => outcome(client.rename(from, to), |()| "ok".into()),
        Operation::HardLink(from, to) => outcome(client.hard_link(from, to), |()| "ok".into()),
        Operation::Symlink(target, link) => outcome(client.symlink(target, link), |()| "ok".into()),
        Operation::ReadLink(path) => outcome(client.read_link(path), |target| target.display().to_string()),
        Operation::Metadata(path) => outcome(client.metadata(path), |m| {
            describe_metadata(m.is_dir(), m.is_file(), m.is_symlink(), m.len(), m.nlink(), m.mode())
        }),
        Operation::SymlinkMetadata(path) => outcome(client.symlink_metadata(path), |m| {
            describe_metadata(m.is_dir(), m.is_file(), m.is_symlink(), m.len(), m.nlink(), m.mode())
        }),
        Operation::SetLen(path, length) => {
            outcome(OpenOptions::new().write(true).open(client, path).and_then(|file| file.set_len(*length)), |()| {
                "ok".into()
            })
        }
        Operation::SetPermissions(path, mode) => {
            outcome(client.set_permissions(path, std::fs::Permissions::from_mode(*mode)), |()| "ok".into())
        }
        Operation::ReadDir(path) => outcome(
            client.read_dir(path).and_then(|entries| {
                entries
                    .map(|entry| {
                        let entry = entry?;
                        let kind = entry.file_type();
                        Ok(format!("{:?}:{}{}", entry.file_name(), kind.is_dir(), kind.is_symlink()))
                    })
                    .collect::<std::io::Result<Vec<String>>>()
            }),
            |mut names| {
                names.sort();
                names.join(" ")
            },
        ),
        Operation::CreateNew(path) => {
            outcome(OpenOptions::new().write(true).create_new(true).mode(0o600).open(client, path), |_| "ok".into())
        }
    }
}

/// A short fingerprint of contents (FNV-1a), so a mismatch prints compactly.
fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |hash, &byte| (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3))
}

/// Every path under `base` on the host: type, and contents or link target.
fn host_tree(base: &Path, relative: &Path, tree: &mut BTreeMap<PathBuf, String>) {
    for entry in std::fs::read_dir(base.join(relative)).expect("host listing") {
        let entry = entry.expect("host entry");
        let path = relative.join(entry.file_name());
        let kind = entry.file_type().expect("host type");
        if kind.is_symlink() {
            tree.insert(path.clone(), format!("-> {}", std::fs::read_link(base.join(&path)).expect("link").display()));
        } else if kind.is_dir() {
            tree.insert(path.clone(), "dir".into());
            host_tree(base, &path, tree);
        } else {
            tree.insert(path.clone(), format!("{:x}", digest(&std::fs::read(base.join(&path)).expect("read"))));
        }
    }
}

fn client_tree(client: &Client, relative: &Path, tree: &mut BTreeMap<PathBuf, String>) {
    for entry in client.read_dir(relative).expect("client listing") {
        let entry = entry.expect("client entry");
        let path = relative.join(entry.file_name());
        let kind = entry.file_type();
        if kind.is_symlink() {
            tree.insert(path.clone(), format!("-> {}", client.read_link(&path).expect("link").display()));
        } else if kind.is_dir() {
            tree.insert(path.clone(), "dir".into());
            client_tree(client, &path, tree);
        } else {
            tree.insert(path.clone(), format!("{:x}", digest(&client.read(&path).expect("read"))));
        }
    }
}

fn run_seed(seed: u64) {
    let server = TestServer::start();
    let client = server.connect();
    let host = tempfile::tempdir().expect("host directory");
    let mut rng = SeededRng::new(seed);
    let mut history = Vec::new();
    for step in 0..STEPS {
        let operation = random_operation(&mut rng);
        let expected = apply_host(host.path(), &operation);
        let actual = apply_client(&client, &operation);
        history.push(format!("{step}: {operation:?} -> {expected:?}"));
        assert_eq!(
            actual,
            expected,
            "seed {seed} step {step}: {operation:?}; client (left) and host (right) disagree\n\
             replay: FSOC_SEED={seed} cargo test -p fsoc-client --test differential\nhistory:\n{}",
            history.join("\n")
        );
    }
    let (mut expected, mut actual) = (BTreeMap::new(), BTreeMap::new());
    host_tree(host.path(), Path::new(""), &mut expected);
    client_tree(&client, Path::new(""), &mut actual);
    assert_eq!(actual, expected, "seed {seed}: the trees differ at the end\nreplay: FSOC_SEED={seed}");
    drop(client);
    server.stop();
}

#[test]
fn client_agrees_with_the_host_file_system() {
    // The server applies no umask (the host's kernel does, for a kernel mount); neither may
    // the host side here. This test binary has one test, so nothing else sees the change.
    // SAFETY: umask has no preconditions.
    unsafe { libc::umask(0) };
    let seeds: Vec<u64> = match std::env::var("FSOC_SEED") {
        Ok(seed) => vec![seed.parse().expect("FSOC_SEED is a number")],
        Err(_) => (1..=8).collect(),
    };
    for seed in seeds {
        run_seed(seed);
    }
}
