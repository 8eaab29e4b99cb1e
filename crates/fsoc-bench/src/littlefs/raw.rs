//! `LittlefsTarget`: littlefs driven through the C bindings the `littlefs2` crate re-exports
//! (`littlefs2::ll`), so every `lfs_config` field can be set (`LittlefsConfig`). Flash access
//! still goes through `NandStorage`'s `littlefs2::driver::Storage` impl.
//!
//! Invariants: the C state (`lfs_t`, `lfs_config`, buffers, storage) lives in one heap
//! allocation that never moves while littlefs holds pointers into it; at most one file is open
//! at a time, and it is closed before the call that opened it returns.

use core::ffi::{c_int, c_void};
use core::ptr::NonNull;
use std::ffi::CString;

use fsoc_media::{Nanos, SimFlash};
use littlefs2::driver::Storage;
use littlefs2::ll;

use super::{LittlefsConfig, NandStorage, BLOCK_COUNT, BLOCK_SIZE_BYTES, PAGE_SIZE_BYTES};
use crate::target::{BenchError, BenchTarget, Durability};

const LFS_ERR_INVAL: c_int = ll::lfs_error_LFS_ERR_INVAL as c_int;

struct State {
    lfs: ll::lfs_t,
    config: ll::lfs_config,
    storage: NandStorage,
    read_buffer: Vec<u8>,
    prog_buffer: Vec<u8>,
    /// u64 words so the bitmap is aligned as littlefs requires (4 bytes).
    lookahead_buffer: Vec<u64>,
    /// The cache of the one open file.
    file_buffer: Vec<u8>,
}

pub struct LittlefsTarget {
    /// Owned; freed in `drop` or taken apart in `unmount`.
    state: NonNull<State>,
}

unsafe extern "C" fn read_callback(
    config: *const ll::lfs_config,
    block: ll::lfs_block_t,
    offset: ll::lfs_off_t,
    buffer: *mut c_void,
    size_bytes: ll::lfs_size_t,
) -> c_int {
    // SAFETY: littlefs passes back the config we gave it, whose context is our storage, and a
    // buffer of `size_bytes`; no Rust reference to the storage is live during a littlefs call.
    let (storage, buffer) = unsafe {
        (
            &mut *((*config).context as *mut NandStorage),
            core::slice::from_raw_parts_mut(buffer as *mut u8, size_bytes as usize),
        )
    };
    let offset = block as usize * BLOCK_SIZE_BYTES + offset as usize;
    match storage.read(offset, buffer) {
        Ok(_) => 0,
        Err(error) => error.code(),
    }
}

unsafe extern "C" fn prog_callback(
    config: *const ll::lfs_config,
    block: ll::lfs_block_t,
    offset: ll::lfs_off_t,
    buffer: *const c_void,
    size_bytes: ll::lfs_size_t,
) -> c_int {
    // SAFETY: as in `read_callback`.
    let (storage, data) = unsafe {
        (
            &mut *((*config).context as *mut NandStorage),
            core::slice::from_raw_parts(buffer as *const u8, size_bytes as usize),
        )
    };
    let offset = block as usize * BLOCK_SIZE_BYTES + offset as usize;
    match storage.write(offset, data) {
        Ok(_) => 0,
        Err(error) => error.code(),
    }
}

unsafe extern "C" fn erase_callback(config: *const ll::lfs_config, block: ll::lfs_block_t) -> c_int {
    // SAFETY: as in `read_callback`.
    let storage = unsafe { &mut *((*config).context as *mut NandStorage) };
    match storage.erase(block as usize * BLOCK_SIZE_BYTES, BLOCK_SIZE_BYTES) {
        Ok(_) => 0,
        Err(error) => error.code(),
    }
}

unsafe extern "C" fn sync_callback(_config: *const ll::lfs_config) -> c_int {
    // Every program has completed when the storage returns.
    0
}

impl LittlefsTarget {
    fn open(storage: NandStorage, settings: &LittlefsConfig, format: bool) -> Result<LittlefsTarget, BenchError> {
        settings.validate().map_err(|reason| BenchError::InvalidConfig { reason })?;
        let cache_bytes = settings.cache_size_bytes as usize;
        let state = Box::new(State {
            // SAFETY: lfs_t is plain C data; littlefs initialises it in format/mount.
            lfs: unsafe { core::mem::zeroed() },
            config: ll::lfs_config::default(),
            storage,
            read_buffer: vec![0; cache_bytes],
            prog_buffer: vec![0; cache_bytes],
            lookahead_buffer: vec![0; (settings.lookahead_size_bytes as usize).div_ceil(8)],
            file_buffer: vec![0; cache_bytes],
        });
        let state = NonNull::from(Box::leak(state));
        let mut target = LittlefsTarget { state };
        // SAFETY: the state is ours alone; the pointers stored in the config point into the
        // same heap allocation, which does not move until it is freed.
        let code = unsafe {
            let state = &mut *target.state.as_ptr();
            state.config = ll::lfs_config {
                context: &mut state.storage as *mut NandStorage as *mut c_void,
                read: Some(read_callback),
                prog: Some(prog_callback),
                erase: Some(erase_callback),
                sync: Some(sync_callback),
                read_size: PAGE_SIZE_BYTES as u32,
                prog_size: PAGE_SIZE_BYTES as u32,
                block_size: BLOCK_SIZE_BYTES as u32,
                block_count: BLOCK_COUNT as u32,
                block_cycles: settings.block_cycles,
                cache_size: settings.cache_size_bytes,
                lookahead_size: settings.lookahead_size_bytes,
                compact_thresh: 0,
                read_buffer: state.read_buffer.as_mut_ptr() as *mut c_void,
                prog_buffer: state.prog_buffer.as_mut_ptr() as *mut c_void,
                lookahead_buffer: state.lookahead_buffer.as_mut_ptr() as *mut c_void,
                name_max: 0,
                file_max: 0,
                attr_max: 0,
                metadata_max: settings.metadata_max_bytes,
                inline_max: settings.inline_max_bytes,
                disk_version: settings.disk_version,
            };
            let mut code = 0;
            if format {
                code = ll::lfs_format(&mut state.lfs, &state.config);
            }
            if code == 0 {
                code = ll::lfs_mount(&mut state.lfs, &state.config);
            }
            code
        };
        if code != 0 {
            let error = target.error(if format { "format" } else { "mount" }, "", code);
            return Err(error);
        }
        Ok(target)
    }

    fn state(&mut self) -> &mut State {
        // SAFETY: owned by `self`; littlefs only touches it during calls made through `&mut self`.
        unsafe { &mut *self.state.as_ptr() }
    }

    fn error(&mut self, operation: &'static str, path: &str, code: c_int) -> BenchError {
        let nand = self.state().storage.take_error();
        BenchError::Littlefs { operation, path: path.to_owned(), code, nand }
    }

    fn c_path(&mut self, operation: &'static str, path: &str) -> Result<CString, BenchError> {
        CString::new(path).map_err(|_| self.error(operation, path, LFS_ERR_INVAL))
    }

    /// Opens `path` with `flags`, runs `body` on the open file, closes it (which commits a
    /// written file) and returns `body`'s value or the first error code.
    fn with_file<R>(
        &mut self,
        operation: &'static str,
        path: &str,
        flags: c_int,
        body: impl FnOnce(*mut ll::lfs_t, *mut ll::lfs_file_t) -> Result<R, c_int>,
    ) -> Result<R, BenchError> {
        let c_path = self.c_path(operation, path)?;
        let state = self.state.as_ptr();
        // SAFETY: the file struct lives in this frame and is closed before it ends, so
        // littlefs's list of open files never points at a dead file.
        let result = unsafe {
            let mut file: ll::lfs_file_t = core::mem::zeroed();
            let file_config = ll::lfs_file_config {
                buffer: (*state).file_buffer.as_mut_ptr() as *mut c_void,
                attrs: core::ptr::null_mut(),
                attr_count: 0,
            };
            let code = ll::lfs_file_opencfg(&mut (*state).lfs, &mut file, c_path.as_ptr(), flags, &file_config);
            if code < 0 {
                Err(code)
            } else {
                let value = body(&mut (*state).lfs, &mut file);
                let close_code = ll::lfs_file_close(&mut (*state).lfs, &mut file);
                match (value, close_code) {
                    (Err(code), _) => Err(code),
                    (Ok(_), code) if code < 0 => Err(code),
                    (Ok(value), _) => Ok(value),
                }
            }
        };
        result.map_err(|code| self.error(operation, path, code))
    }
}

impl LittlefsTarget {
    /// Writes `data` to `path` in `unit`-byte `lfs_file_write` calls, creating the file
    /// (exclusive) or appending to it, and closes it (littlefs's commit). PostMark's unbuffered
    /// writes: the units reach littlefs one by one, and its file cache gathers them into pages.
    pub fn write_in_units(&mut self, path: &str, data: &[u8], unit: usize, append: bool) -> Result<(), BenchError> {
        let flags = if append {
            ll::lfs_open_flags_LFS_O_WRONLY | ll::lfs_open_flags_LFS_O_APPEND
        } else {
            ll::lfs_open_flags_LFS_O_WRONLY | ll::lfs_open_flags_LFS_O_CREAT | ll::lfs_open_flags_LFS_O_EXCL
        } as c_int;
        let operation = if append { "append" } else { "create" };
        self.with_file(operation, path, flags, |lfs, file| {
            for chunk in data.chunks(unit.max(1)) {
                // SAFETY: `chunk` outlives the call; lfs and file are open (see `with_file`).
                let written =
                    unsafe { ll::lfs_file_write(lfs, file, chunk.as_ptr() as *const c_void, chunk.len() as u32) };
                if written < 0 {
                    return Err(written);
                }
                assert_eq!(written as usize, chunk.len(), "littlefs wrote {written} of {} bytes", chunk.len());
            }
            Ok(())
        })
    }

    /// Reads `path` to its end in `unit`-byte `lfs_file_read` calls; returns the bytes read.
    pub fn read_in_units(&mut self, path: &str, unit: usize) -> Result<u64, BenchError> {
        let mut buffer = vec![0u8; unit.max(1)];
        self.with_file("read", path, ll::lfs_open_flags_LFS_O_RDONLY as c_int, |lfs, file| {
            let mut total = 0u64;
            loop {
                // SAFETY: `buffer` is a live buffer of the length passed.
                let count =
                    unsafe { ll::lfs_file_read(lfs, file, buffer.as_mut_ptr() as *mut c_void, buffer.len() as u32) };
                if count < 0 {
                    return Err(count);
                }
                if count == 0 {
                    return Ok(total);
                }
                total += count as u64;
            }
        })
    }
}

impl Drop for LittlefsTarget {
    fn drop(&mut self) {
        // SAFETY: leaked in `open` and freed only here (`unmount` forgets `self`).
        unsafe { drop(Box::from_raw(self.state.as_ptr())) };
    }
}

impl BenchTarget for LittlefsTarget {
    const NAME: &'static str = "littlefs";
    type Settings = LittlefsConfig;

    fn format(flash: SimFlash, _seed: u64, settings: &LittlefsConfig) -> Result<Self, BenchError> {
        LittlefsTarget::open(NandStorage::new(flash)?, settings, true)
    }

    fn mount(flash: SimFlash, settings: &LittlefsConfig) -> Result<Self, BenchError> {
        LittlefsTarget::open(NandStorage::new(flash)?, settings, false)
    }

    fn unmount(mut self) -> Result<SimFlash, BenchError> {
        // SAFETY: no file is open; lfs_unmount only releases littlefs's own state.
        let code = unsafe { ll::lfs_unmount(&mut self.state().lfs) };
        if code != 0 {
            return Err(self.error("unmount", "", code));
        }
        let state = self.state;
        core::mem::forget(self);
        // SAFETY: `self` is forgotten, so this is the only owner left.
        let state = unsafe { Box::from_raw(state.as_ptr()) };
        Ok(state.storage.into_flash())
    }

    fn create_directory(&mut self, path: &str) -> Result<(), BenchError> {
        let c_path = self.c_path("mkdir", path)?;
        // SAFETY: littlefs is mounted and no file is open.
        let code = unsafe { ll::lfs_mkdir(&mut self.state().lfs, c_path.as_ptr()) };
        if code < 0 {
            return Err(self.error("mkdir", path, code));
        }
        Ok(())
    }

    fn create_file(&mut self, path: &str, bytes: &[u8], _durability: Durability) -> Result<(), BenchError> {
        let flags =
            (ll::lfs_open_flags_LFS_O_WRONLY | ll::lfs_open_flags_LFS_O_CREAT | ll::lfs_open_flags_LFS_O_EXCL) as c_int;
        // Closing the file commits it: littlefs's durability point.
        self.with_file("create", path, flags, |lfs, file| {
            if bytes.is_empty() {
                return Ok(());
            }
            // SAFETY: `bytes` outlives the call; lfs and file are open (see `with_file`).
            let written = unsafe { ll::lfs_file_write(lfs, file, bytes.as_ptr() as *const c_void, bytes.len() as u32) };
            if written < 0 {
                return Err(written);
            }
            assert_eq!(written as usize, bytes.len(), "littlefs wrote {written} of {} bytes", bytes.len());
            Ok(())
        })
    }

    fn open_file(&mut self, path: &str) -> Result<(), BenchError> {
        self.with_file("open", path, ll::lfs_open_flags_LFS_O_RDONLY as c_int, |_, _| Ok(()))
    }

    fn read_file(&mut self, path: &str, size_bytes_max: usize) -> Result<Vec<u8>, BenchError> {
        let mut contents = vec![0u8; size_bytes_max];
        let length = self.with_file("read", path, ll::lfs_open_flags_LFS_O_RDONLY as c_int, |lfs, file| {
            let mut filled = 0usize;
            // Bounded: each round reads at least one byte or ends.
            while filled < contents.len() {
                let rest = &mut contents[filled..];
                // SAFETY: `rest` is a live buffer of the length passed.
                let count =
                    unsafe { ll::lfs_file_read(lfs, file, rest.as_mut_ptr() as *mut c_void, rest.len() as u32) };
                if count < 0 {
                    return Err(count);
                }
                if count == 0 {
                    break;
                }
                filled += count as usize;
            }
            Ok(filled)
        })?;
        contents.truncate(length);
        Ok(contents)
    }

    fn delete_file(&mut self, path: &str, _durability: Durability) -> Result<(), BenchError> {
        let c_path = self.c_path("remove", path)?;
        // SAFETY: littlefs is mounted and no file is open.
        let code = unsafe { ll::lfs_remove(&mut self.state().lfs, c_path.as_ptr()) };
        if code < 0 {
            return Err(self.error("remove", path, code));
        }
        Ok(())
    }

    fn commit(&mut self) -> Result<(), BenchError> {
        // Every littlefs operation above already ended in a commit.
        Ok(())
    }

    fn flash(&mut self) -> &mut SimFlash {
        self.state().storage.flash()
    }

    fn now_ns(&mut self) -> Nanos {
        self.state().storage.now_ns()
    }

    fn settings_json(settings: &LittlefsConfig) -> serde_json::Value {
        settings.to_json("littlefs 2.9 (C) via littlefs2 0.8's C bindings (littlefs2::ll)")
    }
}
