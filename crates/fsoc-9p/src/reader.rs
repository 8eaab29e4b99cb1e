//! `Reader`: the bounds-checked little-endian cursor every decoder reads untrusted bytes
//! through. It returns `DecodeError` instead of panicking and never allocates: strings and
//! data come back as slices of the input.
#![deny(clippy::indexing_slicing, clippy::host_endian_bytes)]

use crate::error::DecodeError;
use crate::types::{Qid, QidType, Timestamp};

pub(crate) struct Reader<'a> {
    structure: &'static str,
    remaining: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(structure: &'static str, bytes: &'a [u8]) -> Self {
        Reader { structure, remaining: bytes }
    }

    fn truncated(&self, needed_bytes: usize) -> DecodeError {
        DecodeError::Truncated { structure: self.structure, needed_bytes, actual_bytes: self.remaining.len() }
    }

    pub(crate) fn remaining_bytes(&self) -> usize {
        self.remaining.len()
    }

    pub(crate) fn bytes(&mut self, count: usize) -> Result<&'a [u8], DecodeError> {
        if count > self.remaining.len() {
            return Err(self.truncated(count));
        }
        let (head, rest) = self.remaining.split_at(count);
        self.remaining = rest;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        let (head, rest) = self.remaining.split_first().ok_or_else(|| self.truncated(1))?;
        self.remaining = rest;
        Ok(*head)
    }

    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        let (head, rest) = self.remaining.split_first_chunk::<2>().ok_or_else(|| self.truncated(2))?;
        self.remaining = rest;
        Ok(u16::from_le_bytes(*head))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        let (head, rest) = self.remaining.split_first_chunk::<4>().ok_or_else(|| self.truncated(4))?;
        self.remaining = rest;
        Ok(u32::from_le_bytes(*head))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        let (head, rest) = self.remaining.split_first_chunk::<8>().ok_or_else(|| self.truncated(8))?;
        self.remaining = rest;
        Ok(u64::from_le_bytes(*head))
    }

    pub(crate) fn qid(&mut self) -> Result<Qid, DecodeError> {
        Ok(Qid { qid_type: QidType(self.u8()?), version: self.u32()?, path: self.u64()? })
    }

    pub(crate) fn timestamp(&mut self) -> Result<Timestamp, DecodeError> {
        Ok(Timestamp { seconds: self.u64()?, nanoseconds: self.u64()? })
    }

    /// A string: length[2] then that many bytes, which may be any bytes (9P names are not
    /// required to be UTF-8). A length above `limit_bytes` is an error even if the bytes follow.
    pub(crate) fn string(&mut self, field: &'static str, limit_bytes: usize) -> Result<&'a [u8], DecodeError> {
        let length_bytes = usize::from(self.u16()?);
        if length_bytes > limit_bytes {
            return Err(DecodeError::StringTooLong { structure: self.structure, field, length_bytes, limit_bytes });
        }
        self.bytes(length_bytes)
    }

    /// count[4] then that many bytes (Rread, Twrite, Rreaddir).
    pub(crate) fn counted_data(&mut self) -> Result<&'a [u8], DecodeError> {
        let count = self.u32()?;
        // A count above usize::MAX cannot be satisfied by any buffer; say so as truncation.
        let count = usize::try_from(count).map_err(|_| self.truncated(usize::MAX))?;
        self.bytes(count)
    }

    /// The message must end here.
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        if self.remaining.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes { structure: self.structure, extra_bytes: self.remaining.len() })
        }
    }
}
