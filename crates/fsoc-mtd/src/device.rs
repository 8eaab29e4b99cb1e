//! One MTD character device (`/dev/mtdN`): opening it (refusing anything that is not an MTD
//! character device), describing it (MEMGETINFO plus the 64-bit size and the free OOB bytes
//! from sysfs), and the five ioctls fsoc uses. Errors come back as raw errno values; what they
//! mean for the flash seam is `outcome`'s job.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::abi::{
    EraseInfoUser64, MtdInfoUser, MtdReadReq, MtdReadReqEccStats, MtdWriteReq, MEMERASE64, MEMGETBADBLOCK, MEMGETINFO,
    MEMREAD, MEMSETBADBLOCK, MEMWRITE, MTD_CHAR_MAJOR, MTD_OPS_AUTO_OOB,
};
use crate::outcome::DeviceDescription;
use crate::MtdError;

/// Whether `path` is an MTD character device (major 90), judged by `stat`, not by its name.
/// Errors of `stat` itself (a missing path) are returned.
pub fn is_mtd_char_device(path: &Path) -> std::io::Result<bool> {
    let metadata = std::fs::metadata(path)?;
    Ok(metadata.file_type().is_char_device() && libc::major(metadata.rdev()) == MTD_CHAR_MAJOR)
}

/// What one MEMREAD returned: the errno (None for success), the ECC statistics and the data
/// and OOB bytes transferred.
pub struct ReadAnswer {
    pub errno: Option<i32>,
    pub stats: MtdReadReqEccStats,
    pub data_bytes: u64,
    pub oob_bytes: u64,
}

/// An open `/dev/mtdN`.
pub struct MtdDevice {
    file: File,
    path: PathBuf,
    description: DeviceDescription,
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// `ioctl(fd, request, argument)`, with the errno on failure and the return value otherwise.
///
/// # Safety
/// `argument` must point at a live value of the type `request` expects, writable if the
/// request writes back.
unsafe fn ioctl<T>(file: &File, request: u32, argument: *mut T) -> Result<i32, i32> {
    // SAFETY: the caller's contract; the descriptor belongs to `file`, which outlives the call.
    let result = unsafe { libc::ioctl(file.as_raw_fd(), libc::Ioctl::from(request), argument) };
    if result < 0 {
        Err(last_errno())
    } else {
        Ok(result)
    }
}

impl MtdDevice {
    /// Opens `path` (read-write if `writable`) and describes it; refuses anything that is not
    /// an MTD character device before doing anything else to it.
    pub fn open(path: &Path, writable: bool) -> Result<MtdDevice, MtdError> {
        let shown = path.display().to_string();
        let open_error = |error: std::io::Error| MtdError::Open { path: shown.clone(), error: error.to_string() };
        match is_mtd_char_device(path) {
            Ok(true) => {}
            Ok(false) => return Err(MtdError::NotMtdDevice { path: shown }),
            Err(error) => return Err(open_error(error)),
        }
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(open_error)?;
        // Checked again on the open descriptor: the name may have been replaced in between.
        let metadata = file.metadata().map_err(open_error)?;
        let rdev = metadata.rdev();
        if !metadata.file_type().is_char_device() || libc::major(rdev) != MTD_CHAR_MAJOR {
            return Err(MtdError::NotMtdDevice { path: shown });
        }
        let mut info = MtdInfoUser::default();
        // SAFETY: MEMGETINFO writes one `mtd_info_user`, which `info` is.
        unsafe { ioctl(&file, MEMGETINFO, &mut info) }.map_err(|errno| MtdError::Ioctl {
            path: shown.clone(),
            request: "MEMGETINFO",
            errno,
        })?;
        let sysfs = PathBuf::from(format!("/sys/dev/char/{}:{}", libc::major(rdev), libc::minor(rdev)));
        let size_bytes = sysfs_number(&sysfs.join("size")).unwrap_or(u64::from(info.size));
        if size_bytes & u64::from(u32::MAX) != u64::from(info.size) {
            return Err(MtdError::Geometry {
                path: shown,
                reason: format!("sysfs size {size_bytes} disagrees with MEMGETINFO's {}", info.size),
            });
        }
        let mut device = MtdDevice {
            file,
            path: path.to_path_buf(),
            description: DeviceDescription {
                path: shown,
                kind: info.kind,
                flags: info.flags,
                size_bytes,
                erase_size_bytes: info.erase_size,
                write_size_bytes: info.write_size,
                oob_size_bytes: info.oob_size,
                oob_available_bytes: 0,
                ecc_strength_bits: sysfs_number(&sysfs.join("ecc_strength"))
                    .and_then(|bits| u32::try_from(bits).ok())
                    .unwrap_or(0),
                ecc_step_bytes: sysfs_number(&sysfs.join("ecc_step_size"))
                    .and_then(|bytes| u32::try_from(bytes).ok())
                    .unwrap_or(0),
            },
        };
        device.description.oob_available_bytes = match sysfs_number(&sysfs.join("oobavail")) {
            Some(bytes) => u32::try_from(bytes).unwrap_or(0),
            None => device.probe_oob_available(),
        };
        Ok(device)
    }

    /// Free OOB bytes per page when sysfs does not say: a MEMREAD in AUTO_OOB mode asking for
    /// every OOB byte returns only the free ones. Tries the first page of the first blocks
    /// until one reads (a bad block's page may not); 0 if none does, which the geometry check
    /// then refuses.
    fn probe_oob_available(&self) -> u32 {
        let (page, erase) = (self.description.write_size_bytes, self.description.erase_size_bytes);
        let mut data = vec![0u8; page as usize];
        let mut oob = vec![0u8; self.description.oob_size_bytes as usize];
        for block in 0..8u64 {
            if let Ok(answer) = self.read(block * u64::from(erase), &mut data, &mut oob) {
                if answer.errno.is_none() || answer.errno == Some(libc::EUCLEAN) {
                    return u32::try_from(answer.oob_bytes).unwrap_or(0);
                }
            }
        }
        0
    }

    pub fn description(&self) -> &DeviceDescription {
        &self.description
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// MEMREAD in AUTO_OOB mode: `data.len()` bytes at `offset` and `oob.len()` free OOB
    /// bytes. `Ok` carries ECC outcomes (-EUCLEAN, -EBADMSG) with their statistics, since the
    /// kernel writes the request back for them too; `Err` is any failure without statistics.
    pub fn read(&self, offset: u64, data: &mut [u8], oob: &mut [u8]) -> Result<ReadAnswer, i32> {
        let mut request = MtdReadReq {
            start: offset,
            len: data.len() as u64,
            ooblen: oob.len() as u64,
            usr_data: data.as_mut_ptr() as u64,
            usr_oob: oob.as_mut_ptr() as u64,
            mode: MTD_OPS_AUTO_OOB,
            ..MtdReadReq::default()
        };
        // SAFETY: MEMREAD reads `request` and writes it back; the kernel writes at most `len`
        // bytes to `usr_data` and `ooblen` to `usr_oob`, which are the live, exclusively
        // borrowed `data` and `oob` of exactly those lengths.
        let errno = match unsafe { ioctl(&self.file, MEMREAD, &mut request) } {
            Ok(_) => None,
            Err(errno @ (libc::EUCLEAN | libc::EBADMSG)) => Some(errno),
            Err(errno) => return Err(errno),
        };
        Ok(ReadAnswer { errno, stats: request.ecc_stats, data_bytes: request.len, oob_bytes: request.ooblen })
    }

    /// MEMWRITE in AUTO_OOB mode: one page of data and its free OOB bytes (the kernel adds its
    /// ECC and leaves the bad-block marker bytes alone).
    pub fn write(&self, offset: u64, data: &[u8], oob: &[u8]) -> Result<(), i32> {
        let mut request = MtdWriteReq {
            start: offset,
            len: data.len() as u64,
            ooblen: oob.len() as u64,
            usr_data: data.as_ptr() as u64,
            usr_oob: oob.as_ptr() as u64,
            mode: MTD_OPS_AUTO_OOB,
            ..MtdWriteReq::default()
        };
        // SAFETY: MEMWRITE only reads `request` and the `len` and `ooblen` bytes behind its
        // pointers, which are the live `data` and `oob`.
        unsafe { ioctl(&self.file, MEMWRITE, &mut request) }.map(|_| ())
    }

    /// MEMERASE64 of `length` bytes at `offset` (whole erase blocks).
    pub fn erase(&self, offset: u64, length: u64) -> Result<(), i32> {
        let mut request = EraseInfoUser64 { start: offset, length };
        // SAFETY: MEMERASE64 reads one `erase_info_user64`, which `request` is.
        unsafe { ioctl(&self.file, MEMERASE64, &mut request) }.map(|_| ())
    }

    /// MEMGETBADBLOCK: whether the block at `offset` is marked bad (the kernel's bad-block
    /// table in RAM, built when the device was attached: no flash read).
    pub fn is_bad(&self, offset: u64) -> Result<bool, i32> {
        let mut argument = i64::try_from(offset).map_err(|_| libc::EINVAL)?;
        // SAFETY: MEMGETBADBLOCK reads one `__kernel_loff_t`, which `argument` is.
        unsafe { ioctl(&self.file, MEMGETBADBLOCK, &mut argument) }.map(|bad| bad > 0)
    }

    /// MEMSETBADBLOCK: marks the block at `offset` bad (the kernel writes the marker).
    pub fn mark_bad(&self, offset: u64) -> Result<(), i32> {
        let mut argument = i64::try_from(offset).map_err(|_| libc::EINVAL)?;
        // SAFETY: MEMSETBADBLOCK reads one `__kernel_loff_t`, which `argument` is.
        unsafe { ioctl(&self.file, MEMSETBADBLOCK, &mut argument) }.map(|_| ())
    }
}

/// A decimal number in a sysfs attribute, or `None` if the file is absent or not a number.
fn sysfs_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regular files, directories and other character devices are not MTD devices, and
    /// `open` refuses them without writing to them.
    #[test]
    fn only_mtd_character_devices_are_accepted() {
        let directory = std::env::temp_dir();
        assert!(!is_mtd_char_device(&directory).expect("stat"));
        assert!(!is_mtd_char_device(Path::new("/dev/null")).expect("stat /dev/null"));
        assert!(is_mtd_char_device(Path::new("/nonexistent/mtd0")).is_err());
        let file = directory.join(format!("fsoc-mtd-test-{}", std::process::id()));
        std::fs::write(&file, b"keep").expect("write");
        let refused = MtdDevice::open(&file, true);
        assert!(matches!(refused, Err(MtdError::NotMtdDevice { .. })));
        assert_eq!(std::fs::read(&file).expect("read back"), b"keep");
        std::fs::remove_file(&file).expect("cleanup");
        assert!(matches!(MtdDevice::open(Path::new("/dev/null"), true), Err(MtdError::NotMtdDevice { .. })));
    }
}
