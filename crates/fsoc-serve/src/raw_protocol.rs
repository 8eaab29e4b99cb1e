//! The raw page protocol (`fsoc serve --raw`): seed 000's conventional storage device, where
//! the device exports its chips' pages and the host runs the file system. One message per
//! `Flash` call, framed like 9P (docs/PROTOCOL.md section 7):
//!
//! ```text
//! size u32 (whole frame) | type u8 | tag u16 | body
//! ```
//!
//! All integers little-endian. Requests have even types, replies odd ones (request + 1), and
//! an error reply is `RERROR`. Decoding never trusts a length beyond the frame it was given.

use fsoc_flash::codec::{DecodeError, Reader, Writer};
use fsoc_flash::{BlockAddress, Geometry, NandError, OperationKind, PageAddress, ReadStatus, Timing};

/// The protocol version a `THELLO` names; a server answers only its own.
pub const RAW_VERSION: u32 = 1;
/// Frame header: size, type, tag.
pub const RAW_HEADER_BYTES: usize = 7;
/// Largest frame before `THELLO` is answered (a hello with a 255-byte secret fits).
pub const RAW_FRAME_BEFORE_HELLO_BYTES: usize = 512;
/// Room for a read reply's or a program request's fields besides data and spare.
const RAW_PAGE_MESSAGE_OVERHEAD_BYTES: usize = 64;

/// Message types.
pub mod raw_type {
    pub const THELLO: u8 = 160;
    pub const RHELLO: u8 = 161;
    pub const TREAD: u8 = 162;
    pub const RREAD: u8 = 163;
    pub const TPROGRAM: u8 = 164;
    pub const RPROGRAM: u8 = 165;
    pub const TERASE: u8 = 166;
    pub const RERASE: u8 = 167;
    pub const TISBAD: u8 = 168;
    pub const RISBAD: u8 = 169;
    pub const TMARKBAD: u8 = 170;
    pub const RMARKBAD: u8 = 171;
    pub const TERASECOUNT: u8 = 172;
    pub const RERASECOUNT: u8 = 173;
    pub const TBUSY: u8 = 174;
    pub const RBUSY: u8 = 175;
    pub const TBARRIER: u8 = 176;
    pub const RBARRIER: u8 = 177;
    pub const TFLUSH: u8 = 178;
    pub const RFLUSH: u8 = 179;
    pub const RERROR: u8 = 181;

    /// The operation a message type belongs to (its request's name), for reports.
    pub fn operation_name(message_type: u8) -> &'static str {
        match message_type & !1 {
            THELLO => "hello",
            TREAD => "read",
            TPROGRAM => "program",
            TERASE => "erase",
            TISBAD => "is-bad",
            TMARKBAD => "mark-bad",
            TERASECOUNT => "erase-count",
            TBUSY => "busy-until",
            TBARRIER => "barrier",
            TFLUSH => "flush",
            180 => "error",
            _ => "unknown",
        }
    }
}

/// The largest frame a connection to a device of this geometry carries.
pub fn frame_max_bytes(geometry: &Geometry) -> usize {
    geometry.page_data_bytes as usize + geometry.spare_bytes as usize + RAW_PAGE_MESSAGE_OVERHEAD_BYTES
}

/// A request, decoded as a view of its frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawRequest<'a> {
    Hello { version: u32, secret: &'a [u8] },
    Read { issue_ns: u64, page: PageAddress },
    Program { issue_ns: u64, page: PageAddress, data: &'a [u8], spare: &'a [u8] },
    Erase { issue_ns: u64, block: BlockAddress },
    IsBad { block: BlockAddress },
    MarkBad { block: BlockAddress },
    EraseCount { block: BlockAddress },
    BusyUntil { chip: u32 },
    Barrier,
    Flush,
}

/// What the device says about itself in `RHELLO`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub geometry: Geometry,
    pub chip_count: u32,
    pub timing: Timing,
    pub paired_page_distance: u32,
}

/// A reply, decoded as a view of its frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RawReply<'a> {
    Hello(DeviceInfo),
    Read { done_ns: u64, status: ReadStatus, data: &'a [u8], spare: &'a [u8] },
    Program { done_ns: u64 },
    Erase { done_ns: u64 },
    IsBad { bad: bool },
    MarkBad,
    EraseCount { count: u32 },
    BusyUntil { done_ns: u64 },
    Barrier,
    Flush,
    Error(NandError),
}

fn begin(message_type: u8, tag: u16, capacity: usize) -> Writer {
    let mut writer = Writer::with_capacity(capacity + RAW_HEADER_BYTES);
    writer.u32_le(0);
    writer.u8(message_type);
    writer.u16_le(tag);
    writer
}

/// Writes the frame's size into its first four bytes.
fn finish(mut writer: Writer) -> Vec<u8> {
    let size = u32::try_from(writer.bytes.len()).unwrap_or(u32::MAX).to_le_bytes();
    if let Some(field) = writer.bytes.get_mut(..4) {
        field.copy_from_slice(&size);
    }
    writer.bytes
}

fn put_page(writer: &mut Writer, page: PageAddress) {
    writer.u32_le(page.chip.0);
    writer.u32_le(page.block.0);
    writer.u32_le(page.page_index);
}

fn put_block(writer: &mut Writer, block: BlockAddress) {
    writer.u32_le(block.chip.0);
    writer.u32_le(block.block.0);
}

fn put_bytes(writer: &mut Writer, bytes: &[u8]) {
    writer.u32_le(u32::try_from(bytes.len()).unwrap_or(u32::MAX));
    writer.raw(bytes);
}

fn get_page(reader: &mut Reader<'_>) -> Result<PageAddress, DecodeError> {
    Ok(PageAddress::new(reader.u32_le()?, reader.u32_le()?, reader.u32_le()?))
}

fn get_block(reader: &mut Reader<'_>) -> Result<BlockAddress, DecodeError> {
    Ok(BlockAddress::new(reader.u32_le()?, reader.u32_le()?))
}

fn get_bytes<'a>(reader: &mut Reader<'a>) -> Result<&'a [u8], DecodeError> {
    let length = reader.u32_le()? as usize;
    reader.bytes(length)
}

/// Encodes a request into a whole frame.
pub fn encode_request(tag: u16, request: &RawRequest<'_>) -> Vec<u8> {
    use raw_type::*;
    let mut writer;
    match *request {
        RawRequest::Hello { version, secret } => {
            writer = begin(THELLO, tag, 8 + secret.len());
            writer.u32_le(version);
            put_bytes(&mut writer, secret);
        }
        RawRequest::Read { issue_ns, page } => {
            writer = begin(TREAD, tag, 20);
            writer.u64_le(issue_ns);
            put_page(&mut writer, page);
        }
        RawRequest::Program { issue_ns, page, data, spare } => {
            writer = begin(TPROGRAM, tag, 28 + data.len() + spare.len());
            writer.u64_le(issue_ns);
            put_page(&mut writer, page);
            put_bytes(&mut writer, data);
            put_bytes(&mut writer, spare);
        }
        RawRequest::Erase { issue_ns, block } => {
            writer = begin(TERASE, tag, 16);
            writer.u64_le(issue_ns);
            put_block(&mut writer, block);
        }
        RawRequest::IsBad { block } => {
            writer = begin(TISBAD, tag, 8);
            put_block(&mut writer, block);
        }
        RawRequest::MarkBad { block } => {
            writer = begin(TMARKBAD, tag, 8);
            put_block(&mut writer, block);
        }
        RawRequest::EraseCount { block } => {
            writer = begin(TERASECOUNT, tag, 8);
            put_block(&mut writer, block);
        }
        RawRequest::BusyUntil { chip } => {
            writer = begin(TBUSY, tag, 4);
            writer.u32_le(chip);
        }
        RawRequest::Barrier => writer = begin(TBARRIER, tag, 0),
        RawRequest::Flush => writer = begin(TFLUSH, tag, 0),
    }
    finish(writer)
}

/// The header of a whole frame: type and tag; checks the size field against the frame.
pub fn decode_header(frame: &[u8]) -> Result<(u8, u16), DecodeError> {
    let mut reader = Reader::new("raw frame", frame);
    let size = reader.u32_le()?;
    if size as usize != frame.len() {
        return Err(reader.invalid("size", u64::from(size)));
    }
    Ok((reader.u8()?, reader.u16_le()?))
}

/// Decodes a whole request frame; trailing bytes are an error.
pub fn decode_request(frame: &[u8]) -> Result<(u16, RawRequest<'_>), DecodeError> {
    use raw_type::*;
    let (message_type, tag) = decode_header(frame)?;
    let mut reader = Reader::new("raw request", frame.get(RAW_HEADER_BYTES..).unwrap_or(&[]));
    let request = match message_type {
        THELLO => RawRequest::Hello { version: reader.u32_le()?, secret: get_bytes(&mut reader)? },
        TREAD => RawRequest::Read { issue_ns: reader.u64_le()?, page: get_page(&mut reader)? },
        TPROGRAM => RawRequest::Program {
            issue_ns: reader.u64_le()?,
            page: get_page(&mut reader)?,
            data: get_bytes(&mut reader)?,
            spare: get_bytes(&mut reader)?,
        },
        TERASE => RawRequest::Erase { issue_ns: reader.u64_le()?, block: get_block(&mut reader)? },
        TISBAD => RawRequest::IsBad { block: get_block(&mut reader)? },
        TMARKBAD => RawRequest::MarkBad { block: get_block(&mut reader)? },
        TERASECOUNT => RawRequest::EraseCount { block: get_block(&mut reader)? },
        TBUSY => RawRequest::BusyUntil { chip: reader.u32_le()? },
        TBARRIER => RawRequest::Barrier,
        TFLUSH => RawRequest::Flush,
        other => return Err(reader.invalid("request type", u64::from(other))),
    };
    if reader.remaining_bytes() != 0 {
        return Err(reader.invalid("trailing bytes", reader.remaining_bytes() as u64));
    }
    Ok((tag, request))
}

/// Error codes of `RERROR`, one per `NandError` variant.
mod error_code {
    pub const OUT_OF_RANGE: u8 = 1;
    pub const BUFFER_SIZE: u8 = 2;
    pub const NOT_ERASED: u8 = 3;
    pub const OUT_OF_ORDER: u8 = 4;
    pub const BAD_BLOCK: u8 = 5;
    pub const WORN_OUT: u8 = 6;
    pub const OPERATION_FAILED: u8 = 7;
    pub const POWER_LOST: u8 = 8;
    pub const CHIP_FAILED: u8 = 9;
    pub const IMAGE: u8 = 10;
    pub const INVALID_CONFIG: u8 = 11;
}

fn operation_code(kind: OperationKind) -> u8 {
    match kind {
        OperationKind::Read => 0,
        OperationKind::Program => 1,
        OperationKind::Erase => 2,
    }
}

/// Encodes an error: a code, a page (or block) address, two numbers and a message (the
/// error's text, for variants whose fields do not travel: static descriptions).
fn put_error(writer: &mut Writer, error: &NandError) {
    use error_code::*;
    let (code, page, first, second) = match *error {
        NandError::OutOfRange { value, limit, .. } => (OUT_OF_RANGE, PageAddress::new(0, 0, 0), value, limit),
        NandError::BufferSize { expected_bytes, actual_bytes, .. } => {
            (BUFFER_SIZE, PageAddress::new(0, 0, 0), expected_bytes as u64, actual_bytes as u64)
        }
        NandError::NotErased { page } => (NOT_ERASED, page, 0, 0),
        NandError::OutOfOrder { page, last_programmed_index } => {
            (OUT_OF_ORDER, page, u64::from(last_programmed_index), 0)
        }
        NandError::BadBlock { block } => {
            (BAD_BLOCK, PageAddress { chip: block.chip, block: block.block, page_index: 0 }, 0, 0)
        }
        NandError::WornOut { block, erase_count } => {
            (WORN_OUT, PageAddress { chip: block.chip, block: block.block, page_index: 0 }, u64::from(erase_count), 0)
        }
        NandError::OperationFailed { kind, block } => (
            OPERATION_FAILED,
            PageAddress { chip: block.chip, block: block.block, page_index: 0 },
            u64::from(operation_code(kind)),
            0,
        ),
        NandError::PowerLost => (POWER_LOST, PageAddress::new(0, 0, 0), 0, 0),
        NandError::ChipFailed { chip } => (CHIP_FAILED, PageAddress::new(chip.0, 0, 0), 0, 0),
        NandError::Image(_) => (IMAGE, PageAddress::new(0, 0, 0), 0, 0),
        NandError::InvalidConfig { .. } => (INVALID_CONFIG, PageAddress::new(0, 0, 0), 0, 0),
    };
    writer.u8(code);
    put_page(writer, page);
    writer.u64_le(first);
    writer.u64_le(second);
    let text = error.to_string();
    let text = text.as_bytes();
    put_bytes(writer, text.get(..text.len().min(1024)).unwrap_or(text));
}

fn get_error(reader: &mut Reader<'_>) -> Result<NandError, DecodeError> {
    use error_code::*;
    let code = reader.u8()?;
    let page = get_page(reader)?;
    let (first, second) = (reader.u64_le()?, reader.u64_le()?);
    let text = String::from_utf8_lossy(get_bytes(reader)?).into_owned();
    let block = page.block_address();
    Ok(match code {
        OUT_OF_RANGE => NandError::OutOfRange { what: "address on the device", value: first, limit: second },
        BUFFER_SIZE => NandError::BufferSize {
            what: "page buffer on the device",
            expected_bytes: usize::try_from(first).unwrap_or(usize::MAX),
            actual_bytes: usize::try_from(second).unwrap_or(usize::MAX),
        },
        NOT_ERASED => NandError::NotErased { page },
        OUT_OF_ORDER => NandError::OutOfOrder { page, last_programmed_index: u32::try_from(first).unwrap_or(u32::MAX) },
        BAD_BLOCK => NandError::BadBlock { block },
        WORN_OUT => NandError::WornOut { block, erase_count: u32::try_from(first).unwrap_or(u32::MAX) },
        OPERATION_FAILED => NandError::OperationFailed {
            kind: match first {
                0 => OperationKind::Read,
                1 => OperationKind::Program,
                _ => OperationKind::Erase,
            },
            block,
        },
        POWER_LOST => NandError::PowerLost,
        CHIP_FAILED => NandError::ChipFailed { chip: page.chip },
        IMAGE | INVALID_CONFIG => NandError::Image(format!("on the device: {text}")),
        other => return Err(reader.invalid("error code", u64::from(other))),
    })
}

fn put_status(writer: &mut Writer, status: ReadStatus) {
    let (code, bits, max_per_sector) = match status {
        ReadStatus::Clean => (0, 0, 0),
        ReadStatus::Corrected { bits, max_per_sector } => (1, bits, max_per_sector),
        ReadStatus::Uncorrectable => (2, 0, 0),
        ReadStatus::Erased => (3, 0, 0),
    };
    writer.u8(code);
    writer.u32_le(bits);
    writer.u32_le(max_per_sector);
}

fn get_status(reader: &mut Reader<'_>) -> Result<ReadStatus, DecodeError> {
    let (code, bits, max_per_sector) = (reader.u8()?, reader.u32_le()?, reader.u32_le()?);
    Ok(match code {
        0 => ReadStatus::Clean,
        1 => ReadStatus::Corrected { bits, max_per_sector },
        2 => ReadStatus::Uncorrectable,
        3 => ReadStatus::Erased,
        other => return Err(reader.invalid("read status", u64::from(other))),
    })
}

/// Encodes a reply into a whole frame.
pub fn encode_reply(tag: u16, reply: &RawReply<'_>) -> Vec<u8> {
    use raw_type::*;
    let mut writer;
    match reply {
        RawReply::Hello(info) => {
            writer = begin(RHELLO, tag, 56);
            writer.u32_le(RAW_VERSION);
            writer.u32_le(info.geometry.page_data_bytes);
            writer.u32_le(info.geometry.spare_bytes);
            writer.u32_le(info.geometry.pages_per_block);
            writer.u32_le(info.geometry.block_count);
            writer.u32_le(info.chip_count);
            writer.u64_le(info.timing.read_latency_ns);
            writer.u64_le(info.timing.program_latency_ns);
            writer.u64_le(info.timing.erase_latency_ns);
            writer.u64_le(info.timing.bus_ns_per_byte);
            writer.u32_le(info.paired_page_distance);
        }
        RawReply::Read { done_ns, status, data, spare } => {
            writer = begin(RREAD, tag, 25 + data.len() + spare.len());
            writer.u64_le(*done_ns);
            put_status(&mut writer, *status);
            put_bytes(&mut writer, data);
            put_bytes(&mut writer, spare);
        }
        RawReply::Program { done_ns } => {
            writer = begin(RPROGRAM, tag, 8);
            writer.u64_le(*done_ns);
        }
        RawReply::Erase { done_ns } => {
            writer = begin(RERASE, tag, 8);
            writer.u64_le(*done_ns);
        }
        RawReply::IsBad { bad } => {
            writer = begin(RISBAD, tag, 1);
            writer.u8(u8::from(*bad));
        }
        RawReply::MarkBad => writer = begin(RMARKBAD, tag, 0),
        RawReply::EraseCount { count } => {
            writer = begin(RERASECOUNT, tag, 4);
            writer.u32_le(*count);
        }
        RawReply::BusyUntil { done_ns } => {
            writer = begin(RBUSY, tag, 8);
            writer.u64_le(*done_ns);
        }
        RawReply::Barrier => writer = begin(RBARRIER, tag, 0),
        RawReply::Flush => writer = begin(RFLUSH, tag, 0),
        RawReply::Error(error) => {
            writer = begin(RERROR, tag, 64);
            put_error(&mut writer, error);
        }
    }
    finish(writer)
}

/// Decodes a whole reply frame; trailing bytes are an error.
pub fn decode_reply(frame: &[u8]) -> Result<(u16, RawReply<'_>), DecodeError> {
    use raw_type::*;
    let (message_type, tag) = decode_header(frame)?;
    let mut reader = Reader::new("raw reply", frame.get(RAW_HEADER_BYTES..).unwrap_or(&[]));
    let reply = match message_type {
        RHELLO => {
            let version = reader.u32_le()?;
            if version != RAW_VERSION {
                return Err(DecodeError::UnsupportedVersion {
                    structure: "raw hello",
                    found: version,
                    oldest: RAW_VERSION,
                    newest: RAW_VERSION,
                });
            }
            let geometry = Geometry {
                page_data_bytes: reader.u32_le()?,
                spare_bytes: reader.u32_le()?,
                pages_per_block: reader.u32_le()?,
                block_count: reader.u32_le()?,
            };
            if geometry.validate().is_err() {
                return Err(reader.invalid("geometry", u64::from(geometry.page_data_bytes)));
            }
            let chip_count = reader.u32_le()?;
            if chip_count == 0 || chip_count > 64 {
                return Err(reader.invalid("chip count", u64::from(chip_count)));
            }
            let timing = Timing {
                read_latency_ns: reader.u64_le()?,
                program_latency_ns: reader.u64_le()?,
                erase_latency_ns: reader.u64_le()?,
                bus_ns_per_byte: reader.u64_le()?,
            };
            RawReply::Hello(DeviceInfo { geometry, chip_count, timing, paired_page_distance: reader.u32_le()? })
        }
        RREAD => RawReply::Read {
            done_ns: reader.u64_le()?,
            status: get_status(&mut reader)?,
            data: get_bytes(&mut reader)?,
            spare: get_bytes(&mut reader)?,
        },
        RPROGRAM => RawReply::Program { done_ns: reader.u64_le()? },
        RERASE => RawReply::Erase { done_ns: reader.u64_le()? },
        RISBAD => RawReply::IsBad { bad: reader.u8()? != 0 },
        RMARKBAD => RawReply::MarkBad,
        RERASECOUNT => RawReply::EraseCount { count: reader.u32_le()? },
        RBUSY => RawReply::BusyUntil { done_ns: reader.u64_le()? },
        RBARRIER => RawReply::Barrier,
        RFLUSH => RawReply::Flush,
        RERROR => RawReply::Error(get_error(&mut reader)?),
        other => return Err(reader.invalid("reply type", u64::from(other))),
    };
    if reader.remaining_bytes() != 0 {
        return Err(reader.invalid("trailing bytes", reader.remaining_bytes() as u64));
    }
    Ok((tag, reply))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fsoc_flash::ChipIndex;

    #[test]
    fn requests_round_trip() {
        let data = [7u8; 2048];
        let spare = [1u8; 64];
        let requests = [
            RawRequest::Hello { version: RAW_VERSION, secret: b"0123456789abcdef" },
            RawRequest::Read { issue_ns: 5, page: PageAddress::new(1, 2, 3) },
            RawRequest::Program { issue_ns: 6, page: PageAddress::new(0, 9, 1), data: &data, spare: &spare },
            RawRequest::Erase { issue_ns: 7, block: BlockAddress::new(3, 4) },
            RawRequest::IsBad { block: BlockAddress::new(0, 1) },
            RawRequest::MarkBad { block: BlockAddress::new(0, 2) },
            RawRequest::EraseCount { block: BlockAddress::new(1, 1) },
            RawRequest::BusyUntil { chip: 2 },
            RawRequest::Barrier,
            RawRequest::Flush,
        ];
        for (tag, request) in (0u16..).zip(requests) {
            let frame = encode_request(tag, &request);
            assert_eq!(decode_request(&frame), Ok((tag, request)));
            // Every truncation is an error, never a panic.
            for cut in 0..frame.len() {
                assert!(decode_request(&frame[..cut]).is_err(), "{request:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn replies_round_trip_errors_included() {
        let info = DeviceInfo {
            geometry: Geometry { page_data_bytes: 4096, spare_bytes: 128, pages_per_block: 64, block_count: 256 },
            chip_count: 4,
            timing: Timing {
                read_latency_ns: 25_000,
                program_latency_ns: 200_000,
                erase_latency_ns: 1_500_000,
                bus_ns_per_byte: 25,
            },
            paired_page_distance: 0,
        };
        let data = [3u8; 4096];
        let spare = [4u8; 128];
        let block = BlockAddress::new(2, 7);
        let replies = [
            RawReply::Hello(info),
            RawReply::Read {
                done_ns: 9,
                status: ReadStatus::Corrected { bits: 3, max_per_sector: 2 },
                data: &data,
                spare: &spare,
            },
            RawReply::Read { done_ns: 9, status: ReadStatus::Erased, data: &data, spare: &spare },
            RawReply::Program { done_ns: 10 },
            RawReply::Erase { done_ns: 11 },
            RawReply::IsBad { bad: true },
            RawReply::MarkBad,
            RawReply::EraseCount { count: 12 },
            RawReply::BusyUntil { done_ns: 13 },
            RawReply::Barrier,
            RawReply::Flush,
            RawReply::Error(NandError::PowerLost),
            RawReply::Error(NandError::BadBlock { block }),
            RawReply::Error(NandError::WornOut { block, erase_count: 3000 }),
            RawReply::Error(NandError::OperationFailed { kind: OperationKind::Program, block }),
            RawReply::Error(NandError::NotErased { page: PageAddress::new(1, 2, 3) }),
            RawReply::Error(NandError::OutOfOrder { page: PageAddress::new(1, 2, 3), last_programmed_index: 9 }),
            RawReply::Error(NandError::ChipFailed { chip: ChipIndex(3) }),
        ];
        for (tag, reply) in (0u16..).zip(replies) {
            let frame = encode_reply(tag, &reply);
            assert_eq!(decode_reply(&frame), Ok((tag, reply.clone())));
            for cut in 0..frame.len() {
                assert!(decode_reply(&frame[..cut]).is_err(), "{reply:?} cut at {cut}");
            }
        }
        // Errors whose fields are static text come back as a message.
        let frame = encode_reply(1, &RawReply::Error(NandError::OutOfRange { what: "chip", value: 9, limit: 4 }));
        let (_, reply) = decode_reply(&frame).expect("decode");
        assert_eq!(reply, RawReply::Error(NandError::OutOfRange { what: "address on the device", value: 9, limit: 4 }));
    }

    /// The sizes docs/PROTOCOL.md 7.3 gives.
    #[test]
    fn frame_sizes_are_as_documented() {
        let (data, spare) = ([0u8; 4096], [0u8; 128]);
        let page = PageAddress::new(0, 1, 2);
        let block = BlockAddress::new(0, 1);
        assert_eq!(encode_request(0, &RawRequest::Read { issue_ns: 0, page }).len(), 27);
        let read = RawReply::Read { done_ns: 0, status: ReadStatus::Clean, data: &data, spare: &spare };
        assert_eq!(encode_reply(0, &read).len(), 32 + 4096 + 128);
        let program = RawRequest::Program { issue_ns: 0, page, data: &data, spare: &spare };
        assert_eq!(encode_request(0, &program).len(), 35 + 4096 + 128);
        assert_eq!(encode_reply(0, &RawReply::Program { done_ns: 0 }).len(), 15);
        assert_eq!(encode_request(0, &RawRequest::Erase { issue_ns: 0, block }).len(), 23);
        assert_eq!(encode_reply(0, &RawReply::Erase { done_ns: 0 }).len(), 15);
    }

    #[test]
    fn seeded_garbage_never_panics() {
        let mut rng = fsoc_media::rng::SeededRng::new(0x5A5A);
        let valid = encode_request(
            3,
            &RawRequest::Program { issue_ns: 1, page: PageAddress::new(0, 1, 2), data: &[9u8; 512], spare: &[1u8; 16] },
        );
        for round in 0..20_000u64 {
            let mut frame = valid.clone();
            for _ in 0..=rng.below(4) {
                let index = rng.below(frame.len() as u64) as usize;
                frame[index] = rng.below(256) as u8;
            }
            if round % 3 == 0 {
                frame.truncate(rng.below(frame.len() as u64) as usize);
            }
            let _ = decode_request(&frame);
            let _ = decode_reply(&frame);
        }
    }
}
