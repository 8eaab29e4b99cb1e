//! Finding, locking, opening and closing the volume one path names, for every command that
//! takes a volume (mount, fsck, info, array info, the image tools) and every one that locks
//! an image (mkfs, flash info): a single image file from `fsoc mkfs`, the chip files of an
//! array from `fsoc array mkfs` (`BASE.chip0`, `BASE.chip1`, …), given as `BASE` or as any of
//! its chip files, or raw NAND: an MTD character device (`/dev/mtd0`, recognised by its major
//! number, not its name) or a comma-separated list of them, one per chip
//! (`/dev/mtd0,/dev/mtd1`). Why an image does not open or a volume does not mount is worded
//! here once.
//!
//! Invariants: every file of the volume is locked before it is opened (exclusive for writers,
//! shared for readers), so a mounted volume is refused by every command and never written by
//! two processes; chip files are opened as a set (chip 0 up to the first missing one) and
//! whether they form one volume is the file system's chip-set check, not a guess here (when it
//! finds chips missing, the first missing chip file is named, with `fsoc rebuild`); a path
//! that exists and is neither a regular file nor an MTD character device (a block device,
//! another character device, a FIFO, a directory) is refused before it is opened
//! (`check_volume_path`), so no tool blocks on it, replaces it or writes to it.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use fsoc_array::{chip_file_path, chip_file_paths, ArrayConfig, ThreadedFlash, CHIP_FILE_SUFFIX};
use fsoc_core::fs::FsError;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::image::{ImageError, ImageStore};
use fsoc_media::{
    BlockAddress, ChipIndex, Completed, Flash, Geometry, NandError, Nanos, PageAddress, ReadStatus, SimFlash, Timing,
};
use fsoc_mtd::MtdFlash;

/// What a volume path names on the host, judged by `stat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathKind {
    /// Nothing there (yet).
    Missing,
    /// A regular file: an image or a chip file.
    Regular,
    /// An MTD character device (major 90): raw NAND.
    Mtd,
}

/// Says what `path` is, or refuses it with a clear error if it is anything a volume cannot
/// be (a directory, a block device, a character device other than MTD, a FIFO, a socket).
/// Nothing is opened: a FIFO would block an `open`, and a refused path is left untouched.
pub fn check_volume_path(path: &Path) -> Result<PathKind, String> {
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(PathKind::Missing),
        Err(error) => return Err(format!("{}: {error}", path.display())),
    };
    if metadata.is_file() {
        return Ok(PathKind::Regular);
    }
    if fsoc_mtd::is_mtd_char_device(path).map_err(|error| format!("{}: {error}", path.display()))? {
        return Ok(PathKind::Mtd);
    }
    use std::os::unix::fs::FileTypeExt;
    let file_type = metadata.file_type();
    let what = if file_type.is_dir() {
        "a directory"
    } else if file_type.is_block_device() {
        "a block device (fsoc runs on raw NAND through MTD, /dev/mtdN, not on block devices)"
    } else if file_type.is_char_device() {
        "a character device that is not an MTD device (/dev/mtdN)"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Err(format!(
        "{}: is {what}; an fsoc volume is an image file or raw NAND through MTD (/dev/mtdN, or /dev/mtd0,/dev/mtd1 \
         for a chip array); left untouched",
        path.display()
    ))
}

/// The MTD devices `path` names, one per chip: a comma-separated list, or one path that is an
/// MTD character device; `None` for anything else (an image or an array's chip files). Each
/// listed device is checked when the volume is locked (`VolumeFiles::lock`).
pub fn mtd_devices(path: &Path) -> Option<Vec<PathBuf>> {
    let text = path.to_str()?;
    if text.contains(',') {
        return Some(text.split(',').map(PathBuf::from).collect());
    }
    // The mount table's form of a list (`VolumeFiles::mount_source`): only when every part
    // is an MTD device, so a file whose name holds a `+` stays a file.
    if text.contains(MTD_SOURCE_SEPARATOR) {
        let parts: Vec<PathBuf> = text.split(MTD_SOURCE_SEPARATOR).map(PathBuf::from).collect();
        return parts.iter().all(|part| fsoc_mtd::is_mtd_char_device(part).unwrap_or(false)).then_some(parts);
    }
    fsoc_mtd::is_mtd_char_device(path).unwrap_or(false).then(|| vec![path.to_path_buf()])
}

/// Joins the devices of an MTD array in a mount table's source field, where a comma would end
/// the mount option that carries it.
pub const MTD_SOURCE_SEPARATOR: char = '+';

/// The first file a mount-table source names: itself, or the first device of an MTD list.
pub fn first_source_file(source: &Path) -> PathBuf {
    mtd_devices(source).and_then(|devices| devices.into_iter().next()).unwrap_or_else(|| source.to_path_buf())
}

/// Checks that every path of an MTD list is an MTD character device.
fn check_mtd_devices(devices: &[PathBuf]) -> Result<(), String> {
    for device in devices {
        match check_volume_path(device)? {
            PathKind::Mtd => {}
            PathKind::Missing => return Err(format!("{}: no such MTD device", device.display())),
            PathKind::Regular => {
                return Err(format!(
                    "{}: is a regular file; a comma-separated list names MTD devices (/dev/mtd0,/dev/mtd1), one \
                     per chip",
                    device.display()
                ))
            }
        }
    }
    Ok(())
}

/// The files a volume path stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeFiles {
    /// One image file holding every chip.
    Image(PathBuf),
    /// One file per chip, in chip order, named after `base`.
    Array { base: PathBuf, chips: Vec<PathBuf> },
    /// Raw NAND: one MTD character device per chip, in chip order; `name` as given.
    Mtd { name: PathBuf, devices: Vec<PathBuf> },
}

impl VolumeFiles {
    /// Which files `path` names: an array when `path` is a chip file `BASE.chipN` of a set
    /// with a chip 0, or a `BASE` that does not exist while `BASE.chip0` does; else an image.
    pub fn locate(path: &Path) -> VolumeFiles {
        if let Some(devices) = mtd_devices(path) {
            return VolumeFiles::Mtd { name: path.to_path_buf(), devices };
        }
        match array_base(path) {
            Some(base) => VolumeFiles::Array { chips: chip_file_paths(&base), base },
            None => VolumeFiles::Image(path.to_path_buf()),
        }
    }

    /// The name to show: the image, or the array's base.
    pub fn name(&self) -> &Path {
        match self {
            VolumeFiles::Image(image) => image,
            VolumeFiles::Array { base, .. } => base,
            VolumeFiles::Mtd { name, .. } => name,
        }
    }

    /// The file that stands for the whole volume where one path is needed (the mount table's
    /// source, `fsoc umount`'s wait): the image, or chip 0, which every command locks.
    pub fn primary_file(&self) -> PathBuf {
        match self {
            VolumeFiles::Image(image) => image.clone(),
            VolumeFiles::Array { base, .. } => chip_file_path(base, 0),
            VolumeFiles::Mtd { devices, .. } => devices.first().cloned().unwrap_or_default(),
        }
    }

    /// The path a mount records as its source so that `fsoc umount` finds the whole volume
    /// again: the primary file, or for an MTD array every device, joined by
    /// `MTD_SOURCE_SEPARATOR` (paths canonical where they resolve).
    pub fn mount_source(&self) -> PathBuf {
        let canonical = |path: &PathBuf| path.canonicalize().unwrap_or_else(|_| path.clone());
        match self {
            VolumeFiles::Mtd { devices, .. } if devices.len() > 1 => {
                let parts: Vec<String> =
                    devices.iter().map(|device| canonical(device).to_string_lossy().into_owned()).collect();
                PathBuf::from(parts.join(&MTD_SOURCE_SEPARATOR.to_string()))
            }
            _ => canonical(&self.primary_file()),
        }
    }

    /// Every file of the volume.
    pub fn files(&self) -> Vec<PathBuf> {
        match self {
            VolumeFiles::Image(image) => vec![image.clone()],
            VolumeFiles::Array { chips, .. } => chips.clone(),
            VolumeFiles::Mtd { devices, .. } => devices.clone(),
        }
    }

    /// Locks every file of the volume, or says that it is in use. A path of the wrong kind
    /// (see `check_volume_path`; for an MTD list, anything but an MTD device) is refused first.
    pub fn lock(&self, exclusive: bool) -> Result<Vec<ImageLock>, String> {
        self.check()?;
        self.files().iter().map(|file| lock_image(file, exclusive)).collect()
    }

    /// Refuses a volume whose paths are of the wrong kind (see `check_volume_path`; in an MTD
    /// list, anything but an MTD device), before anything opens them.
    pub fn check(&self) -> Result<(), String> {
        match self {
            VolumeFiles::Mtd { devices, .. } => check_mtd_devices(devices),
            VolumeFiles::Image(image) => match check_volume_path(image)? {
                // An array whose chip 0 is gone is named by its BASE: say so, not "no such file".
                PathKind::Missing if chip_file_paths_beyond(image, 1).is_some() => Err(missing_chip_file(image, 0)),
                _ => Ok(()),
            },
            VolumeFiles::Array { .. } => self.files().iter().try_for_each(|file| check_volume_path(file).map(|_| ())),
        }
    }
}

/// The first chip file of array `base` that exists from position `first` on, if any: a sign
/// that the chip files before it are missing rather than never made.
fn chip_file_paths_beyond(base: &Path, first: u32) -> Option<PathBuf> {
    (first..fsoc_core::txn::superblock::CHIP_COUNT_MAX)
        .map(|chip| chip_file_path(base, chip))
        .find(|path| path.exists())
}

/// The base of the chip-file array `path` belongs to (as BASE or as a chip file BASE.chipN,
/// chip 0 present or not) and the first of its `chip_count` chip files that is missing; `None`
/// when `path` names no array of chip files or none of them is missing.
fn first_missing_chip_file(path: &Path, chip_count: u32) -> Option<(PathBuf, u32)> {
    let base = chip_file_base(path).unwrap_or_else(|| path.to_path_buf());
    chip_file_paths_beyond(&base, 0)?;
    let chip = (0..chip_count).find(|&chip| !chip_file_path(&base, chip).exists())?;
    Some((base, chip))
}

/// `BASE` when `path` is named like a chip file `BASE.chipN`, whether or not BASE's files exist.
pub fn chip_file_base(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    name.rsplit_once(CHIP_FILE_SUFFIX)
        .filter(|(base, index)| {
            !base.is_empty() && !index.is_empty() && index.bytes().all(|byte| byte.is_ascii_digit())
        })
        .map(|(base, _)| path.with_file_name(base))
}

/// Says that chip file `chip` of array `base` is missing and what to do about it.
fn missing_chip_file(base: &Path, chip: u32) -> String {
    format!(
        "chip file {} is missing: put it back, or, if the chip is lost, run `fsoc rebuild {} --chip {chip}` (a volume \
         formatted with --redundancy parity rebuilds it from the other chips)",
        chip_file_path(base, chip).display(),
        base.display()
    )
}

/// An advisory lock on an image file, held while a tool or a mount uses it.
pub struct ImageLock {
    _file: File,
}

/// Locks `image` (an image file, a chip file or an MTD device; exclusive for writers, shared
/// for readers) or says who holds it. Any other kind of path is refused without opening it.
pub fn lock_image(image: &Path, exclusive: bool) -> Result<ImageLock, String> {
    check_volume_path(image)?;
    let file = File::open(image).map_err(|error| format!("{}: {error}", image.display()))?;
    let operation = if exclusive { libc::LOCK_EX } else { libc::LOCK_SH };
    // SAFETY: flock on a descriptor this function owns; no memory is passed.
    if unsafe { libc::flock(file.as_raw_fd(), operation | libc::LOCK_NB) } != 0 {
        return Err(format!(
            "{}: the image is in use by another fsoc process (mounted, or a tool is running); unmount it first",
            image.display()
        ));
    }
    Ok(ImageLock { _file: file })
}

/// Waits until no fsoc process holds `image` (a server releases it after its final commit).
pub fn wait_for_image(image: &Path, timeout: std::time::Duration) -> Result<(), String> {
    if let Some(devices) = mtd_devices(image).filter(|devices| devices.len() > 1) {
        let deadline = std::time::Instant::now() + timeout;
        return devices.iter().try_for_each(|device| {
            wait_for_image(device, deadline.saturating_duration_since(std::time::Instant::now()))
        });
    }
    check_volume_path(image)?;
    let file = File::open(image).map_err(|error| format!("{}: {error}", image.display()))?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        // SAFETY: flock on a descriptor this function owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0 {
            return Ok(()); // released when `file` closes
        }
        if std::time::Instant::now() >= deadline {
            return Err(format!("{}: still in use after {timeout:?}; is it mounted elsewhere?", image.display()));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Explains an image-file error and says what to do about it.
pub fn describe_image_error(image: &Path, error: &ImageError) -> String {
    let hint = match error {
        ImageError::BadMagic { .. } => "this file is not an fsoc image (create one with `fsoc mkfs`)",
        ImageError::Truncated { .. } | ImageError::FileSizeMismatch { .. } => {
            "the image file is truncated or was damaged: restore it from a copy"
        }
        ImageError::Io { .. } => "the image file cannot be read",
        _ => "the image header is damaged: restore the image from a copy",
    };
    format!("{}: {error}: {hint}", image.display())
}

/// The file beside a volume that stands for its NVRAM (`fsoc mkfs --nvram`): `NAME.nvram`,
/// where NAME is the image or an array's base.
pub fn nvram_path(name: &Path) -> PathBuf {
    fsoc_media::nvram::sidecar_path(name)
}

/// The NVRAM of the volume `name`, if its file exists (`fsoc_media::nvram::open_sidecar`):
/// written through `pwrite` and made durable with `fdatasync` at every record.
pub fn open_nvram(name: &Path) -> Result<Option<Box<dyn fsoc_media::NvramDevice>>, String> {
    match fsoc_media::nvram::open_sidecar(name) {
        Ok(nvram) => Ok(nvram.map(|nvram| Box::new(nvram) as Box<dyn fsoc_media::NvramDevice>)),
        Err(error) => Err(format!("{}: {error}", nvram_path(name).display())),
    }
}

/// Explains why a volume does not mount.
pub fn describe_mount_error(image: &Path, error: &FsError) -> String {
    // Chip files are opened up to the first missing one (a chip file alone when chip 0 is
    // missing): name the volume's first chip file that is not there.
    if let FsError::Io(fsoc_core::txn::TxnError::ChipSet(fsoc_core::txn::ChipSetError::MissingChip {
        volume_chip_count,
        ..
    })) = error
    {
        if let Some((base, chip)) = first_missing_chip_file(image, *volume_chip_count) {
            return format!("{}: cannot mount: {error}; {}", image.display(), missing_chip_file(&base, chip));
        }
    }
    let hint = match error {
        FsError::Io(fsoc_core::txn::TxnError::Nvram { .. }) => format!(
            "the volume's NVRAM is the file {} (made by `fsoc mkfs --nvram`): keep it beside the volume, \
             and never give one volume another's",
            nvram_path(image).display()
        ),
        FsError::Io(fsoc_core::txn::TxnError::NotAVolume { .. }) => {
            "the flash image holds no fsoc volume: create one with `fsoc mkfs`".to_string()
        }
        // fsck cannot say more: it needs a mounted volume too. Say what is known.
        FsError::Io(fsoc_core::txn::TxnError::NoMetaroot) => {
            "no readable metaroot (transaction record): the volume cannot be recovered by fsoc; restore it from a copy"
                .to_string()
        }
        // Raw NAND: name devices, not chip files, and the rebuild a replaced chip needs.
        FsError::Io(fsoc_core::txn::TxnError::ChipSet(chip_set)) if mtd_devices(image).is_some() => {
            let replaced = match chip_set {
                fsoc_core::txn::ChipSetError::ForeignChip { position, .. }
                | fsoc_core::txn::ChipSetError::NotAVolumeChip { position } => format!(
                    "; if the device in position {position} is a new chip in place of a lost one, `fsoc rebuild {} \
                     --chip {position}` writes it from the others (a volume made with --redundancy parity)",
                    image.display()
                ),
                _ => String::new(),
            };
            format!(
                "these MTD devices do not form one volume: list the volume's own devices (/dev/mtdN), one per \
                 chip, in chip order as given to `fsoc mkfs`{replaced}"
            )
        }
        FsError::Io(fsoc_core::txn::TxnError::ChipSet(_)) => {
            "these chip files do not form one volume: put back the volume's own chip files, named \
             BASE.chip0, BASE.chip1, … in chip order"
                .to_string()
        }
        _ => "the volume's fixed structures are damaged beyond what mount recovers; restore it from a copy".to_string(),
    };
    format!("{}: cannot mount: {error}; {hint}", image.display())
}

/// Bytes of tree nodes cached per tree by tools and the mount (4,096 nodes of 4 KiB).
const CACHE_BYTES: usize = 16 << 20;

/// A file-system configuration for tools and the mount: defaults with a larger node cache.
pub fn volume_config(read_only: bool) -> FsConfig {
    let mut config = FsConfig::default();
    config.volume.cache_bytes_max = config.volume.cache_bytes_max.max(CACHE_BYTES);
    config.volume.read_only = read_only;
    config
}

/// The base of the array `path` belongs to, if it names one (see `VolumeFiles::locate`).
pub fn array_base(path: &Path) -> Option<PathBuf> {
    let chip_base = chip_file_base(path).filter(|base| chip_file_path(base, 0).exists());
    chip_base.or_else(|| (!path.exists() && chip_file_path(path, 0).exists()).then(|| path.to_path_buf()))
}

/// A chip file of an `fsoc array` volume (BASE.chipN), or its BASE, given to an image tool
/// (ls, cat, put, get, rm, mkdir, mv), which reads single-file images only: say so and say
/// what works on it, instead of calling it damaged.
pub fn refuse_array_chip(image: &Path) -> Result<(), String> {
    if let Some(base) = array_base(image) {
        return Err(format!(
            "{}: this is an array volume made by `fsoc array mkfs` (one file per chip); the image tools \
             (ls, cat, put, get, rm, mkdir, mv) read single-file images from `fsoc mkfs`. Mount the array to use \
             its files: `fsoc mount {} MOUNTPOINT` (fsoc fsck and fsoc info take it too).",
            image.display(),
            base.display()
        ));
    }
    Ok(())
}

/// The flash under a volume of either kind, so one code path mounts, checks and serves both.
pub enum VolumeFlash {
    Image(SimFlash<ImageStore>),
    Array(ThreadedFlash),
    /// Raw NAND through Linux MTD (fsoc-mtd), one device per chip.
    Mtd(MtdFlash),
}

impl VolumeFlash {
    /// Makes everything written durable and releases the files (an array's worker threads
    /// finish their queues and stop).
    pub fn close(self) -> Result<(), NandError> {
        match self {
            VolumeFlash::Image(mut flash) => flash.flush(),
            VolumeFlash::Array(flash) => flash.close(),
            // Programs and erases through MTD are on the chip when their ioctl returns.
            VolumeFlash::Mtd(_) => Ok(()),
        }
    }
}

/// Forwards a `Flash` call to whichever flash the volume has.
macro_rules! forward {
    ($self:ident, $flash:ident => $call:expr) => {
        match $self {
            VolumeFlash::Image($flash) => $call,
            VolumeFlash::Array($flash) => $call,
            VolumeFlash::Mtd($flash) => $call,
        }
    };
}

impl Flash for VolumeFlash {
    fn geometry(&self) -> Geometry {
        forward!(self, flash => flash.geometry())
    }

    fn chip_count(&self) -> u32 {
        forward!(self, flash => flash.chip_count())
    }

    fn timing(&self) -> Timing {
        forward!(self, flash => flash.timing())
    }

    fn read_page(
        &self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &mut [u8],
        spare: &mut [u8],
    ) -> Result<Completed<ReadStatus>, NandError> {
        forward!(self, flash => flash.read_page(issue_ns, page, data, spare))
    }

    fn read_pages(
        &self,
        issue_ns: Nanos,
        pages: &[PageAddress],
        data: &mut [&mut [u8]],
        spares: &mut [u8],
        completions: &mut Vec<Completed<ReadStatus>>,
    ) -> Result<(), NandError> {
        forward!(self, flash => flash.read_pages(issue_ns, pages, data, spares, completions))
    }

    fn program_page(
        &mut self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &[u8],
        spare: &[u8],
    ) -> Result<Completed<()>, NandError> {
        forward!(self, flash => flash.program_page(issue_ns, page, data, spare))
    }

    fn erase_block(&mut self, issue_ns: Nanos, block: BlockAddress) -> Result<Completed<()>, NandError> {
        forward!(self, flash => flash.erase_block(issue_ns, block))
    }

    fn is_bad_block(&self, block: BlockAddress) -> Result<bool, NandError> {
        forward!(self, flash => flash.is_bad_block(block))
    }

    fn mark_bad_block(&mut self, block: BlockAddress) -> Result<(), NandError> {
        forward!(self, flash => flash.mark_bad_block(block))
    }

    fn busy_until_ns(&self, chip: ChipIndex) -> Nanos {
        forward!(self, flash => flash.busy_until_ns(chip))
    }

    fn all_done_ns(&self) -> Nanos {
        forward!(self, flash => flash.all_done_ns())
    }

    fn erase_count(&self, block: BlockAddress) -> Result<u32, NandError> {
        forward!(self, flash => flash.erase_count(block))
    }

    fn paired_page_distance(&self) -> u32 {
        forward!(self, flash => flash.paired_page_distance())
    }

    fn ecc_correctable_bits_per_512(&self) -> Option<u32> {
        forward!(self, flash => flash.ecc_correctable_bits_per_512())
    }

    fn flush(&mut self) -> Result<(), NandError> {
        forward!(self, flash => flash.flush())
    }

    fn begin_flush(&mut self) -> Result<fsoc_media::FlushWait, NandError> {
        forward!(self, flash => flash.begin_flush())
    }

    fn write_barrier(&mut self) -> Result<(), NandError> {
        forward!(self, flash => flash.write_barrier())
    }

    fn prefetch(&self, pages: &[PageAddress]) {
        forward!(self, flash => flash.prefetch(pages))
    }
}

/// What the ECC of an MTD volume's chips did since it was opened (reads corrected, bits,
/// uncorrectable reads), for `fsoc info` and `fsoc fsck`; `None` for simulated flash.
pub fn mtd_ecc_summary(flash: &VolumeFlash) -> Option<String> {
    let VolumeFlash::Mtd(flash) = flash else { return None };
    let counters = flash.counters();
    let sum = |field: fn(&fsoc_mtd::MtdCounters) -> u64| counters.iter().map(field).sum::<u64>();
    Some(format!(
        "{} page reads: {} corrected by ECC ({} bits), {} uncorrectable",
        sum(|chip| chip.reads),
        sum(|chip| chip.corrected_reads),
        sum(|chip| chip.corrected_bits),
        sum(|chip| chip.uncorrectable_reads)
    ))
}

/// A mounted volume with the locks on its files, which it holds until it is dropped.
pub struct OpenVolume {
    pub files: VolumeFiles,
    pub fs: FileSystem<VolumeFlash>,
    pub locks: Vec<ImageLock>,
}

/// Locks the files of the volume `path` names (a writer always exclusively, a reader as
/// `exclusive` says), opens and mounts it.
pub fn open(path: &Path, read_only: bool, exclusive: bool) -> Result<OpenVolume, String> {
    open_files(VolumeFiles::locate(path), read_only, exclusive)
}

/// `open` for the image tools, which read single-file images only: an array's chip file (or
/// its base) is refused with what works on it instead.
pub fn open_image(image: &Path, read_only: bool) -> Result<OpenVolume, String> {
    if let Some(devices) = mtd_devices(image) {
        return open_files(VolumeFiles::Mtd { name: image.to_path_buf(), devices }, read_only, !read_only);
    }
    refuse_array_chip(image)?;
    open_files(VolumeFiles::Image(image.to_path_buf()), read_only, !read_only)
}

/// Locks `files` (as `open` does), opens and mounts the volume they hold.
pub fn open_files(files: VolumeFiles, read_only: bool, exclusive: bool) -> Result<OpenVolume, String> {
    let locks = files.lock(exclusive || !read_only)?;
    let flash = open_flash(&files, read_only)?;
    let fs = mount(flash, files.name(), read_only)?;
    Ok(OpenVolume { files, fs, locks })
}

/// `open` for a mount, which holds its files exclusively: a read-only mount opens them for
/// writing too when it can (a mount's `remount,rw` then makes the volume writable in place),
/// and mounts the file system read-only all the same. Returns the volume and whether its
/// flash takes writes.
pub fn open_for_mount(path: &Path, read_only: bool) -> Result<(OpenVolume, bool), String> {
    let files = VolumeFiles::locate(path);
    let locks = files.lock(true)?;
    let (flash, writable) = match open_flash(&files, false) {
        Ok(flash) => (flash, true),
        // A write-protected device (or one this user may only read) still mounts read-only.
        Err(_) if read_only => (open_flash(&files, true)?, false),
        Err(error) => return Err(error),
    };
    let fs = mount(flash, files.name(), read_only)?;
    Ok((OpenVolume { files, fs, locks }, writable))
}

/// Opens the chips of `files` without mounting the file system on them (the caller holds the
/// locks): for `fsoc serve --raw`, which exports pages, not files. MTD devices are opened
/// read-write unless `read_only`.
pub fn open_flash(files: &VolumeFiles, read_only: bool) -> Result<VolumeFlash, String> {
    Ok(match files {
        VolumeFiles::Image(image) => {
            VolumeFlash::Image(SimFlash::open_image(image).map_err(|error| describe_image_error(image, &error))?)
        }
        VolumeFiles::Array { base, chips } => {
            VolumeFlash::Array(ThreadedFlash::open_files(chips, ArrayConfig::default()).map_err(|error| {
                format!("{}: {error} (an array volume of {} chip files)", base.display(), chips.len())
            })?)
        }
        VolumeFiles::Mtd { devices, .. } => {
            VolumeFlash::Mtd(MtdFlash::open(devices, !read_only).map_err(|error| error.to_string())?)
        }
    })
}

/// Mounts the volume on `flash` with the tools' configuration and the wall clock.
pub fn mount<F: Flash>(flash: F, name: &Path, read_only: bool) -> Result<FileSystem<F>, String> {
    let nvram = open_nvram(name)?;
    let mut fs = FileSystem::mount_with_nvram(flash, nvram, volume_config(read_only))
        .map_err(|error| describe_mount_error(name, &error))?;
    fs.now_ns = wall_clock_ns();
    Ok(fs)
}

/// Nanoseconds since the Unix epoch: the time the commands stamp on what they change.
pub fn wall_clock_ns() -> i64 {
    fsoc_engine::wall_clock_ns()
}

/// Unmounts cleanly (the final commit) and makes it durable; `name` is for messages.
pub fn close(fs: FileSystem<VolumeFlash>, name: &Path) -> Result<(), String> {
    let flash = fs.unmount().map_err(|error| format!("{}: unmount: {error}", name.display()))?;
    // Bit flips on raw NAND are news for the user (a sign the flash ages): say so.
    if let VolumeFlash::Mtd(mtd) = &flash {
        let counters = mtd.counters();
        if counters.iter().any(|chip| chip.corrected_reads > 0 || chip.uncorrectable_reads > 0) {
            if let Some(summary) = mtd_ecc_summary(&flash) {
                eprintln!("fsoc: {}: ecc: {summary}", name.display());
            }
        }
    }
    flash.close().map_err(|error| format!("{}: close: {error}", name.display()))
}

/// Closes a volume the FUSE mount or the 9P server has stopped serving: cleanly (`close`), or,
/// after an internal error (`failure`: the volume is poisoned), without committing, so the image
/// keeps its last commit, and says so. The caller releases the image locks after.
pub fn close_served(
    fs: FileSystem<VolumeFlash>,
    failure: Option<&str>,
    name: &Path,
    image: &Path,
) -> Result<(), String> {
    let Some(failure) = failure else {
        return close(fs, name);
    };
    let flash = fs.unmount().map_err(|error| format!("{}: {error}", image.display()))?;
    let _ = flash.close();
    Err(format!(
        "{}: stopped serving after an internal error ({failure}); the image keeps its last committed state: run `fsoc fsck {}`",
        image.display(),
        image.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chip file or a missing base with a chip 0 is an array; anything else is an image,
    /// including a name that merely ends in `.chipN` with no chip 0 beside it.
    #[test]
    fn paths_are_located() {
        let directory = tempfile::tempdir().expect("tempdir");
        let base = directory.path().join("disk");
        let image = directory.path().join("plain.img");
        for path in [chip_file_path(&base, 0), chip_file_path(&base, 1), image.clone()] {
            std::fs::write(path, b"").expect("write");
        }
        let array =
            VolumeFiles::Array { base: base.clone(), chips: vec![chip_file_path(&base, 0), chip_file_path(&base, 1)] };
        assert_eq!(VolumeFiles::locate(&base), array);
        assert_eq!(VolumeFiles::locate(&chip_file_path(&base, 1)), array);
        assert_eq!(VolumeFiles::locate(&image), VolumeFiles::Image(image.clone()));
        let lone = directory.path().join("lone.chip3");
        assert_eq!(VolumeFiles::locate(&lone), VolumeFiles::Image(lone.clone()));
        assert_eq!(array.primary_file(), chip_file_path(&base, 0));
        assert_eq!(array.name(), base);
    }

    /// A missing chip file is named by its array whatever path named the volume (BASE, or a
    /// chip file, chip 0 there or not); a lone file that merely ends in `.chipN` names none.
    #[test]
    fn missing_chip_files_are_named() {
        let directory = tempfile::tempdir().expect("tempdir");
        let base = directory.path().join("disk");
        for chip in [0, 2] {
            std::fs::write(chip_file_path(&base, chip), b"").expect("write");
        }
        assert_eq!(first_missing_chip_file(&base, 3), Some((base.clone(), 1)));
        assert_eq!(first_missing_chip_file(&chip_file_path(&base, 2), 3), Some((base.clone(), 1)));
        assert_eq!(first_missing_chip_file(&base, 1), None, "chip 0 of a one-chip volume is there");
        std::fs::remove_file(chip_file_path(&base, 0)).expect("remove chip 0");
        assert_eq!(first_missing_chip_file(&chip_file_path(&base, 2), 3), Some((base.clone(), 0)));
        assert_eq!(chip_file_base(&chip_file_path(&base, 12)), Some(base.clone()));
        assert!(VolumeFiles::Image(base.clone()).check().expect_err("chip 0 missing").contains("disk.chip0"));
        assert_eq!(first_missing_chip_file(&directory.path().join("lone.img"), 2), None);
    }

    /// A `+` in a file name is not an MTD list (only a list of MTD devices is), and the mount
    /// source of an image or a file array is its canonical primary file; a comma always means
    /// a device list, checked when the volume is locked.
    #[test]
    fn mtd_lists_are_told_from_file_names() {
        let directory = tempfile::tempdir().expect("tempdir");
        let image = directory.path().join("a+b.img");
        std::fs::write(&image, b"").expect("write");
        assert_eq!(mtd_devices(&image), None);
        assert_eq!(VolumeFiles::locate(&image), VolumeFiles::Image(image.clone()));
        assert_eq!(VolumeFiles::locate(&image).mount_source(), image.canonicalize().expect("canonical"));
        let list = directory.path().join("x,y");
        let VolumeFiles::Mtd { devices, .. } = VolumeFiles::locate(&list) else { panic!("a comma list is MTD") };
        assert_eq!(devices.len(), 2);
        assert!(VolumeFiles::locate(&list).lock(false).is_err(), "its parts are no MTD devices");
        assert_eq!(first_source_file(&image), image);
    }
}
