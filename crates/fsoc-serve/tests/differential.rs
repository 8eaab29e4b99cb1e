//! The same seeded random operations (create, write, read, truncate, rename, unlink, mkdir,
//! rmdir, readdir, getattr) through 9P and directly on a `FileSystem` of the same geometry:
//! every answer (data, listing, size or errno) must be the same, and so must the final tree.
//! A failure prints the seed and the operation that differed.

mod support;

use fsoc_9p::constants::{open_flags, setattr, UNLINKAT_REMOVE_DIRECTORY};
use fsoc_9p::SetAttributes;
use fsoc_core::fs::FileKind;
use fsoc_core::FileSystem;
use fsoc_media::rng::SeededRng;
use fsoc_serve::ServeConfig;
use support::{fresh_volume, Client, TestFlash, TestServer};

const ROOT: u32 = 1;
const DIRECTORIES: [&[u8]; 2] = [b"d", b"e"];
const FILES: [&[u8]; 3] = [b"f", b"g", b"h"];
const OPERATIONS_PER_SEED: usize = 1000;

#[derive(Clone, Debug)]
enum Operation {
    Create { path: Vec<&'static [u8]>, contents: Vec<u8> },
    Write { path: Vec<&'static [u8]>, offset: u64, contents: Vec<u8> },
    Read { path: Vec<&'static [u8]>, offset: u64, count: u32 },
    Truncate { path: Vec<&'static [u8]>, size: u64 },
    Rename { from: Vec<&'static [u8]>, to: Vec<&'static [u8]> },
    Unlink { path: Vec<&'static [u8]> },
    Mkdir { path: Vec<&'static [u8]> },
    Rmdir { path: Vec<&'static [u8]> },
    Readdir { path: Vec<&'static [u8]> },
    Getattr { path: Vec<&'static [u8]> },
}

/// Every path of a volume with its contents (None for a directory), depth first.
type Tree = Vec<(Vec<Vec<u8>>, Option<Vec<u8>>)>;

/// What an operation answered.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Answer {
    Done,
    Data(Vec<u8>),
    Names(Vec<Vec<u8>>),
    Stat {
        directory: bool,
        size: u64,
    },
    /// The errno of the operation itself.
    Errno(u32),
    /// A directory on the way does not exist or is not a directory.
    Unresolved,
}

/// A path to a file: up to two directories (mostly none) and a file name. Directories and
/// files have names of their own, so most operations find what they name.
fn file_path(rng: &mut SeededRng) -> Vec<&'static [u8]> {
    let mut path = directories(rng, 2);
    path.push(FILES[rng.below(FILES.len() as u64) as usize]);
    path
}

/// A path to a directory: at most `depth_max` directories, at least one.
fn directory_path(rng: &mut SeededRng, depth_max: u64) -> Vec<&'static [u8]> {
    let mut path = directories(rng, depth_max - 1);
    path.push(DIRECTORIES[rng.below(DIRECTORIES.len() as u64) as usize]);
    path
}

fn directories(rng: &mut SeededRng, depth_max: u64) -> Vec<&'static [u8]> {
    let depth = match rng.below(20) {
        0..=9 => 0,
        10..=16 => 1,
        _ => 2,
    }
    .min(depth_max);
    (0..depth).map(|_| DIRECTORIES[rng.below(DIRECTORIES.len() as u64) as usize]).collect()
}

fn any_path(rng: &mut SeededRng) -> Vec<&'static [u8]> {
    if rng.chance_percent(75) {
        file_path(rng)
    } else {
        directory_path(rng, 2)
    }
}

fn contents(rng: &mut SeededRng) -> Vec<u8> {
    let length = match rng.below(4) {
        0 => 0,
        1 => rng.below(100),
        2 => rng.range(1000, 5000),
        _ => rng.range(10_000, 40_000),
    };
    let byte = rng.below(256) as u8;
    (0..length).map(|index| byte.wrapping_add(index as u8)).collect()
}

fn operation(rng: &mut SeededRng) -> Operation {
    match rng.below(12) {
        0..=2 => Operation::Create { path: any_path(rng), contents: contents(rng) },
        3 => Operation::Write { path: any_path(rng), offset: rng.below(50_000), contents: contents(rng) },
        4 | 5 => Operation::Read { path: any_path(rng), offset: rng.below(45_000), count: rng.range(1, 20_000) as u32 },
        6 => Operation::Truncate { path: any_path(rng), size: rng.below(50_000) },
        7 => Operation::Rename { from: any_path(rng), to: any_path(rng) },
        8 => Operation::Unlink { path: any_path(rng) },
        9 => Operation::Mkdir { path: directory_path(rng, 2) },
        10 => {
            if rng.chance_percent(30) {
                Operation::Rmdir { path: directory_path(rng, 2) }
            } else {
                Operation::Readdir { path: directory_path(rng, 2) }
            }
        }
        _ => Operation::Getattr { path: any_path(rng) },
    }
}

/// The operations applied directly to the file system.
struct Direct {
    fs: FileSystem<TestFlash>,
}

impl Direct {
    fn resolve(&self, path: &[&[u8]]) -> Option<u64> {
        let mut inode = 1;
        for name in path {
            match self.fs.lookup(inode, name) {
                Ok((found, FileKind::Directory)) => inode = found,
                _ => return None,
            }
        }
        Some(inode)
    }

    fn apply(&mut self, operation: &Operation) -> Answer {
        let errno = |error: fsoc_core::FsError| Answer::Errno(error.errno() as u32);
        let path: &[&[u8]] = match operation {
            Operation::Rename { .. } => &[b""],
            Operation::Create { path, .. }
            | Operation::Write { path, .. }
            | Operation::Read { path, .. }
            | Operation::Truncate { path, .. }
            | Operation::Unlink { path }
            | Operation::Mkdir { path }
            | Operation::Rmdir { path }
            | Operation::Readdir { path }
            | Operation::Getattr { path } => path,
        };
        let (parent_path, leaf) = (&path[..path.len() - 1], path[path.len() - 1]);
        // A rename resolves both of its directories itself.
        let Some(parent) = self.resolve(parent_path) else { return Answer::Unresolved };
        self.fs.now_ns += 1;
        let fs = &mut self.fs;
        match operation {
            Operation::Create { contents, .. } => {
                match fs.create(parent, leaf, FileKind::File, 0o644, 1000, 100, None) {
                    Ok(inode) => fs.write(inode, 0, contents).map(|_| Answer::Done).unwrap_or_else(errno),
                    Err(error) => errno(error),
                }
            }
            Operation::Write { offset, contents, .. } => match fs.lookup(parent, leaf) {
                // open(2) of a directory for writing fails before any write.
                Ok((_, FileKind::Directory)) => Answer::Errno(21),
                Ok((inode, _)) => fs.write(inode, *offset, contents).map(|_| Answer::Done).unwrap_or_else(errno),
                Err(error) => errno(error),
            },
            Operation::Read { offset, count, .. } => match fs.lookup(parent, leaf) {
                Ok((inode, _)) => {
                    let mut buffer = vec![0u8; *count as usize];
                    fs.read_into(inode, *offset, &mut buffer)
                        .map(|read| Answer::Data(buffer[..read].to_vec()))
                        .unwrap_or_else(errno)
                }
                Err(error) => errno(error),
            },
            Operation::Truncate { size, .. } => match fs.lookup(parent, leaf) {
                Ok((inode, _)) => fs.truncate(inode, *size).map(|_| Answer::Done).unwrap_or_else(errno),
                Err(error) => errno(error),
            },
            Operation::Rename { from, to } => {
                let (from_parent, to_parent) = (&from[..from.len() - 1], &to[..to.len() - 1]);
                let (Some(source), Some(target)) = (self.resolve(from_parent), self.resolve(to_parent)) else {
                    return Answer::Unresolved;
                };
                let fs = &mut self.fs;
                fs.rename(source, from[from.len() - 1], target, to[to.len() - 1])
                    .map(|_| Answer::Done)
                    .unwrap_or_else(errno)
            }
            Operation::Unlink { .. } => fs.remove(parent, leaf, false).map(|_| Answer::Done).unwrap_or_else(errno),
            Operation::Rmdir { .. } => fs.remove(parent, leaf, true).map(|_| Answer::Done).unwrap_or_else(errno),
            Operation::Mkdir { .. } => fs
                .create(parent, leaf, FileKind::Directory, 0o755, 1000, 100, None)
                .map(|_| Answer::Done)
                .unwrap_or_else(errno),
            Operation::Readdir { .. } => match fs.lookup(parent, leaf) {
                Ok((inode, FileKind::Directory)) => {
                    let entries = fs.readdir(inode, None, 1000).expect("readdir");
                    Answer::Names(entries.into_iter().map(|entry| entry.name).collect())
                }
                Ok(_) => Answer::Errno(20), // a file cannot be listed: ENOTDIR
                Err(error) => errno(error),
            },
            Operation::Getattr { .. } => match fs.lookup(parent, leaf) {
                Ok((inode, _)) => {
                    let record = fs.getattr(inode).expect("getattr");
                    Answer::Stat { directory: record.kind == FileKind::Directory, size: record.size }
                }
                Err(error) => errno(error),
            },
        }
    }
}

/// The operations through 9P: fid 1 is the root, fids 10 and 11 are scratch.
fn through_9p(client: &mut Client, operation: &Operation) -> Answer {
    let errno = |errno: fsoc_9p::Errno| Answer::Errno(errno.0);
    // Walks `path` (directories only) to `fid`; false (and no fid) if it does not resolve.
    let walk_directory = |client: &mut Client, path: &[&[u8]], fid: u32| -> bool {
        match client.walk(ROOT, fid, path) {
            Ok(qids) if qids.len() == path.len() => {
                if qids.last().is_some_and(|qid| qid.qid_type != fsoc_9p::QidType::DIRECTORY) {
                    client.clunk(fid).expect("clunk");
                    return false;
                }
                true
            }
            _ => false,
        }
    };
    // Walks a leaf from the directory fid 10 to fid 11 and runs `body` on it.
    let on_leaf = |client: &mut Client, leaf: &[u8], body: &mut dyn FnMut(&mut Client) -> Answer| -> Answer {
        match client.walk(10, 11, &[leaf]) {
            Ok(_) => {
                let answer = body(client);
                client.clunk(11).expect("clunk");
                answer
            }
            Err(error) => errno(error),
        }
    };
    if let Operation::Rename { from, to } = operation {
        let resolved = walk_directory(client, &from[..from.len() - 1], 10);
        if !resolved {
            return Answer::Unresolved;
        }
        if !walk_directory(client, &to[..to.len() - 1], 11) {
            client.clunk(10).expect("clunk");
            return Answer::Unresolved;
        }
        let answer = client.renameat(10, from[from.len() - 1], 11, to[to.len() - 1]).map(|_| Answer::Done);
        client.clunk(10).expect("clunk");
        client.clunk(11).expect("clunk");
        return answer.unwrap_or_else(errno);
    }
    let (Operation::Create { path, .. }
    | Operation::Write { path, .. }
    | Operation::Read { path, .. }
    | Operation::Truncate { path, .. }
    | Operation::Unlink { path }
    | Operation::Mkdir { path }
    | Operation::Rmdir { path }
    | Operation::Readdir { path }
    | Operation::Getattr { path }) = operation
    else {
        unreachable!()
    };
    let (parent, leaf) = (&path[..path.len() - 1], path[path.len() - 1]);
    if !walk_directory(client, parent, 10) {
        return Answer::Unresolved;
    }
    let chunk = (client.msize - 24) as usize;
    let answer = match operation {
        Operation::Create { contents, .. } => {
            client.walk(10, 11, &[]).expect("clone");
            match client.lcreate(11, leaf, open_flags::WRITE_ONLY | open_flags::CREATE | open_flags::EXCLUSIVE, 0o644) {
                Ok(_) => {
                    for (index, piece) in contents.chunks(chunk).enumerate() {
                        client.write(11, (index * chunk) as u64, piece).expect("write");
                    }
                    client.clunk(11).expect("clunk");
                    Answer::Done
                }
                Err(error) => {
                    client.clunk(11).expect("clunk");
                    errno(error)
                }
            }
        }
        Operation::Write { offset, contents, .. } => on_leaf(client, leaf, &mut |client| {
            if let Err(error) = client.lopen(11, open_flags::WRITE_ONLY) {
                return errno(error);
            }
            for (index, piece) in contents.chunks(chunk).enumerate() {
                if let Err(error) = client.write(11, offset + (index * chunk) as u64, piece) {
                    return errno(error);
                }
            }
            Answer::Done
        }),
        Operation::Read { offset, count, .. } => on_leaf(client, leaf, &mut |client| {
            if let Err(error) = client.lopen(11, open_flags::READ_ONLY) {
                return errno(error);
            }
            let mut data = Vec::new();
            while data.len() < *count as usize {
                match client.read(11, offset + data.len() as u64, *count - data.len() as u32) {
                    Ok(piece) if piece.is_empty() => break,
                    Ok(piece) => data.extend(piece),
                    Err(error) => return errno(error),
                }
            }
            Answer::Data(data)
        }),
        Operation::Truncate { size, .. } => on_leaf(client, leaf, &mut |client| {
            let change = SetAttributes { valid_mask: setattr::SIZE, size_bytes: *size, ..SetAttributes::default() };
            client.setattr(11, change).map(|_| Answer::Done).unwrap_or_else(errno)
        }),
        Operation::Unlink { .. } => client.unlinkat(10, leaf, 0).map(|_| Answer::Done).unwrap_or_else(errno),
        Operation::Rmdir { .. } => {
            client.unlinkat(10, leaf, UNLINKAT_REMOVE_DIRECTORY).map(|_| Answer::Done).unwrap_or_else(errno)
        }
        Operation::Mkdir { .. } => client.mkdir(10, leaf, 0o755).map(|_| Answer::Done).unwrap_or_else(errno),
        Operation::Readdir { .. } => on_leaf(client, leaf, &mut |client| {
            let attributes = client.getattr(11).expect("getattr");
            if attributes.qid.qid_type != fsoc_9p::QidType::DIRECTORY {
                return Answer::Errno(20);
            }
            client.lopen(11, open_flags::READ_ONLY).expect("lopen directory");
            let names = client.list(11, 300).expect("list");
            Answer::Names(names.into_iter().filter(|name| name != b"." && name != b"..").collect())
        }),
        Operation::Getattr { .. } => on_leaf(client, leaf, &mut |client| {
            let attributes = client.getattr(11).expect("getattr");
            let directory = attributes.qid.qid_type == fsoc_9p::QidType::DIRECTORY;
            Answer::Stat { directory, size: if directory { 0 } else { attributes.size_bytes } }
        }),
        Operation::Rename { .. } => unreachable!(),
    };
    client.clunk(10).expect("clunk");
    answer
}

/// Every path and file's contents, depth first, through 9P.
fn tree_9p(client: &mut Client, path: &mut Vec<Vec<u8>>, fid: u32, into: &mut Tree) {
    let names: Vec<Vec<u8>> = {
        client.walk(fid, 20 + path.len() as u32 * 2, &[]).expect("clone");
        let listing_fid = 20 + path.len() as u32 * 2;
        client.lopen(listing_fid, open_flags::READ_ONLY).expect("lopen");
        let names = client.list(listing_fid, 4000).expect("list");
        client.clunk(listing_fid).expect("clunk");
        names.into_iter().filter(|name| name != b"." && name != b"..").collect()
    };
    for name in names {
        path.push(name.clone());
        let child = 21 + path.len() as u32 * 2;
        client.walk(fid, child, &[&name]).expect("walk");
        if client.getattr(child).expect("getattr").qid.qid_type == fsoc_9p::QidType::DIRECTORY {
            into.push((path.clone(), None));
            tree_9p(client, path, child, into);
        } else {
            let mut contents = Vec::new();
            client.lopen(child, open_flags::READ_ONLY).expect("lopen");
            loop {
                let piece = client.read(child, contents.len() as u64, 60_000).expect("read");
                if piece.is_empty() {
                    break;
                }
                contents.extend(piece);
            }
            into.push((path.clone(), Some(contents)));
        }
        client.clunk(child).expect("clunk");
        path.pop();
    }
}

fn tree_direct(fs: &FileSystem<TestFlash>, inode: u64, path: &mut Vec<Vec<u8>>, into: &mut Tree) {
    for entry in fs.readdir(inode, None, 10_000).expect("readdir") {
        path.push(entry.name.clone());
        if entry.kind == FileKind::Directory {
            into.push((path.clone(), None));
            tree_direct(fs, entry.inode, path, into);
        } else {
            let size = fs.getattr(entry.inode).expect("getattr").size;
            into.push((path.clone(), Some(fs.read(entry.inode, 0, size as usize).expect("read"))));
        }
        path.pop();
    }
}

fn run_seed(seed: u64) {
    let server = TestServer::start(ServeConfig { commit_interval: None, ..ServeConfig::default() });
    let mut client = server.connect();
    client.attach(ROOT, b"user", b"").expect("attach");
    let mut direct = Direct { fs: fresh_volume() };
    let mut rng = SeededRng::new(seed);
    let mut succeeded = 0;
    for index in 0..OPERATIONS_PER_SEED {
        let operation = operation(&mut rng);
        let expected = direct.apply(&operation);
        let answered = through_9p(&mut client, &operation);
        assert_eq!(answered, expected, "seed {seed:#x}, operation {index}: {operation:?}");
        succeeded += usize::from(!matches!(answered, Answer::Errno(_) | Answer::Unresolved));
    }
    eprintln!("seed {seed:#x}: {succeeded} of {OPERATIONS_PER_SEED} operations succeeded");
    // The workload must do things, not mostly fail: 30 % at least succeed.
    assert!(succeeded * 10 >= OPERATIONS_PER_SEED * 3, "seed {seed:#x}: only {succeeded} operations succeeded");
    let (mut served, mut expected) = (Vec::new(), Vec::new());
    tree_9p(&mut client, &mut Vec::new(), ROOT, &mut served);
    tree_direct(&direct.fs, 1, &mut Vec::new(), &mut expected);
    assert_eq!(served, expected, "seed {seed:#x}: the final trees differ");
    drop(client);
    let mut fs = server.stop().fs;
    assert!(fs.fsck(true).expect("fsck").is_clean(), "seed {seed:#x}: fsck");
}

#[test]
fn random_operations_answer_as_the_file_system_does() {
    for seed in [1, 2, 3, 0x9e37_79b9_7f4a_7c15] {
        run_seed(seed);
    }
}
