//! Byte-exact vectors written by hand from the spec: docs/PROTOCOL.md's example hex dumps
//! decode to the values the document states, and those values encode to the same bytes, so
//! neither the document nor the codec can drift. Each example is also checked for being the
//! only decoding direction that accepts it.
use fsoc_9p::constants::{dirent_type, getattr, VERSION_9P2000_L};
use fsoc_9p::{
    decode_reply, decode_request, encode, encode_read_header, Attributes, DirectoryEntries, DirectoryEntry, Errno, Fid,
    Qid, QidType, Reply, Request, Tag, Timestamp, WalkNames,
};

const PROTOCOL_MD: &str = include_str!("../../../docs/PROTOCOL.md");

/// The bytes of the code block that starts with `example: NAME`; text after `|` is comment.
fn example(name: &str) -> Vec<u8> {
    let marker = format!("example: {name}\n");
    let start = PROTOCOL_MD.find(&marker).unwrap_or_else(|| panic!("example {name} missing from PROTOCOL.md"));
    let block = &PROTOCOL_MD[start + marker.len()..];
    let block = &block[..block.find("```").expect("closing fence")];
    block
        .lines()
        .flat_map(|line| line.split('|').next().unwrap_or("").split_whitespace())
        .map(|pair| u8::from_str_radix(pair, 16).unwrap_or_else(|_| panic!("{name}: bad hex byte {pair:?}")))
        .collect()
}

fn check_request(name: &str, tag: Tag, expected: Request<'_>) {
    let bytes = example(name);
    assert_eq!(decode_request(&bytes), Ok((tag, expected)), "{name} decodes");
    assert!(decode_reply(&bytes).is_err(), "{name} is not a reply");
    let mut buffer = vec![0u8; bytes.len()];
    assert_eq!(encode(tag, &expected, &mut buffer), Ok(bytes.len()), "{name} length");
    assert_eq!(buffer, bytes, "{name} encodes to the document's bytes");
}

fn check_reply(name: &str, tag: Tag, expected: Reply<'_>) {
    let bytes = example(name);
    assert_eq!(decode_reply(&bytes), Ok((tag, expected)), "{name} decodes");
    assert!(decode_request(&bytes).is_err(), "{name} is not a request");
    let mut buffer = vec![0u8; bytes.len()];
    assert_eq!(encode(tag, &expected, &mut buffer), Ok(bytes.len()), "{name} length");
    assert_eq!(buffer, bytes, "{name} encodes to the document's bytes");
}

#[test]
fn every_example_in_the_document_is_checked() {
    let names: Vec<&str> = PROTOCOL_MD.lines().filter_map(|line| line.strip_prefix("example: ")).collect();
    assert_eq!(
        names,
        ["tversion_8192", "twalk_two_names", "rgetattr_file", "rreaddir_two_entries", "rlerror_enoent", "rread_hello"]
    );
}

#[test]
fn tversion_8192() {
    check_request("tversion_8192", Tag::NONE, Request::Version { msize: 8192, version: VERSION_9P2000_L });
}

#[test]
fn twalk_two_names() {
    let names = WalkNames::from_slice(&[b"usr", b"bin"]).unwrap();
    check_request("twalk_two_names", Tag(1), Request::Walk { fid: Fid(1), new_fid: Fid(2), names });
}

#[test]
fn rgetattr_file() {
    let time = Timestamp { seconds: 1_700_000_000, nanoseconds: 0 };
    let attributes = Attributes {
        valid_mask: getattr::BASIC,
        qid: Qid { qid_type: QidType::FILE, version: 0, path: 0x2c1bd1 },
        mode: 0o100644,
        uid: 1000,
        gid: 1000,
        link_count: 1,
        rdev: 0,
        size_bytes: 6,
        block_size_bytes: 4096,
        block_count: 8,
        access_time: time,
        modify_time: Timestamp { seconds: 1_700_000_000, nanoseconds: 500_000_000 },
        change_time: time,
        birth_time: Timestamp::default(),
        generation: 0,
        data_version: 0,
    };
    check_reply("rgetattr_file", Tag(1), Reply::Getattr { attributes });
}

#[test]
fn rreaddir_two_entries() {
    let bytes = example("rreaddir_two_entries");
    let directory = |path| Qid { qid_type: QidType::DIRECTORY, version: 0, path };
    let expected = [
        DirectoryEntry { qid: directory(2), offset: 1, dirent_type: dirent_type::DIRECTORY, name: b"." },
        DirectoryEntry { qid: directory(1), offset: 2, dirent_type: dirent_type::DIRECTORY, name: b".." },
    ];
    let entries = DirectoryEntries::parse(&bytes[11..]).unwrap();
    assert_eq!(entries.iter().collect::<Vec<_>>(), expected);
    check_reply("rreaddir_two_entries", Tag(1), Reply::Readdir { entries });

    // The in-place writer builds the same bytes.
    let mut buffer = [0u8; 128];
    let mut writer = fsoc_9p::DirectoryEntryWriter::new(&mut buffer, 4096).unwrap();
    for entry in &expected {
        assert!(writer.push(entry).unwrap());
    }
    let length = writer.finish(Tag(1));
    assert_eq!(&buffer[..length], &bytes[..]);
}

#[test]
fn rlerror_enoent() {
    check_reply("rlerror_enoent", Tag(1), Reply::Lerror { errno: Errno::ENOENT });
}

#[test]
fn rread_hello() {
    let bytes = example("rread_hello");
    check_reply("rread_hello", Tag(1), Reply::Read { data: b"hello\n" });
    // The zero-copy path: data placed first, header written in front of it.
    let mut buffer = [0u8; 64];
    buffer[11..17].copy_from_slice(b"hello\n");
    assert_eq!(encode_read_header(Tag(1), 6, &mut buffer), Ok(17));
    assert_eq!(&buffer[..17], &bytes[..]);
}
