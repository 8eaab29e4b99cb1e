//! What the kernel's answers mean for the flash seam: a MEMREAD's errno and ECC statistics
//! become a `ReadStatus` exactly as the simulator reports them, failed programs and erases
//! become `NandError::OperationFailed`, and a device's description becomes a `Geometry` or a
//! typed refusal. Pure functions, so every mapping is tested without a kernel.

use fsoc_flash::{BlockAddress, Geometry, NandError, OperationKind, ReadStatus};

use crate::abi::{MtdReadReqEccStats, MTD_MLCNANDFLASH, MTD_NANDFLASH, MTD_WRITEABLE};
use crate::MtdError;

/// Free OOB bytes per page fsoc needs: its page tag (fsoc-core `SPARE_TAG_BYTES`, 16 bytes,
/// the floor of `Geometry::validate` too) and the tag's CRC-32C (`spare`).
pub const OOB_BYTES_MIN: u32 = 20;
const _: () = assert!(OOB_BYTES_MIN as usize == crate::spare::OOB_BYTES);
/// Spare bytes per page the layers above get.
pub const SPARE_BYTES: u32 = 16;
const _: () = assert!(SPARE_BYTES as usize == crate::spare::SPARE_BYTES);

/// Classifies a completed MEMREAD. `errno` is `None` when the ioctl returned 0, `stats` the
/// request's `ecc_stats` as the kernel wrote them back; `data` and `spare` are what was read.
///
/// - -EBADMSG (or uncorrectable errors counted) is `Uncorrectable`: some ECC step failed.
/// - A page that reads all 0xFF (data and free OOB bytes) is `Erased`, as the simulator
///   reports an erased page whose flips the ECC absorbed: fsoc never programs such a page
///   (every page carries a tag), so all 0xFF means not programmed since the last erase.
/// - -EUCLEAN (or corrected bit flips counted) is `Corrected`, with the kernel's count of
///   corrected bits and its worst ECC step.
/// - Any other errno is not an ECC outcome: `Err` with it, for the caller to report.
pub fn read_status(
    errno: Option<i32>,
    stats: MtdReadReqEccStats,
    data: &[u8],
    spare: &[u8],
) -> Result<ReadStatus, i32> {
    match errno {
        None | Some(libc::EUCLEAN) | Some(libc::EBADMSG) => {}
        Some(other) => return Err(other),
    }
    if errno == Some(libc::EBADMSG) || stats.uncorrectable_errors > 0 {
        return Ok(ReadStatus::Uncorrectable);
    }
    if data.iter().chain(spare).all(|&byte| byte == 0xFF) {
        return Ok(ReadStatus::Erased);
    }
    if errno == Some(libc::EUCLEAN) || stats.corrected_bitflips > 0 {
        // -EUCLEAN with no count cannot happen on 6.1 (the count is what raises it); say at
        // least one bit rather than report a corrected read as clean.
        let bits = stats.corrected_bitflips.max(1);
        return Ok(ReadStatus::Corrected { bits, max_per_sector: stats.max_bitflips.clamp(1, bits) });
    }
    Ok(ReadStatus::Clean)
}

/// A page's status once its spare bytes are checked too: a corrected tag adds one corrected
/// bit, an unrecoverable one makes the page uncorrectable (its owner cannot be trusted).
pub fn with_spare(status: ReadStatus, spare: crate::spare::SpareOutcome) -> ReadStatus {
    use crate::spare::SpareOutcome;
    match (status, spare) {
        (ReadStatus::Uncorrectable, _) | (_, SpareOutcome::Uncorrectable) => ReadStatus::Uncorrectable,
        (status, SpareOutcome::Clean) => status,
        (ReadStatus::Corrected { bits, max_per_sector }, SpareOutcome::Corrected) => {
            ReadStatus::Corrected { bits: bits.saturating_add(1), max_per_sector }
        }
        (_, SpareOutcome::Corrected) => ReadStatus::Corrected { bits: 1, max_per_sector: 1 },
    }
}

/// The error of a failed program or erase: EIO is the chip's status fail (the block should be
/// retired, as the simulator reports it); anything else is a device problem, named.
pub fn operation_error(kind: OperationKind, block: BlockAddress, errno: i32, path: &str) -> NandError {
    match errno {
        libc::EIO => NandError::OperationFailed { kind, block },
        other => NandError::Image(format!(
            "{path}: {kind:?} of block {} failed: {}",
            block.block.0,
            std::io::Error::from_raw_os_error(other)
        )),
    }
}

/// A program or erase of a block that failed in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    Erase,
    Program { page_index: u32 },
}

/// Whether a block fsoc retires may be marked bad in the kernel's table now. The kernel
/// erases the block before writing its marker, so only a block that holds nothing fsoc may
/// still read: one whose erase failed (its pages were dead, that is why it was erased), one
/// whose first page failed to program (pages are programmed in order, so none before it), or
/// one whose first page reads erased.
pub fn mark_now(failure: Option<Failure>, first_page_erased: bool) -> bool {
    match failure {
        Some(Failure::Erase) | Some(Failure::Program { page_index: 0 }) => true,
        Some(Failure::Program { .. }) | None => first_page_erased,
    }
}

/// What one MTD device says about itself, gathered by `device::MtdDevice::describe`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceDescription {
    pub path: String,
    /// `mtd_info_user.type`.
    pub kind: u8,
    pub flags: u32,
    /// Total bytes (from sysfs, which is 64-bit; MEMGETINFO's `size` is 32-bit).
    pub size_bytes: u64,
    pub erase_size_bytes: u32,
    pub write_size_bytes: u32,
    pub oob_size_bytes: u32,
    /// Free OOB bytes per page in MTD_OPS_AUTO_OOB mode (the ECC layout's free regions).
    pub oob_available_bytes: u32,
    /// Bits the kernel's ECC corrects per `ecc_step_bytes` of data (sysfs `ecc_strength`,
    /// `ecc_step_size`); 0 when sysfs does not say.
    pub ecc_strength_bits: u32,
    pub ecc_step_bytes: u32,
}

impl DeviceDescription {
    /// The ECC's strength per 512 bytes of data, if sysfs gave it (a code over 1,024-byte
    /// steps correcting 8 bits counts as 4 per 512: what the file system compares a read's
    /// worst sector against is a fraction of the code's margin, so the scaling is a fair
    /// summary, not an exact one).
    pub fn ecc_correctable_bits_per_512(&self) -> Option<u32> {
        if self.ecc_strength_bits == 0 || self.ecc_step_bytes == 0 {
            return None;
        }
        Some((u64::from(self.ecc_strength_bits) * 512).div_ceil(u64::from(self.ecc_step_bytes)).max(1))
            .and_then(|bits| u32::try_from(bits).ok())
    }
}

/// The chip geometry a device gives fsoc, or why fsoc cannot use it. `writable` says whether
/// the caller means to program and erase.
pub fn device_geometry(device: &DeviceDescription, writable: bool) -> Result<Geometry, MtdError> {
    let refuse = |reason: String| MtdError::Geometry { path: device.path.clone(), reason };
    if device.kind != MTD_NANDFLASH && device.kind != MTD_MLCNANDFLASH {
        return Err(refuse(format!(
            "MTD type {} is not raw NAND (type {MTD_NANDFLASH} or {MTD_MLCNANDFLASH}); fsoc needs pages with spare \
             bytes (NOR, RAM and UBI volumes are not supported)",
            device.kind
        )));
    }
    if writable && device.flags & MTD_WRITEABLE == 0 {
        return Err(MtdError::ReadOnly { path: device.path.clone() });
    }
    if device.write_size_bytes == 0 || device.erase_size_bytes == 0 {
        return Err(refuse("page or erase-block size is 0".into()));
    }
    if !device.erase_size_bytes.is_multiple_of(device.write_size_bytes) {
        return Err(refuse(format!(
            "erase block of {} bytes is not a whole number of {}-byte pages",
            device.erase_size_bytes, device.write_size_bytes
        )));
    }
    if !device.size_bytes.is_multiple_of(u64::from(device.erase_size_bytes)) {
        return Err(refuse(format!(
            "size {} bytes is not a whole number of {}-byte erase blocks",
            device.size_bytes, device.erase_size_bytes
        )));
    }
    if device.oob_available_bytes < OOB_BYTES_MIN {
        return Err(MtdError::SpareTooSmall {
            path: device.path.clone(),
            oob_size_bytes: device.oob_size_bytes,
            oob_available_bytes: device.oob_available_bytes,
            needed_bytes: OOB_BYTES_MIN,
        });
    }
    let block_count = u32::try_from(device.size_bytes / u64::from(device.erase_size_bytes))
        .map_err(|_| refuse("more than 2^32 erase blocks".into()))?;
    let geometry = Geometry {
        page_data_bytes: device.write_size_bytes,
        spare_bytes: SPARE_BYTES,
        pages_per_block: device.erase_size_bytes / device.write_size_bytes,
        block_count,
    };
    geometry.validate().map_err(|reason| refuse(reason.into()))?;
    Ok(geometry)
}

/// The geometry of a chip array made of `devices` (one per chip): every device must give the
/// same geometry, since fsoc stripes segments across identical chips.
pub fn array_geometry(devices: &[DeviceDescription], writable: bool) -> Result<Geometry, MtdError> {
    let (first, others) = devices.split_first().ok_or(MtdError::NoDevices)?;
    let geometry = device_geometry(first, writable)?;
    for device in others {
        let other = device_geometry(device, writable)?;
        if other != geometry {
            return Err(MtdError::Mismatch {
                first_path: first.path.clone(),
                first: geometry,
                other_path: device.path.clone(),
                other,
            });
        }
    }
    Ok(geometry)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(uncorrectable_errors: u32, corrected_bitflips: u32, max_bitflips: u32) -> MtdReadReqEccStats {
        MtdReadReqEccStats { uncorrectable_errors, corrected_bitflips, max_bitflips }
    }

    /// Each kernel answer maps to the outcome the simulator would report for that page.
    #[test]
    fn kernel_read_answers_map_to_simulator_outcomes() {
        let (data, spare, erased) = ([0x5Au8; 64], [1u8; 16], [0xFFu8; 64]);
        assert_eq!(read_status(None, stats(0, 0, 0), &data, &spare), Ok(ReadStatus::Clean));
        assert_eq!(
            read_status(Some(libc::EUCLEAN), stats(0, 3, 2), &data, &spare),
            Ok(ReadStatus::Corrected { bits: 3, max_per_sector: 2 })
        );
        // Corrected flips below the kernel's bitflip threshold come back as 0 with a count.
        assert_eq!(
            read_status(None, stats(0, 1, 1), &data, &spare),
            Ok(ReadStatus::Corrected { bits: 1, max_per_sector: 1 })
        );
        assert_eq!(read_status(Some(libc::EBADMSG), stats(1, 0, 0), &data, &spare), Ok(ReadStatus::Uncorrectable));
        assert_eq!(read_status(None, stats(2, 5, 4), &data, &spare), Ok(ReadStatus::Uncorrectable));
        // An erased page, clean or with flips the ECC absorbed, is erased; an uncorrectable
        // one is not (its bytes are not trustworthy).
        assert_eq!(read_status(None, stats(0, 0, 0), &erased, &[0xFF; 16]), Ok(ReadStatus::Erased));
        assert_eq!(read_status(Some(libc::EUCLEAN), stats(0, 1, 1), &erased, &[0xFF; 16]), Ok(ReadStatus::Erased));
        assert_eq!(
            read_status(Some(libc::EBADMSG), stats(1, 0, 0), &erased, &[0xFF; 16]),
            Ok(ReadStatus::Uncorrectable)
        );
        // All-0xFF data with a tag in the spare bytes is a programmed page.
        assert_eq!(read_status(None, stats(0, 0, 0), &erased, &spare), Ok(ReadStatus::Clean));
        assert_eq!(read_status(Some(libc::EIO), stats(0, 0, 0), &data, &spare), Err(libc::EIO));
        assert_eq!(read_status(Some(libc::EINVAL), stats(0, 0, 0), &data, &spare), Err(libc::EINVAL));
    }

    #[test]
    fn the_spare_outcome_joins_the_page_status() {
        use crate::spare::SpareOutcome;
        let corrected = ReadStatus::Corrected { bits: 2, max_per_sector: 2 };
        assert_eq!(with_spare(ReadStatus::Clean, SpareOutcome::Clean), ReadStatus::Clean);
        assert_eq!(
            with_spare(ReadStatus::Clean, SpareOutcome::Corrected),
            ReadStatus::Corrected { bits: 1, max_per_sector: 1 }
        );
        assert_eq!(
            with_spare(corrected, SpareOutcome::Corrected),
            ReadStatus::Corrected { bits: 3, max_per_sector: 2 }
        );
        assert_eq!(with_spare(corrected, SpareOutcome::Uncorrectable), ReadStatus::Uncorrectable);
        assert_eq!(with_spare(ReadStatus::Uncorrectable, SpareOutcome::Clean), ReadStatus::Uncorrectable);
    }

    #[test]
    fn status_fail_is_an_operation_failure_and_other_errors_are_named() {
        let block = BlockAddress::new(1, 7);
        assert_eq!(
            operation_error(OperationKind::Erase, block, libc::EIO, "/dev/mtd1"),
            NandError::OperationFailed { kind: OperationKind::Erase, block }
        );
        let NandError::Image(message) = operation_error(OperationKind::Program, block, libc::EROFS, "/dev/mtd1") else {
            panic!("EROFS is not a status fail");
        };
        assert!(message.contains("/dev/mtd1") && message.contains("block 7"), "{message}");
    }

    /// A block is marked in the kernel's table (which erases it first) only if it holds no
    /// page fsoc may still read.
    #[test]
    fn blocks_holding_pages_are_not_marked_in_the_kernel() {
        assert!(mark_now(Some(Failure::Erase), false));
        assert!(mark_now(Some(Failure::Program { page_index: 0 }), false));
        assert!(!mark_now(Some(Failure::Program { page_index: 40 }), false), "pages 0-39 are live");
        assert!(mark_now(Some(Failure::Program { page_index: 40 }), true));
        assert!(!mark_now(None, false));
        assert!(mark_now(None, true));
    }

    /// nandsim's 2 KiB-page chip with 1-bit Hamming ECC: 64 OOB bytes, 38 free.
    fn nandsim_2k() -> DeviceDescription {
        DeviceDescription {
            path: "/dev/mtd0".into(),
            kind: MTD_NANDFLASH,
            flags: MTD_WRITEABLE | 0x800,
            size_bytes: 256 << 20,
            erase_size_bytes: 128 << 10,
            write_size_bytes: 2048,
            oob_size_bytes: 64,
            oob_available_bytes: 38,
            ecc_strength_bits: 1,
            ecc_step_bytes: 512,
        }
    }

    #[test]
    fn ecc_strength_is_scaled_to_512_bytes_and_absent_when_unknown() {
        assert_eq!(nandsim_2k().ecc_correctable_bits_per_512(), Some(1));
        let bch8 = DeviceDescription { ecc_strength_bits: 8, ecc_step_bytes: 1024, ..nandsim_2k() };
        assert_eq!(bch8.ecc_correctable_bits_per_512(), Some(4));
        let hamming_256 = DeviceDescription { ecc_strength_bits: 1, ecc_step_bytes: 256, ..nandsim_2k() };
        assert_eq!(hamming_256.ecc_correctable_bits_per_512(), Some(2));
        assert_eq!(DeviceDescription { ecc_strength_bits: 0, ..nandsim_2k() }.ecc_correctable_bits_per_512(), None);
        assert_eq!(DeviceDescription { ecc_step_bytes: 0, ..nandsim_2k() }.ecc_correctable_bits_per_512(), None);
    }

    #[test]
    fn a_nand_device_gives_its_geometry_with_the_protected_tag_as_spare() {
        let geometry = device_geometry(&nandsim_2k(), true).expect("geometry");
        assert_eq!(
            geometry,
            Geometry { page_data_bytes: 2048, spare_bytes: 16, pages_per_block: 64, block_count: 2048 }
        );
        // 20 free bytes are enough (4-bit BCH on 2 KiB pages leaves 34): the tag and its CRC.
        let few = DeviceDescription { oob_available_bytes: 20, ..nandsim_2k() };
        assert_eq!(device_geometry(&few, true).expect("20 free bytes").spare_bytes, 16);
        // Above 4 GiB (where MEMGETINFO's 32-bit size wraps) the block count still comes out.
        let large = DeviceDescription { size_bytes: 8 << 30, ..nandsim_2k() };
        assert_eq!(device_geometry(&large, true).expect("8 GiB").block_count, 65_536);
    }

    /// Every way a device can be unusable is refused with a typed error naming it.
    #[test]
    fn unusable_devices_are_refused() {
        let nor = DeviceDescription { kind: 3, ..nandsim_2k() };
        assert!(matches!(device_geometry(&nor, true), Err(MtdError::Geometry { .. })));
        let read_only = DeviceDescription { flags: 0, ..nandsim_2k() };
        assert!(matches!(device_geometry(&read_only, true), Err(MtdError::ReadOnly { .. })));
        assert!(device_geometry(&read_only, false).is_ok(), "a read-only device is fine for reading");
        let little_oob = DeviceDescription { oob_size_bytes: 64, oob_available_bytes: 19, ..nandsim_2k() };
        assert!(matches!(
            device_geometry(&little_oob, true),
            Err(MtdError::SpareTooSmall { oob_available_bytes: 19, needed_bytes: 20, .. })
        ));
        let ragged = DeviceDescription { size_bytes: (256 << 20) + 2048, ..nandsim_2k() };
        assert!(matches!(device_geometry(&ragged, true), Err(MtdError::Geometry { .. })));
        let odd_block = DeviceDescription { erase_size_bytes: 3000, ..nandsim_2k() };
        assert!(matches!(device_geometry(&odd_block, true), Err(MtdError::Geometry { .. })));
        let zero = DeviceDescription { write_size_bytes: 0, ..nandsim_2k() };
        assert!(matches!(device_geometry(&zero, true), Err(MtdError::Geometry { .. })));
        let tiny = DeviceDescription { size_bytes: 2 << 17, ..nandsim_2k() };
        assert!(matches!(device_geometry(&tiny, true), Err(MtdError::Geometry { .. })), "2 blocks");
    }

    #[test]
    fn an_array_needs_identical_chips() {
        let second = DeviceDescription { path: "/dev/mtd1".into(), ..nandsim_2k() };
        assert_eq!(array_geometry(&[nandsim_2k(), second.clone()], true).expect("pair").block_count, 2048);
        let smaller = DeviceDescription { size_bytes: 128 << 20, ..second };
        assert!(matches!(array_geometry(&[nandsim_2k(), smaller], true), Err(MtdError::Mismatch { .. })));
        assert!(matches!(array_geometry(&[], true), Err(MtdError::NoDevices)));
    }
}
