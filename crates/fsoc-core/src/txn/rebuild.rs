//! Rebuilding a replaced chip of a volume with redundancy, offline (docs/DESIGN.md,
//! "Redundancy across chips"): every block of the new chip is erased, then written page by page
//! with what the lost chip held, computed from the other chips: its superblock copies, its
//! metaroot pages from their twins, and, with parity, each log page from the rest of its row
//! (a parity page from the row's data pages).
//!
//! Invariants: only the chip being rebuilt is erased or programmed, and only the others are
//! read, so a power cut during a rebuild leaves the other chips as they were and the rebuild
//! can simply be run again (each block is erased before it is written); the new chip carries no
//! superblock until everything else is written (block 0 is erased first and written last), so
//! a rebuild cut short leaves a chip mount takes for missing; pages are programmed in
//! ascending order within each block.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use alloc::vec;
use alloc::vec::Vec;

use fsoc_flash::{BlockAddress, Flash, NandError, PageAddress, ReadStatus};

use crate::segment::device::{Device, PageTag, SPARE_TAG_BYTES};
use crate::segment::layout::{Redundancy, SUPERBLOCK_HOMES, SUPERBLOCK_SEGMENT};
use crate::segment::parity::{self, OpenRow};
use crate::txn::superblock::{Superblock, FORMAT_VERSION_SUPERBLOCK_HOMES};
use crate::txn::volume::{TxnError, Volume};

/// What a rebuild did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RebuildReport {
    /// Pages programmed on the new chip (superblock copies, metaroot copies, rebuilt log
    /// pages, parity pages).
    pub pages_written: u64,
    /// Pages read from the other chips.
    pub pages_read: u64,
    /// Rows whose data pages had no parity (never sealed: a power cut before their commit),
    /// whose page on the lost chip is therefore left erased: it held nothing committed.
    pub unsealed_rows: u64,
    /// Pages that could not be rebuilt because another page they depend on is unreadable too
    /// (a second fault). Committed data on them is lost; fsck reports where.
    pub unrecoverable_pages: u64,
    /// Blocks of the new chip that could not be erased (marked bad): only blocks with nothing
    /// to hold; one with pages to hold ends the rebuild with `TxnError::CannotRebuild`.
    pub bad_blocks: u32,
}

/// Segments done and the total, for a progress bar.
pub type RebuildProgress<'a> = &'a mut dyn FnMut(u32, u32);

/// Rebuilds chip `chip` of the volume on `flash`, whose chip in that place is new (or holds
/// anything: it is erased block by block). The volume must not be mounted. Returns the flash
/// (also after a failure, such as a power cut, so the rebuild can be run again) and what was
/// done.
pub fn rebuild_chip<F: Flash>(
    flash: F,
    chip: u32,
    progress: RebuildProgress<'_>,
) -> (F, Result<RebuildReport, TxnError>) {
    let mut device = Device::new(flash);
    let result = rebuild_on(&mut device, chip, progress);
    device.set_missing_chip(None);
    (device.into_flash(), result)
}

fn rebuild_on<F: Flash>(
    device: &mut Device<F>,
    chip: u32,
    progress: RebuildProgress<'_>,
) -> Result<RebuildReport, TxnError> {
    let layout = device.layout();
    if chip >= layout.chip_count {
        return Err(TxnError::WrongDevice { reason: "no chip in that position" });
    }
    // The volume's description from any other chip.
    let superblock = (0..layout.chip_count)
        .filter(|&other| other != chip)
        .find_map(|other| Volume::read_superblock_of(device, other).ok())
        .map(|(superblock, _)| superblock)
        .ok_or(TxnError::NotAVolume { reason: "no other chip holds a readable superblock" })?;
    // Every other chip must be this volume's, in its own position: rebuilding from a chip that
    // is blank, foreign or out of place would write garbage over the one asked for and lose
    // two chips' worth of pages.
    for other in (0..layout.chip_count).filter(|&other| other != chip) {
        let in_place = Volume::read_superblock_of(device, other).ok().is_some_and(|(found, _)| {
            found.volume_id == superblock.volume_id
                && found.chip_index == other
                && found.chip_count == layout.chip_count
        });
        if !in_place {
            return Err(TxnError::CannotRebuild {
                reason: "another chip of the volume is missing, blank or out of place: only one chip can be rebuilt, \
                         from all the others",
            });
        }
    }
    if superblock.chip_count != layout.chip_count || superblock.geometry != layout.geometry {
        return Err(TxnError::WrongDevice { reason: "the chips do not match the volume's superblock" });
    }
    if superblock.redundancy == Redundancy::None {
        return Err(TxnError::CannotRebuild {
            reason: "the volume was formatted without redundancy (fsoc mkfs --redundancy)",
        });
    }
    if superblock.redundancy == Redundancy::MirrorMeta {
        return Err(TxnError::CannotRebuild {
            reason: "the volume keeps only its metadata on two chips (mirror-meta): the lost chip's file data \
                     cannot be rebuilt; copy the files off the read-only volume (unreadable ones answer EIO) \
                     to a new volume",
        });
    }
    device.set_redundancy(superblock.redundancy);
    device.set_metaroot_areas(superblock.metaroot_areas);
    device.set_missing_chip(Some(chip));
    let mut rebuild = Rebuild { device, chip, report: RebuildReport::default(), homes: Vec::new() };
    let segment_count = layout.segment_count();
    // The new chip's superblock goes first and comes back last: until the rest is written the
    // chip holds none, so a rebuild cut short leaves a chip that mount takes for missing (and
    // rebuilds on every read), never one that looks whole with half its pages erased.
    // (Both homes, from version 9 on: a chip that held this volume before keeps its old
    // generations there, and mount looks in the second home when block 0 is erased.)
    let homes = superblock.format_version >= FORMAT_VERSION_SUPERBLOCK_HOMES;
    for home in if homes { SUPERBLOCK_HOMES.to_vec() } else { vec![SUPERBLOCK_SEGMENT] } {
        let now_ns = rebuild.device.now_ns();
        match rebuild.device.flash_mut().erase_block(now_ns, BlockAddress::new(chip, home)) {
            Ok(_) | Err(NandError::BadBlock { .. } | NandError::OperationFailed { .. } | NandError::WornOut { .. }) => {
            }
            Err(error) => return Err(error.into()),
        }
    }
    rebuild.device.write_barrier()?;
    // Version 9's second superblock home comes back just before block 0: while either holds
    // the superblock the chip looks whole, so both wait until every other segment is written.
    let second_home = homes.then_some(SUPERBLOCK_HOMES[1]);
    let order = (SUPERBLOCK_SEGMENT + 1..segment_count)
        .filter(|&segment| Some(segment) != second_home)
        .chain(second_home)
        .chain([SUPERBLOCK_SEGMENT]);
    rebuild.homes = if homes { SUPERBLOCK_HOMES.to_vec() } else { vec![SUPERBLOCK_SEGMENT] };
    for (done, segment) in order.enumerate() {
        rebuild.segment(segment)?;
        progress(u32::try_from(done + 1).unwrap_or(segment_count), segment_count);
    }
    rebuild.device.write_barrier()?;
    Ok(rebuild.report)
}

struct Rebuild<'d, F: Flash> {
    device: &'d mut Device<F>,
    chip: u32,
    report: RebuildReport,
    /// The segments whose blocks hold superblock generations (block 0; from version 9 also
    /// the second home), copied page by page from another chip.
    homes: Vec<u32>,
}

/// A page's data and spare bytes, to program.
type PageBytes = (Vec<u8>, Vec<u8>);

/// A page as read from another chip.
struct Read {
    status: ReadStatus,
    data: Vec<u8>,
    spare: Vec<u8>,
}

impl<F: Flash> Rebuild<'_, F> {
    fn segment(&mut self, segment: u32) -> Result<(), TxnError> {
        let block = BlockAddress::new(self.chip, segment);
        let now_ns = self.device.now_ns();
        // A block of the new chip that cannot be erased is marked bad. If it had nothing to
        // hold (a free or retired segment), the log retires its segment when it next opens it;
        // if it had, the chip cannot be made whole: the rebuild stops before the superblock, so
        // the chip stays missing and the volume degraded, with every page still rebuilt on read.
        let erased = match self.device.flash_mut().erase_block(now_ns, block) {
            Ok(_) => true,
            Err(NandError::BadBlock { .. } | NandError::OperationFailed { .. } | NandError::WornOut { .. }) => {
                self.report.bad_blocks += 1;
                // Best effort: the block is not used either way.
                let _ = self.device.flash_mut().mark_bad_block(block);
                false
            }
            Err(error) => return Err(error.into()),
        };
        let layout = self.device.layout();
        let spare_bytes = layout.spare_size_bytes();
        for row in 0..layout.geometry.pages_per_block {
            let target = PageAddress::new(self.chip, segment, row);
            let page = if self.homes.contains(&segment) {
                // Every generation the other chips hold (pages 0 and 1 as formatted, then two
                // a rewrite), as this chip's.
                let donor = (0..layout.chip_count).find(|&other| other != self.chip).unwrap_or(0);
                let read = self.read(PageAddress::new(donor, segment, row))?;
                match read.status {
                    ReadStatus::Clean | ReadStatus::Corrected { .. } => {
                        Superblock::decode(&read.data).ok().map(|found| {
                            let bytes = Superblock { chip_index: self.chip, ..found }.encode(layout.page_size_bytes());
                            (bytes, tag_spare(PageTag::Superblock, spare_bytes))
                        })
                    }
                    ReadStatus::Erased | ReadStatus::Uncorrectable => None,
                }
            } else if layout.is_metaroot_area(segment) {
                // Stripe page k's twin is k ^ 1, on the neighbouring chip.
                let k = row * layout.chip_count + self.chip;
                let read = self.read(layout.stripe_page(segment, k ^ 1))?;
                match read.status {
                    ReadStatus::Erased => None,
                    ReadStatus::Uncorrectable => {
                        self.report.unrecoverable_pages += 1;
                        None
                    }
                    ReadStatus::Clean | ReadStatus::Corrected { .. } => Some((read.data, read.spare)),
                }
            } else if layout.is_parity_segment(segment) {
                self.log_page(segment, row)?
            } else {
                None
            };
            if let Some((data, spare)) = page {
                if !erased {
                    return Err(TxnError::CannotRebuild {
                        reason: "a block of the new chip cannot be erased and would hold pages of the volume: the \
                                 chip stays missing (the volume reads degraded); rebuild onto another chip",
                    });
                }
                let now_ns = self.device.now_ns();
                self.device.flash_mut().program_page(now_ns, target, &data, &spare)?;
                self.report.pages_written += 1;
            }
        }
        // Reads wait, programs do not: keep the clock honest per segment.
        self.device.barrier();
        Ok(())
    }

    /// The lost chip's page of row `row` of a log segment: rebuilt data, or the row's parity.
    fn log_page(&mut self, segment: u32, row: u32) -> Result<Option<PageBytes>, TxnError> {
        let layout = self.device.layout();
        let parity_chip = layout.parity_chip(segment, row);
        let mut others = Vec::new();
        let lost = self.chip;
        for other in (0..layout.chip_count).filter(|&other| other != lost) {
            let read = self.read(PageAddress::new(other, segment, row))?;
            match read.status {
                ReadStatus::Erased => {}
                ReadStatus::Uncorrectable => {
                    self.report.unrecoverable_pages += 1;
                    return Ok(None);
                }
                ReadStatus::Clean | ReadStatus::Corrected { .. } => others.push((other == parity_chip, read)),
            }
        }
        let spare_bytes = layout.spare_size_bytes();
        let page_bytes = layout.page_size_bytes();
        if self.chip == parity_chip {
            if others.is_empty() {
                return Ok(None);
            }
            let mut open = OpenRow::new(segment, row, page_bytes);
            for (_, read) in &others {
                open.add(&read.data, &read.spare);
            }
            let spare = open.parity_spare(spare_bytes);
            return Ok(Some((open.data, spare)));
        }
        if others.is_empty() {
            return Ok(None);
        }
        let views: Vec<(bool, &[u8], &[u8])> =
            others.iter().map(|(is_parity, read)| (*is_parity, read.data.as_slice(), read.spare.as_slice())).collect();
        let Some((data, tag)) = parity::rebuild(page_bytes, &views) else {
            self.report.unsealed_rows += 1;
            return Ok(None);
        };
        if parity::is_empty_slot(&data, &tag) {
            return Ok(None);
        }
        let mut spare = vec![0xFF; spare_bytes];
        for (to, from) in spare.iter_mut().zip(tag) {
            *to = from;
        }
        Ok(Some((data, spare)))
    }

    fn read(&mut self, page: PageAddress) -> Result<Read, TxnError> {
        let layout = self.device.layout();
        let mut data = vec![0u8; layout.page_size_bytes()];
        let mut spare = vec![0u8; layout.spare_size_bytes()];
        self.report.pages_read += 1;
        let now_ns = self.device.now_ns();
        let status = match self.device.flash().read_page(now_ns, page, &mut data, &mut spare) {
            Ok(done) => {
                self.device.wait_until(done.done_ns);
                done.value
            }
            // A retired segment's bad block holds nothing to rebuild from.
            Err(NandError::BadBlock { .. }) => ReadStatus::Uncorrectable,
            Err(error) => return Err(error.into()),
        };
        Ok(Read { status, data, spare })
    }
}

fn tag_spare(tag: PageTag, spare_bytes: usize) -> Vec<u8> {
    let mut spare = vec![0xFF; spare_bytes.max(SPARE_TAG_BYTES)];
    tag.encode(&mut spare);
    spare.truncate(spare_bytes);
    spare
}
