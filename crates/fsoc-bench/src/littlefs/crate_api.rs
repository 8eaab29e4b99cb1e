//! `LittlefsCrateTarget`: littlefs through the `littlefs2` crate's safe `Filesystem` API, with
//! the settings its `Storage` impl fixes at compile time (`LittlefsConfig::CRATE_DEFAULTS`:
//! `metadata_max` and `inline_max` at littlefs's defaults, which the API does not expose). It
//! cross-checks `LittlefsTarget`: with the same settings both must do the same flash
//! operations.

use core::mem::ManuallyDrop;
use core::ptr::NonNull;

use fsoc_media::{Nanos, SimFlash};
use littlefs2::fs::{Allocation, File, Filesystem};
use littlefs2::io::{Error as LfsError, Write as _};
use littlefs2::path::PathBuf;

use super::{LittlefsConfig, NandStorage};
use crate::target::{BenchError, BenchTarget, Durability};

/// A mounted littlefs. `Filesystem` borrows its allocation and storage for its whole life, so
/// both live in heap boxes owned through raw pointers: they never move while mounted, and
/// they are freed only after the `Filesystem` that borrows them is gone.
pub struct LittlefsCrateTarget {
    filesystem: ManuallyDrop<Filesystem<'static, NandStorage>>,
    allocation: NonNull<Allocation<NandStorage>>,
    storage: NonNull<NandStorage>,
}

impl LittlefsCrateTarget {
    /// Mounts the littlefs on `storage`; formats it first if `format`.
    fn open(storage: NandStorage, format: bool) -> Result<LittlefsCrateTarget, BenchError> {
        let storage = NonNull::from(Box::leak(Box::new(storage)));
        let allocation = NonNull::from(Box::leak(Box::new(Allocation::<NandStorage>::new())));
        // SAFETY: both pointers come from live boxes nobody else references; the `'static`
        // borrows end when `filesystem` is taken apart in `unmount` or dropped in `drop`,
        // before the boxes are rebuilt and freed.
        let (storage_ref, allocation_ref) = unsafe { (&mut *storage.as_ptr(), &mut *allocation.as_ptr()) };
        let mounted = if format {
            Filesystem::format(storage_ref).and_then(|()| Filesystem::mount(allocation_ref, storage_ref))
        } else {
            Filesystem::mount(allocation_ref, storage_ref)
        };
        match mounted {
            Ok(filesystem) => {
                Ok(LittlefsCrateTarget { filesystem: ManuallyDrop::new(filesystem), allocation, storage })
            }
            Err(error) => {
                // SAFETY: the failed mount dropped its borrows; the boxes are ours again.
                let mut storage = unsafe {
                    drop(Box::from_raw(allocation.as_ptr()));
                    Box::from_raw(storage.as_ptr())
                };
                let nand = storage.take_error();
                Err(BenchError::Littlefs {
                    operation: if format { "format" } else { "mount" },
                    path: String::new(),
                    code: error.code(),
                    nand,
                })
            }
        }
    }

    fn storage(&mut self) -> &mut NandStorage {
        // SAFETY: no littlefs call is running (we hold `&mut self`), so littlefs does not use
        // the storage while this borrow lives.
        unsafe { self.filesystem.borrow_storage_mut() }
    }

    fn error(&mut self, operation: &'static str, path: &str, error: LfsError) -> BenchError {
        let nand = self.storage().take_error();
        BenchError::Littlefs { operation, path: path.to_owned(), code: error.code(), nand }
    }

    fn path(&mut self, operation: &'static str, path: &str) -> Result<PathBuf, BenchError> {
        PathBuf::try_from(path).map_err(|_| self.error(operation, path, LfsError::INVALID))
    }
}

impl Drop for LittlefsCrateTarget {
    fn drop(&mut self) {
        // SAFETY: the filesystem goes first, ending its borrows; then the boxes are freed once.
        // `unmount` forgets `self` after taking everything out, so this runs only for a
        // target that was not unmounted.
        unsafe {
            ManuallyDrop::drop(&mut self.filesystem);
            drop(Box::from_raw(self.allocation.as_ptr()));
            drop(Box::from_raw(self.storage.as_ptr()));
        }
    }
}

impl BenchTarget for LittlefsCrateTarget {
    const NAME: &'static str = "littlefs-crate-api";
    /// Fixed at compile time by the `Storage` impl; only `CRATE_DEFAULTS` is accepted.
    type Settings = LittlefsConfig;

    fn format(flash: SimFlash, _seed: u64, settings: &LittlefsConfig) -> Result<Self, BenchError> {
        check_crate_settings(settings)?;
        LittlefsCrateTarget::open(NandStorage::new(flash)?, true)
    }

    fn mount(flash: SimFlash, settings: &LittlefsConfig) -> Result<Self, BenchError> {
        check_crate_settings(settings)?;
        LittlefsCrateTarget::open(NandStorage::new(flash)?, false)
    }

    fn unmount(self) -> Result<SimFlash, BenchError> {
        // littlefs keeps nothing dirty between calls (every close and remove committed), so
        // unmounting is dropping the state; `lfs_unmount` only releases buffers.
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so each of these is taken apart exactly once; the
        // filesystem's borrows end before the boxes are rebuilt.
        let storage = unsafe {
            drop(ManuallyDrop::take(&mut this.filesystem));
            drop(Box::from_raw(this.allocation.as_ptr()));
            Box::from_raw(this.storage.as_ptr())
        };
        Ok(storage.into_flash())
    }

    fn create_directory(&mut self, path: &str) -> Result<(), BenchError> {
        let lfs_path = self.path("mkdir", path)?;
        self.filesystem.create_dir(&lfs_path).map_err(|error| self.error("mkdir", path, error))
    }

    fn create_file(&mut self, path: &str, bytes: &[u8], _durability: Durability) -> Result<(), BenchError> {
        let lfs_path = self.path("create", path)?;
        // Closing the file (at the end of the closure) commits it: littlefs's durability point.
        let result = littlefs2::fs::OpenOptions::new().write(true).create_new(true).open_and_then(
            &self.filesystem,
            &lfs_path,
            |file| file.write_all(bytes),
        );
        result.map_err(|error| self.error("create", path, error))
    }

    fn open_file(&mut self, path: &str) -> Result<(), BenchError> {
        let lfs_path = self.path("open", path)?;
        let result = File::open_and_then(&self.filesystem, &lfs_path, |_file| Ok(()));
        result.map_err(|error| self.error("open", path, error))
    }

    fn read_file(&mut self, path: &str, size_bytes_max: usize) -> Result<Vec<u8>, BenchError> {
        let lfs_path = self.path("read", path)?;
        let mut contents = vec![0u8; size_bytes_max];
        let result = File::open_and_then(&self.filesystem, &lfs_path, |file| {
            let mut filled = 0;
            while filled < contents.len() {
                let count = file.read(&mut contents[filled..])?;
                if count == 0 {
                    break;
                }
                filled += count;
            }
            Ok(filled)
        });
        let length = result.map_err(|error| self.error("read", path, error))?;
        contents.truncate(length);
        Ok(contents)
    }

    fn delete_file(&mut self, path: &str, _durability: Durability) -> Result<(), BenchError> {
        let lfs_path = self.path("remove", path)?;
        self.filesystem.remove(&lfs_path).map_err(|error| self.error("remove", path, error))
    }

    fn commit(&mut self) -> Result<(), BenchError> {
        // Every littlefs operation above already ended in a commit.
        Ok(())
    }

    fn flash(&mut self) -> &mut SimFlash {
        self.storage().flash()
    }

    fn now_ns(&mut self) -> Nanos {
        self.storage().now_ns()
    }

    fn settings_json(settings: &LittlefsConfig) -> serde_json::Value {
        settings.to_json("littlefs 2.9 (C) via the littlefs2 0.8 crate's safe API")
    }
}

fn check_crate_settings(settings: &LittlefsConfig) -> Result<(), BenchError> {
    if *settings != LittlefsConfig::CRATE_DEFAULTS {
        return Err(BenchError::InvalidConfig {
            reason: format!("the littlefs2 safe API fixes its settings at compile time; got {settings:?}"),
        });
    }
    Ok(())
}
