//! Creating, locking and opening an fsoc image file exactly as the `fsoc` command does
//! (crates/fsoc-cli/src/volume_files.rs and volume_cmd.rs): the same simulated flash
//! (`SimFlash<ImageStore>`), the same file-system configuration, the same advisory lock and the
//! same size rule, so an image made here passes `fsoc fsck` and one made by `fsoc mkfs` opens
//! here.
//!
//! Invariants: an image is locked before it is mounted (exclusive for a writer, shared for a
//! reader), so a mounted image (`fsoc mount` holds the exclusive lock) is never opened; a path
//! that exists and is not a regular file is refused before it is opened, so nothing blocks on
//! a FIFO or writes to a device; a new image is built under a temporary name and renamed over
//! the path only once formatted and flushed, so a failed create leaves the old file as it was.
//!
//! The helpers here repeat a few small functions of the command-line crate (a binary, so not
//! a dependency): the size rule, the volume id and the configuration. If the command's rule
//! changes, change it here too; the pytest suite runs `fsoc fsck` on images made here.

use std::fs::File;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use fsoc_core::fs::FsError;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::image::{ImageError, ImageStore};
use fsoc_media::{Flash, Profile, SimConfig, SimFlash};

/// The flash under every image opened here: one image file holding every chip.
pub type ImageFlash = SimFlash<ImageStore>;

/// Why an image could not be created or opened: an errno for Python's `OSError` and a message
/// that says what to do.
#[derive(Debug)]
pub struct OpenError {
    pub errno: i32,
    pub message: String,
}

impl OpenError {
    fn new(errno: i32, message: impl Into<String>) -> OpenError {
        OpenError { errno, message: message.into() }
    }

    fn io(error: &std::io::Error, context: &str) -> OpenError {
        OpenError::new(error.raw_os_error().unwrap_or(libc::EIO), format!("{context}: {error}"))
    }
}

/// Bytes of tree nodes cached per tree, as the command's tools use (4,096 nodes of 4 KiB).
const CACHE_BYTES: usize = 16 << 20;

/// The command's configuration for tools and the mount: defaults with a larger node cache.
pub fn volume_config(read_only: bool) -> FsConfig {
    let mut config = FsConfig::default();
    config.volume.cache_bytes_max = config.volume.cache_bytes_max.max(CACHE_BYTES);
    config.volume.read_only = read_only;
    config
}

/// Nanoseconds since the Unix epoch: the time stamped on what a call changes.
pub fn wall_clock_ns() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |since| i64::try_from(since.as_nanos()).unwrap_or(i64::MAX))
}

/// Refuses a path that exists and is not a regular file (nothing is opened: a FIFO would
/// block). Returns whether it exists.
pub fn check_image_path(path: &Path) -> Result<bool, OpenError> {
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(error) => return Err(OpenError::io(&error, &path.display().to_string())),
    };
    if metadata.is_file() {
        return Ok(true);
    }
    let file_type = metadata.file_type();
    let (errno, what) = if file_type.is_dir() {
        (libc::EISDIR, "a directory")
    } else if file_type.is_block_device() || file_type.is_char_device() {
        (libc::EINVAL, "a device (the Python package opens image files; use `fsoc` for raw NAND through MTD)")
    } else {
        (libc::EINVAL, "not a regular file")
    };
    Err(OpenError::new(
        errno,
        format!("{}: is {what}; an fsoc image is a regular file; left untouched", path.display()),
    ))
}

/// An advisory lock on an image file, held while the image is open.
pub struct ImageLock {
    _file: File,
}

/// Locks `path` (exclusive for writers, shared for readers), or says who holds it.
pub fn lock_image(path: &Path, exclusive: bool) -> Result<ImageLock, OpenError> {
    check_image_path(path)?;
    let file = File::open(path).map_err(|error| OpenError::io(&error, &path.display().to_string()))?;
    let operation = if exclusive { libc::LOCK_EX } else { libc::LOCK_SH };
    // SAFETY: flock on a descriptor this function owns; no memory is passed.
    if unsafe { libc::flock(file.as_raw_fd(), operation | libc::LOCK_NB) } != 0 {
        return Err(OpenError::new(
            libc::EBUSY,
            format!(
                "{}: the image is in use by another fsoc process or Image (mounted, or a tool is running); \
                 unmount or close it first",
                path.display()
            ),
        ));
    }
    Ok(ImageLock { _file: file })
}

/// Explains an image-file error and says what to do about it.
fn describe_image_error(path: &Path, error: &ImageError) -> OpenError {
    let (errno, hint) = match error {
        ImageError::BadMagic { .. } => (libc::EINVAL, "this file is not an fsoc image (create one with Image.create)"),
        ImageError::Truncated { .. } | ImageError::FileSizeMismatch { .. } => {
            (libc::EIO, "the image file is truncated or was damaged: restore it from a copy")
        }
        ImageError::Io { .. } => (libc::EIO, "the image file cannot be read"),
        _ => (libc::EIO, "the image header is damaged: restore the image from a copy"),
    };
    OpenError::new(errno, format!("{}: {error}: {hint}", path.display()))
}

/// Explains why a volume does not mount.
fn describe_mount_error(path: &Path, error: &FsError) -> OpenError {
    let hint = match error {
        FsError::Io(fsoc_core::txn::TxnError::NotAVolume { .. }) => {
            "the flash image holds no fsoc volume: create one with Image.create or `fsoc mkfs`"
        }
        FsError::Io(fsoc_core::txn::TxnError::NoMetaroot) => {
            "no readable metaroot (transaction record): the volume cannot be recovered; restore it from a copy"
        }
        FsError::Io(fsoc_core::txn::TxnError::Nvram { .. }) => {
            "the volume's NVRAM is the file IMAGE.nvram beside it (made by `fsoc mkfs --nvram`); keep the two together"
        }
        _ => "the volume's fixed structures are damaged beyond what mount recovers; restore it from a copy",
    };
    OpenError::new(error.errno(), format!("{}: cannot mount: {error}; {hint}", path.display()))
}

/// A mounted image with the lock on its file, which it holds until it is dropped.
pub struct OpenImage {
    pub fs: FileSystem<ImageFlash>,
    pub read_only: bool,
    pub lock: ImageLock,
}

/// Locks (exclusive to write, shared to read), opens and mounts the image at `path`.
pub fn open(path: &Path, read_only: bool) -> Result<OpenImage, OpenError> {
    if !check_image_path(path)? {
        return Err(OpenError::new(libc::ENOENT, format!("{}: no such image file", path.display())));
    }
    let lock = lock_image(path, !read_only)?;
    let flash = SimFlash::open_image(path).map_err(|error| describe_image_error(path, &error))?;
    // A volume made with `fsoc mkfs --nvram` keeps its latest commits in IMAGE.nvram.
    let nvram = fsoc_media::nvram::open_sidecar(path)
        .map_err(|error| {
            OpenError::new(libc::EIO, format!("{}: {error}", fsoc_media::nvram::sidecar_path(path).display()))
        })?
        .map(|nvram| Box::new(nvram) as Box<dyn fsoc_media::NvramDevice>);
    let mut fs = FileSystem::mount_with_nvram(flash, nvram, volume_config(read_only))
        .map_err(|error| describe_mount_error(path, &error))?;
    fs.now_ns = wall_clock_ns();
    Ok(OpenImage { fs, read_only, lock })
}

/// Unmounts cleanly (the final commit) and makes the image file durable.
pub fn close(fs: FileSystem<ImageFlash>) -> Result<(), FsError> {
    let mut flash = fs.unmount()?;
    flash.flush().map_err(|error| FsError::Io(fsoc_core::txn::TxnError::from(error)))
}

/// What `Image.create` (like `fsoc mkfs`) was asked for.
pub struct CreateOptions {
    pub profile: String,
    pub chip_count: u32,
    pub block_count: Option<u32>,
    pub size_bytes: Option<u64>,
    pub seed: u64,
    pub volume_id: Option<u64>,
    pub force: bool,
    /// Bytes of NVRAM (FeRAM, MRAM or PCM, by name) for the commit tier, kept in IMAGE.nvram as
    /// `fsoc mkfs --nvram` does.
    pub nvram: Option<(u64, String)>,
}

/// Erase blocks per chip a volume of this profile and chip count may have: (smallest,
/// largest), by the format's own rule, as `fsoc mkfs`.
fn block_count_range(profile: Profile, chip_count: u32) -> (u32, u32) {
    fsoc_core::txn::Volume::<ImageFlash>::block_count_range(
        |blocks| profile.geometry(blocks),
        chip_count,
        &FsConfig::default().volume,
    )
}

fn size_text(bytes: u64) -> String {
    match bytes {
        bytes if bytes >= 1 << 40 => format!("{:.1}T", bytes as f64 / (1u64 << 40) as f64),
        bytes if bytes >= 1 << 30 => format!("{:.1}G", bytes as f64 / (1u64 << 30) as f64),
        bytes if bytes >= 1 << 20 => format!("{:.1}M", bytes as f64 / (1u64 << 20) as f64),
        bytes => format!("{}K", bytes >> 10),
    }
}

/// The profile `name` names, or a refusal that lists the valid names.
pub fn profile(name: &str) -> Result<Profile, OpenError> {
    Profile::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = Profile::ALL.iter().map(|profile| profile.name()).collect();
        OpenError::new(libc::EINVAL, format!("unknown profile {name:?}: give one of {}", names.join(", ")))
    })
}

/// The smallest and largest volume, in bytes, the format makes of `profile` on `chip_count`
/// chips (what `Image.create` accepts as `size`).
pub fn volume_size_range(profile_name: &str, chip_count: u32) -> Result<(u64, u64), OpenError> {
    let profile = profile(profile_name)?;
    check_chip_count(chip_count)?;
    let (blocks_min, blocks_max) = block_count_range(profile, chip_count);
    let block_bytes = profile.geometry(1).block_data_bytes();
    let volume_bytes = |blocks: u32| u64::from(blocks) * u64::from(chip_count) * block_bytes;
    Ok((volume_bytes(blocks_min), volume_bytes(blocks_max)))
}

fn check_chip_count(chip_count: u32) -> Result<(), OpenError> {
    let chip_count_max = fsoc_core::txn::superblock::CHIP_COUNT_MAX;
    if !(1..=chip_count_max).contains(&chip_count) {
        return Err(OpenError::new(
            libc::EINVAL,
            format!("{chip_count} is not a chip count: give 1 to {chip_count_max}"),
        ));
    }
    Ok(())
}

/// Erase blocks per chip for `options`, or why the volume cannot be made (sizes first).
fn block_count(profile: Profile, options: &CreateOptions) -> Result<u32, OpenError> {
    let chip_count = options.chip_count;
    check_chip_count(chip_count)?;
    let block_bytes = profile.geometry(1).block_data_bytes();
    let blocks = match (options.block_count, options.size_bytes) {
        (Some(_), Some(_)) => return Err(OpenError::new(libc::EINVAL, "give blocks or size, not both")),
        (Some(blocks), None) => blocks,
        (None, Some(size_bytes)) => {
            u32::try_from((size_bytes / u64::from(chip_count)).div_ceil(block_bytes)).unwrap_or(u32::MAX)
        }
        (None, None) => 512,
    };
    let (blocks_min, blocks_max) = block_count_range(profile, chip_count);
    if (blocks_min..=blocks_max).contains(&blocks) {
        return Ok(blocks);
    }
    let volume_bytes = |blocks: u32| u64::from(blocks) * u64::from(chip_count) * block_bytes;
    Err(OpenError::new(
        libc::EINVAL,
        format!(
            "a {} volume on {chip_count} chip(s) must be {} to {} ({blocks_min} to {blocks_max} erase blocks of {} \
             KiB per chip); {} ({blocks} blocks per chip) was asked for",
            profile.name(),
            size_text(volume_bytes(blocks_min)),
            size_text(volume_bytes(blocks_max)),
            block_bytes / 1024,
            size_text(volume_bytes(blocks))
        ),
    ))
}

/// SOURCE_DATE_EPOCH (reproducible builds), if set: `fsoc mkfs`'s rule.
fn source_date_epoch() -> Result<Option<u64>, OpenError> {
    fsoc_media::image::source_date_epoch().map_err(|message| OpenError::new(libc::EINVAL, message))
}

/// The volume id for a new volume, by `fsoc mkfs`'s rule (given, or reproducible from
/// SOURCE_DATE_EPOCH and the seed, or random); 0 is not a volume id.
fn new_volume_id(given: Option<u64>, seed: u64) -> Result<u64, OpenError> {
    if given == Some(0) {
        return Err(OpenError::new(libc::EINVAL, "the volume id must not be 0"));
    }
    source_date_epoch()?;
    fsoc_media::image::new_volume_id(given, seed).map_err(|message| OpenError::new(libc::EIO, message))
}

/// Formats a new image at `path` as `fsoc mkfs` does and returns it mounted and writable.
/// The image is built under a temporary name beside `path` and renamed over it once formatted
/// and flushed; an existing file is replaced only with `force`, and never while it is locked.
pub fn create(path: &Path, options: &CreateOptions) -> Result<OpenImage, OpenError> {
    let profile = profile(&options.profile)?;
    let blocks = block_count(profile, options)?;
    // Never touch a mounted or busy image; keep the old one until the new one is complete.
    let _old_lock = if check_image_path(path)? {
        if !options.force {
            return Err(OpenError::new(
                libc::EEXIST,
                format!("{}: exists; pass force=True to replace it", path.display()),
            ));
        }
        Some(lock_image(path, true)?)
    } else {
        None
    };
    // An NVRAM file beside the path (`fsoc mkfs --nvram`) belongs to the volume being replaced:
    // left there, it would be given to the new volume, which has none, and refused.
    let nvram_file = fsoc_media::nvram::sidecar_path(path);
    let nvram = match &options.nvram {
        Some((size_bytes, technology)) => {
            let technology =
                fsoc_media::NvramTechnology::from_name(&technology.to_ascii_lowercase()).ok_or_else(|| {
                    OpenError::new(
                        libc::EINVAL,
                        format!("{technology} is not an NVRAM technology: give feram, mram or pcm"),
                    )
                })?;
            let valid = (fsoc_media::nvram::NVRAM_SIZE_BYTES_MIN..=fsoc_media::nvram::NVRAM_SIZE_BYTES_MAX)
                .contains(size_bytes)
                && size_bytes.is_multiple_of(8);
            if !valid {
                return Err(OpenError::new(
                    libc::EINVAL,
                    format!("an NVRAM of {size_bytes} bytes: an NVRAM holds 1 KiB to 16 MiB, in whole 8-byte words"),
                ));
            }
            Some((*size_bytes, technology))
        }
        None => None,
    };
    if nvram_file.exists() && !options.force {
        return Err(OpenError::new(
            libc::EEXIST,
            format!("{}: exists; pass force=True to replace it", nvram_file.display()),
        ));
    }
    let volume_id = new_volume_id(options.volume_id, options.seed)?;
    let now_ns = match source_date_epoch()? {
        Some(epoch) => i64::try_from(epoch).unwrap_or(i64::MAX).saturating_mul(1_000_000_000),
        None => wall_clock_ns(),
    };
    let file_name =
        path.file_name().ok_or_else(|| OpenError::new(libc::EINVAL, format!("{}: not a file name", path.display())))?;
    let temporary: PathBuf =
        path.with_file_name(format!(".{}.mkfs-{}", file_name.to_string_lossy(), std::process::id()));
    let nvram_temporary: PathBuf =
        path.with_file_name(format!(".{}.mkfs-{}.nvram", file_name.to_string_lossy(), std::process::id()));
    let result = (|| {
        let config = SimConfig::new(profile, options.chip_count, blocks, options.seed);
        let flash = SimFlash::create_image(&temporary, config).map_err(|error| describe_image_error(path, &error))?;
        // Locked before anyone can see it under `path`; the lock follows the file's rename.
        let lock = lock_image(&temporary, true)?;
        let device: Option<Box<dyn fsoc_media::NvramDevice>> = match nvram {
            Some((size_bytes, technology)) => {
                let _ = std::fs::remove_file(&nvram_temporary);
                let nvram_error = |error: fsoc_media::NvramError| {
                    OpenError::new(libc::EIO, format!("{}: {error}", nvram_file.display()))
                };
                let section = fsoc_media::FileSection::create(&nvram_temporary, 0, size_bytes).map_err(nvram_error)?;
                let config = fsoc_media::NvramConfig::new(size_bytes, technology, options.seed);
                Some(Box::new(fsoc_media::Nvram::new(config, section).map_err(nvram_error)?))
            }
            None => None,
        };
        let mut fs = FileSystem::format_with_nvram(flash, device, volume_config(false), volume_id, now_ns)
            .map_err(|error| OpenError::new(error.errno(), format!("{}: format: {error}", path.display())))?;
        fs.flash_mut()
            .flush()
            .map_err(|error| OpenError::new(libc::EIO, format!("{}: flush: {error}", path.display())))?;
        // The NVRAM first: an image without its NVRAM file refuses to mount, while a stale one
        // beside the old image would be another volume's.
        if nvram.is_some() {
            std::fs::rename(&nvram_temporary, &nvram_file)
                .map_err(|error| OpenError::io(&error, &nvram_file.display().to_string()))?;
        } else if nvram_file.exists() {
            std::fs::remove_file(&nvram_file)
                .map_err(|error| OpenError::io(&error, &nvram_file.display().to_string()))?;
        }
        std::fs::rename(&temporary, path).map_err(|error| OpenError::io(&error, &path.display().to_string()))?;
        fs.now_ns = wall_clock_ns();
        Ok(OpenImage { fs, read_only: false, lock })
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
        let _ = std::fs::remove_file(&nvram_temporary);
    }
    result
}
