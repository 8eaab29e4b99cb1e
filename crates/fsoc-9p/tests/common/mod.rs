//! Sample messages for the round-trip, property and mutation tests: `sample_request(variant,
//! rng, pool)` builds request variant `variant` (0..REQUEST_VARIANT_COUNT) with integers from
//! `rng` and names and data sliced out of `pool`, so the messages borrow like decoded ones.
//! Integers are often 0 or all ones, the edges a codec gets wrong.
#![allow(dead_code)] // each test file uses a different part

use fsoc_9p::constants::{NAME_LENGTH_MAX_BYTES, SYMLINK_TARGET_LENGTH_MAX_BYTES};
use fsoc_9p::{
    Attributes, DirectoryEntries, DirectoryEntry, DirectoryEntryWriter, Errno, Fid, FsStats, LockQuery, LockRequest,
    LockStatus, LockType, Qid, QidType, Reply, Request, SetAttributes, Tag, Timestamp, WalkNames, WalkQids,
};
use fsoc_media::rng::SeededRng;

pub const REQUEST_VARIANT_COUNT: usize = 28;
pub const REPLY_VARIANT_COUNT: usize = 29;
/// Room for any sample message: data and names come from a pool of at most this many bytes,
/// plus headers and up to 16 walk names.
pub const SAMPLE_BUFFER_BYTES: usize = 16 * 1024;
/// The largest pool the generators are given.
pub const POOL_BYTES_MAX: usize = 4096;

pub fn u64_edge(rng: &mut SeededRng) -> u64 {
    match rng.below(4) {
        0 => 0,
        1 => u64::MAX,
        _ => rng.next_u64(),
    }
}
pub fn u32_edge(rng: &mut SeededRng) -> u32 {
    (u64_edge(rng) >> 32) as u32
}
pub fn u16_edge(rng: &mut SeededRng) -> u16 {
    (u64_edge(rng) >> 48) as u16
}
pub fn u8_edge(rng: &mut SeededRng) -> u8 {
    (u64_edge(rng) >> 56) as u8
}

/// A slice of `pool` of at most `max_bytes`, at a random place.
pub fn slice<'a>(rng: &mut SeededRng, pool: &'a [u8], max_bytes: usize) -> &'a [u8] {
    let length = rng.below(max_bytes.min(pool.len()) as u64 + 1) as usize;
    let start = rng.below((pool.len() - length) as u64 + 1) as usize;
    &pool[start..start + length]
}
pub fn name<'a>(rng: &mut SeededRng, pool: &'a [u8]) -> &'a [u8] {
    // Names of exactly the limit are common enough to test the boundary.
    let max = if rng.below(8) == 0 { NAME_LENGTH_MAX_BYTES } else { 32 };
    slice(rng, pool, max)
}
pub fn target<'a>(rng: &mut SeededRng, pool: &'a [u8]) -> &'a [u8] {
    slice(rng, pool, SYMLINK_TARGET_LENGTH_MAX_BYTES)
}
pub fn string<'a>(rng: &mut SeededRng, pool: &'a [u8]) -> &'a [u8] {
    slice(rng, pool, 300)
}
pub fn fid(rng: &mut SeededRng) -> Fid {
    Fid(u32_edge(rng))
}
pub fn qid(rng: &mut SeededRng) -> Qid {
    Qid { qid_type: QidType(u8_edge(rng)), version: u32_edge(rng), path: u64_edge(rng) }
}
pub fn timestamp(rng: &mut SeededRng) -> Timestamp {
    Timestamp { seconds: u64_edge(rng), nanoseconds: u64_edge(rng) }
}
pub fn lock_query<'a>(rng: &mut SeededRng, pool: &'a [u8]) -> LockQuery<'a> {
    LockQuery {
        lock_type: LockType(u8_edge(rng)),
        start: u64_edge(rng),
        length: u64_edge(rng),
        proc_id: u32_edge(rng),
        client_id: string(rng, pool),
    }
}

pub fn sample_request<'a>(variant: usize, rng: &mut SeededRng, pool: &'a [u8]) -> Request<'a> {
    match variant {
        0 => Request::Version { msize: u32_edge(rng), version: string(rng, pool) },
        1 => {
            Request::Auth { afid: fid(rng), uname: string(rng, pool), aname: string(rng, pool), n_uname: u32_edge(rng) }
        }
        2 => Request::Attach {
            fid: fid(rng),
            afid: fid(rng),
            uname: string(rng, pool),
            aname: string(rng, pool),
            n_uname: u32_edge(rng),
        },
        3 => Request::Flush { old_tag: Tag(u16_edge(rng)) },
        4 => {
            let mut names = WalkNames::new();
            for _ in 0..rng.below(17) {
                names.push(name(rng, pool)).expect("at most 16");
            }
            Request::Walk { fid: fid(rng), new_fid: fid(rng), names }
        }
        5 => Request::Lopen { fid: fid(rng), flags: u32_edge(rng) },
        6 => Request::Lcreate {
            fid: fid(rng),
            name: name(rng, pool),
            flags: u32_edge(rng),
            mode: u32_edge(rng),
            gid: u32_edge(rng),
        },
        7 => Request::Read { fid: fid(rng), offset: u64_edge(rng), count: u32_edge(rng) },
        8 => Request::Write { fid: fid(rng), offset: u64_edge(rng), data: slice(rng, pool, pool.len()) },
        9 => Request::Clunk { fid: fid(rng) },
        10 => Request::Remove { fid: fid(rng) },
        11 => Request::Getattr { fid: fid(rng), request_mask: u64_edge(rng) },
        12 => Request::Setattr {
            fid: fid(rng),
            attributes: SetAttributes {
                valid_mask: u32_edge(rng),
                mode: u32_edge(rng),
                uid: u32_edge(rng),
                gid: u32_edge(rng),
                size_bytes: u64_edge(rng),
                access_time: timestamp(rng),
                modify_time: timestamp(rng),
            },
        },
        13 => Request::Readdir { fid: fid(rng), offset: u64_edge(rng), count: u32_edge(rng) },
        14 => {
            Request::Mkdir { directory_fid: fid(rng), name: name(rng, pool), mode: u32_edge(rng), gid: u32_edge(rng) }
        }
        15 => Request::Symlink {
            directory_fid: fid(rng),
            name: name(rng, pool),
            target: target(rng, pool),
            gid: u32_edge(rng),
        },
        16 => Request::Link { directory_fid: fid(rng), fid: fid(rng), name: name(rng, pool) },
        17 => Request::Readlink { fid: fid(rng) },
        18 => Request::Rename { fid: fid(rng), directory_fid: fid(rng), name: name(rng, pool) },
        19 => Request::Renameat {
            old_directory_fid: fid(rng),
            old_name: name(rng, pool),
            new_directory_fid: fid(rng),
            new_name: name(rng, pool),
        },
        20 => Request::Unlinkat { directory_fid: fid(rng), name: name(rng, pool), flags: u32_edge(rng) },
        21 => Request::Fsync { fid: fid(rng), datasync: u32_edge(rng) },
        22 => Request::Statfs { fid: fid(rng) },
        23 => Request::Xattrwalk { fid: fid(rng), new_fid: fid(rng), name: name(rng, pool) },
        24 => Request::Xattrcreate {
            fid: fid(rng),
            name: name(rng, pool),
            attribute_size_bytes: u64_edge(rng),
            flags: u32_edge(rng),
        },
        25 => Request::Lock {
            fid: fid(rng),
            lock: LockRequest {
                lock_type: LockType(u8_edge(rng)),
                flags: u32_edge(rng),
                start: u64_edge(rng),
                length: u64_edge(rng),
                proc_id: u32_edge(rng),
                client_id: string(rng, pool),
            },
        },
        26 => Request::Getlock { fid: fid(rng), query: lock_query(rng, pool) },
        27 => Request::Mknod {
            directory_fid: fid(rng),
            name: name(rng, pool),
            mode: u32_edge(rng),
            major: u32_edge(rng),
            minor: u32_edge(rng),
            gid: u32_edge(rng),
        },
        _ => panic!("request variant {variant} out of range"),
    }
}

/// Reply variant `variant`; an Rreaddir's entries are written into `scratch` (at least
/// SAMPLE_BUFFER_BYTES long), which the reply then borrows.
pub fn sample_reply<'a>(variant: usize, rng: &mut SeededRng, pool: &'a [u8], scratch: &'a mut [u8]) -> Reply<'a> {
    match variant {
        0 => Reply::Version { msize: u32_edge(rng), version: string(rng, pool) },
        1 => Reply::Auth { aqid: qid(rng) },
        2 => Reply::Attach { qid: qid(rng) },
        3 => Reply::Lerror { errno: Errno(u32_edge(rng)) },
        4 => Reply::Flush,
        5 => {
            let mut qids = WalkQids::new();
            for _ in 0..rng.below(17) {
                qids.push(qid(rng)).expect("at most 16");
            }
            Reply::Walk { qids }
        }
        6 => Reply::Lopen { qid: qid(rng), iounit: u32_edge(rng) },
        7 => Reply::Lcreate { qid: qid(rng), iounit: u32_edge(rng) },
        8 => Reply::Read { data: slice(rng, pool, pool.len()) },
        9 => Reply::Write { count: u32_edge(rng) },
        10 => Reply::Clunk,
        11 => Reply::Remove,
        12 => Reply::Getattr {
            attributes: Attributes {
                valid_mask: u64_edge(rng),
                qid: qid(rng),
                mode: u32_edge(rng),
                uid: u32_edge(rng),
                gid: u32_edge(rng),
                link_count: u64_edge(rng),
                rdev: u64_edge(rng),
                size_bytes: u64_edge(rng),
                block_size_bytes: u64_edge(rng),
                block_count: u64_edge(rng),
                access_time: timestamp(rng),
                modify_time: timestamp(rng),
                change_time: timestamp(rng),
                birth_time: timestamp(rng),
                generation: u64_edge(rng),
                data_version: u64_edge(rng),
            },
        },
        13 => Reply::Setattr,
        14 => Reply::Readdir { entries: sample_entries(rng, pool, scratch) },
        15 => Reply::Mkdir { qid: qid(rng) },
        16 => Reply::Symlink { qid: qid(rng) },
        17 => Reply::Link,
        18 => Reply::Readlink { target: target(rng, pool) },
        19 => Reply::Rename,
        20 => Reply::Renameat,
        21 => Reply::Unlinkat,
        22 => Reply::Fsync,
        23 => Reply::Statfs {
            stats: FsStats {
                fs_type: u32_edge(rng),
                block_size_bytes: u32_edge(rng),
                block_count: u64_edge(rng),
                free_block_count: u64_edge(rng),
                available_block_count: u64_edge(rng),
                file_count: u64_edge(rng),
                free_file_count: u64_edge(rng),
                fs_id: u64_edge(rng),
                name_length_max: u32_edge(rng),
            },
        },
        24 => Reply::Xattrwalk { size_bytes: u64_edge(rng) },
        25 => Reply::Xattrcreate,
        26 => Reply::Lock { status: LockStatus(u8_edge(rng)) },
        27 => Reply::Getlock { query: lock_query(rng, pool) },
        28 => Reply::Mknod { qid: qid(rng) },
        _ => panic!("reply variant {variant} out of range"),
    }
}

/// Up to 20 entries, written with the crate's own writer.
pub fn sample_entries<'a>(rng: &mut SeededRng, pool: &'a [u8], scratch: &'a mut [u8]) -> DirectoryEntries<'a> {
    let entry_count = rng.below(21);
    let data_size_bytes = {
        let mut writer = DirectoryEntryWriter::new(&mut *scratch, u32::MAX).expect("scratch holds a header");
        for _ in 0..entry_count {
            let entry = DirectoryEntry {
                qid: qid(rng),
                offset: u64_edge(rng),
                dirent_type: u8_edge(rng),
                name: name(rng, pool),
            };
            assert!(writer.push(&entry).expect("name within the limit"), "scratch too small for sample entries");
        }
        writer.data_size_bytes()
    };
    let scratch: &'a [u8] = scratch;
    DirectoryEntries::parse(&scratch[11..11 + data_size_bytes]).expect("the writer's entries parse")
}
