//! Adapter that lets the B+trees allocate and read pages through the segment log. It keeps the
//! segment layer's own error, so a power loss under a tree operation is reported as such.

use alloc::vec::Vec;

use fsoc_media::{Flash, NandError};

use crate::address::LogAddress;
use crate::btree::{NodeStore, NodeTag, TreeError};
use crate::segment::{PageTag, SegmentError, SegmentLog};

pub struct LogNodeStore<'a, F: Flash> {
    pub log: &'a mut SegmentLog<F>,
    /// The segment-layer error behind the last `TreeError::Io` / `NoSpace`.
    pub error: Option<SegmentError>,
}

impl<'a, F: Flash> LogNodeStore<'a, F> {
    pub fn new(log: &'a mut SegmentLog<F>) -> Self {
        LogNodeStore { log, error: None }
    }

    fn convert(&mut self, address: LogAddress, error: SegmentError) -> TreeError {
        let converted = match &error {
            SegmentError::NoFreeSegment => TreeError::NoSpace,
            SegmentError::Unreadable { .. } => TreeError::Io { address, reason: "page unreadable (uncorrectable or erased)" },
            SegmentError::Media(NandError::PowerLost) => TreeError::Io { address, reason: "power lost" },
            SegmentError::Media(_) => TreeError::Io { address, reason: "flash error" },
            SegmentError::CorruptTable { .. } => TreeError::Io { address, reason: "segment table corrupt" },
            SegmentError::Accounting { .. } => TreeError::Io { address, reason: "segment accounting broken by a corrupt record" },
        };
        self.error = Some(error);
        converted
    }
}

impl<F: Flash> NodeStore for LogNodeStore<'_, F> {
    fn node_size_bytes(&self) -> usize {
        self.log.layout().page_size_bytes()
    }

    fn read_page(&mut self, address: LogAddress, out: &mut Vec<u8>) -> Result<(), TreeError> {
        self.log.read(address, out).map_err(|error| self.convert(address, error))
    }

    fn append_node(&mut self, bytes: &[u8], tag: NodeTag) -> Result<LogAddress, TreeError> {
        let page_tag = PageTag::Node { tree_id: tag.tree_id, level: tag.level };
        self.log.append(bytes, page_tag).map_err(|error| self.convert(LogAddress::NULL, error))
    }

    fn release(&mut self, address: LogAddress) {
        self.log.release(address);
    }
}
