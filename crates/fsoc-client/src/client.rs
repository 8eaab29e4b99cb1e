//! `Client`: a connection to `fsoc serve` with `std::fs`'s calls by path (metadata, read_dir,
//! create_dir, remove_file, rename, ...). Paths are taken from the root of the served volume
//! (a leading `/` or none mean the same); they are walked 16 names a message, and symbolic
//! links are followed by the client (the server's walk never follows them), at most 40 per
//! lookup as Linux does.
//!
//! Invariants: every call leaves no fid behind (nodes clunk when dropped); a path is resolved
//! against the server's tree at the time of the call, nothing is cached.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use fsoc_9p::constants::{setattr, WALK_ELEMENT_COUNT_MAX};
use fsoc_9p::{decode_reply, Errno, Fid, Reply, Request, SetAttributes};

use crate::address::Address;
use crate::connection::Connection;
use crate::error::{os_error, protocol_error, reply_error};
use crate::file::{File, OpenOptions};
use crate::metadata::{DirEntry, FileType, Metadata, StatFs};
use crate::node::{short_walk_error, Node};

/// Symbolic links followed in one lookup before ELOOP (Linux's MAXSYMLINKS).
pub(crate) const SYMLINK_FOLLOW_MAX: usize = 40;

/// How to connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectOptions {
    /// The largest message offered at Tversion (the server may agree to less; fsoc serve's
    /// limit is 1 MiB).
    pub msize_bytes: u32,
    /// Requests in flight on the connection at once (tags); further senders wait. fsoc serve
    /// reads at most 32 at once (fewer at large msize) and leaves the rest in the socket.
    pub requests_in_flight_max: usize,
    /// Treads or Twrites in flight for one large `File` read or write.
    pub pipeline_depth: usize,
    /// The pre-shared key of a server started with `--secret-file`, sent as the attach's aname
    /// (docs/PROTOCOL.md 6.1).
    pub secret: Option<Vec<u8>>,
    /// The user the server makes new files belong to (the attach's n_uname), and the group
    /// sent with each create. Default: this process's effective ids.
    pub uid: u32,
    pub gid: u32,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        // SAFETY: geteuid and getegid have no preconditions and cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        ConnectOptions { msize_bytes: 1 << 20, requests_in_flight_max: 32, pipeline_depth: 4, secret: None, uid, gid }
    }
}

impl ConnectOptions {
    /// Reads the secret as `fsoc serve --secret-file` does: the file's bytes less one trailing
    /// newline.
    pub fn secret_file(mut self, path: &Path) -> io::Result<ConnectOptions> {
        let mut secret = std::fs::read(path)
            .map_err(|error| io::Error::new(error.kind(), format!("{}: {error}", path.display())))?;
        if secret.last() == Some(&b'\n') {
            secret.pop();
        }
        self.secret = Some(secret);
        Ok(self)
    }
}

pub(crate) struct Inner {
    pub root: Node,
    pub options: ConnectOptions,
    pub address: Address,
}

/// A connection to a 9P2000.L server, attached to its root. Cheap to clone (shared); usable
/// from many threads at once, whose requests are in flight together.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Client").field("address", &self.inner.address.to_string()).finish()
    }
}

/// The names of `path` from the root: `.` dropped, `..` kept (the server walks it to the
/// parent, never above the root).
fn names_of(path: &Path) -> io::Result<Vec<Vec<u8>>> {
    let mut names = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => names.push(b"..".to_vec()),
            Component::Normal(name) => names.push(name.as_bytes().to_vec()),
            Component::Prefix(_) => return Err(io::Error::new(io::ErrorKind::InvalidInput, "path prefix")),
        }
    }
    Ok(names)
}

impl Client {
    /// Connects to `address` (`tcp:HOST:PORT` or `unix:PATH`), negotiates 9P2000.L and
    /// attaches to the volume's root.
    pub fn connect(address: &str, options: &ConnectOptions) -> io::Result<Client> {
        let address = Address::parse(address)?;
        let stream = address.connect()?;
        let connection = Arc::new(Connection::open(stream, options.msize_bytes, options.requests_in_flight_max)?);
        let fid = connection.allocate_fid();
        let secret = options.secret.as_deref().unwrap_or_default();
        let request = Request::Attach { fid, afid: Fid::NONE, uname: b"fsoc", aname: secret, n_uname: options.uid };
        let message = connection.call(&request)?;
        let qid = match decode_reply(&message) {
            Ok((_, Reply::Attach { qid })) => qid,
            Ok((_, Reply::Lerror { errno })) => {
                connection.release_fid(fid);
                let error = reply_error(errno);
                if errno == Errno::EACCES {
                    return Err(io::Error::new(
                        error.kind(),
                        format!("{address}: the server refused the attach (EACCES): a wrong or missing secret"),
                    ));
                }
                return Err(error);
            }
            Ok((_, other)) => return Err(protocol_error(&format!("Tattach answered with {other:?}"))),
            Err(error) => return Err(protocol_error(&format!("Rattach: {error}"))),
        };
        let root = Node::attached(connection, fid, qid);
        Ok(Client { inner: Arc::new(Inner { root, options: options.clone(), address }) })
    }

    /// The root directory's node (fid-level access: `fsoc mount --remote` works on nodes).
    pub fn root(&self) -> &Node {
        &self.inner.root
    }

    /// Whether the server agreed to run requests in arrival order (Tversion 9P2000.L.fsoc, as
    /// `fsoc serve` does): then `Node`'s batched calls (`walk_with_attributes`, `open_clone`,
    /// `create_file`, ...) take one round trip.
    pub fn ordered(&self) -> bool {
        self.inner.root.connection().ordered()
    }

    /// Waits until every request this connection sent without waiting for its reply (the
    /// Tclunk of a dropped `File`, `Node` or `ReadDir`) has been answered: afterwards the server
    /// has seen and finished everything sent so far.
    pub fn wait_idle(&self) -> io::Result<()> {
        self.inner.root.connection().wait_idle()
    }

    pub fn options(&self) -> &ConnectOptions {
        &self.inner.options
    }

    /// The negotiated msize.
    pub fn msize_bytes(&self) -> u32 {
        self.inner.root.readdir_count_max() + fsoc_9p::constants::READDIR_HEADER_SIZE_BYTES as u32
    }

    /// A node for `path`; with `follow_last`, a final symbolic link is followed too (those
    /// before it always are).
    pub fn lookup(&self, path: &Path, follow_last: bool) -> io::Result<Node> {
        self.resolve(names_of(path)?, follow_last)
    }

    fn resolve(&self, mut names: Vec<Vec<u8>>, follow_last: bool) -> io::Result<Node> {
        let root = &self.inner.root;
        let mut links_followed = 0usize;
        'restart: loop {
            let mut current: Option<Node> = None;
            let mut index = 0usize;
            while index < names.len() {
                let end = (index + WALK_ELEMENT_COUNT_MAX).min(names.len());
                let chunk: Vec<&[u8]> = names[index..end].iter().map(Vec::as_slice).collect();
                let from = current.as_ref().unwrap_or(root);
                let walked = from.walk_partial(&chunk)?;
                let last = walked.qids.last().copied().unwrap_or(from.qid());
                let is_symlink = last.qid_type.0 & fsoc_9p::QidType::SYMLINK.0 != 0;
                match walked.node {
                    None => {
                        // Stopped after name `index + walked - 1`: a symbolic link there is to be
                        // followed; anything else is the error.
                        if !is_symlink {
                            return Err(short_walk_error(last));
                        }
                        let link_index = index + walked.qids.len() - 1;
                        let target = self.walk_names(&names[..=link_index])?.readlink()?;
                        names = splice(&names, link_index, &target, &mut links_followed)?;
                        continue 'restart;
                    }
                    Some(node) => {
                        index = end;
                        if is_symlink && (index < names.len() || follow_last) {
                            let target = node.readlink()?;
                            names = splice(&names, index - 1, &target, &mut links_followed)?;
                            continue 'restart;
                        }
                        current = Some(node);
                    }
                }
            }
            return match current {
                Some(node) => Ok(node),
                None => root.clone_node(),
            };
        }
    }

    /// Walks `names` from the root, following nothing.
    fn walk_names(&self, names: &[Vec<u8>]) -> io::Result<Node> {
        let names: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
        self.inner.root.walk(&names)
    }

    /// The directory holding `path`'s last name (links followed), and that name.
    pub(crate) fn parent_of(&self, path: &Path) -> io::Result<(Node, Vec<u8>)> {
        let mut names = names_of(path)?;
        match names.pop() {
            Some(name) if name != b".." => {
                let directory = self.resolve(names, true)?;
                if !directory.is_directory() {
                    return Err(reply_error(Errno::ENOTDIR));
                }
                Ok((directory, name))
            }
            // The root, or a path ending in `..`: no name to create or remove there.
            _ => Err(os_error(libc::EINVAL)),
        }
    }

    /// std::fs::metadata: follows symbolic links.
    pub fn metadata(&self, path: impl AsRef<Path>) -> io::Result<Metadata> {
        self.lookup(path.as_ref(), true)?.getattr()
    }

    /// std::fs::symlink_metadata: a final symbolic link is described itself.
    pub fn symlink_metadata(&self, path: impl AsRef<Path>) -> io::Result<Metadata> {
        self.lookup(path.as_ref(), false)?.getattr()
    }

    pub fn exists(&self, path: impl AsRef<Path>) -> io::Result<bool> {
        match self.metadata(path) {
            Ok(_) => Ok(true),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Opens a file for reading (std::fs::File::open).
    pub fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        OpenOptions::new().read(true).open(self, path)
    }

    /// Creates or truncates a file for writing (std::fs::File::create).
    pub fn create(&self, path: impl AsRef<Path>) -> io::Result<File> {
        OpenOptions::new().write(true).create(true).truncate(true).open(self, path)
    }

    /// The whole contents of a file (std::fs::read).
    pub fn read(&self, path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
        let file = self.open(path)?;
        let size = file.metadata()?.len();
        let mut contents = vec![0u8; usize::try_from(size).unwrap_or(usize::MAX)];
        let read = file.node().read_at_pipelined(0, &mut contents, self.inner.options.pipeline_depth)?;
        contents.truncate(read);
        // Grown since the size was asked: read on to the end.
        let mut chunk = vec![0u8; file.node().iounit() as usize];
        loop {
            let more = file.node().read_at(contents.len() as u64, &mut chunk)?;
            if more == 0 {
                return Ok(contents);
            }
            contents.extend_from_slice(&chunk[..more]);
        }
    }

    /// Creates or replaces a file with `contents` (std::fs::write).
    pub fn write(&self, path: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> io::Result<()> {
        let mut file = self.create(path)?;
        std::io::Write::write_all(&mut file, contents.as_ref())
    }

    /// The entries of a directory, without `.` and `..` (std::fs::read_dir).
    pub fn read_dir(&self, path: impl AsRef<Path>) -> io::Result<ReadDir> {
        let path = path.as_ref();
        let mut node = self.lookup(path, true)?;
        node.lopen(fsoc_9p::constants::open_flags::READ_ONLY | fsoc_9p::constants::open_flags::DIRECTORY)?;
        Ok(ReadDir { node, directory: path.to_path_buf(), buffered: VecDeque::new(), offset: 0, finished: false })
    }

    pub fn create_dir(&self, path: impl AsRef<Path>) -> io::Result<()> {
        self.create_dir_with_mode(path, 0o777)
    }

    /// mkdir(2) with `mode` (the server applies no umask).
    pub fn create_dir_with_mode(&self, path: impl AsRef<Path>, mode: u32) -> io::Result<()> {
        let path = path.as_ref();
        if names_of(path)?.is_empty() {
            return Err(os_error(libc::EEXIST));
        }
        let (directory, name) = self.parent_of(path)?;
        directory.mkdir(&name, mode, self.inner.options.gid).map(|_| ())
    }

    /// Creates a directory and every missing parent (std::fs::create_dir_all, by the same
    /// steps: mkdir, and on ENOENT the parents first).
    pub fn create_dir_all(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let path = path.as_ref();
        if names_of(path)?.is_empty() {
            return Ok(());
        }
        let is_directory = |path: &Path| self.metadata(path).is_ok_and(|metadata| metadata.is_dir());
        match self.create_dir(path) {
            Ok(()) => return Ok(()),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(_) if is_directory(path) => return Ok(()),
            Err(error) => return Err(error),
        }
        if let Some(parent) = path.parent() {
            self.create_dir_all(parent)?;
        }
        match self.create_dir(path) {
            Err(_) if is_directory(path) => Ok(()),
            other => other,
        }
    }

    pub fn remove_file(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let (directory, name) = self.parent_of(path.as_ref())?;
        directory.unlinkat(&name, false)
    }

    pub fn remove_dir(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let (directory, name) = self.parent_of(path.as_ref())?;
        directory.unlinkat(&name, true)
    }

    /// Removes a directory and everything in it (std::fs::remove_dir_all).
    pub fn remove_dir_all(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let path = path.as_ref();
        for entry in self.read_dir(path)? {
            let entry = entry?;
            if entry.file_type().is_dir() {
                self.remove_dir_all(entry.path())?;
            } else {
                self.remove_file(entry.path())?;
            }
        }
        self.remove_dir(path)
    }

    /// rename(2): replaces `to` as rename does.
    pub fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
        let (from_directory, from_name) = self.parent_of(from.as_ref())?;
        let (to_directory, to_name) = self.parent_of(to.as_ref())?;
        from_directory.renameat(&from_name, &to_directory, &to_name)
    }

    /// A second name `link` for the file `original` (a final symbolic link is linked itself, as
    /// std::fs::hard_link does on Linux).
    pub fn hard_link(&self, original: impl AsRef<Path>, link: impl AsRef<Path>) -> io::Result<()> {
        let file = self.lookup(original.as_ref(), false)?;
        let (directory, name) = self.parent_of(link.as_ref())?;
        directory.link(&file, &name)
    }

    /// A symbolic link `link` pointing to `original` (std::os::unix::fs::symlink).
    pub fn symlink(&self, original: impl AsRef<Path>, link: impl AsRef<Path>) -> io::Result<()> {
        let (directory, name) = self.parent_of(link.as_ref())?;
        directory.symlink(&name, original.as_ref().as_os_str().as_bytes(), self.inner.options.gid).map(|_| ())
    }

    pub fn read_link(&self, path: impl AsRef<Path>) -> io::Result<PathBuf> {
        let target = self.lookup(path.as_ref(), false)?.readlink()?;
        Ok(PathBuf::from(OsStr::from_bytes(&target)))
    }

    /// chmod(2): the permission bits of `permissions` (links followed).
    pub fn set_permissions(&self, path: impl AsRef<Path>, permissions: std::fs::Permissions) -> io::Result<()> {
        let node = self.lookup(path.as_ref(), true)?;
        node.setattr(SetAttributes {
            valid_mask: setattr::MODE,
            mode: permissions.mode() & 0o7777,
            ..SetAttributes::default()
        })
    }

    /// The volume's usage (statfs(2)).
    pub fn statfs(&self) -> io::Result<StatFs> {
        self.inner.root.statfs()
    }

    /// A transaction point: every change made through any connection before it is on flash
    /// when this returns.
    pub fn sync(&self) -> io::Result<()> {
        self.inner.root.fsync(false)
    }
}

/// Replaces the name at `link_index` by the names of `target` (from the root if it is
/// absolute, else from the link's directory).
fn splice(names: &[Vec<u8>], link_index: usize, target: &[u8], links_followed: &mut usize) -> io::Result<Vec<Vec<u8>>> {
    *links_followed += 1;
    if *links_followed > SYMLINK_FOLLOW_MAX {
        return Err(os_error(libc::ELOOP));
    }
    if target.is_empty() {
        return Err(reply_error(Errno::ENOENT));
    }
    let target_names = names_of(Path::new(OsStr::from_bytes(target)))?;
    let mut spliced = if target.first() == Some(&b'/') { Vec::new() } else { names[..link_index].to_vec() };
    spliced.extend(target_names);
    spliced.extend_from_slice(&names[link_index + 1..]);
    Ok(spliced)
}

/// The entries of a directory, one Rreaddir at a time (std::fs::ReadDir).
#[derive(Debug)]
pub struct ReadDir {
    node: Node,
    directory: PathBuf,
    buffered: VecDeque<DirEntry>,
    offset: u64,
    finished: bool,
}

impl Iterator for ReadDir {
    type Item = io::Result<DirEntry>;

    fn next(&mut self) -> Option<io::Result<DirEntry>> {
        loop {
            if let Some(entry) = self.buffered.pop_front() {
                return Some(Ok(entry));
            }
            if self.finished {
                return None;
            }
            let entries = match self.node.readdir(self.offset, self.node.readdir_count_max()) {
                Ok(entries) => entries,
                Err(error) => {
                    self.finished = true;
                    return Some(Err(error));
                }
            };
            let Some(last) = entries.last() else {
                self.finished = true;
                return None;
            };
            self.offset = last.offset;
            for entry in entries {
                if entry.name == b"." || entry.name == b".." {
                    continue;
                }
                self.buffered.push_back(DirEntry {
                    directory: self.directory.clone(),
                    name: entry.name,
                    file_type: FileType::from_dirent(entry.dirent_type),
                    ino: entry.qid.path,
                });
            }
        }
    }
}
