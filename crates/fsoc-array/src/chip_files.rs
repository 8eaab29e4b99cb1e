//! The per-chip file layout: chip c of array `BASE` is the file `BASE.chip{c}`, a one-chip
//! fsoc-media image (docs/FORMAT.md, "Image file", with `chip_count` = 1). Files of one array
//! must describe identical chips; which volume a chip belongs to and its position are the file
//! system's business (its per-chip superblock), not this layer's.

use std::path::{Path, PathBuf};

use fsoc_media::image::{ImageError, ImageHeader, ImageStore};
use fsoc_media::store::PageStore;
use fsoc_media::{NandError, SimConfig};

/// Chip file `c` of array `BASE` is `BASE` + this + `c`.
pub const CHIP_FILE_SUFFIX: &str = ".chip";
/// Largest array this crate opens (the superblock allows 64, and so does the CLI).
pub const CHIP_COUNT_MAX: u32 = 64;

/// Why an array of chip files could not be created or opened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArrayError {
    #[error("chip file {path}: {source}")]
    ChipFile { path: String, source: ImageError },
    #[error("chip file {path} holds {chip_count} chips; an array's chip files hold one each")]
    NotOneChip { path: String, chip_count: u32 },
    #[error("chip file {path} describes a different chip ({field}) than {first_path}")]
    ChipMismatch { path: String, first_path: String, field: &'static str },
    #[error("an array needs 1..={CHIP_COUNT_MAX} chips, got {chip_count}")]
    ChipCount { chip_count: usize },
    #[error("no chip files {base}.chip0, .chip1, … found")]
    NoChipFiles { base: String },
    #[error("chip worker {chip}: {reason}")]
    Worker { chip: u32, reason: String },
    #[error("simulator: {0}")]
    Flash(#[from] NandError),
}

/// Path of chip file `chip_index` of array `base`.
pub fn chip_file_path(base: &Path, chip_index: u32) -> PathBuf {
    let mut name = base.as_os_str().to_os_string();
    name.push(format!("{CHIP_FILE_SUFFIX}{chip_index}"));
    PathBuf::from(name)
}

/// The chip files of `base` that exist: `.chip0`, `.chip1`, … up to the first gap. A missing
/// chip in the middle therefore shows up as a shorter array, which mount refuses by its
/// superblocks (`ChipSetError::MissingChip`).
pub fn chip_file_paths(base: &Path) -> Vec<PathBuf> {
    (0..CHIP_COUNT_MAX).map(|chip| chip_file_path(base, chip)).take_while(|path| path.exists()).collect()
}

fn chip_file_error(path: &Path) -> impl FnOnce(ImageError) -> ArrayError + '_ {
    move |source| ArrayError::ChipFile { path: path.display().to_string(), source }
}

/// Creates one fresh one-chip image per path, each with `config`'s chip description.
pub(crate) fn create_chip_files(paths: &[PathBuf], config: &SimConfig) -> Result<Vec<ImageStore>, ArrayError> {
    let chip_config = SimConfig { chip_count: 1, ..config.clone() };
    paths.iter().map(|path| ImageStore::create(path, &chip_config).map_err(chip_file_error(path))).collect()
}

/// Creates `path` as a blank chip of the same description as the chip file `like` (geometry,
/// profile, ECC strength, endurance): every block erased, unworn and good, as a new chip put in
/// a lost one's place before the file system rebuilds what it held (`fsoc rebuild`). The file
/// must not exist; it is durable when this returns.
pub fn create_blank_chip_file(path: &Path, like: &Path) -> Result<(), ArrayError> {
    let header = *ImageStore::open(like).map_err(chip_file_error(like))?.header();
    if header.chip_count != 1 {
        return Err(ArrayError::NotOneChip { path: like.display().to_string(), chip_count: header.chip_count });
    }
    let config = SimConfig { chip_count: 1, ..header.sim_config() };
    let mut store = ImageStore::create(path, &config).map_err(chip_file_error(path))?;
    store.flush()?;
    Ok(())
}

/// Opens existing chip files and checks they describe identical one-chip devices. Returns the
/// stores and the array's configuration (chip 0's description, `paths.len()` chips).
pub(crate) fn open_chip_files(paths: &[PathBuf]) -> Result<(Vec<ImageStore>, SimConfig), ArrayError> {
    if paths.is_empty() || paths.len() > CHIP_COUNT_MAX as usize {
        return Err(ArrayError::ChipCount { chip_count: paths.len() });
    }
    let mut stores = Vec::with_capacity(paths.len());
    let mut first: Option<(ImageHeader, &PathBuf)> = None;
    for path in paths {
        let store = ImageStore::open(path).map_err(chip_file_error(path))?;
        let header = *store.header();
        if header.chip_count != 1 {
            return Err(ArrayError::NotOneChip { path: path.display().to_string(), chip_count: header.chip_count });
        }
        if let Some((first_header, first_path)) = &first {
            let mismatch = |field| ArrayError::ChipMismatch {
                path: path.display().to_string(),
                first_path: first_path.display().to_string(),
                field,
            };
            if header.geometry != first_header.geometry {
                return Err(mismatch("geometry"));
            }
            if header.profile != first_header.profile {
                return Err(mismatch("profile"));
            }
            if header.ecc_correctable_bits_per_512 != first_header.ecc_correctable_bits_per_512 {
                return Err(mismatch("ECC strength"));
            }
            if header.endurance_cycles != first_header.endurance_cycles {
                return Err(mismatch("endurance"));
            }
            // The seed may differ (chips of different arrays): the simulator uses chip 0's, and
            // mount then refuses the mix by its superblocks.
        } else {
            first = Some((header, path));
        }
        stores.push(store);
    }
    let (first_header, _) = first.ok_or(ArrayError::ChipCount { chip_count: 0 })?;
    let chip_count = u32::try_from(paths.len()).map_err(|_| ArrayError::ChipCount { chip_count: paths.len() })?;
    let config = SimConfig { chip_count, ..first_header.sim_config() };
    Ok((stores, config))
}
