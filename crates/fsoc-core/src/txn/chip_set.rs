//! Chip-set validation at mount: every chip of the array must carry a superblock of the same
//! volume, with its own position as `chip_index`, before anything else is read.
//!
//! Invariants: the check reads exactly one superblock page per chip (a second copy only for a
//! chip whose first copy is unreadable), issued together so they overlap across chips: mount
//! reads grow by one page per added chip and mount time by one page read. It never writes.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use alloc::vec;
use alloc::vec::Vec;

use fsoc_flash::{Flash, ReadStatus};

use crate::address::LogAddress;
use crate::segment::layout::SUPERBLOCK_SEGMENT;
use crate::segment::Device;
use crate::txn::superblock::Superblock;
use crate::txn::volume::TxnError;

/// Why the chips given to mount do not form the volume (docs/FORMAT.md, "Chip set").
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChipSetError {
    #[error("the volume has {volume_chip_count} chips but only {array_chip_count} were given: a chip is missing")]
    MissingChip { volume_chip_count: u32, array_chip_count: u32 },
    #[error("the volume has {volume_chip_count} chips but {array_chip_count} were given: extra chips")]
    ExtraChip { volume_chip_count: u32, array_chip_count: u32 },
    #[error("chip in position {position} has no readable fsoc superblock (blank or foreign chip)")]
    NotAVolumeChip { position: u32 },
    #[error(
        "chip in position {position} belongs to volume {found_volume_id:#018x}, chip 0 to \
         {expected_volume_id:#018x}: chips from different volumes"
    )]
    ForeignChip { position: u32, expected_volume_id: u64, found_volume_id: u64 },
    #[error("chip in position {position} is chip {chip_index} of the volume: chips are out of order")]
    WrongOrder { position: u32, chip_index: u32 },
    #[error(
        "chip in position {position} describes a different array (chip count, geometry or format version) than chip 0"
    )]
    Inconsistent { position: u32 },
}

/// Checks that the array's chips are exactly the volume's chips, in order. `first` is the
/// superblock already read from chip 0.
pub fn check_chip_set<F: Flash>(device: &mut Device<F>, first: &Superblock) -> Result<(), TxnError> {
    let layout = device.layout();
    let array_chip_count = layout.chip_count;
    if first.chip_count > array_chip_count {
        return Err(ChipSetError::MissingChip { volume_chip_count: first.chip_count, array_chip_count }.into());
    }
    if first.chip_count < array_chip_count {
        return Err(ChipSetError::ExtraChip { volume_chip_count: first.chip_count, array_chip_count }.into());
    }
    check_one(0, first, first)?;
    if array_chip_count == 1 {
        return Ok(());
    }
    // Copy 0 of chip c is stripe page c of segment 0 (docs/FORMAT.md, "Superblock").
    let addresses: Vec<LogAddress> =
        (1..array_chip_count).map(|position| layout.address(SUPERBLOCK_SEGMENT, position)).collect();
    let mut buffers = vec![Vec::new(); addresses.len()];
    let mut statuses = Vec::new();
    device.read_many(&addresses, &mut buffers, &mut statuses)?;
    for ((position, buffer), status) in (1..array_chip_count).zip(&buffers).zip(&statuses) {
        let superblock = match decode_readable(*status, buffer) {
            Some(superblock) => superblock,
            None => {
                // Copy 1 of chip c is stripe page c + p.
                let address = layout.address(SUPERBLOCK_SEGMENT, position + array_chip_count);
                let mut copy = Vec::new();
                let status = device.read(address, &mut copy)?;
                decode_readable(status, &copy).ok_or(ChipSetError::NotAVolumeChip { position })?
            }
        };
        check_one(position, &superblock, first)?;
    }
    Ok(())
}

fn decode_readable(status: ReadStatus, bytes: &[u8]) -> Option<Superblock> {
    match status {
        ReadStatus::Erased | ReadStatus::Uncorrectable => None,
        ReadStatus::Clean | ReadStatus::Corrected { .. } => Superblock::decode(bytes).ok(),
    }
}

/// The superblock found in `position` must be chip `position` of chip 0's volume.
fn check_one(position: u32, found: &Superblock, first: &Superblock) -> Result<(), ChipSetError> {
    if found.volume_id != first.volume_id {
        return Err(ChipSetError::ForeignChip {
            position,
            expected_volume_id: first.volume_id,
            found_volume_id: found.volume_id,
        });
    }
    if found.chip_count != first.chip_count
        || found.geometry != first.geometry
        || found.format_version != first.format_version
    {
        return Err(ChipSetError::Inconsistent { position });
    }
    if found.chip_index != position {
        return Err(ChipSetError::WrongOrder { position, chip_index: found.chip_index });
    }
    Ok(())
}
