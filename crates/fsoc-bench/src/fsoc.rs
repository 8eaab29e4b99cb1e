//! The fsoc target: `fsoc_core::FileSystem` on the benchmark's `SimFlash`, default `FsConfig`.
//!
//! Durability: `Durability::Commit` ends the call with a transaction point (fsync of the new
//! file, `transact` after an unlink), so each such call is on flash when it returns, as
//! littlefs's close and remove are.

use fsoc_core::{FileSystem, FsConfig, FsError, OpenFlags};
use fsoc_media::{Flash, Nanos, SimFlash};

use crate::target::{BenchError, BenchTarget, Durability};

/// Mode of the files and directories the benchmarks create.
const FILE_MODE: u32 = 0o644;
const DIRECTORY_MODE: u32 = 0o755;

pub struct FsocTarget {
    fs: FileSystem<SimFlash>,
}

fn fsoc_error<'a>(operation: &'static str, path: &'a str) -> impl FnOnce(FsError) -> BenchError + 'a {
    move |source| BenchError::Fsoc { operation, path: path.to_owned(), source }
}

impl FsocTarget {
    pub fn file_system(&mut self) -> &mut FileSystem<SimFlash> {
        &mut self.fs
    }

    fn read_flags() -> OpenFlags {
        OpenFlags { read: true, ..OpenFlags::default() }
    }
}

impl BenchTarget for FsocTarget {
    const NAME: &'static str = "fsoc";

    type Settings = FsConfig;

    fn format(flash: SimFlash, seed: u64, settings: &FsConfig) -> Result<Self, BenchError> {
        let fs = FileSystem::format(flash, *settings, seed).map_err(fsoc_error("format", ""))?;
        Ok(FsocTarget { fs })
    }

    fn mount(flash: SimFlash, settings: &FsConfig) -> Result<Self, BenchError> {
        let fs = FileSystem::mount(flash, *settings).map_err(fsoc_error("mount", ""))?;
        Ok(FsocTarget { fs })
    }

    fn unmount(self) -> Result<SimFlash, BenchError> {
        self.fs.unmount().map_err(fsoc_error("unmount", ""))
    }

    fn create_directory(&mut self, path: &str) -> Result<(), BenchError> {
        self.fs.mkdir(path.as_bytes(), DIRECTORY_MODE).map(|_| ()).map_err(fsoc_error("mkdir", path))
    }

    fn create_file(&mut self, path: &str, bytes: &[u8], durability: Durability) -> Result<(), BenchError> {
        let flags = OpenFlags { write: true, create: true, exclusive: true, ..OpenFlags::default() };
        let fd = self.fs.open(path.as_bytes(), flags, FILE_MODE).map_err(fsoc_error("create", path))?;
        if !bytes.is_empty() {
            let written = self.fs.write_fd(fd, bytes).map_err(fsoc_error("write", path))?;
            assert_eq!(written, bytes.len(), "fsoc wrote {written} of {} bytes to {path}", bytes.len());
        }
        if durability == Durability::Commit {
            self.fs.fsync_fd(fd).map_err(fsoc_error("fsync", path))?;
        }
        self.fs.close(fd).map_err(fsoc_error("close", path))
    }

    fn open_file(&mut self, path: &str) -> Result<(), BenchError> {
        let fd = self.fs.open(path.as_bytes(), Self::read_flags(), 0).map_err(fsoc_error("open", path))?;
        self.fs.close(fd).map_err(fsoc_error("close", path))
    }

    fn read_file(&mut self, path: &str, size_bytes_max: usize) -> Result<Vec<u8>, BenchError> {
        let fd = self.fs.open(path.as_bytes(), Self::read_flags(), 0).map_err(fsoc_error("open", path))?;
        let contents = self.fs.read_fd(fd, size_bytes_max).map_err(fsoc_error("read", path))?;
        self.fs.close(fd).map_err(fsoc_error("close", path))?;
        Ok(contents)
    }

    fn delete_file(&mut self, path: &str, durability: Durability) -> Result<(), BenchError> {
        self.fs.unlink(path.as_bytes()).map_err(fsoc_error("unlink", path))?;
        if durability == Durability::Commit {
            self.fs.transact().map_err(fsoc_error("transact", path))?;
        }
        Ok(())
    }

    fn commit(&mut self) -> Result<(), BenchError> {
        self.fs.transact().map_err(fsoc_error("transact", ""))
    }

    fn flash(&mut self) -> &mut SimFlash {
        self.fs.flash_mut()
    }

    fn now_ns(&mut self) -> Nanos {
        // Programs are issued without waiting; the operation is done when the chips are.
        self.fs.device_now_ns().max(self.fs.flash().all_done_ns())
    }

    fn settings_json(settings: &FsConfig) -> serde_json::Value {
        serde_json::json!({
            "config": if *settings == FsConfig::default() { "FsConfig::default()" } else { "custom" },
            "cache_bytes_max": settings.volume.cache_bytes_max,
            "dirty_nodes_max": settings.volume.dirty_nodes_max,
            "reserve_segments": settings.volume.reserve_segments,
            "io_batch_pages": settings.io_batch_pages,
            "commit": "fsync before close on create, transact after unlink",
        })
    }
}
