//! `Sink`: where the encoders put bytes. `Counter` measures a message without writing it;
//! `SliceWriter` writes into the caller's buffer, bounds-checked. One encoder per message runs
//! on both, so the size field and the bytes that follow it cannot disagree.
#![deny(clippy::indexing_slicing, clippy::host_endian_bytes)]

use crate::error::EncodeError;
use crate::types::{Qid, Timestamp};

/// A byte destination. Public only inside the crate's sealed `Encode` trait.
pub trait Sink {
    fn bytes(&mut self, bytes: &[u8]) -> Result<(), EncodeError>;

    fn u8(&mut self, value: u8) -> Result<(), EncodeError> {
        self.bytes(&[value])
    }
    fn u16(&mut self, value: u16) -> Result<(), EncodeError> {
        self.bytes(&value.to_le_bytes())
    }
    fn u32(&mut self, value: u32) -> Result<(), EncodeError> {
        self.bytes(&value.to_le_bytes())
    }
    fn u64(&mut self, value: u64) -> Result<(), EncodeError> {
        self.bytes(&value.to_le_bytes())
    }
    fn qid(&mut self, qid: &Qid) -> Result<(), EncodeError> {
        self.u8(qid.qid_type.0)?;
        self.u32(qid.version)?;
        self.u64(qid.path)
    }
    fn timestamp(&mut self, time: &Timestamp) -> Result<(), EncodeError> {
        self.u64(time.seconds)?;
        self.u64(time.nanoseconds)
    }
    /// length[2] then the bytes; a string above `limit_bytes` is refused, so the encoder never
    /// writes what the decoder would reject.
    fn string(
        &mut self,
        structure: &'static str,
        field: &'static str,
        bytes: &[u8],
        limit_bytes: usize,
    ) -> Result<(), EncodeError> {
        let too_long = EncodeError::StringTooLong { structure, field, length_bytes: bytes.len(), limit_bytes };
        if bytes.len() > limit_bytes {
            return Err(too_long);
        }
        self.u16(u16::try_from(bytes.len()).map_err(|_| too_long)?)?;
        self.bytes(bytes)
    }
    /// count[4] then the bytes. A count that does not fit four bytes cannot be in a message
    /// whose size fits four bytes; `encode` refuses such a message before writing.
    fn counted_data(&mut self, bytes: &[u8]) -> Result<(), EncodeError> {
        let count = u32::try_from(bytes.len()).map_err(|_| EncodeError::MessageTooLarge { size_bytes: bytes.len() })?;
        self.u32(count)?;
        self.bytes(bytes)
    }
}

/// Counts bytes, so `encode` knows the size field and whether the buffer is big enough
/// before it writes anything.
#[derive(Default)]
pub struct Counter {
    pub size_bytes: usize,
}

impl Sink for Counter {
    fn bytes(&mut self, bytes: &[u8]) -> Result<(), EncodeError> {
        self.size_bytes = self.size_bytes.saturating_add(bytes.len());
        Ok(())
    }
}

/// Writes into a caller's buffer from `position` on.
pub struct SliceWriter<'b> {
    buffer: &'b mut [u8],
    pub position: usize,
}

impl<'b> SliceWriter<'b> {
    pub fn new(buffer: &'b mut [u8], position: usize) -> Self {
        SliceWriter { buffer, position }
    }

    /// The buffer's bytes before `position`.
    pub fn written(&self) -> &[u8] {
        self.buffer.get(..self.position).unwrap_or(&[])
    }

    pub fn into_buffer(self) -> &'b mut [u8] {
        self.buffer
    }
}

impl Sink for SliceWriter<'_> {
    fn bytes(&mut self, bytes: &[u8]) -> Result<(), EncodeError> {
        let end = self.position.saturating_add(bytes.len());
        let capacity_bytes = self.buffer.len();
        let target = self
            .buffer
            .get_mut(self.position..end)
            .ok_or(EncodeError::BufferTooSmall { needed_bytes: end, capacity_bytes })?;
        target.copy_from_slice(bytes);
        self.position = end;
        Ok(())
    }
}
