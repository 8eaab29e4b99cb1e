//! `OperationGenerator`: seeded, model-aware generation of realistic operation sequences.
//!
//! Sequences are meant to hit collisions and error paths often: names come from a tiny
//! alphabet (plus the odd 200–255-byte name), paths stay within a few levels, descriptors
//! are mostly ones the model has open, and writes mix tiny, page-sized and multi-page
//! sizes at offsets inside, at and beyond the end of file. The same seed, configuration
//! and model states give the same operations.

use crate::model::{ModelConfig, ModelFs, OpenFileInfo, PathInfo};
use crate::operation::{Operation, OperationKind};
use crate::path;
use crate::types::{Fd, FileKind, OpenFlags, Whence, FD_FIRST, NAME_SIZE_MAX_BYTES};
use fsoc_media::rng::SeededRng;

/// Relative frequency of each operation kind; 0 disables a kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperationWeights {
    weights: [u32; OperationKind::COUNT],
}

impl OperationWeights {
    /// Every kind with the same weight.
    pub fn uniform(weight: u32) -> Self {
        OperationWeights { weights: [weight; OperationKind::COUNT] }
    }

    /// Only `kinds`, equally often.
    pub fn only(kinds: &[OperationKind]) -> Self {
        let mut weights = Self::uniform(0);
        for &kind in kinds {
            weights.set(kind, 1);
        }
        weights
    }

    pub fn get(&self, kind: OperationKind) -> u32 {
        self.weights[kind.index()]
    }

    pub fn set(&mut self, kind: OperationKind, weight: u32) -> &mut Self {
        self.weights[kind.index()] = weight;
        self
    }

    /// Builder form of `set`.
    pub fn with(mut self, kind: OperationKind, weight: u32) -> Self {
        self.set(kind, weight);
        self
    }
}

impl Default for OperationWeights {
    /// Data operations dominate; namespace changes are common; harness events are rare.
    fn default() -> Self {
        use OperationKind as K;
        let mut weights = Self::uniform(0);
        for (kind, weight) in [
            (K::Open, 12),
            (K::Read, 6),
            (K::Write, 12),
            (K::Pread, 5),
            (K::Pwrite, 10),
            (K::Seek, 3),
            (K::Ftruncate, 3),
            (K::Fsync, 2),
            (K::Close, 8),
            (K::Fstat, 3),
            (K::Stat, 4),
            (K::Truncate, 2),
            (K::Mkdir, 6),
            (K::Rmdir, 3),
            (K::Unlink, 4),
            (K::Rename, 5),
            (K::Readdir, 3),
            (K::Link, 2),
            (K::Symlink, 2),
            (K::Readlink, 1),
            (K::Chmod, 1),
            (K::Chown, 1),
            (K::Utimens, 1),
            (K::Statfs, 1),
            (K::Transact, 2),
            (K::Remount, 1),
            (K::PowerCut, 1),
        ] {
            weights.set(kind, weight);
        }
        weights
    }
}

/// Knobs of both generators (seeded and proptest).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneratorConfig {
    pub weights: OperationWeights,
    /// Whether `Remount` may be generated, whatever its weight.
    pub include_remount: bool,
    /// Whether `PowerCut` may be generated, whatever its weight.
    pub include_power_cut: bool,
    /// The name alphabet: a handful of short names makes collisions frequent.
    pub names: Vec<Vec<u8>>,
    /// Chance of a 200–255-byte name instead (one letter of `names` repeated, at one of a
    /// few lengths, so long names collide too).
    pub long_name_percent: u32,
    /// Chance of a syntactically invalid path (`.`, `..`, `//`, 256-byte name, relative).
    pub invalid_path_percent: u32,
    /// Chance of a descriptor that is not open.
    pub invalid_fd_percent: u32,
    /// Deepest directory level created; paths are at most one level deeper.
    pub depth_max: usize,
    /// Largest generated write, in bytes (multi-page writes reach it).
    pub write_size_max_bytes: u64,
    /// The flash page size the "page-sized" writes and offsets align to.
    pub page_size_bytes: u64,
    /// Valid offsets and truncate sizes stay below this, so the model's memory stays
    /// small; probes past the model's `file_size_max_bytes` still happen.
    pub file_size_soft_max_bytes: u64,
    /// Chance that an offset or size deliberately exceeds the maximum file size.
    pub file_size_limit_probe_percent: u32,
    /// With more descriptors open than this, `Close` becomes much likelier than `Open`.
    pub open_fd_count_soft_max: usize,
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        GeneratorConfig {
            weights: OperationWeights::default(),
            include_remount: true,
            include_power_cut: true,
            names: vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()],
            long_name_percent: 3,
            invalid_path_percent: 2,
            invalid_fd_percent: 5,
            depth_max: 4,
            write_size_max_bytes: 40 * 1024,
            page_size_bytes: 4096,
            file_size_soft_max_bytes: 2 << 20,
            file_size_limit_probe_percent: 1,
            open_fd_count_soft_max: 8,
        }
    }
}

impl GeneratorConfig {
    /// Without `Remount` and `PowerCut`: for file systems or tests without a harness.
    pub fn without_harness_events(self) -> Self {
        GeneratorConfig { include_remount: false, include_power_cut: false, ..self }
    }

    /// The weight actually used for `kind`, after the include switches.
    pub fn effective_weight(&self, kind: OperationKind) -> u32 {
        match kind {
            OperationKind::Remount if !self.include_remount => 0,
            OperationKind::PowerCut if !self.include_power_cut => 0,
            _ => self.weights.get(kind),
        }
    }

    fn check(&self) {
        assert!(!self.names.is_empty(), "the name alphabet is empty");
        for name in &self.names {
            assert!(path::check_name(name).is_ok(), "bad alphabet name {name:?}");
        }
        assert!(self.depth_max >= 1, "depth_max must allow one level");
        assert!(self.page_size_bytes >= 1, "page_size_bytes must be positive");
        assert!(self.write_size_max_bytes >= 1, "write_size_max_bytes must be positive");
        let total: u64 = OperationKind::ALL.iter().map(|&kind| u64::from(self.effective_weight(kind))).sum();
        assert!(total > 0, "every operation kind has weight 0");
    }
}

/// Seeded generator; see the module comment.
#[derive(Clone, Debug)]
pub struct OperationGenerator {
    seed: u64,
    random: SeededRng,
    config: GeneratorConfig,
    /// The model's limit as of the last `next`; limit probes aim just past it.
    file_size_max_bytes: u64,
}

/// What the generator knows about the model when choosing one operation.
struct Hint<'m> {
    paths: Vec<PathInfo>,
    files: Vec<OpenFileInfo>,
    config: &'m ModelConfig,
}

impl OperationGenerator {
    pub fn new(seed: u64, config: GeneratorConfig) -> Self {
        config.check();
        let file_size_max_bytes = ModelConfig::default().file_size_max_bytes;
        OperationGenerator { seed, random: SeededRng::new(seed), config, file_size_max_bytes }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn config(&self) -> &GeneratorConfig {
        &self.config
    }

    /// `count` operations generated against a scratch model that applies each one, so
    /// the sequence is meaningful when replayed from a freshly formatted file system with
    /// `model_config`.
    pub fn generate(seed: u64, config: GeneratorConfig, model_config: ModelConfig, count: usize) -> Vec<Operation> {
        let mut generator = OperationGenerator::new(seed, config);
        let mut model = ModelFs::new(model_config);
        (0..count)
            .map(|step| {
                let operation = generator.next(&model);
                // Time does not influence generation; any increasing clock will do.
                let _outcome = model.apply(&operation, step as i64 + 1);
                operation
            })
            .collect()
    }

    /// The next operation, chosen with the model's current state as a hint (it is only
    /// read, never changed).
    pub fn next(&mut self, model: &ModelFs) -> Operation {
        let hint = Hint { paths: model.existing_paths(), files: model.open_files(), config: model.config() };
        self.file_size_max_bytes = hint.config.file_size_max_bytes;
        let kind = self.kind(&hint);
        self.operation(kind, &hint)
    }

    fn kind(&mut self, hint: &Hint<'_>) -> OperationKind {
        let crowded = hint.files.len() > self.config.open_fd_count_soft_max;
        let weights: Vec<u32> = OperationKind::ALL
            .iter()
            .map(|&kind| {
                let weight = self.config.effective_weight(kind);
                match kind {
                    OperationKind::Close if crowded => weight.saturating_mul(4),
                    OperationKind::Open if crowded => weight / 4,
                    _ => weight,
                }
            })
            .collect();
        let index = self.random.weighted_index(&weights).expect("checked: some weight > 0");
        OperationKind::ALL[index]
    }

    fn operation(&mut self, kind: OperationKind, hint: &Hint<'_>) -> Operation {
        use OperationKind as K;
        fn readable(file: &OpenFileInfo) -> bool {
            file.readable && file.kind == FileKind::File
        }
        fn writable(file: &OpenFileInfo) -> bool {
            file.writable
        }
        fn any(_: &OpenFileInfo) -> bool {
            true
        }
        // A descriptor operation with no suitable descriptor open would only test EBADF;
        // mostly open something instead (EBADF stays common through invalid_fd_percent).
        let suitable: Option<fn(&OpenFileInfo) -> bool> = match kind {
            K::Read | K::Pread => Some(readable),
            K::Write | K::Pwrite | K::Ftruncate => Some(writable),
            K::Seek | K::Fsync | K::Close | K::Fstat => Some(any),
            _ => None,
        };
        if let Some(suitable) = suitable {
            let starved = !hint.files.iter().any(suitable);
            if starved && self.config.effective_weight(K::Open) > 0 && self.random.chance_percent(75) {
                return self.open(hint);
            }
        }
        match kind {
            K::Open => self.open(hint),
            K::Read => {
                let fd = self.fd(hint, readable);
                Operation::Read { fd, size_bytes: self.read_size() }
            }
            K::Write => {
                let fd = self.fd(hint, writable);
                Operation::Write { fd, data: self.data() }
            }
            K::Pread => {
                let fd = self.fd(hint, readable);
                let offset = self.offset(Self::size_of(hint, fd), 1);
                Operation::Pread { fd, offset, size_bytes: self.read_size() }
            }
            K::Pwrite => {
                let fd = self.fd(hint, writable);
                let data = self.data();
                let offset = self.offset(Self::size_of(hint, fd), data.len() as u64);
                Operation::Pwrite { fd, offset, data }
            }
            K::Seek => self.seek(hint),
            K::Ftruncate => {
                let fd = self.fd(hint, writable);
                let size_bytes = self.truncate_size(Self::size_of(hint, fd));
                Operation::Ftruncate { fd, size_bytes }
            }
            K::Fsync => Operation::Fsync { fd: self.fd(hint, |_| true) },
            K::Close => Operation::Close { fd: self.fd(hint, |_| true) },
            K::Fstat => Operation::Fstat { fd: self.fd(hint, |_| true) },
            K::Stat => Operation::Stat { path: self.path(hint, None) },
            K::Truncate => {
                let path = self.path(hint, Some(FileKind::File));
                let size = hint.paths.iter().find(|info| info.path == path).map_or(0, |info| info.size_bytes);
                Operation::Truncate { path, size_bytes: self.truncate_size(size) }
            }
            K::Mkdir => {
                let path = if self.random.chance_percent(75) { self.new_path(hint) } else { self.path(hint, None) };
                Operation::Mkdir { path, mode: self.mode() }
            }
            K::Rmdir => {
                // Directories fill up quickly with a small alphabet; aim at empty ones half
                // the time so removal succeeds as well as fails with ENOTEMPTY.
                let empty: Vec<&PathInfo> = hint
                    .paths
                    .iter()
                    .filter(|info| info.kind == FileKind::Directory && info.entry_count == 0)
                    .filter(|info| info.path != b"/")
                    .collect();
                let path = match self.random.chance_percent(50).then(|| self.random.pick(&empty)) {
                    Some(Some(info)) => info.path.clone(),
                    _ => self.path(hint, Some(FileKind::Directory)),
                };
                Operation::Rmdir { path }
            }
            K::Unlink => {
                let kind = if self.random.chance_percent(20) { FileKind::Symlink } else { FileKind::File };
                Operation::Unlink { path: self.path(hint, Some(kind)) }
            }
            K::Rename => self.rename(hint),
            K::Readdir => Operation::Readdir { path: self.path(hint, Some(FileKind::Directory)) },
            K::Link => {
                let existing_path = self.path(hint, Some(FileKind::File));
                let new_path = if self.random.chance_percent(80) { self.new_path(hint) } else { self.path(hint, None) };
                Operation::Link { existing_path, new_path }
            }
            K::Symlink => {
                let target = self.symlink_target();
                Operation::Symlink { target, link_path: self.new_path(hint) }
            }
            K::Readlink => Operation::Readlink { path: self.path(hint, Some(FileKind::Symlink)) },
            K::Chmod => Operation::Chmod { path: self.path(hint, None), mode: self.mode() },
            K::Chown => {
                let path = self.path(hint, None);
                let ids = [0, 1000, 1001, 65_534];
                let uid = self.id(&ids);
                let gid = self.id(&ids);
                Operation::Chown { path, uid, gid }
            }
            K::Utimens => {
                let path = self.path(hint, None);
                // Within ±2^62 ns (1824 to 2116): before the epoch too.
                let atime_ns = self.random.below(1 << 63) as i64 - (1 << 62);
                let mtime_ns = self.random.below(1 << 63) as i64 - (1 << 62);
                Operation::Utimens { path, atime_ns, mtime_ns }
            }
            K::Statfs => Operation::Statfs,
            K::Transact => Operation::Transact,
            K::Remount => Operation::Remount,
            K::PowerCut => Operation::PowerCut,
        }
    }

    fn open(&mut self, hint: &Hint<'_>) -> Operation {
        let path = if self.random.chance_percent(55) {
            let kind = if self.random.chance_percent(80) { FileKind::File } else { FileKind::Directory };
            self.path(hint, Some(kind))
        } else {
            self.new_path(hint)
        };
        let existing = hint.paths.iter().find(|info| info.path == path).map(|info| info.kind);
        let mode = self.mode();
        if existing == Some(FileKind::Directory) && self.random.chance_percent(70) {
            return Operation::Open { path, flags: OpenFlags::DIRECTORY, mode };
        }
        let random = &mut self.random;
        let mut flags = OpenFlags {
            read: random.chance_percent(75),
            write: random.chance_percent(70),
            create: random.chance_percent(if existing.is_some() { 30 } else { 85 }),
            exclusive: false,
            truncate: random.chance_percent(10),
            append: random.chance_percent(15),
            directory: random.chance_percent(3),
        };
        flags.exclusive = flags.create && random.chance_percent(20);
        if !flags.read && !flags.write && random.chance_percent(80) {
            flags.read = true;
        }
        Operation::Open { path, flags, mode }
    }

    fn seek(&mut self, hint: &Hint<'_>) -> Operation {
        let fd = self.fd(hint, |_| true);
        let size = Self::size_of(hint, fd);
        let whence = *self.random.pick(&[Whence::Set, Whence::Current, Whence::End]).expect("3");
        let offset = if self.random.chance_percent(self.config.file_size_limit_probe_percent) {
            // Past the maximum size, or far negative: EINVAL either way.
            let beyond = hint.config.file_size_max_bytes.saturating_add(1).min(i64::MAX as u64);
            if self.random.chance_percent(50) {
                beyond as i64
            } else {
                -(beyond as i64)
            }
        } else {
            match whence {
                Whence::Set => self.offset(size, 1) as i64,
                Whence::Current | Whence::End => {
                    let magnitude = self.random.below(2 * self.config.page_size_bytes + 1) as i64;
                    if self.random.chance_percent(50) {
                        magnitude
                    } else {
                        -magnitude
                    }
                }
            }
        };
        Operation::Seek { fd, offset, whence }
    }

    /// Renames keep the tree within `depth_max`: a directory only moves where its whole
    /// subtree still fits (except into its own subtree, which always fails).
    fn rename(&mut self, hint: &Hint<'_>) -> Operation {
        let source_path = self.path(hint, None);
        let room = Self::subtree_height(hint, &source_path);
        let depth_max = self.config.depth_max;
        let fits = |path: &[u8]| path::depth(path) + room <= depth_max;
        let target_path = match self.random.below(10) {
            0..=3 => self.new_path_with_room(hint, room),
            4..=7 => {
                let targets: Vec<&PathInfo> = hint.paths.iter().filter(|info| fits(&info.path)).collect();
                match self.random.pick(&targets) {
                    Some(info) => info.path.clone(),
                    None => self.new_path_with_room(hint, room),
                }
            }
            // Into the source's own subtree (EINVAL for directories, ENOTDIR for files).
            8 => path::join(&source_path, &self.name()),
            _ => {
                let random_path = self.random_path();
                if fits(&random_path) {
                    random_path
                } else {
                    self.new_path_with_room(hint, room)
                }
            }
        };
        Operation::Rename { source_path, target_path }
    }

    /// How many levels an existing directory's subtree reaches below it (0 for a file, an
    /// empty directory or a missing path).
    fn subtree_height(hint: &Hint<'_>, directory: &[u8]) -> usize {
        let base_depth = path::depth(directory);
        let mut prefix = directory.to_vec();
        prefix.push(b'/');
        hint.paths
            .iter()
            .filter(|info| info.path.starts_with(&prefix))
            .map(|info| path::depth(&info.path) - base_depth)
            .max()
            .unwrap_or(0)
    }

    // ------------------------------------------------------------------ descriptors

    /// Mostly an open descriptor, preferably one that `wanted` accepts; sometimes one
    /// that is not open.
    fn fd(&mut self, hint: &Hint<'_>, wanted: impl Fn(&OpenFileInfo) -> bool) -> Fd {
        if hint.files.is_empty() || self.random.chance_percent(self.config.invalid_fd_percent) {
            return self.invalid_fd(hint);
        }
        let preferred: Vec<Fd> = hint.files.iter().filter(|file| wanted(file)).map(|file| file.fd).collect();
        if !preferred.is_empty() && self.random.chance_percent(85) {
            return *self.random.pick(&preferred).expect("not empty");
        }
        self.random.pick(&hint.files).expect("not empty").fd
    }

    fn invalid_fd(&mut self, hint: &Hint<'_>) -> Fd {
        let first_unused = (FD_FIRST..).find(|fd| hint.files.iter().all(|file| file.fd != *fd));
        let first_unused = first_unused.expect("fd space");
        let candidates = [0, 1, 2, first_unused, first_unused + 1, 1000, u32::MAX];
        *self.random.pick(&candidates).expect("not empty")
    }

    fn size_of(hint: &Hint<'_>, fd: Fd) -> u64 {
        hint.files.iter().find(|file| file.fd == fd).map_or(0, |file| file.size_bytes)
    }

    // ------------------------------------------------------------------------ paths

    /// One short name from the alphabet, or now and then a long one.
    fn name(&mut self) -> Vec<u8> {
        let short = self.random.pick(&self.config.names).expect("checked: not empty").clone();
        if !self.random.chance_percent(self.config.long_name_percent) {
            return short;
        }
        let length = *self.random.pick(&[200, 254, NAME_SIZE_MAX_BYTES]).expect("3");
        vec![short[0]; length]
    }

    /// A syntactically invalid path, each form exercising a different check.
    fn invalid_path(&mut self) -> Vec<u8> {
        let name = self.name();
        match self.random.below(8) {
            0 => name,
            1 => [b"/".as_slice(), &name, b"/"].concat(),
            2 => [b"//".as_slice(), &name].concat(),
            3 => [b"/".as_slice(), &name, b"/."].concat(),
            4 => [b"/".as_slice(), &name, b"/.."].concat(),
            5 => path::join(b"/", &[b'n'; NAME_SIZE_MAX_BYTES + 1]),
            6 => Vec::new(),
            _ => [b"/".as_slice(), &name, b"\0x"].concat(),
        }
    }

    /// Any path built from the alphabet, one to `depth_max` levels deep.
    fn random_path(&mut self) -> Vec<u8> {
        let depth = self.random.range(1, self.config.depth_max as u64);
        let mut path = b"/".to_vec();
        for _ in 0..depth {
            let name = self.name();
            path = path::join(&path, &name);
        }
        path
    }

    /// A name in an existing directory shallow enough to stay within `depth_max`: often
    /// free, sometimes taken (the alphabet is small).
    fn new_path(&mut self, hint: &Hint<'_>) -> Vec<u8> {
        self.new_path_with_room(hint, 0)
    }

    /// `new_path` leaving `room` levels below the new name.
    fn new_path_with_room(&mut self, hint: &Hint<'_>, room: usize) -> Vec<u8> {
        if self.random.chance_percent(self.config.invalid_path_percent) {
            return self.invalid_path();
        }
        let parents: Vec<&PathInfo> = hint
            .paths
            .iter()
            .filter(|info| info.kind == FileKind::Directory && path::depth(&info.path) + room < self.config.depth_max)
            .collect();
        let parent = self.random.pick(&parents).map_or(b"/".to_vec(), |info| info.path.clone());
        let name = self.name();
        path::join(&parent, &name)
    }

    /// Mostly an existing path (of `kind` when given and there is one), else a new or a
    /// random one.
    fn path(&mut self, hint: &Hint<'_>, kind: Option<FileKind>) -> Vec<u8> {
        if self.random.chance_percent(self.config.invalid_path_percent) {
            return self.invalid_path();
        }
        match self.random.below(100) {
            0..=64 => {
                let of_kind: Vec<&PathInfo> =
                    hint.paths.iter().filter(|info| kind.is_none() || kind == Some(info.kind)).collect();
                let pool: Vec<&PathInfo> = if of_kind.is_empty() { hint.paths.iter().collect() } else { of_kind };
                self.random.pick(&pool).map_or(b"/".to_vec(), |info| info.path.clone())
            }
            65..=89 => self.new_path(hint),
            _ => self.random_path(),
        }
    }

    fn symlink_target(&mut self) -> Vec<u8> {
        match self.random.below(20) {
            0 => Vec::new(), // ENOENT
            1..=9 => self.random_path(),
            _ => {
                let length = self.random.range(1, 40) as usize;
                self.random.bytes(length).into_iter().map(|byte| b'!' + byte % 94).collect()
            }
        }
    }

    // ---------------------------------------------------------------- sizes and data

    /// Mixed sizes: mostly tiny, often about a page, sometimes many pages.
    fn write_size(&mut self) -> u64 {
        let page = self.config.page_size_bytes;
        let size_max = self.config.write_size_max_bytes;
        let size = match self.random.below(100) {
            0..=1 => 0,
            2..=41 => self.random.range(1, 100),
            42..=66 => {
                let pages = *self.random.pick(&[page / 2, page, 2 * page]).expect("3");
                let nudge = *self.random.pick(&[0i64, 0, 0, 1, -1, -17]).expect("6");
                pages.saturating_add_signed(nudge).max(1)
            }
            67..=76 => self.random.range(101, page.max(102) - 1),
            _ => self.random.range(page + 1, size_max.max(page + 1)),
        };
        size.min(size_max)
    }

    fn read_size(&mut self) -> u64 {
        if self.random.chance_percent(5) {
            return 1 << 20; // whole files in one read
        }
        self.write_size()
    }

    fn data(&mut self) -> Vec<u8> {
        let size = self.write_size() as usize;
        self.random.bytes(size)
    }

    /// An offset for an access of `size_bytes` to a file of `file_size` bytes: at the
    /// start, inside, at the end, past the end (leaving a hole), page-aligned, or rarely
    /// so far out that the access exceeds the maximum file size.
    fn offset(&mut self, file_size: u64, size_bytes: u64) -> u64 {
        let page = self.config.page_size_bytes;
        if self.random.chance_percent(self.config.file_size_limit_probe_percent) {
            // Ends past the maximum file size: EFBIG for writes, empty for reads.
            return limit_probe(&mut self.random, self.file_size_max_bytes, size_bytes);
        }
        let offset = match self.random.below(100) {
            0..=19 => 0,
            20..=44 => self.random.range(0, file_size),
            45..=64 => file_size,
            65..=79 => file_size + self.random.range(1, 3 * page),
            80..=89 => page * self.random.range(0, file_size / page + 1),
            _ => {
                let boundary = page * self.random.range(1, file_size / page + 2);
                boundary.saturating_add_signed(self.random.range(0, 16) as i64 - 8)
            }
        };
        offset.min(self.config.file_size_soft_max_bytes)
    }

    fn truncate_size(&mut self, file_size: u64) -> u64 {
        let page = self.config.page_size_bytes;
        if self.random.chance_percent(self.config.file_size_limit_probe_percent) {
            return self.file_size_max_bytes.saturating_add(1 + self.random.below(page));
        }
        let size = match self.random.below(10) {
            0..=1 => 0,
            2..=4 => self.random.range(0, file_size),
            5..=6 => file_size + self.random.range(1, 4 * page),
            7..=8 => page * self.random.range(0, file_size / page + 2),
            _ => file_size,
        };
        size.min(self.config.file_size_soft_max_bytes)
    }

    fn mode(&mut self) -> u32 {
        match self.random.below(10) {
            0..=3 => 0o644,
            4..=5 => 0o755,
            6 => 0o600,
            7 => 0o777,
            8 => self.random.below(0o10000) as u32,
            _ => self.random.next_u64() as u32, // higher bits must be ignored
        }
    }

    fn id(&mut self, common: &[u32]) -> u32 {
        if self.random.chance_percent(80) {
            *self.random.pick(common).expect("not empty")
        } else {
            self.random.next_u64() as u32
        }
    }
}

/// An offset at which an access of `size_bytes` ends past `file_size_max_bytes`.
fn limit_probe(random: &mut SeededRng, file_size_max_bytes: u64, size_bytes: u64) -> u64 {
    let just_past = file_size_max_bytes.saturating_sub(size_bytes.max(1)) + 1;
    match random.below(3) {
        0 => just_past,
        1 => file_size_max_bytes.saturating_add(random.below(1 << 20)),
        _ => u64::MAX - random.below(1 << 20),
    }
}
