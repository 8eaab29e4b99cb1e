//! What tools, tests and benchmarks may look at below the file system, read-only except where
//! named: the flash (for a simulator's statistics and fault injection), the device's virtual
//! clock, the layout, the superblock, the committed metaroot and the segment table. The layers'
//! own structures (`Volume`, `SegmentLog`, `Device`) stay private to the crate; this is the
//! whole window onto them.

use fsoc_flash::{Flash, Nanos};

use crate::btree::TreeCounters;
use crate::fs::FileSystem;
use crate::segment::{Layout, SegmentTable};
use crate::txn::nvram_log::NvramMountReport;
use crate::txn::{Metaroot, Superblock, WornOut};

impl<F: Flash> FileSystem<F> {
    /// The flash under the volume.
    pub fn flash(&self) -> &F {
        self.volume.log.device().flash()
    }

    /// The flash, mutably: for a simulator's fault injection and counter resets between
    /// measurements. Programming or erasing through it behind the file system's back breaks
    /// the volume, as it would on a real device.
    pub fn flash_mut(&mut self) -> &mut F {
        self.volume.log.device_mut().flash_mut()
    }

    /// The device's virtual clock (simulated time): when everything waited for has completed.
    pub fn device_now_ns(&self) -> Nanos {
        self.volume.log.device().now_ns()
    }

    /// Waits for every operation issued so far (moves the virtual clock to the last chip's
    /// completion), so a measurement that follows starts from an idle array.
    pub fn wait_for_device(&mut self) {
        self.volume.log.device_mut().barrier();
    }

    /// Programs and erases issued since mount (failed ones included): a simulation's count of
    /// where a power cut may fall.
    pub fn flash_operations_issued(&self) -> u64 {
        self.volume.log.device().operations_issued()
    }

    /// `flash_operations_issued` when the newest commit became durable.
    pub fn last_commit_operations(&self) -> u64 {
        self.volume.last_commit_operations
    }

    pub fn layout(&self) -> Layout {
        self.volume.layout()
    }

    /// The chip a volume with redundancy runs without (dead or blank at mount, or failed since):
    /// reads rebuild its pages, and the volume is read-only until `rebuild_chip` restores it.
    pub fn missing_chip(&self) -> Option<u32> {
        self.volume.missing_chip()
    }

    /// Blocks marked bad (factory or grown) on each chip, in chip order: the flash's own marks
    /// (a RAM table on every backend, so no page is read); 0 for a missing chip.
    pub fn bad_blocks_per_chip(&self) -> alloc::vec::Vec<u32> {
        let layout = self.volume.layout();
        let flash = self.volume.log.device().flash();
        let missing = self.volume.missing_chip();
        (0..layout.chip_count)
            .map(|chip| {
                if Some(chip) == missing {
                    return 0;
                }
                let bad = (0..layout.segment_count())
                    .filter(|&block| flash.is_bad_block(fsoc_flash::BlockAddress::new(chip, block)).unwrap_or(false))
                    .count();
                u32::try_from(bad).unwrap_or(u32::MAX)
            })
            .collect()
    }

    /// Reads answered by rebuilding a page from its row's parity or its twin, since mount.
    pub fn rebuilt_reads(&self) -> u64 {
        self.volume.log.device().rebuilt_reads()
    }

    /// The NVRAM's size and technology code (`NvramDevice::technology_code`), on a volume that
    /// keeps its transaction points there.
    pub fn nvram_info(&self) -> Option<(u64, u8)> {
        self.volume.nvram_info()
    }

    /// (used, capacity) bytes of the NVRAM log's records.
    pub fn nvram_usage(&self) -> Option<(u64, u64)> {
        self.volume.nvram_usage()
    }

    /// What mount read from the NVRAM (accesses, bytes, records replayed).
    pub fn nvram_mount_report(&self) -> NvramMountReport {
        self.volume.nvram_mount_report()
    }

    /// The superblock the volume was mounted with.
    pub fn superblock(&self) -> &Superblock {
        &self.volume.superblock
    }

    /// The newest committed metaroot.
    pub fn committed(&self) -> &Metaroot {
        self.volume.committed()
    }

    /// The segment table, if it has been read (mount reads it only after a crash that left a
    /// delta commit, or on the first write; `space` and `statfs` read it).
    pub fn segment_table(&self) -> Option<&SegmentTable> {
        self.volume.log.is_table_loaded().then(|| self.volume.log.table())
    }

    /// Counters of the directory tree's node cache (page reads, hits), for read-cost tests.
    pub fn directory_tree_counters(&self) -> TreeCounters {
        self.volume.directory.counters()
    }

    /// End of life, if the volume has reached it (docs/DESIGN.md, "End of life"): why the flash
    /// can no longer guarantee writes. The volume is then read-only.
    pub fn wear_out(&self) -> Option<WornOut> {
        self.volume.wear_out()
    }

    /// (log segments failed in service, log segments put in service): `Volume::failed_segments`.
    pub fn failed_segments(&self) -> Option<(u32, u32)> {
        self.volume.failed_segments()
    }

    /// Whether a failed change has made the volume refuse further changes.
    pub fn is_poisoned(&self) -> bool {
        self.volume.is_poisoned()
    }

    /// Makes the volume refuse further changes (its last commit stays what mount finds): for a
    /// caller that caught a panic mid-change, as the FUSE adapter does.
    pub fn poison(&mut self) {
        self.volume.poison();
    }
}

/// Test-only access to the trees and the log, to build the hostile and damaged images the
/// hardening tests need (a record rewritten with a valid checksum chain, a crafted root).
/// Behind the `craft` feature, which only dev-dependencies enable: no product build has it.
#[cfg(feature = "craft")]
pub struct Craft<'a, F: Flash> {
    pub directory: &'a mut crate::btree::Tree,
    pub allocation: &'a mut crate::btree::Tree,
    pub log: &'a mut crate::segment::SegmentLog<F>,
}

#[cfg(feature = "craft")]
impl<F: Flash> Craft<'_, F> {
    pub fn layout(&self) -> Layout {
        self.log.layout()
    }
}

#[cfg(feature = "craft")]
impl<F: Flash> FileSystem<F> {
    /// The trees and the log, bypassing every check (`craft` feature; tests only).
    pub fn craft(&mut self) -> Craft<'_, F> {
        let volume = &mut self.volume;
        Craft { directory: &mut volume.directory, allocation: &mut volume.allocation, log: &mut volume.log }
    }
}
