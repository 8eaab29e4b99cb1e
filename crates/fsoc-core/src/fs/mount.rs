//! Format, mount, unmount and the commit entry points of the file system (layer 6 over the
//! transaction layer): what makes the working state durable, and the delta replay at mount.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use alloc::boxed::Box;

use fsoc_flash::{Flash, FlushWait, NvramDevice};

use super::{delta, FileSystem, FsConfig, FsStats, TreeId};
use crate::fs::error::FsError;
use crate::fs::records::ROOT_INODE;
use crate::fs::records::{FileKind, InodeRecord};
use crate::txn::volume::MountReport;
use crate::txn::{TxnError, Volume};

impl<F: Flash> FileSystem<F> {
    /// Formats `flash` as an empty volume with a root directory (mode 0o755, owned by root).
    pub fn format(flash: F, config: FsConfig, volume_id: u64) -> Result<FileSystem<F>, FsError> {
        Self::format_at(flash, config, volume_id, 0)
    }

    /// `format`, stamping the root directory with `now_ns` (nanoseconds since the epoch).
    pub fn format_at(flash: F, config: FsConfig, volume_id: u64, now_ns: i64) -> Result<FileSystem<F>, FsError> {
        Self::format_with_nvram(flash, None, config, volume_id, now_ns)
    }

    /// `format_at`, keeping transaction points (fsync, transact) in `nvram` when given: the
    /// volume then needs that NVRAM at every mount (docs/DESIGN.md, "The NVRAM tier").
    pub fn format_with_nvram(
        flash: F,
        nvram: Option<Box<dyn NvramDevice>>,
        config: FsConfig,
        volume_id: u64,
        now_ns: i64,
    ) -> Result<FileSystem<F>, FsError> {
        let volume = Volume::format_with_nvram(flash, nvram, config.volume, volume_id)?;
        let mut fs = FileSystem::from_volume(volume, config);
        fs.now_ns = now_ns;
        fs.mutate(|fs| {
            let root = InodeRecord::new(FileKind::Directory, 0o755, (0, 0), (fs.now_ns, 0), (ROOT_INODE, 0));
            fs.put_inode(ROOT_INODE, &root)
        })?;
        fs.commit()?;
        // The format's commit is durable: inodes made from here on are its generation.
        if fs.has_wide_inodes() {
            fs.generation = generation_of(fs.volume.committed().commit_counter);
        }
        Ok(fs)
    }

    /// Mounts a formatted volume. Reads a bounded number of pages; removes orphans left by a
    /// crash (files unlinked while open) when writable.
    pub fn mount(flash: F, config: FsConfig) -> Result<FileSystem<F>, FsError> {
        Self::mount_with_nvram(flash, None, config)
    }

    /// `mount` of a volume formatted with NVRAM (which must be given) or without (which must
    /// not): the NVRAM log's records are replayed after the flash's commit.
    pub fn mount_with_nvram(
        flash: F,
        nvram: Option<Box<dyn NvramDevice>>,
        config: FsConfig,
    ) -> Result<FileSystem<F>, FsError> {
        let volume = Volume::mount_with_nvram(flash, nvram, config.volume)?;
        let mut fs = FileSystem::from_volume(volume, config);
        fs.replay_delta()?;
        fs.replay_nvram()?;
        // A volume mount found at its end of life takes no change (docs/DESIGN.md, "End of
        // life"), orphan removal included.
        if fs.volume.worn_out().is_some() || fs.volume.missing_chip().is_some() {
            fs.config.volume.read_only = true;
        }
        if !fs.config.volume.read_only {
            fs.remove_orphans()?;
        }
        Ok(fs)
    }

    /// Whether the file system takes no change: mounted read-only, or made so by a degraded
    /// array or the end of life.
    pub fn is_read_only(&self) -> bool {
        self.config.volume.read_only
    }

    /// Turns a file system mounted read-only into a writable one (`mount -o remount,rw` of a
    /// mount that began read-only), doing then what a writable mount does at once: the
    /// volume's re-anchoring after an unclean unmount (`Volume::make_writable`) and the removal
    /// of a crash's orphans (when no file is open). The flash must take programs and erases (the caller opened it
    /// so). A degraded, poisoned or worn-out volume stays read-only and this says why.
    pub fn make_writable(&mut self) -> Result<(), FsError> {
        if !self.config.volume.read_only {
            return Ok(());
        }
        if let Some(worn) = self.volume.worn_out() {
            return Err(FsError::WornOut(worn));
        }
        self.volume.make_writable()?;
        self.config.volume.read_only = false;
        // A crash's orphans have no name, but a file handle may have opened one in the
        // read-only session: then all are left for the next mount to remove.
        if self.open_counts.is_empty() {
            self.remove_orphans()?;
        }
        Ok(())
    }

    pub(super) fn from_volume(volume: Volume<F>, config: FsConfig) -> Self {
        // With NVRAM the delta's increment may fill the log, and its cumulative view a
        // metaroot page (the flash delta commit the tier falls back to).
        let capacity = match volume.nvram_usage() {
            Some((_, capacity)) => usize::try_from(capacity).unwrap_or(usize::MAX).max(volume.delta_bytes_max()),
            None => volume.delta_bytes_max(),
        };
        let compact = volume.superblock.format_version >= crate::txn::superblock::FORMAT_VERSION_COMPACT_DELTA;
        let delta = delta::DeltaLog::with_encoding(capacity, compact);
        let delta = if volume.nvram_usage().is_some() { delta.for_nvram() } else { delta };
        FileSystem {
            delta,
            volume,
            config,
            now_ns: 0,
            generation: 0,
            open_counts: BTreeMap::new(),
            descriptors: BTreeMap::new(),
            pending: BTreeMap::new(),
            stats: FsStats::default(),
            tree_changes: 0,
        }
    }

    /// Before a mount makes its first inode on a volume that keeps generations: commits once
    /// and gives its inodes that commit's counter. A power cut can lose files made since, and
    /// the next mount hands their numbers out again, but under a newer generation, so a file
    /// handle of a lost file answers ESTALE instead of opening another file. The commit is a
    /// delta commit (one metaroot page), made once per mount and only by a mount that creates.
    pub(super) fn start_generation(&mut self) -> Result<(), FsError> {
        if self.generation != 0 || !self.has_wide_inodes() || self.config.volume.read_only {
            return Ok(());
        }
        self.commit_for_sync()?;
        self.generation = generation_of(self.volume.committed().commit_counter);
        Ok(())
    }

    /// The generation of the inodes this mount makes: 0 until it makes its first (and always
    /// on a read-only mount or a volume older than format version 5).
    pub fn generation(&self) -> u32 {
        self.generation
    }

    pub fn mount_report(&self) -> MountReport {
        self.volume.mount_report
    }

    /// Commits and returns the flash (a clean unmount).
    pub fn unmount(mut self) -> Result<F, FsError> {
        let open: Vec<u64> = self.open_counts.keys().copied().collect();
        self.descriptors.clear();
        self.open_counts.clear();
        if !self.config.volume.read_only && !self.volume.is_poisoned() {
            self.mutate(|fs| {
                for inode in open {
                    fs.drop_if_orphan(inode)?;
                }
                // Orphans are files open in this session (a crash's were removed at mount),
                // and every descriptor is closed now.
                fs.volume.may_have_orphans = false;
                fs.materialize_all_inner()
            })?;
            self.volume.commit(true)?;
            self.delta.clear();
            self.stats.commits += 1;
        }
        Ok(self.volume.into_flash())
    }

    /// Drops everything uncommitted and returns the flash, as a power cut would.
    pub fn into_flash_without_commit(self) -> F {
        self.volume.into_flash()
    }

    /// A full transaction point: trees, segment table and metaroot; afterwards everything the
    /// previous committed state alone referenced may be reused.
    pub fn commit(&mut self) -> Result<(), FsError> {
        let flush = self.begin_commit()?;
        self.finish(flush)
    }

    /// Waits for the flush a `begin_*` call started; a failure poisons the volume (as a
    /// failed commit does) and is the commit's error.
    pub fn finish(&mut self, flush: FlushWait) -> Result<(), FsError> {
        Ok(self.volume.finish(flush)?)
    }

    /// `commit` with the backing store's flush left running: the new state is the committed
    /// one at once, and durable once the returned wait returns `Ok`. A caller that shares the
    /// volume may release its lock before waiting (readers then run during the flush); if the
    /// wait fails it must `poison` the volume. On a backend that flushes synchronously (the
    /// default `Flash::begin_flush`) the wait is already done.
    pub fn begin_commit(&mut self) -> Result<FlushWait, FsError> {
        if self.volume.is_poisoned() {
            return Err(FsError::Io(TxnError::Poisoned));
        }
        if self.config.volume.read_only {
            return Ok(FlushWait::done());
        }
        // Pending pages live only in the NVRAM log, which this commit makes redundant.
        self.materialize_all()?;
        let flush = self.volume.begin_commit(false)?;
        self.delta.clear();
        self.stats.commits += 1;
        Ok(flush)
    }

    /// A transaction point for fsync/transact: a delta commit when enabled and the changes
    /// since the last full commit fit one metaroot page, else a full commit.
    pub fn commit_for_sync(&mut self) -> Result<(), FsError> {
        let flush = self.begin_commit_for_sync()?;
        self.finish(flush)
    }

    /// `commit_for_sync` with the flush left running, as `begin_commit`.
    pub fn begin_commit_for_sync(&mut self) -> Result<FlushWait, FsError> {
        if self.volume.has_nvram() && !self.config.volume.read_only {
            return self.commit_to_nvram();
        }
        // A metaroot area's erase count waits in RAM (version 9): a full commit stores it
        // before the area fills.
        if !self.config.delta_commits || self.config.volume.read_only || self.volume.area_erase_must_be_stored() {
            return self.begin_commit();
        }
        let room = self.volume.delta_bytes_max();
        // A chain under way goes on (the changes since the full commit, past a page when it
        // started, are not encoded again at every fsync); else every change since the full
        // commit in one record ends any chain; else a chain starts; else a full commit.
        let chain_under_way = self.delta.chain().is_some();
        let mut record = None;
        if chain_under_way {
            record = self.chained_payload(room).map(|(payload, link)| (payload, Some(link)));
        }
        if record.is_none() {
            record = self.delta.encode_within(room).map(|payload| (payload, None));
            if record.is_some() {
                self.delta.end_chain();
            }
        }
        if record.is_none() && !chain_under_way {
            record = self.chained_payload(room).map(|(payload, link)| (payload, Some(link)));
        }
        let Some((payload, chain)) = record else {
            return self.begin_commit();
        };
        if self.volume.is_poisoned() {
            return Err(FsError::Io(TxnError::Poisoned));
        }
        let flush = self.volume.begin_commit_delta(payload, chain)?;
        self.delta.mark_point();
        self.stats.delta_commits += 1;
        Ok(flush)
    }

    /// Format version 12: when the changes since the full commit no longer fit a metaroot,
    /// the changes since the previous delta commit (the chain's base, kept while records stay
    /// in its area) may, in a record that extends it; mount replays the base's payload, then
    /// the record's. `None`: a full commit is due.
    fn chained_payload(&mut self, room: usize) -> Option<(Vec<u8>, crate::txn::ChainLink)> {
        let room = room.checked_sub(crate::txn::ChainLink::ENCODED_BYTES)?;
        let link = match self.delta.chain() {
            Some(link) if self.volume.chain_allowed(link) => link,
            Some(_) => return None,
            None => {
                let link = self.volume.chain_base()?;
                self.delta.start_chain(link);
                link
            }
        };
        self.delta.encode_chain_within(room).map(|payload| (payload, link))
    }

    /// A transaction point on a volume with NVRAM: one log record holding the changes since the
    /// previous transaction point. When the log is past its high-water mark or cannot take
    /// them, the log is destaged by a full commit; either makes every record redundant, so the
    /// log starts again. A record is durable when this returns.
    ///
    /// A log smaller than two metaroot pages' delta room (1 or 2 KiB beside 2 KiB pages) fills
    /// every few records; it destages by a flash delta commit (one metaroot page) while the
    /// changes since the last full commit fit one. Measured on seed 004's Sync-PostMark
    /// (`fsoc bench postmark`, before small writes rode in the log): 1 KiB took 162.1 s with
    /// full-commit destages, more than no
    /// NVRAM (159.2 s), and 151.7 s this way; for 4 KiB and more, delta destages cost more than
    /// they save (a delta commit frees nothing, so dropped pages wait for the next full
    /// commit): 144.1 s against 143.4 s at 4 KiB, 121.7 s against 121.0 s at 128 KiB.
    fn commit_to_nvram(&mut self) -> Result<FlushWait, FsError> {
        if self.volume.is_poisoned() {
            return Err(FsError::Io(TxnError::Poisoned));
        }
        let (used, capacity) = self.volume.nvram_usage().unwrap_or((0, 0));
        let high_water = capacity * u64::from(self.config.nvram_high_water_percent.min(100)) / 100;
        let room = usize::try_from(self.volume.nvram_payload_room()).unwrap_or(usize::MAX);
        let increment = if self.config.delta_commits && used < high_water {
            self.delta.encode_increment_within(room)
        } else {
            None
        };
        if let Some(increment) = increment {
            self.volume.commit_nvram(increment)?;
            // The next record holds only what changes after this one.
            self.delta.mark_point();
            self.stats.nvram_commits += 1;
            return Ok(FlushWait::done());
        }
        self.stats.nvram_destages += 1;
        let delta_room = self.volume.delta_bytes_max();
        let tiny_log = self.config.delta_commits && capacity <= 2 * delta_room as u64;
        if tiny_log && self.delta.may_fit_within(delta_room) {
            // Pending pages are programmed before any flash commit; that may grow the delta.
            self.materialize_all()?;
            if let Some(payload) = self.delta.encode_within(delta_room) {
                let flush = self.volume.begin_commit_delta(payload, None)?;
                self.delta.mark_point();
                self.stats.delta_commits += 1;
                return Ok(flush);
            }
        }
        self.begin_commit()
    }

    /// Mount: applies the NVRAM log's records, oldest first, after the flash's commit (and
    /// its delta). They are durable already, so nothing is left pending afterwards.
    pub(super) fn replay_nvram(&mut self) -> Result<(), FsError> {
        let records = self.volume.take_nvram_records();
        if records.is_empty() {
            return Ok(());
        }
        for record in records {
            self.replay_payload(&record.payload, false)?;
        }
        // Durable already: the next record starts after them (the cumulative view stays).
        self.delta.mark_point();
        Ok(())
    }

    /// Mount: applies the newest delta commit's changes onto the full commit's trees and
    /// segment table (and keeps them in the delta log, which stays cumulative).
    pub(super) fn replay_delta(&mut self) -> Result<(), FsError> {
        let payload = self.volume.committed().delta.clone();
        let compact = self.delta.is_compact();
        // A chained record (format version 12) extends its base's changes: those first.
        let base = self.volume.take_mounted_base_delta();
        self.replay_payload(&base, compact)?;
        self.replay_payload(&payload, compact)?;
        self.delta.mark_point();
        Ok(())
    }

    /// Applies one delta payload (a flash delta commit's or an NVRAM record's) to the trees and
    /// the segment table, recording it in the delta log as well.
    /// `compact`: the payload is in the compact encoding (a delta commit's from format version
    /// 11 on); NVRAM records are always plain.
    fn replay_payload(&mut self, payload: &[u8], compact: bool) -> Result<(), FsError> {
        if payload.is_empty() {
            return Ok(());
        }
        let decoded = if compact { super::delta_compact::decode(payload) } else { delta::DeltaLog::decode(payload) }
            .map_err(|_| FsError::Corrupt("undecodable delta commit"))?;
        if decoded.segments.is_empty() && decoded.entries.is_empty() {
            // A delta commit of nothing (a writable mount's generation commit): no table read.
            return Ok(());
        }
        self.volume.ensure_table_loaded()?;
        for (segment_index, allocated, released) in decoded.segments {
            self.volume
                .log
                .table_for_replay()
                .apply_delta(segment_index, allocated, released)
                .map_err(FsError::Corrupt)?;
            self.delta.record_segment(segment_index, allocated, released);
        }
        for (tree_id, key, value) in decoded.entries {
            let which = match tree_id {
                crate::txn::volume::DIRECTORY_TREE_ID => TreeId::Directory,
                crate::txn::volume::ALLOCATION_TREE_ID => TreeId::Allocation,
                crate::fs::pending::PENDING_TREE_ID if self.volume.has_nvram() => {
                    self.replay_pending(&key, value.as_deref())?;
                    continue;
                }
                _ => return Err(FsError::Corrupt("delta names an unknown tree")),
            };
            match value {
                Some(value) => self.tree_insert(which, &key, &value).map(|_| ())?,
                None => self.tree_remove(which, &key).map(|_| ())?,
            }
        }
        Ok(())
    }

    /// Whether anything changed since the last transaction point (what a periodic commit, an
    /// fsync or a clean unmount would make durable).
    pub fn has_uncommitted_changes(&self) -> bool {
        self.delta.changed
    }

    pub fn commit_counter(&self) -> u64 {
        self.volume.commit_counter()
    }
}

/// The generation a commit counter gives (`InodeRecord::generation`): its low 32 bits, and 1
/// where those are 0 (0 means "no generation yet").
fn generation_of(commit_counter: u64) -> u32 {
    u32::try_from(commit_counter & u64::from(u32::MAX)).unwrap_or(u32::MAX).max(1)
}
