//! The limits and errors of docs/PROTOCOL.md section 3, each at its boundary: framing, exact
//! length, unknown types, walk element counts, name and target lengths, and the in-place
//! writers (Rread and Twrite headers, Rreaddir up to the client's count).
use fsoc_9p::constants::{
    message_type, NAME_LENGTH_MAX_BYTES, READ_HEADER_SIZE_BYTES, SYMLINK_TARGET_LENGTH_MAX_BYTES,
    WALK_ELEMENT_COUNT_MAX, WRITE_HEADER_SIZE_BYTES,
};
use fsoc_9p::{
    decode_header, decode_reply, decode_request, encode, encode_read_header, encode_write_header, frame_size,
    DecodeError, DirectoryEntries, DirectoryEntry, DirectoryEntryWriter, EncodeError, Fid, Qid, Reply, Request, Tag,
    TooManyWalkElements, WalkNames,
};

/// A message built by hand: header with the right size, then `body`.
fn message(message_type: u8, tag: u16, body: &[u8]) -> Vec<u8> {
    let size = (7 + body.len()) as u32;
    let mut bytes = size.to_le_bytes().to_vec();
    bytes.push(message_type);
    bytes.extend_from_slice(&tag.to_le_bytes());
    bytes.extend_from_slice(body);
    bytes
}

fn string(bytes: &[u8]) -> Vec<u8> {
    let mut out = (bytes.len() as u16).to_le_bytes().to_vec();
    out.extend_from_slice(bytes);
    out
}

fn encoded(request: &Request<'_>) -> Vec<u8> {
    let mut buffer = vec![0u8; 70_000];
    let length = encode(Tag(3), request, &mut buffer).unwrap();
    buffer.truncate(length);
    buffer
}

#[test]
fn framing_waits_for_the_size_and_bounds_it() {
    assert_eq!(frame_size(&[], 8192), Ok(None));
    assert_eq!(frame_size(&[7, 0, 0], 8192), Ok(None));
    for size in 0..7u32 {
        assert_eq!(frame_size(&size.to_le_bytes(), 8192), Err(DecodeError::SizeBelowHeader { size_bytes: size }));
    }
    assert_eq!(frame_size(&7u32.to_le_bytes(), 8192), Ok(Some(7)));
    assert_eq!(frame_size(&[0x00, 0x20, 0, 0, 0x6e], 8192), Ok(Some(8192)));
    assert_eq!(
        frame_size(&8193u32.to_le_bytes(), 8192),
        Err(DecodeError::SizeAboveMsize { size_bytes: 8193, msize_bytes: 8192 })
    );
    assert_eq!(
        frame_size(&u32::MAX.to_le_bytes(), 8192),
        Err(DecodeError::SizeAboveMsize { size_bytes: u32::MAX, msize_bytes: 8192 })
    );
}

#[test]
fn a_message_decodes_only_at_exactly_its_size() {
    let bytes = encoded(&Request::Clunk { fid: Fid(9) });
    assert_eq!(decode_request(&bytes), Ok((Tag(3), Request::Clunk { fid: Fid(9) })));
    assert_eq!(
        decode_request(&bytes[..10]),
        Err(DecodeError::Truncated { structure: "Tclunk", needed_bytes: 11, actual_bytes: 10 })
    );
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(decode_request(&longer), Err(DecodeError::TrailingBytes { structure: "Tclunk", extra_bytes: 1 }));
    // The size field says 12 and 12 bytes arrive, but Tclunk ends after 11.
    let body_too_long = message(message_type::TCLUNK, 3, &[9, 0, 0, 0, 0]);
    assert_eq!(decode_request(&body_too_long), Err(DecodeError::TrailingBytes { structure: "Tclunk", extra_bytes: 1 }));
    let body_too_short = message(message_type::TCLUNK, 3, &[9, 0, 0]);
    assert_eq!(
        decode_request(&body_too_short),
        Err(DecodeError::Truncated { structure: "Tclunk", needed_bytes: 4, actual_bytes: 3 })
    );
    for length in 0..7 {
        assert!(decode_request(&bytes[..length]).is_err());
        assert!(decode_header(&bytes[..length]).is_err());
    }
}

#[test]
fn unknown_and_wrong_direction_types_are_refused_with_a_readable_tag() {
    // Tlerror (6), Terror/Rerror, Topen/Tcreate, Tstat/Twstat and unassigned codes.
    for code in [0u8, 6, 10, 11, 28, 29, 106, 107, 112, 113, 114, 115, 124, 125, 126, 127, 255] {
        let bytes = message(code, 42, &[]);
        assert_eq!(decode_request(&bytes), Err(DecodeError::UnknownType { message_type: code, direction: "request" }));
        assert_eq!(decode_reply(&bytes), Err(DecodeError::UnknownType { message_type: code, direction: "reply" }));
        // The server still learns the tag to answer with Rlerror.
        assert_eq!(decode_header(&bytes).map(|header| header.tag), Ok(Tag(42)));
    }
    let rclunk = message(message_type::RCLUNK, 1, &[]);
    assert!(matches!(decode_request(&rclunk), Err(DecodeError::UnknownType { .. })));
    let tclunk = message(message_type::TCLUNK, 1, &[1, 0, 0, 0]);
    assert!(matches!(decode_reply(&tclunk), Err(DecodeError::UnknownType { .. })));
}

#[test]
fn walks_hold_at_most_sixteen_elements() {
    let names: Vec<&[u8]> = vec![b"a"; WALK_ELEMENT_COUNT_MAX + 1];
    assert_eq!(WalkNames::from_slice(&names[..16]).map(|list| list.len()), Ok(16));
    assert_eq!(WalkNames::from_slice(&names), Err(TooManyWalkElements { count: 17 }));

    let mut body = vec![1, 0, 0, 0, 2, 0, 0, 0];
    body.extend_from_slice(&17u16.to_le_bytes());
    for _ in 0..17 {
        body.extend_from_slice(&string(b"a"));
    }
    assert_eq!(
        decode_request(&message(message_type::TWALK, 1, &body)),
        Err(DecodeError::TooManyWalkElements { structure: "Twalk", count: 17 })
    );
    // A huge count is refused before anything is read for it.
    let huge = message(message_type::RWALK, 1, &u16::MAX.to_le_bytes());
    assert_eq!(decode_reply(&huge), Err(DecodeError::TooManyWalkElements { structure: "Rwalk", count: u16::MAX }));
}

#[test]
fn names_are_bytes_of_at_most_255() {
    let longest = vec![b'n'; NAME_LENGTH_MAX_BYTES];
    let request = Request::Mkdir { directory_fid: Fid(1), name: &longest, mode: 0o755, gid: 0 };
    assert_eq!(decode_request(&encoded(&request)), Ok((Tag(3), request)));

    let too_long = vec![b'n'; NAME_LENGTH_MAX_BYTES + 1];
    let request = Request::Mkdir { directory_fid: Fid(1), name: &too_long, mode: 0o755, gid: 0 };
    let mut buffer = [0u8; 512];
    assert_eq!(
        encode(Tag(3), &request, &mut buffer),
        Err(EncodeError::StringTooLong { structure: "Tmkdir", field: "name", length_bytes: 256, limit_bytes: 255 })
    );
    let mut body = vec![1, 0, 0, 0];
    body.extend_from_slice(&string(&too_long));
    body.extend_from_slice(&[0; 8]);
    assert_eq!(
        decode_request(&message(message_type::TMKDIR, 3, &body)),
        Err(DecodeError::StringTooLong { structure: "Tmkdir", field: "name", length_bytes: 256, limit_bytes: 255 })
    );

    // Not UTF-8, and containing bytes a server will refuse: still a name to the codec.
    let odd: &[u8] = &[0xff, 0xfe, b'/', 0, b'.'];
    let request = Request::Unlinkat { directory_fid: Fid(1), name: odd, flags: 0x200 };
    assert_eq!(decode_request(&encoded(&request)), Ok((Tag(3), request)));
}

#[test]
fn symlink_targets_are_at_most_4095_bytes() {
    let longest = vec![b't'; SYMLINK_TARGET_LENGTH_MAX_BYTES];
    let request = Request::Symlink { directory_fid: Fid(1), name: b"link", target: &longest, gid: 0 };
    assert_eq!(decode_request(&encoded(&request)), Ok((Tag(3), request)));

    let too_long = vec![b't'; SYMLINK_TARGET_LENGTH_MAX_BYTES + 1];
    let mut buffer = vec![0u8; 8192];
    assert_eq!(
        encode(Tag(1), &Reply::Readlink { target: &too_long }, &mut buffer),
        Err(EncodeError::StringTooLong {
            structure: "Rreadlink",
            field: "target",
            length_bytes: 4096,
            limit_bytes: 4095
        })
    );
    assert!(matches!(
        decode_reply(&message(message_type::RREADLINK, 1, &string(&too_long))),
        Err(DecodeError::StringTooLong { length_bytes: 4096, .. })
    ));
    // Other strings go to the 2-byte length's limit.
    let long_aname = vec![b'a'; 60_000];
    let request =
        Request::Attach { fid: Fid(0), afid: Fid::NONE, uname: b"root", aname: &long_aname, n_uname: u32::MAX };
    assert_eq!(decode_request(&encoded(&request)), Ok((Tag(3), request)));
}

#[test]
fn read_and_write_headers_go_in_front_of_data_in_place() {
    let data = b"some file data";
    let mut whole = [0u8; 64];
    let whole_length = encode(Tag(5), &Reply::Read { data }, &mut whole).unwrap();
    let mut in_place = [0u8; 64];
    in_place[READ_HEADER_SIZE_BYTES..][..data.len()].copy_from_slice(data);
    assert_eq!(encode_read_header(Tag(5), data.len() as u32, &mut in_place), Ok(whole_length));
    assert_eq!(in_place[..whole_length], whole[..whole_length]);
    assert_eq!(
        encode_read_header(Tag(5), 100, &mut in_place),
        Err(EncodeError::BufferTooSmall { needed_bytes: 111, capacity_bytes: 64 })
    );

    let request = Request::Write { fid: Fid(4), offset: 1 << 40, data };
    let whole_length = encode(Tag(6), &request, &mut whole).unwrap();
    let mut in_place = [0u8; 64];
    in_place[WRITE_HEADER_SIZE_BYTES..][..data.len()].copy_from_slice(data);
    assert_eq!(encode_write_header(Tag(6), Fid(4), 1 << 40, data.len() as u32, &mut in_place), Ok(whole_length));
    assert_eq!(in_place[..whole_length], whole[..whole_length]);
    assert_eq!(decode_request(&in_place[..whole_length]), Ok((Tag(6), request)));
}

fn entry(name: &[u8]) -> DirectoryEntry<'_> {
    DirectoryEntry { qid: Qid::default(), offset: 7, dirent_type: 8, name }
}

#[test]
fn readdir_fills_up_to_the_clients_count_with_whole_entries() {
    // Each entry of a 6-byte name takes 30 bytes; a count of 100 holds three.
    let mut buffer = [0u8; 4096];
    let mut writer = DirectoryEntryWriter::new(&mut buffer, 100).unwrap();
    let mut added = 0;
    while writer.push(&entry(b"file01")).unwrap() {
        added += 1;
        assert!(added <= 3, "wrote past the client's count");
    }
    assert_eq!(added, 3);
    assert_eq!(writer.data_size_bytes(), 90);
    let length = writer.finish(Tag(2));
    let (tag, reply) = decode_reply(&buffer[..length]).unwrap();
    assert_eq!(tag, Tag(2));
    let Reply::Readdir { entries } = reply else { panic!("not an Rreaddir: {reply:?}") };
    assert_eq!(entries.iter().collect::<Vec<_>>(), [entry(b"file01"); 3]);

    // An entry that ends exactly at the count fits: 90 + 24 = 114.
    let mut writer = DirectoryEntryWriter::new(&mut buffer, 114).unwrap();
    for _ in 0..3 {
        assert!(writer.push(&entry(b"file01")).unwrap());
    }
    assert!(!writer.push(&entry(b"f")).unwrap(), "25 bytes do not fit in 24");
    assert!(writer.push(&entry(b"")).unwrap(), "24 bytes fit in 24");
    assert_eq!(writer.data_size_bytes(), 114);
    assert!(!writer.push(&entry(b"")).unwrap());
}

#[test]
fn readdir_is_bounded_by_the_buffer_too_and_ends_empty() {
    // A buffer of 11 + 40 bytes takes one 30-byte entry whatever the count.
    let mut buffer = [0u8; 51];
    let mut writer = DirectoryEntryWriter::new(&mut buffer, u32::MAX).unwrap();
    assert!(writer.push(&entry(b"file01")).unwrap());
    assert!(!writer.push(&entry(b"file02")).unwrap());
    assert_eq!(writer.finish(Tag(1)), 41);

    // Count 0: the end-of-directory reply.
    let mut buffer = [0u8; 64];
    let mut writer = DirectoryEntryWriter::new(&mut buffer, 0).unwrap();
    assert!(!writer.push(&entry(b"x")).unwrap());
    let length = writer.finish(Tag(1));
    assert_eq!(decode_reply(&buffer[..length]), Ok((Tag(1), Reply::Readdir { entries: DirectoryEntries::default() })));

    let mut tiny = [0u8; 10];
    assert_eq!(
        DirectoryEntryWriter::new(&mut tiny, 100).err(),
        Some(EncodeError::BufferTooSmall { needed_bytes: 11, capacity_bytes: 10 })
    );
    let long_name = [b'x'; 256];
    let mut writer = DirectoryEntryWriter::new(&mut buffer, 4096).unwrap();
    assert!(matches!(writer.push(&entry(&long_name)), Err(EncodeError::StringTooLong { .. })));
}

#[test]
fn readdir_data_must_be_whole_entries() {
    let mut buffer = [0u8; 128];
    let mut writer = DirectoryEntryWriter::new(&mut buffer, 4096).unwrap();
    assert!(writer.push(&entry(b"abc")).unwrap());
    let data = writer.entries().as_bytes().to_vec();
    assert_eq!(data.len(), 27);
    assert!(DirectoryEntries::parse(&data).is_ok());
    for cut in 1..data.len() {
        assert!(DirectoryEntries::parse(&data[..cut]).is_err(), "an entry cut at {cut} parsed");
        let mut body = (cut as u32).to_le_bytes().to_vec();
        body.extend_from_slice(&data[..cut]);
        assert!(decode_reply(&message(message_type::RREADDIR, 1, &body)).is_err());
    }
}
