//! `RemoteFlash`: the host side of the raw page protocol. A `Flash` whose chips sit behind
//! `fsoc serve --raw`: every call is one request and its reply, so the host runs fsoc's whole
//! engine (seed 000's conventional storage device) and the wire carries pages.
//!
//! One request at a time (a lock around the connection); reads take `&self` as the trait
//! asks, and wait their turn. A connection failure, or a reply that does not decode or does
//! not answer the request, is `NandError::Image` naming the device, and the connection is not
//! used again.

use std::io::{Read, Write};
use std::sync::{Mutex, PoisonError};

use fsoc_flash::{
    BlockAddress, ChipIndex, Completed, Flash, Geometry, NandError, Nanos, PageAddress, ReadStatus, Timing,
};

use crate::listen::{ListenAddress, Stream};
use crate::raw_protocol::{
    decode_reply, encode_request, frame_max_bytes, raw_type, DeviceInfo, RawReply, RawRequest, RAW_HEADER_BYTES,
    RAW_VERSION,
};
use crate::wire_counters::WireCounters;

struct Link {
    stream: Stream,
    buffer: Vec<u8>,
    /// Set by a failure that leaves the stream out of step: later calls fail at once.
    broken: Option<String>,
    next_tag: u16,
}

/// A flash device reached over the raw page protocol.
pub struct RemoteFlash {
    link: Mutex<Link>,
    info: DeviceInfo,
    frame_max: usize,
    address: String,
    counters: WireCounters,
}

impl std::fmt::Debug for RemoteFlash {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("RemoteFlash").field("address", &self.address).field("info", &self.info).finish()
    }
}

impl RemoteFlash {
    /// Connects to `fsoc serve --raw` at `address` and says hello (with `secret`, if the
    /// device needs one).
    pub fn connect(address: &ListenAddress, secret: Option<&[u8]>) -> Result<RemoteFlash, NandError> {
        let name = address.to_string();
        let stream =
            Stream::connect(address).map_err(|error| NandError::Image(format!("raw device {name}: {error}")))?;
        let mut link = Link { stream, buffer: Vec::new(), broken: None, next_tag: 0 };
        let hello = RawRequest::Hello { version: RAW_VERSION, secret: secret.unwrap_or_default() };
        let counters = WireCounters::default();
        let info = match exchange(&mut link, &name, &hello, 1024, &counters)? {
            RawReply::Hello(info) => info,
            RawReply::Error(error) => return Err(error),
            other => return Err(NandError::Image(format!("raw device {name}: answered hello with {other:?}"))),
        };
        let frame_max = frame_max_bytes(&info.geometry);
        Ok(RemoteFlash { link: Mutex::new(link), info, frame_max, address: name, counters })
    }

    /// What the device said about itself.
    pub fn device_info(&self) -> DeviceInfo {
        self.info
    }

    /// Messages and bytes this host sent and received, per raw message type.
    pub fn counters(&self) -> &WireCounters {
        &self.counters
    }

    /// One request and its reply; `answer` picks the value out of the expected reply.
    fn call<T>(
        &self,
        request: &RawRequest<'_>,
        answer: impl FnOnce(RawReply<'_>) -> Option<T>,
    ) -> Result<T, NandError> {
        let mut link = self.link.lock().unwrap_or_else(PoisonError::into_inner);
        let reply = exchange(&mut link, &self.address, request, self.frame_max, &self.counters)?;
        if let RawReply::Error(error) = reply {
            return Err(error);
        }
        let description = format!("{reply:?}");
        answer(reply).ok_or_else(|| {
            let message = format!("raw device {}: unexpected reply {description:.80}", self.address);
            link.broken = Some(message.clone());
            NandError::Image(message)
        })
    }
}

/// Sends `request` and reads its reply into the link's buffer.
fn exchange<'a>(
    link: &'a mut Link,
    address: &str,
    request: &RawRequest<'_>,
    frame_max: usize,
    counters: &WireCounters,
) -> Result<RawReply<'a>, NandError> {
    if let Some(reason) = &link.broken {
        return Err(NandError::Image(reason.clone()));
    }
    let tag = link.next_tag;
    link.next_tag = link.next_tag.wrapping_add(1);
    let frame = encode_request(tag, request);
    counters.count_frame(&frame);
    let fail = |link: &mut Link, reason: String| {
        let message = format!("raw device {address}: {reason}");
        link.broken = Some(message.clone());
        NandError::Image(message)
    };
    if let Err(error) = link.stream.write_all(&frame) {
        return Err(fail(link, format!("sending: {error}")));
    }
    let mut size_field = [0u8; 4];
    if let Err(error) = link.stream.read_exact(&mut size_field) {
        return Err(fail(link, format!("receiving: {error}")));
    }
    let size = u32::from_le_bytes(size_field) as usize;
    if !(RAW_HEADER_BYTES..=frame_max).contains(&size) {
        return Err(fail(link, format!("a reply of {size} bytes (limit {frame_max})")));
    }
    link.buffer.clear();
    link.buffer.resize(size, 0);
    let (head, body) = link.buffer.split_at_mut(4);
    head.copy_from_slice(&size_field);
    if let Err(error) = link.stream.read_exact(body) {
        return Err(fail(link, format!("receiving: {error}")));
    }
    counters.count_frame(&link.buffer);
    let decoded = decode_reply(&link.buffer).map_err(|error| error.to_string());
    match decoded {
        Ok((reply_tag, _)) if reply_tag != tag => Err(fail(link, format!("reply tag {reply_tag}, expected {tag}"))),
        Ok(_) => Ok(decode_reply(&link.buffer)
            .map(|(_, reply)| reply)
            .map_err(|error| NandError::Image(error.to_string()))?),
        Err(reason) => Err(fail(link, format!("undecodable reply: {reason}"))),
    }
}

/// Copies a read reply's bytes into the caller's buffers, checking their sizes.
fn copy_page(from: (&[u8], &[u8]), data: &mut [u8], spare: &mut [u8]) -> Option<()> {
    if from.0.len() != data.len() || from.1.len() != spare.len() {
        return None;
    }
    data.copy_from_slice(from.0);
    spare.copy_from_slice(from.1);
    Some(())
}

impl Flash for RemoteFlash {
    fn geometry(&self) -> Geometry {
        self.info.geometry
    }

    fn chip_count(&self) -> u32 {
        self.info.chip_count
    }

    fn timing(&self) -> Timing {
        self.info.timing
    }

    fn read_page(
        &self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &mut [u8],
        spare: &mut [u8],
    ) -> Result<Completed<ReadStatus>, NandError> {
        self.call(&RawRequest::Read { issue_ns, page }, |reply| match reply {
            RawReply::Read { done_ns, status, data: read_data, spare: read_spare } => {
                copy_page((read_data, read_spare), data, spare).map(|()| Completed { value: status, done_ns })
            }
            _ => None,
        })
    }

    fn program_page(
        &mut self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &[u8],
        spare: &[u8],
    ) -> Result<Completed<()>, NandError> {
        self.call(&RawRequest::Program { issue_ns, page, data, spare }, |reply| match reply {
            RawReply::Program { done_ns } => Some(Completed { value: (), done_ns }),
            _ => None,
        })
    }

    fn erase_block(&mut self, issue_ns: Nanos, block: BlockAddress) -> Result<Completed<()>, NandError> {
        self.call(&RawRequest::Erase { issue_ns, block }, |reply| match reply {
            RawReply::Erase { done_ns } => Some(Completed { value: (), done_ns }),
            _ => None,
        })
    }

    fn is_bad_block(&self, block: BlockAddress) -> Result<bool, NandError> {
        self.call(&RawRequest::IsBad { block }, |reply| match reply {
            RawReply::IsBad { bad } => Some(bad),
            _ => None,
        })
    }

    fn mark_bad_block(&mut self, block: BlockAddress) -> Result<(), NandError> {
        self.call(&RawRequest::MarkBad { block }, |reply| matches!(reply, RawReply::MarkBad).then_some(()))
    }

    /// Asks the device; a failure reads as "busy until now" (0), which only costs the caller's
    /// virtual-time bookkeeping, and the next real call reports the broken link.
    fn busy_until_ns(&self, chip: ChipIndex) -> Nanos {
        self.call(&RawRequest::BusyUntil { chip: chip.0 }, |reply| match reply {
            RawReply::BusyUntil { done_ns } => Some(done_ns),
            _ => None,
        })
        .unwrap_or(0)
    }

    fn erase_count(&self, block: BlockAddress) -> Result<u32, NandError> {
        self.call(&RawRequest::EraseCount { block }, |reply| match reply {
            RawReply::EraseCount { count } => Some(count),
            _ => None,
        })
    }

    fn paired_page_distance(&self) -> u32 {
        self.info.paired_page_distance
    }

    fn flush(&mut self) -> Result<(), NandError> {
        self.call(&RawRequest::Flush, |reply| matches!(reply, RawReply::Flush).then_some(()))
    }

    fn write_barrier(&mut self) -> Result<(), NandError> {
        self.call(&RawRequest::Barrier, |reply| matches!(reply, RawReply::Barrier).then_some(()))
    }
}

/// The operation name of a raw message type, for reports (`raw_type::operation_name`).
pub fn raw_operation_name(message_type: u8) -> &'static str {
    raw_type::operation_name(message_type)
}
