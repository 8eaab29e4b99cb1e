//! `File` (an open file: `Read`, `Write`, `Seek`, positioned `read_at`/`write_at` from any
//! thread) and `OpenOptions` (std::fs::OpenOptions's flags, sent as Tlopen/Tlcreate flags).
//!
//! Invariants: a file's fid is opened exactly once and clunked when the `File` drops (the
//! server then releases it: an unlinked open file lives until then); large reads and writes
//! go out as up to `pipeline_depth` Treads/Twrites of at most the iounit each; appends are
//! never pipelined (the server places each at the end as it runs it, in any order).

use std::ffi::OsStr;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use fsoc_9p::constants::{open_flags, setattr};
use fsoc_9p::SetAttributes;

use crate::client::{Client, SYMLINK_FOLLOW_MAX};
use crate::error::os_error;
use crate::metadata::Metadata;
use crate::node::Node;

/// How to open a file, as std::fs::OpenOptions.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
    sync: bool,
    mode: Option<u32>,
}

impl OpenOptions {
    pub fn new() -> OpenOptions {
        OpenOptions::default()
    }
    pub fn read(&mut self, read: bool) -> &mut Self {
        self.read = read;
        self
    }
    pub fn write(&mut self, write: bool) -> &mut Self {
        self.write = write;
        self
    }
    pub fn append(&mut self, append: bool) -> &mut Self {
        self.append = append;
        self
    }
    pub fn truncate(&mut self, truncate: bool) -> &mut Self {
        self.truncate = truncate;
        self
    }
    pub fn create(&mut self, create: bool) -> &mut Self {
        self.create = create;
        self
    }
    pub fn create_new(&mut self, create_new: bool) -> &mut Self {
        self.create_new = create_new;
        self
    }
    /// O_SYNC: every write returns once durable, and so does the open itself when it creates
    /// or truncates the file (`fsoc serve` makes a transaction point before the reply; the
    /// std::os::unix OpenOptionsExt equivalent is `custom_flags(libc::O_SYNC)`).
    pub fn sync(&mut self, sync: bool) -> &mut Self {
        self.sync = sync;
        self
    }
    /// Permission bits of a created file (default 0o666; the server applies no umask).
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = Some(mode);
        self
    }

    /// The Tlopen/Tlcreate flags, or EINVAL for the combinations std::fs refuses.
    fn flags(&self) -> io::Result<u32> {
        let writes = self.write || self.append;
        if !self.read && !writes {
            return Err(os_error(libc::EINVAL));
        }
        if (self.truncate || self.create || self.create_new) && !writes {
            return Err(os_error(libc::EINVAL));
        }
        if self.truncate && self.append {
            return Err(os_error(libc::EINVAL));
        }
        let mut flags = match (self.read, writes) {
            (true, true) => open_flags::READ_WRITE,
            (false, true) => open_flags::WRITE_ONLY,
            _ => open_flags::READ_ONLY,
        };
        if self.append {
            flags |= open_flags::APPEND;
        }
        if self.truncate {
            flags |= open_flags::TRUNCATE;
        }
        if self.sync {
            flags |= open_flags::SYNC | open_flags::DATA_SYNC; // as Linux's O_SYNC
        }
        Ok(flags)
    }

    /// Tlcreate of `path`'s name in its directory. The server does not follow a symbolic link
    /// in the way (EEXIST): as open(2) does, the client opens where it leads, or creates the
    /// file it names, at most 40 links deep.
    fn create_following_links(
        &self,
        client: &Client,
        path: &Path,
        flags: u32,
        mode: u32,
        gid: u32,
    ) -> io::Result<Node> {
        let mut path = path.to_path_buf();
        for _ in 0..=SYMLINK_FOLLOW_MAX {
            // The directory's fid is this call's own (a fresh walk), so Tlcreate may turn it
            // into the new file's: no clone walk, and one clunk fewer.
            let (mut node, name) = client.parent_of(&path)?;
            let exclusive = if self.create_new { open_flags::EXCLUSIVE } else { 0 };
            match node.lcreate(&name, flags | open_flags::CREATE | exclusive, mode, gid) {
                Ok(()) => return Ok(node),
                Err(error) if !self.create_new && error.raw_os_error() == Some(libc::EEXIST) => {
                    let link = client.lookup(&path, false)?;
                    if !link.is_symlink() {
                        return Err(error);
                    }
                    let target = PathBuf::from(OsStr::from_bytes(&link.readlink()?));
                    path = match path.parent() {
                        Some(parent) if target.is_relative() => parent.join(target),
                        _ => target,
                    };
                }
                Err(error) => return Err(error),
            }
        }
        Err(os_error(libc::ELOOP))
    }

    pub fn open(&self, client: &Client, path: impl AsRef<Path>) -> io::Result<File> {
        let path = path.as_ref();
        let flags = self.flags()?;
        let mode = self.mode.unwrap_or(0o666) & 0o7777;
        let gid = client.options().gid;
        let node = if self.create_new || self.create {
            self.create_following_links(client, path, flags, mode, gid)?
        } else {
            let mut node = client.lookup(path, true)?;
            node.lopen(flags)?;
            node
        };
        Ok(File { node, pipeline_depth: client.options().pipeline_depth, position: 0, append: self.append })
    }
}

/// An open file on the server.
#[derive(Debug)]
pub struct File {
    node: Node,
    pipeline_depth: usize,
    position: u64,
    append: bool,
}

impl File {
    /// Opens for reading (std::fs::File::open).
    pub fn open(client: &Client, path: impl AsRef<Path>) -> io::Result<File> {
        client.open(path)
    }

    /// Creates or truncates for writing (std::fs::File::create).
    pub fn create(client: &Client, path: impl AsRef<Path>) -> io::Result<File> {
        client.create(path)
    }

    /// The open fid.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// Reads at `offset` without moving the position; usable from many threads at once (their
    /// requests share the connection). A buffer larger than the iounit is filled by up to
    /// `pipeline_depth` reads in flight.
    pub fn read_at(&self, buffer: &mut [u8], offset: u64) -> io::Result<usize> {
        if buffer.len() > self.node.iounit() as usize {
            self.node.read_at_pipelined(offset, buffer, self.pipeline_depth)
        } else {
            self.node.read_at(offset, buffer)
        }
    }

    /// Writes at `offset` without moving the position (in append mode the server writes at the
    /// end whatever the offset).
    pub fn write_at(&self, data: &[u8], offset: u64) -> io::Result<usize> {
        if self.append || data.len() <= self.node.iounit() as usize {
            self.node.write_at(offset, data)
        } else {
            self.node.write_at_pipelined(offset, data, self.pipeline_depth)
        }
    }

    pub fn metadata(&self) -> io::Result<Metadata> {
        self.node.getattr()
    }

    /// truncate(2) or extend with zeros.
    pub fn set_len(&self, size_bytes: u64) -> io::Result<()> {
        self.node.setattr(SetAttributes { valid_mask: setattr::SIZE, size_bytes, ..SetAttributes::default() })
    }

    pub fn set_permissions(&self, permissions: std::fs::Permissions) -> io::Result<()> {
        let mode = permissions.mode() & 0o7777;
        self.node.setattr(SetAttributes { valid_mask: setattr::MODE, mode, ..SetAttributes::default() })
    }

    /// fsync(2): on fsoc serve a transaction point (everything changed before it is on flash).
    pub fn sync_all(&self) -> io::Result<()> {
        self.node.fsync(false)
    }

    /// fdatasync(2); the same transaction point on fsoc serve.
    pub fn sync_data(&self) -> io::Result<()> {
        self.node.fsync(true)
    }
}

impl Read for File {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let read = self.read_at(buffer, self.position)?;
        self.position += read as u64;
        Ok(read)
    }
}

impl Write for File {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let written = self.write_at(data, self.position)?;
        self.position = if self.append { self.metadata()?.len() } else { self.position + written as u64 };
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        // Nothing is buffered on this side: every write is answered by the server.
        Ok(())
    }
}

impl Seek for File {
    fn seek(&mut self, position: SeekFrom) -> io::Result<u64> {
        let (base, delta) = match position {
            SeekFrom::Start(offset) => {
                self.position = offset;
                return Ok(offset);
            }
            SeekFrom::End(delta) => (self.metadata()?.len(), delta),
            SeekFrom::Current(delta) => (self.position, delta),
        };
        self.position = base.checked_add_signed(delta).ok_or_else(|| os_error(libc::EINVAL))?;
        Ok(self.position)
    }
}
