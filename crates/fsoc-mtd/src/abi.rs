//! The kernel's MTD user ABI (include/uapi/mtd/mtd-abi.h): the structures the ioctls of
//! `/dev/mtdN` take and their request numbers. Layouts are checked against the header's
//! sizes and offsets at compile time, and the request numbers against the values the header's
//! `_IOR`/`_IOW`/`_IOWR` macros give (tests below), so a wrong field order cannot pass.

use core::mem::size_of;

/// Character-device major number of MTD (`MTD_CHAR_MAJOR` in include/linux/mtd/mtd.h): even
/// minors are read-write `/dev/mtdN`, odd ones the read-only `/dev/mtdNro`.
pub const MTD_CHAR_MAJOR: u32 = 90;

/// `mtd_info_user.type` of raw NAND (SLC) and MLC NAND.
pub const MTD_NANDFLASH: u8 = 4;
pub const MTD_MLCNANDFLASH: u8 = 8;
/// `mtd_info_user.flags`: the device may be written.
pub const MTD_WRITEABLE: u32 = 0x400;

/// `mtd_write_req.mode` / `mtd_read_req.mode`: the kernel computes and checks its ECC and
/// places the caller's spare bytes in the free OOB bytes of its ECC layout, in order.
pub const MTD_OPS_AUTO_OOB: u8 = 1;

/// `struct mtd_info_user` (MEMGETINFO).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MtdInfoUser {
    pub kind: u8,
    pub flags: u32,
    /// Total size in bytes, truncated to 32 bits by the ABI (the sysfs `size` is not).
    pub size: u32,
    pub erase_size: u32,
    pub write_size: u32,
    pub oob_size: u32,
    pub padding: u64,
}

/// `struct erase_info_user64` (MEMERASE64).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EraseInfoUser64 {
    pub start: u64,
    pub length: u64,
}

/// `struct mtd_write_req` (MEMWRITE).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MtdWriteReq {
    pub start: u64,
    pub len: u64,
    pub ooblen: u64,
    pub usr_data: u64,
    pub usr_oob: u64,
    pub mode: u8,
    pub padding: [u8; 7],
}

/// `struct mtd_read_req_ecc_stats`: what the ECC engine found during one MEMREAD.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MtdReadReqEccStats {
    pub uncorrectable_errors: u32,
    pub corrected_bitflips: u32,
    pub max_bitflips: u32,
}

/// `struct mtd_read_req` (MEMREAD, Linux 6.1 and later). On return `len` and `ooblen` hold
/// the bytes read and `ecc_stats` the ECC outcome.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MtdReadReq {
    pub start: u64,
    pub len: u64,
    pub ooblen: u64,
    pub usr_data: u64,
    pub usr_oob: u64,
    pub mode: u8,
    pub padding: [u8; 7],
    pub ecc_stats: MtdReadReqEccStats,
}

// The header's sizes (x86-64 and every 64-bit Linux ABI: u64 aligned to 8).
const _: () = assert!(size_of::<MtdInfoUser>() == 32);
const _: () = assert!(size_of::<EraseInfoUser64>() == 16);
const _: () = assert!(size_of::<MtdWriteReq>() == 48);
const _: () = assert!(size_of::<MtdReadReqEccStats>() == 12);
const _: () = assert!(size_of::<MtdReadReq>() == 64);
const _: () = assert!(core::mem::offset_of!(MtdInfoUser, flags) == 4);
const _: () = assert!(core::mem::offset_of!(MtdInfoUser, oob_size) == 20);
const _: () = assert!(core::mem::offset_of!(MtdInfoUser, padding) == 24);
const _: () = assert!(core::mem::offset_of!(MtdWriteReq, mode) == 40);
const _: () = assert!(core::mem::offset_of!(MtdReadReq, ecc_stats) == 48);

/// `_IOC(direction, 'M', number, size)` of include/uapi/asm-generic/ioctl.h.
const fn mtd_ioctl(direction: u32, number: u32, size_bytes: usize) -> u32 {
    // The size field is 14 bits wide; a larger structure would be a different request.
    assert!(size_bytes < 1 << 14, "ioctl argument too large for _IOC");
    #[allow(clippy::cast_possible_truncation)] // below 2^14: asserted above
    let size_field = size_bytes as u32;
    (direction << 30) | (size_field << 16) | ((b'M' as u32) << 8) | number
}
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

pub const MEMGETINFO: u32 = mtd_ioctl(IOC_READ, 1, size_of::<MtdInfoUser>());
/// Argument: a pointer to the block's byte offset (`__kernel_loff_t`); returns 1 if bad.
pub const MEMGETBADBLOCK: u32 = mtd_ioctl(IOC_WRITE, 11, size_of::<i64>());
pub const MEMSETBADBLOCK: u32 = mtd_ioctl(IOC_WRITE, 12, size_of::<i64>());
pub const MEMERASE64: u32 = mtd_ioctl(IOC_WRITE, 20, size_of::<EraseInfoUser64>());
pub const MEMWRITE: u32 = mtd_ioctl(IOC_READ | IOC_WRITE, 24, size_of::<MtdWriteReq>());
pub const MEMREAD: u32 = mtd_ioctl(IOC_READ | IOC_WRITE, 26, size_of::<MtdReadReq>());

#[cfg(test)]
mod tests {
    use super::*;

    /// The request numbers are those of the kernel header (values printed by a C program
    /// including <mtd/mtd-abi.h>), so the formula and the struct sizes agree with it.
    #[test]
    fn request_numbers_match_the_kernel_header() {
        assert_eq!(MEMGETINFO, 0x8020_4d01);
        assert_eq!(MEMGETBADBLOCK, 0x4008_4d0b);
        assert_eq!(MEMSETBADBLOCK, 0x4008_4d0c);
        assert_eq!(MEMERASE64, 0x4010_4d14);
        assert_eq!(MEMWRITE, 0xc030_4d18);
        assert_eq!(MEMREAD, 0xc040_4d1a);
    }
}
