//! `fsoc serve --raw`: the conventional storage device of seed 000. The device exports its
//! chips' pages (read, program, erase, bad-block marks, barriers, flush) over the raw page
//! protocol (`raw_protocol`), and the host runs the file system itself over `RemoteFlash`.
//!
//! One host at a time owns the chips: while a connection is served, another is refused (closed
//! at once). Each request is one `Flash` call, answered before the next is read. Bounds: a
//! frame larger than one page message is a framing error that closes the connection; nothing
//! is allocated beyond one frame buffer. A TCP listener that is not loopback requires the
//! shared secret, given in `THELLO` and compared in constant time.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::sync::{Arc, Mutex, PoisonError};

use fsoc_flash::{Flash, NandError};

use crate::listen::{Listener, Stream};
use crate::raw_protocol::{
    decode_request, encode_reply, frame_max_bytes, DeviceInfo, RawReply, RawRequest, RAW_FRAME_BEFORE_HELLO_BYTES,
    RAW_HEADER_BYTES, RAW_VERSION,
};
use crate::server::{ServeError, Stopper};
use crate::wire_counters::WireCounters;

/// The device side of the raw page protocol over a flash `F`.
pub struct RawServer<F: Flash + Send + 'static> {
    flash: Arc<Mutex<F>>,
    secret: Option<Vec<u8>>,
    counters: Arc<WireCounters>,
    stopper: Stopper,
}

struct Running {
    control: Stream,
    thread: std::thread::JoinHandle<()>,
}

impl<F: Flash + Send + 'static> RawServer<F> {
    /// A server for `flash`; with `secret`, a client must present it in its hello.
    pub fn new(flash: F, secret: Option<Vec<u8>>) -> RawServer<F> {
        RawServer {
            flash: Arc::new(Mutex::new(flash)),
            secret,
            counters: Arc::new(WireCounters::default()),
            stopper: Stopper::default(),
        }
    }

    pub fn stopper(&self) -> Stopper {
        self.stopper.clone()
    }

    /// Messages and bytes per raw message type, both directions.
    pub fn counters(&self) -> Arc<WireCounters> {
        Arc::clone(&self.counters)
    }

    /// Serves hosts one at a time until stopped; then ends the connection being served (after
    /// the request it is answering) and returns the flash, flushed.
    pub fn run(self, listener: &Listener) -> Result<F, ServeError> {
        let RawServer { flash, secret, counters, stopper } = self;
        let secret = Arc::new(secret);
        let mut running: Option<Running> = None;
        let accepted = loop {
            let stream = match listener.accept(|| stopper.is_stopped()) {
                Ok(Some(stream)) => stream,
                Ok(None) => break Ok(()),
                Err(error) => break Err(ServeError::Accept(error)),
            };
            if running.as_ref().is_some_and(|connection| !connection.thread.is_finished()) {
                log::warn!("refusing a connection: another host owns the chips");
                stream.shutdown(Shutdown::Both);
                continue;
            }
            if let Some(finished) = running.take() {
                let _ = finished.thread.join();
            }
            let Ok(control) = stream.try_clone() else { continue };
            let (flash, secret, counters) = (Arc::clone(&flash), Arc::clone(&secret), Arc::clone(&counters));
            let spawned = std::thread::Builder::new()
                .name("fsoc-raw".into())
                .spawn(move || serve_connection(&flash, secret.as_deref(), &counters, stream));
            match spawned {
                Ok(thread) => running = Some(Running { control, thread }),
                Err(error) => log::warn!("cannot start a connection thread: {error}"),
            }
        };
        if let Some(connection) = running {
            connection.control.shutdown(Shutdown::Read);
            let _ = connection.thread.join();
        }
        accepted?;
        let flash = Arc::try_unwrap(flash).map_err(|_| ServeError::StillReferenced)?;
        let mut flash = flash.into_inner().unwrap_or_else(PoisonError::into_inner);
        flash.flush().map_err(|error| ServeError::Config(format!("flushing the chips: {error}")))?;
        Ok(flash)
    }
}

/// Reads one whole frame of at most `frame_max` bytes into `buffer`; `None` at a clean end of
/// the stream or on a framing error (logged).
fn read_frame<'a>(stream: &mut Stream, buffer: &'a mut Vec<u8>, frame_max: usize) -> Option<&'a [u8]> {
    let mut size_field = [0u8; 4];
    stream.read_exact(&mut size_field).ok()?;
    let size = u32::from_le_bytes(size_field) as usize;
    if !(RAW_HEADER_BYTES..=frame_max).contains(&size) {
        log::warn!("raw connection: a frame of {size} bytes (limit {frame_max}); disconnecting");
        return None;
    }
    buffer.clear();
    buffer.resize(size, 0);
    let (head, body) = buffer.split_at_mut(4);
    head.copy_from_slice(&size_field);
    stream.read_exact(body).ok()?;
    Some(buffer.as_slice())
}

fn serve_connection<F: Flash>(flash: &Mutex<F>, secret: Option<&[u8]>, counters: &WireCounters, mut stream: Stream) {
    let info = {
        let flash = flash.lock().unwrap_or_else(PoisonError::into_inner);
        DeviceInfo {
            geometry: flash.geometry(),
            chip_count: flash.chip_count(),
            timing: flash.timing(),
            paired_page_distance: flash.paired_page_distance(),
        }
    };
    let mut frame_max = RAW_FRAME_BEFORE_HELLO_BYTES;
    let mut greeted = false;
    let mut buffer = Vec::new();
    let (mut data, mut spare) =
        (vec![0u8; info.geometry.page_data_bytes as usize], vec![0u8; info.geometry.spare_bytes as usize]);
    while let Some(frame) = read_frame(&mut stream, &mut buffer, frame_max) {
        counters.count_frame(frame);
        let (tag, request) = match decode_request(frame) {
            Ok(decoded) => decoded,
            Err(error) => {
                log::warn!("raw connection: undecodable request ({error}); disconnecting");
                break;
            }
        };
        let mut close = false;
        let reply = match request {
            RawRequest::Hello { version, secret: given } => {
                if version != RAW_VERSION {
                    close = true;
                    RawReply::Error(NandError::Image(format!(
                        "protocol version {version}; this device speaks {RAW_VERSION}"
                    )))
                } else if secret.is_some_and(|secret| !crate::secret::matches(secret, given)) {
                    close = true;
                    RawReply::Error(NandError::Image("wrong secret".into()))
                } else {
                    greeted = true;
                    frame_max = frame_max_bytes(&info.geometry);
                    RawReply::Hello(info)
                }
            }
            _ if !greeted => {
                close = true;
                RawReply::Error(NandError::Image("a request before THELLO".into()))
            }
            request => {
                let mut flash = flash.lock().unwrap_or_else(PoisonError::into_inner);
                execute(&mut *flash, request, &mut data, &mut spare)
            }
        };
        let bytes = encode_reply(tag, &reply);
        counters.count_frame(&bytes);
        if stream.write_all(&bytes).is_err() || close {
            break;
        }
    }
    stream.shutdown(Shutdown::Both);
}

/// One request's `Flash` call. `data` and `spare` are the connection's page buffers.
fn execute<'a, F: Flash>(
    flash: &mut F,
    request: RawRequest<'_>,
    data: &'a mut [u8],
    spare: &'a mut [u8],
) -> RawReply<'a> {
    let result = match request {
        RawRequest::Read { issue_ns, page } => {
            return match flash.read_page(issue_ns, page, data, spare) {
                Ok(completed) => RawReply::Read { done_ns: completed.done_ns, status: completed.value, data, spare },
                Err(error) => RawReply::Error(error),
            }
        }
        RawRequest::Program { issue_ns, page, data, spare } => {
            flash.program_page(issue_ns, page, data, spare).map(|done| RawReply::Program { done_ns: done.done_ns })
        }
        RawRequest::Erase { issue_ns, block } => {
            flash.erase_block(issue_ns, block).map(|done| RawReply::Erase { done_ns: done.done_ns })
        }
        RawRequest::IsBad { block } => flash.is_bad_block(block).map(|bad| RawReply::IsBad { bad }),
        RawRequest::MarkBad { block } => flash.mark_bad_block(block).map(|()| RawReply::MarkBad),
        RawRequest::EraseCount { block } => flash.erase_count(block).map(|count| RawReply::EraseCount { count }),
        RawRequest::BusyUntil { chip } => {
            if chip < flash.chip_count() {
                Ok(RawReply::BusyUntil { done_ns: flash.busy_until_ns(fsoc_flash::ChipIndex(chip)) })
            } else {
                Err(NandError::OutOfRange {
                    what: "chip",
                    value: u64::from(chip),
                    limit: u64::from(flash.chip_count()),
                })
            }
        }
        RawRequest::Barrier => flash.write_barrier().map(|()| RawReply::Barrier),
        RawRequest::Flush => flash.flush().map(|()| RawReply::Flush),
        RawRequest::Hello { .. } => Err(NandError::Image("a second THELLO".into())),
    };
    result.unwrap_or_else(RawReply::Error)
}
