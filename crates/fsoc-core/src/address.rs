//! Log addresses: the only page addresses layers above the segment log ever see.

use fsoc_flash::codec::{DecodeError, Reader, Writer};

/// A page in the volume's log, numbered `segment_index * pages_per_segment + page_in_segment`.
/// `LogAddress::NULL` (all ones, like erased flash) means "no page".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogAddress(pub u32);

/// As a person reads it in a message: "log page 1234", or "no page" for NULL.
impl core::fmt::Display for LogAddress {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if *self == LogAddress::NULL {
            formatter.write_str("no page")
        } else {
            write!(formatter, "log page {}", self.0)
        }
    }
}

impl LogAddress {
    pub const NULL: LogAddress = LogAddress(u32::MAX);
    pub fn is_null(self) -> bool {
        self == LogAddress::NULL
    }
}

/// A pointer to a node or page on flash: its address and the CRC-32C of its content, so a
/// torn or misdirected write is detected when the pointer is followed (docs/FORMAT.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PagePointer {
    pub address: LogAddress,
    pub checksum: u32,
}

impl PagePointer {
    pub const NULL: PagePointer = PagePointer { address: LogAddress::NULL, checksum: 0 };
    pub const ENCODED_BYTES: usize = 8;
}

/// Reads a `PagePointer` (address, then checksum, both little-endian u32) from the codec.
pub(crate) trait ReadPointer {
    fn pointer(&mut self) -> Result<PagePointer, DecodeError>;
}

impl ReadPointer for Reader<'_> {
    fn pointer(&mut self) -> Result<PagePointer, DecodeError> {
        let address = LogAddress(self.u32_le()?);
        let checksum = self.u32_le()?;
        Ok(PagePointer { address, checksum })
    }
}

/// Writes a `PagePointer` in the layout `ReadPointer` reads.
pub(crate) trait WritePointer {
    fn pointer(&mut self, pointer: PagePointer);
}

impl WritePointer for Writer {
    fn pointer(&mut self, pointer: PagePointer) {
        self.u32_le(pointer.address.0);
        self.u32_le(pointer.checksum);
    }
}
