//! Rreaddir's data: `DirectoryEntries` (checked entries, read in place) and
//! `DirectoryEntryWriter` (appends entries to a reply in the caller's buffer up to the byte
//! limit the client asked for, then writes the header in front).
//! **Invariant:** a `DirectoryEntries` holds only whole, well-formed entries, so iterating it
//! cannot fail.
#![deny(clippy::indexing_slicing, clippy::host_endian_bytes)]

use crate::constants::{message_type, DIRECTORY_ENTRY_FIXED_SIZE_BYTES, NAME_LENGTH_MAX_BYTES, READ_HEADER_SIZE_BYTES};
use crate::error::{DecodeError, EncodeError};
use crate::reader::Reader;
use crate::sink::{Sink, SliceWriter};
use crate::types::{Qid, Tag};

/// One entry of a directory listing: qid[13] offset[8] type[1] name[s].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DirectoryEntry<'a> {
    pub qid: Qid,
    /// Where the next Treaddir continues to read the directory after this entry.
    pub offset: u64,
    /// constants::dirent_type.
    pub dirent_type: u8,
    pub name: &'a [u8],
}

impl DirectoryEntry<'_> {
    /// The bytes this entry takes in Rreaddir data.
    pub fn encoded_size_bytes(&self) -> usize {
        DIRECTORY_ENTRY_FIXED_SIZE_BYTES + self.name.len()
    }

    fn read<'a>(reader: &mut Reader<'a>) -> Result<DirectoryEntry<'a>, DecodeError> {
        Ok(DirectoryEntry {
            qid: reader.qid()?,
            offset: reader.u64()?,
            dirent_type: reader.u8()?,
            name: reader.string("name", NAME_LENGTH_MAX_BYTES)?,
        })
    }

    fn write<S: Sink>(&self, sink: &mut S) -> Result<(), EncodeError> {
        sink.qid(&self.qid)?;
        sink.u64(self.offset)?;
        sink.u8(self.dirent_type)?;
        sink.string("Rreaddir entry", "name", self.name, NAME_LENGTH_MAX_BYTES)
    }
}

/// The data of an Rreaddir: zero or more whole entries, checked when made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DirectoryEntries<'a> {
    bytes: &'a [u8],
}

impl<'a> DirectoryEntries<'a> {
    /// Checks that `bytes` is a sequence of whole entries with names of at most 255 bytes.
    /// Each entry takes at least 24 bytes, so the loop ends within `bytes.len() / 24` steps.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, DecodeError> {
        let mut reader = Reader::new("Rreaddir entry", bytes);
        while reader.remaining_bytes() > 0 {
            DirectoryEntry::read(&mut reader)?;
        }
        Ok(DirectoryEntries { bytes })
    }

    /// The entries as they are on the wire.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn iter(&self) -> DirectoryEntryIter<'a> {
        DirectoryEntryIter { reader: Reader::new("Rreaddir entry", self.bytes) }
    }
}

impl<'a> IntoIterator for DirectoryEntries<'a> {
    type Item = DirectoryEntry<'a>;
    type IntoIter = DirectoryEntryIter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// The entries of a `DirectoryEntries`, in order.
pub struct DirectoryEntryIter<'a> {
    reader: Reader<'a>,
}

impl<'a> Iterator for DirectoryEntryIter<'a> {
    type Item = DirectoryEntry<'a>;
    fn next(&mut self) -> Option<DirectoryEntry<'a>> {
        if self.reader.remaining_bytes() == 0 {
            return None;
        }
        let entry = DirectoryEntry::read(&mut self.reader);
        // `parse` or the writer checked every entry, so this cannot fail.
        debug_assert!(entry.is_ok(), "checked directory entries failed to decode: {entry:?}");
        entry.ok()
    }
}

/// Builds an Rreaddir in place: entries go after a reserved header, at most `count` bytes of
/// them (the Treaddir's count, and what fits the buffer); `finish` writes the header.
pub struct DirectoryEntryWriter<'b> {
    writer: SliceWriter<'b>,
    /// Where entries must end: header plus the smaller of the client's count and the buffer.
    end: usize,
}

impl<'b> DirectoryEntryWriter<'b> {
    /// `buffer` is the reply buffer (at most msize bytes); `count` is the Treaddir's count.
    pub fn new(buffer: &'b mut [u8], count: u32) -> Result<Self, EncodeError> {
        let capacity_bytes = buffer.len();
        if capacity_bytes < READ_HEADER_SIZE_BYTES {
            return Err(EncodeError::BufferTooSmall { needed_bytes: READ_HEADER_SIZE_BYTES, capacity_bytes });
        }
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        let end = READ_HEADER_SIZE_BYTES.saturating_add(count).min(capacity_bytes);
        Ok(DirectoryEntryWriter { writer: SliceWriter::new(buffer, READ_HEADER_SIZE_BYTES), end })
    }

    /// Appends `entry` if it fits: Ok(true) when added, Ok(false) when it would pass the limit
    /// (nothing written; the listing continues in the next Treaddir from the last entry's
    /// offset). A name above 255 bytes is an error.
    pub fn push(&mut self, entry: &DirectoryEntry<'_>) -> Result<bool, EncodeError> {
        if entry.name.len() > NAME_LENGTH_MAX_BYTES {
            return Err(EncodeError::StringTooLong {
                structure: "Rreaddir entry",
                field: "name",
                length_bytes: entry.name.len(),
                limit_bytes: NAME_LENGTH_MAX_BYTES,
            });
        }
        if self.writer.position.saturating_add(entry.encoded_size_bytes()) > self.end {
            return Ok(false);
        }
        let start = self.writer.position;
        entry.write(&mut self.writer)?;
        assert_eq!(self.writer.position - start, entry.encoded_size_bytes(), "entry size disagrees with its bytes");
        Ok(true)
    }

    /// The entries written so far.
    pub fn entries(&self) -> DirectoryEntries<'_> {
        DirectoryEntries { bytes: self.writer.written().get(READ_HEADER_SIZE_BYTES..).unwrap_or(&[]) }
    }

    /// Bytes of entries so far.
    pub fn data_size_bytes(&self) -> usize {
        self.writer.position - READ_HEADER_SIZE_BYTES
    }

    /// Writes the Rreaddir header in front of the entries and returns the message's length:
    /// the reply is the buffer's first that many bytes.
    pub fn finish(self, tag: Tag) -> usize {
        let size_bytes = self.writer.position;
        let data_size_bytes = size_bytes - READ_HEADER_SIZE_BYTES;
        assert!(size_bytes <= self.end, "entries ran past their limit: {size_bytes} > {}", self.end);
        // Both fit four bytes: `end` is at most the header plus a u32 count.
        let size_field = u32::try_from(size_bytes).unwrap_or(u32::MAX);
        let count_field = u32::try_from(data_size_bytes).unwrap_or(u32::MAX);
        let buffer = self.writer.into_buffer();
        let mut header = SliceWriter::new(buffer, 0);
        let written = header
            .u32(size_field)
            .and_then(|()| header.u8(message_type::RREADDIR))
            .and_then(|()| header.u16(tag.0))
            .and_then(|()| header.u32(count_field));
        // `new` checked that the buffer holds the header.
        assert!(written.is_ok(), "Rreaddir header did not fit a checked buffer: {written:?}");
        size_bytes
    }
}
