//! Targets for what arrives over a connection: 9P2000.L requests and replies and Rreaddir
//! data (fsoc-9p, docs/PROTOCOL.md), and the raw page protocol of `fsoc serve --raw`
//! (fsoc-serve's `raw_protocol`, docs/PROTOCOL.md section 7).
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::host_endian_bytes)]

use fsoc_9p::constants::{DIRECTORY_ENTRY_FIXED_SIZE_BYTES, READ_HEADER_SIZE_BYTES};
use fsoc_9p::{DirectoryEntries, DirectoryEntryWriter, Reply, Tag};
use fsoc_flash::ReadStatus;
use fsoc_serve::raw_protocol::{self, RawReply};

use crate::input::zeroed;

/// `RREAD`: header (7 bytes), `done_ns[8]`, `status[1]`, then `corrected_bits[4]
/// max_per_sector[4]`.
const READ_STATUS_COUNTS: std::ops::Range<usize> = 16..24;

/// A 9P request: decoding accepts only the canonical form (fsoc-9p's invariant), so whatever
/// decodes re-encodes to exactly the input.
pub fn decode_9p_request(data: &[u8]) {
    check_9p_framing(data);
    let Ok((tag, request)) = fsoc_9p::decode_request(data) else {
        return;
    };
    let mut buffer = vec![0u8; data.len()];
    assert_eq!(fsoc_9p::encode(tag, &request, &mut buffer), Ok(data.len()), "{request:?} re-encodes to another size");
    assert_eq!(buffer, data, "request {request:?} re-encodes differently");
}

/// A 9P reply, as `decode_9p_request`.
pub fn decode_9p_reply(data: &[u8]) {
    check_9p_framing(data);
    let Ok((tag, reply)) = fsoc_9p::decode_reply(data) else {
        return;
    };
    let mut buffer = vec![0u8; data.len()];
    assert_eq!(fsoc_9p::encode(tag, &reply, &mut buffer), Ok(data.len()), "{reply:?} re-encodes to another size");
    assert_eq!(buffer, data, "reply {reply:?} re-encodes differently");
}

/// The frame length and header readers see the same bytes first on a connection.
fn check_9p_framing(data: &[u8]) {
    if let Ok(Some(size_bytes)) = fsoc_9p::frame_size(data, u32::MAX) {
        assert!(size_bytes >= 7, "frame of {size_bytes} bytes accepted");
    }
    if let (Ok(header), Some(size_field)) = (fsoc_9p::decode_header(data), data.first_chunk::<4>()) {
        assert_eq!(header.size_bytes, u32::from_le_bytes(*size_field));
    }
}

/// Rreaddir data: whole entries, each re-written by the server's own writer to the same bytes,
/// and the reply so built decodes to the same entries.
pub fn parse_9p_directory(data: &[u8]) {
    let Ok(entries) = DirectoryEntries::parse(data) else {
        return;
    };
    assert_eq!(entries.as_bytes(), data);
    let Ok(count) = u32::try_from(data.len()) else {
        return;
    };
    let mut buffer = vec![0u8; READ_HEADER_SIZE_BYTES + data.len()];
    let mut writer = match DirectoryEntryWriter::new(&mut buffer, count) {
        Ok(writer) => writer,
        Err(error) => unreachable!("a buffer longer than the header was refused: {error:?}"),
    };
    let mut entry_count = 0;
    for entry in entries.iter() {
        assert_eq!(writer.push(&entry), Ok(true), "entry {entry:?} of parsed data does not fit again");
        entry_count += 1;
    }
    assert!(
        entry_count <= data.len() / DIRECTORY_ENTRY_FIXED_SIZE_BYTES,
        "{entry_count} entries in {} bytes",
        data.len()
    );
    assert_eq!(writer.data_size_bytes(), data.len(), "entries re-written to another size");
    let size_bytes = writer.finish(Tag(7));
    assert_eq!(size_bytes, buffer.len());
    assert_eq!(buffer.get(READ_HEADER_SIZE_BYTES..), Some(data), "entries re-written differently");
    assert_eq!(fsoc_9p::decode_reply(&buffer), Ok((Tag(7), Reply::Readdir { entries })), "Rreaddir of the entries");
}

/// A raw-protocol request: every field travels, so it re-encodes to exactly the input.
pub fn decode_raw_request(data: &[u8]) {
    let Ok((tag, request)) = raw_protocol::decode_request(data) else {
        return;
    };
    assert_eq!(raw_protocol::encode_request(tag, &request), data, "raw request {request:?} re-encodes differently");
}

/// A raw-protocol reply. Exact, except in three places where the decoder reads less than the
/// bytes say, each re-encoded as the device writes it (docs/PROTOCOL.md section 7.2):
/// `RREAD`'s `corrected_bits` and `max_per_sector` count only with status 1 (corrected) and
/// are written as 0 otherwise; `RISBAD`'s flag reads any non-zero byte as bad and is written
/// as 1; and an `RERROR` carries the device's error as a code, numbers and text, from which the
/// host rebuilds a `NandError` whose own text says it came from the device, so an error reply
/// re-encodes to one that decodes to the same tag and the same kind of error.
pub fn decode_raw_reply(data: &[u8]) {
    let Ok((tag, reply)) = raw_protocol::decode_reply(data) else {
        return;
    };
    let encoded = raw_protocol::encode_reply(tag, &reply);
    match &reply {
        RawReply::Error(error) => match raw_protocol::decode_reply(&encoded) {
            Ok((again_tag, RawReply::Error(again))) => {
                assert_eq!(again_tag, tag);
                assert_eq!(core::mem::discriminant(&again), core::mem::discriminant(error), "{error:?} -> {again:?}");
            }
            other => unreachable!("error reply {reply:?} re-encoded into {other:?}"),
        },
        RawReply::IsBad { bad } => {
            let mut canonical = data.to_vec();
            if let Some(flag) = canonical.last_mut() {
                *flag = u8::from(*bad);
            }
            assert_eq!(encoded, canonical, "is-bad reply re-encodes differently");
        }
        RawReply::Read { status, .. } if !matches!(status, ReadStatus::Corrected { .. }) => {
            let canonical = zeroed(data, &[READ_STATUS_COUNTS]);
            assert_eq!(encoded, canonical, "read reply {reply:?} re-encodes differently");
        }
        _ => assert_eq!(encoded, data, "raw reply {reply:?} re-encodes differently"),
    }
    if !matches!(reply, RawReply::Error(_)) {
        assert_eq!(raw_protocol::decode_reply(&encoded), Ok((tag, reply)), "re-encoded raw reply decodes differently");
    }
}
