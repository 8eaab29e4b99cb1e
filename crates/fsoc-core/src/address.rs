//! Log addresses: the only page addresses layers above the segment log ever see.

/// A page in the volume's log, numbered `segment_index * pages_per_segment + page_in_segment`.
/// `LogAddress::NULL` (all ones, like erased flash) means "no page".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogAddress(pub u32);

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
