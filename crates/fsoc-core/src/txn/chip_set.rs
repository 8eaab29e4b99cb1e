//! Chip-set validation at mount: every chip of the array must carry a superblock of the same
//! volume, with its own position as `chip_index`, before anything else is read.
//!
//! Invariants: the check reads exactly one superblock page per chip (a second copy only for a
//! chip whose first copy is unreadable), issued together so they overlap across chips: mount
//! reads grow by one page per added chip and mount time by one page read. It never writes.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use alloc::vec;
use alloc::vec::Vec;

use fsoc_flash::{Flash, NandError, PageAddress, ReadStatus};

use crate::address::LogAddress;
use crate::segment::layout::{Redundancy, SUPERBLOCK_HOMES, SUPERBLOCK_SEGMENT};
use crate::segment::Device;
use crate::txn::superblock::{Superblock, FORMAT_VERSION_SUPERBLOCK_HOMES};
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
/// superblock already read from chip `first_chip`: 0, or when chip 0 is gone from a volume
/// with redundancy, the chip that named the volume instead (`first` then says `chip_index` 0).
///
/// A volume with redundancy may lack one chip: dead (its reads fail) or blank (no superblock,
/// a replacement not yet rebuilt). That chip is returned, and its pages are rebuilt from the
/// others. A chip of another volume or in the wrong place is refused all the same.
pub fn check_chip_set<F: Flash>(
    device: &mut Device<F>,
    first: &Superblock,
    first_chip: u32,
) -> Result<Option<u32>, TxnError> {
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
        return Ok(None);
    }
    let tolerate_one = first.redundancy != Redundancy::None;
    // Copy 0 of chip c is stripe page c of segment 0 (docs/FORMAT.md, "Superblock").
    // Chip 0 was read (or found missing: then the chip read instead is checked here again).
    let positions: Vec<u32> = (1..array_chip_count).collect();
    let mut missing = (first_chip != 0).then_some(0);
    let addresses: Vec<LogAddress> =
        positions.iter().map(|&position| layout.address(SUPERBLOCK_SEGMENT, position)).collect();
    let mut buffers = vec![Vec::new(); addresses.len()];
    let mut statuses = Vec::new();
    match device.read_many(&addresses, &mut buffers, &mut statuses) {
        Ok(()) => {}
        Err(NandError::ChipFailed { .. }) if tolerate_one => {
            // One by one, so the chips that answer are still checked.
            statuses.clear();
            for (address, buffer) in addresses.iter().zip(buffers.iter_mut()) {
                let status = match device.read(*address, buffer) {
                    Ok(status) => status,
                    // The dead chip: no superblock there, as a blank one.
                    Err(NandError::ChipFailed { .. }) => ReadStatus::Uncorrectable,
                    Err(error) => return Err(error.into()),
                };
                statuses.push(status);
            }
        }
        Err(error) => return Err(error.into()),
    }
    for ((&position, buffer), status) in positions.iter().zip(&buffers).zip(&statuses) {
        let superblock = match decode_readable(*status, buffer) {
            Some(superblock) => Some(superblock),
            None => {
                // Copy 1 of chip c is stripe page c + p.
                let address = layout.address(SUPERBLOCK_SEGMENT, position + array_chip_count);
                let mut copy = Vec::new();
                match device.read(address, &mut copy) {
                    Ok(status) => decode_readable(status, &copy),
                    Err(NandError::ChipFailed { .. }) if tolerate_one => None,
                    Err(error) => return Err(error.into()),
                }
            }
        };
        // Version 9: block 0 is erased while it is being rewritten; the second home holds the
        // superblock meanwhile.
        let superblock = match superblock {
            None if first.format_version >= FORMAT_VERSION_SUPERBLOCK_HOMES => {
                second_home_superblock(device, position, tolerate_one)?
            }
            found => found,
        };
        match superblock {
            Some(superblock) => check_one(position, &superblock, first)?,
            None if tolerate_one && missing.is_none() && position != 0 => missing = Some(position),
            None => return Err(ChipSetError::NotAVolumeChip { position }.into()),
        }
    }
    Ok(missing)
}

/// Pages 0 and 1 of the superblock's second home on `chip` (version 9), decoded if either is.
fn second_home_superblock<F: Flash>(
    device: &mut Device<F>,
    chip: u32,
    tolerate_one: bool,
) -> Result<Option<Superblock>, TxnError> {
    let layout = device.layout();
    let (mut data, mut spare) = (vec![0u8; layout.page_size_bytes()], vec![0u8; layout.spare_size_bytes()]);
    for page in 0..2 {
        match device.read_physical(PageAddress::new(chip, SUPERBLOCK_HOMES[1], page), &mut data, &mut spare) {
            Ok(status) => {
                if let Some(found) = decode_readable(status, &data) {
                    return Ok(Some(found));
                }
            }
            Err(NandError::ChipFailed { .. }) if tolerate_one => return Ok(None),
            Err(error) => return Err(error.into()),
        }
    }
    Ok(None)
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
        || found.redundancy != first.redundancy
    {
        return Err(ChipSetError::Inconsistent { position });
    }
    if found.chip_index != position {
        return Err(ChipSetError::WrongOrder { position, chip_index: found.chip_index });
    }
    Ok(())
}
