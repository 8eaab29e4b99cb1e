//! The NVRAM commit tier (issue 10): fsync and transact append a record to the NVRAM log and
//! program no flash page; mount replays the records after the flash's commit, reading at most
//! the NVRAM's size; a full log is destaged by a full commit; a volume formatted with NVRAM is
//! refused without it (or with another volume's). Power cuts at every NVRAM write and every
//! flash operation of an fsync-heavy workload leave the last durable state.
mod common;
use common::*;
use fsoc_core::fs::FsError;
use fsoc_core::txn::TxnError;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::{FlashStats, Nvram, NvramConfig, NvramTechnology, Profile, SharedNvram, SimFlash};

fn nvram(size_bytes: u64, seed: u64) -> SharedNvram {
    SharedNvram::new(Nvram::in_ram(NvramConfig::new(size_bytes, NvramTechnology::FeRam, seed)).expect("nvram"))
}

fn format(flash: SimFlash, nvram: &SharedNvram) -> FileSystem<SimFlash> {
    format_id(flash, nvram, 7)
}

fn format_id(flash: SimFlash, nvram: &SharedNvram, volume_id: u64) -> FileSystem<SimFlash> {
    FileSystem::format_with_nvram(flash, Some(Box::new(nvram.clone())), FsConfig::default(), volume_id, 0)
        .expect("format")
}

fn mount(flash: SimFlash, nvram: &SharedNvram) -> FileSystem<SimFlash> {
    FileSystem::mount_with_nvram(flash, Some(Box::new(nvram.clone())), FsConfig::default()).expect("mount")
}

fn programs(fs: &FileSystem<SimFlash>) -> u64 {
    fs.flash().counters().totals().programs
}

/// A power-cut copy of an NVRAM: same bytes, power on, counters reset.
fn reopened(nvram: &SharedNvram) -> SharedNvram {
    nvram.with(|device| {
        let backing = device.backing().clone();
        SharedNvram::new(Nvram::new(*device.config(), backing).expect("reopen"))
    })
}

#[test]
fn an_fsync_of_a_small_change_programs_no_flash_page() {
    let nvram = nvram(128 * 1024, 1);
    let mut fs = format(sim(Profile::Mlc, 1, 64, 1), &nvram);
    let mut programs_per_fsync = Vec::new();
    for index in 0..50 {
        let fd = fs.open(format!("/f{index}").as_bytes(), CREATE, 0o644).expect("create");
        fs.pwrite(fd, 0, b"small and inline").expect("write");
        let before = programs(&fs);
        fs.fsync_fd(fd).expect("fsync");
        programs_per_fsync.push(programs(&fs) - before);
        fs.close(fd).expect("close");
    }
    assert!(programs_per_fsync.iter().all(|&count| count == 0), "flash programs per fsync: {programs_per_fsync:?}");
    assert_eq!(fs.stats.nvram_commits, 50, "one record per fsync (the generation commit rode with the first)");
    // A power cut now: every fsync'd file is there after the replay.
    let flash = fs.into_flash_without_commit();
    let nvram = reopened(&nvram);
    let mut fs = mount(flash, &nvram);
    let report = fs.nvram_mount_report();
    assert!(report.records >= 50, "records replayed: {}", report.records);
    assert!(report.bytes_read <= 128 * 1024, "NVRAM bytes read at mount: {}", report.bytes_read);
    for index in 0..50 {
        let fd = fs_open_read(&fs, index);
        assert_eq!(fd, b"small and inline");
    }
    let report = fs.fsck(true).expect("fsck");
    assert!(report.is_clean(), "{:?}", report.violations);
}

fn fs_open_read(fs: &FileSystem<SimFlash>, index: usize) -> Vec<u8> {
    let (inode, record) = fs.stat(format!("/f{index}").as_bytes()).expect("stat");
    fs.read(inode, 0, usize::try_from(record.size).expect("size")).expect("read")
}

#[test]
fn a_full_log_is_destaged_by_a_full_commit_and_nothing_is_lost() {
    // 2 KiB of NVRAM: a handful of records, then destages.
    let nvram = nvram(2048, 2);
    let mut fs = format(sim(Profile::Mlc, 1, 64, 2), &nvram);
    for index in 0..200 {
        let fd = fs.open(format!("/f{index}").as_bytes(), CREATE, 0o644).expect("create");
        fs.pwrite(fd, 0, format!("file {index}").as_bytes()).expect("write");
        fs.fsync_fd(fd).expect("fsync");
        fs.close(fd).expect("close");
    }
    assert!(fs.stats.nvram_destages > 0, "no destage with a 2 KiB log");
    // While the changes since the last full commit fit a metaroot page, a destage is a delta
    // commit (one page), not a full one.
    assert!(fs.stats.delta_commits > 0 && fs.stats.commits > 0, "{:?}", fs.stats);
    assert!(fs.stats.nvram_commits > fs.stats.nvram_destages, "{:?}", fs.stats);
    let (used, capacity) = fs.nvram_usage().expect("nvram");
    assert!(used < capacity);
    let flash = fs.into_flash_without_commit();
    let mut fs = mount(flash, &reopened(&nvram));
    for index in 0..200 {
        assert_eq!(fs_open_read(&fs, index), format!("file {index}").as_bytes());
    }
    assert!(fs.fsck(true).expect("fsck").is_clean());
}

#[test]
fn a_volume_with_nvram_is_refused_without_it_or_with_another_volumes() {
    let nvram_a = nvram(4096, 3);
    let fs = format(sim(Profile::Mlc, 1, 64, 3), &nvram_a);
    let flash = fs.unmount().expect("unmount");
    match FileSystem::mount(flash.clone(), FsConfig::default()) {
        Err(FsError::Io(TxnError::Nvram { reason })) => assert!(reason.contains("no NVRAM was given"), "{reason}"),
        other => panic!("mounted without its NVRAM: {:?}", other.map(|_| ())),
    }
    // Another volume's NVRAM.
    let nvram_b = nvram(4096, 4);
    let other = format_id(sim(Profile::Mlc, 1, 64, 4), &nvram_b, 8);
    drop(other);
    let other_volume = FileSystem::mount_with_nvram(flash.clone(), Some(Box::new(nvram_b)), FsConfig::default());
    assert!(matches!(other_volume, Err(FsError::Io(TxnError::Nvram { .. }))), "{:?}", other_volume.err());
    // An NVRAM of the wrong size, a blank NVRAM.
    let wrong_size = FileSystem::mount_with_nvram(flash.clone(), Some(Box::new(nvram(8192, 5))), FsConfig::default());
    assert!(matches!(wrong_size, Err(FsError::Io(TxnError::Nvram { .. }))));
    let blank = FileSystem::mount_with_nvram(flash.clone(), Some(Box::new(nvram(4096, 6))), FsConfig::default());
    assert!(matches!(blank, Err(FsError::Io(TxnError::Nvram { .. }))));
    // A volume without NVRAM refuses one.
    let plain = FileSystem::format(sim(Profile::Mlc, 1, 64, 5), FsConfig::default(), 5).expect("format");
    let flash = plain.unmount().expect("unmount");
    let given = FileSystem::mount_with_nvram(flash, Some(Box::new(nvram(4096, 7))), FsConfig::default());
    assert!(matches!(given, Err(FsError::Io(TxnError::Nvram { .. }))));
    // And the right one mounts.
    let fs = FileSystem::mount_with_nvram(
        format(sim(Profile::Mlc, 1, 64, 8), &nvram_a).unmount().expect("unmount"),
        Some(Box::new(nvram_a.clone())),
        FsConfig::default(),
    )
    .expect("mount with its NVRAM");
    assert!(fs.mount_report().clean);
}

/// The fsync-heavy workload of the cut sweeps: small files created, written, renamed and
/// removed, each change fsync'd; one larger write that takes data pages.
fn workload(fs: &mut FileSystem<SimFlash>, observe: &mut dyn FnMut(&mut FileSystem<SimFlash>)) -> Result<(), FsError> {
    fs.mkdir(b"/d", 0o755)?;
    observe(fs);
    for index in 0..12u32 {
        let path = format!("/d/f{index}");
        let fd = fs.open(path.as_bytes(), CREATE, 0o644)?;
        let content = vec![u8::try_from(index).unwrap_or(0); if index == 5 { 9000 } else { 40 + index as usize }];
        fs.pwrite(fd, 0, &content)?;
        fs.fsync_fd(fd)?;
        observe(fs);
        fs.close(fd)?;
        if index % 3 == 2 {
            fs.rename_path(path.as_bytes(), format!("/d/r{index}").as_bytes())?;
            fs.transact()?;
            observe(fs);
        }
        if index % 4 == 3 {
            fs.unlink(format!("/d/f{}", index - 1).as_bytes())
                .or_else(|_| fs.unlink(format!("/d/r{}", index - 1).as_bytes()))?;
            fs.transact()?;
            observe(fs);
        }
    }
    Ok(())
}

/// What a test compares: every file's path and content.
type State = Vec<(String, Vec<u8>)>;

fn visible(fs: &FileSystem<SimFlash>) -> State {
    let mut state = Vec::new();
    if let Ok(entries) = fs.readdir_path(b"/d") {
        for entry in entries {
            let path = format!("/d/{}", String::from_utf8_lossy(&entry.name));
            let (inode, record) = fs.stat(path.as_bytes()).expect("stat");
            state.push((path, fs.read(inode, 0, usize::try_from(record.size).expect("size")).expect("read")));
        }
    }
    state.sort();
    state
}

struct Reference {
    /// (flash operations, NVRAM writes) after which each commit was durable, and its state.
    commits: Vec<(u64, u64, State)>,
    nvram_writes: u64,
    flash_operations: u64,
}

fn formatted(nvram_bytes: u64) -> (SimFlash, SharedNvram) {
    let nvram = nvram(nvram_bytes, 11);
    let fs = format(sim(Profile::Mlc, 1, 48, 11), &nvram);
    let flash = fs.unmount().expect("unmount");
    nvram.with(Nvram::reset_counters);
    (flash, nvram)
}

fn reference(flash: &SimFlash, nvram: &SharedNvram) -> Reference {
    let nvram = reopened(nvram);
    let mut fs = mount(flash.clone(), &nvram);
    let writes = |nvram: &SharedNvram| nvram.with(|device| device.writes_count());
    let mut commits = vec![(0, 0, visible(&fs))];
    let mut counter = fs.commit_counter();
    workload(&mut fs, &mut |fs| {
        if fs.commit_counter() != counter {
            counter = fs.commit_counter();
            commits.push((fs.last_commit_operations(), writes(&nvram), visible(fs)));
        }
    })
    .expect("reference run");
    Reference { commits, nvram_writes: writes(&nvram), flash_operations: fs.flash_operations_issued() }
}

/// After a cut: remount, fsck, and the state is the last durable commit's or the next one's.
fn check_after_cut(flash: SimFlash, nvram: &SharedNvram, durable: usize, reference: &Reference, label: &str) {
    let nvram = reopened(nvram);
    let mut fs = FileSystem::mount_with_nvram(flash, Some(Box::new(nvram)), FsConfig::default())
        .unwrap_or_else(|error| panic!("{label}: remount: {error}"));
    let report = fs.fsck(true).unwrap_or_else(|error| panic!("{label}: fsck: {error}"));
    assert!(report.is_clean(), "{label}: fsck: {:?}", report.violations);
    let state = visible(&fs);
    let last = &reference.commits[durable].2;
    let next = reference.commits.get(durable + 1).map(|commit| &commit.2);
    assert!(
        &state == last || next == Some(&state),
        "{label}: state is neither commit {durable} nor the next: {state:?}"
    );
}

#[test]
fn power_cuts_at_every_nvram_write_leave_the_last_durable_commit() {
    let (flash, nvram) = formatted(4096);
    let reference = reference(&flash, &nvram);
    println!("NVRAM cut points: {}, commits: {}", reference.nvram_writes, reference.commits.len());
    assert!(reference.nvram_writes > 20, "workload too small: {} NVRAM writes", reference.nvram_writes);
    for cut_after in 0..reference.nvram_writes {
        let cut_nvram = reopened(&nvram);
        cut_nvram.with(|device| device.schedule_power_cut(cut_after));
        let mut fs = mount(flash.clone(), &cut_nvram);
        let _ = workload(&mut fs, &mut |_| {});
        assert!(cut_nvram.with(|device| device.power_is_lost()), "cut {cut_after}: the workload ended before it");
        let durable = reference.commits.iter().rposition(|commit| commit.1 <= cut_after).unwrap_or(0);
        check_after_cut(
            fs.into_flash_without_commit(),
            &cut_nvram,
            durable,
            &reference,
            &format!("NVRAM cut {cut_after}"),
        );
    }
}

#[test]
fn power_cuts_at_every_flash_operation_leave_the_last_durable_commit() {
    // A 1 KiB log: destages (flash delta commits, and full ones) every few records, so the
    // flash has work too.
    let (flash, nvram) = formatted(1024);
    let reference = reference(&flash, &nvram);
    println!("flash cut points: {}, commits: {}", reference.flash_operations, reference.commits.len());
    assert!(reference.flash_operations > 10, "workload too small: {} flash operations", reference.flash_operations);
    for cut_after in 0..reference.flash_operations {
        let cut_nvram = reopened(&nvram);
        let mut cut_flash = flash.clone();
        cut_flash.schedule_power_cut(cut_after);
        let mut fs = mount(cut_flash, &cut_nvram);
        let _ = workload(&mut fs, &mut |_| {});
        let mut cut_flash = fs.into_flash_without_commit();
        assert!(cut_flash.power_is_lost(), "cut {cut_after}: the workload ended before it");
        cut_flash.restore_power();
        let durable = reference.commits.iter().rposition(|commit| commit.0 <= cut_after).unwrap_or(0);
        check_after_cut(cut_flash, &cut_nvram, durable, &reference, &format!("flash cut {cut_after}"));
    }
}

/// Mount with a full log: the flash's metaroot search reads the same pages as without NVRAM
/// (14 on one MLC chip), and the NVRAM is read once at most (bytes read ≤ its size), however
/// many records it holds.
#[test]
fn mount_with_a_full_log_reads_the_same_flash_pages_and_at_most_the_nvram() {
    let size_bytes = 16 * 1024;
    let nvram = nvram(size_bytes, 12);
    let config = FsConfig { nvram_high_water_percent: 100, ..FsConfig::default() };
    let mut fs =
        FileSystem::format_with_nvram(sim(Profile::Mlc, 1, 64, 12), Some(Box::new(nvram.clone())), config, 12, 0)
            .expect("format");
    let mut index = 0;
    // Fill the log until the next record would not fit (a destage would follow).
    while fs.stats.nvram_destages == 0 {
        let fd = fs.open(format!("/f{index}").as_bytes(), CREATE, 0o644).expect("create");
        fs.pwrite(fd, 0, b"x").expect("write");
        fs.fsync_fd(fd).expect("fsync");
        fs.close(fd).expect("close");
        index += 1;
    }
    // The destage emptied it: fill it again, stopping before the next destage.
    let destages = fs.stats.nvram_destages;
    loop {
        let (used, capacity) = fs.nvram_usage().expect("nvram");
        if used + 512 > capacity {
            break;
        }
        let fd = fs.open(format!("/f{index}").as_bytes(), CREATE, 0o644).expect("create");
        fs.fsync_fd(fd).expect("fsync");
        fs.close(fd).expect("close");
        index += 1;
    }
    assert_eq!(fs.stats.nvram_destages, destages, "the log must stay full");
    let (used, capacity) = fs.nvram_usage().expect("nvram");
    println!("log holds {used} of {capacity} bytes, {index} files");
    let flash = fs.into_flash_without_commit();
    let nvram = reopened(&nvram);
    let fs = FileSystem::mount_with_nvram(flash, Some(Box::new(nvram)), config).expect("mount");
    let report = fs.nvram_mount_report();
    assert_eq!(fs.mount_report().page_reads, 15, "the flash's metaroot search");
    assert!(report.bytes_read <= size_bytes, "NVRAM bytes read: {}", report.bytes_read);
    assert!(report.bytes_read >= used, "every record read: {} of {used}", report.bytes_read);
    assert!(report.records > 10, "records: {}", report.records);
    assert!(fs.stat(format!("/f{}", index - 1).as_bytes()).is_ok(), "the newest file is there");
}

/// Small writes ride in the log (issue 10 point 2): 512-byte appends to a file kept in extents,
/// each fsync'd, program no flash page; reads, SEEK_DATA/SEEK_HOLE and stat see them; a power
/// cut replays them; a destage programs each page once; truncate and delete over them work.
#[test]
fn small_writes_ride_in_the_log_and_survive_a_power_cut() {
    let nvram = nvram(128 * 1024, 13);
    let mut fs = format(sim(Profile::Mlc, 1, 64, 13), &nvram);
    let fd = fs.open(b"/log", CREATE, 0o644).expect("create");
    let mut expected = vec![7u8; 5000]; // three pages (2 KiB each), in extents
    fs.pwrite(fd, 0, &expected).expect("write");
    fs.fsync_fd(fd).expect("fsync");
    let mut programs_per_append = Vec::new();
    for round in 0..40u8 {
        let unit = vec![round; 512];
        let before = programs(&fs);
        fs.pwrite(fd, expected.len() as u64, &unit).expect("append");
        fs.fsync_fd(fd).expect("fsync");
        programs_per_append.push(programs(&fs) - before);
        expected.extend_from_slice(&unit);
    }
    assert!(
        programs_per_append.iter().all(|&count| count == 0),
        "programs per append + fsync: {programs_per_append:?}"
    );
    assert!(fs.pending_page_count() > 0);
    let (inode, record) = fs.stat(b"/log").expect("stat");
    assert_eq!(record.size, expected.len() as u64);
    assert_eq!(fs.read(inode, 0, expected.len()).expect("read"), expected);
    assert_eq!(fs.seek_hole(inode, 0).expect("SEEK_HOLE"), expected.len() as u64, "no hole: pending pages are data");
    assert_eq!(fs.seek_data(inode, 6000).expect("SEEK_DATA"), 6000);
    // A power cut: the records bring the pending pages back.
    let flash = fs.into_flash_without_commit();
    let nvram = reopened(&nvram);
    let mut fs = mount(flash, &nvram);
    let (inode, _) = fs.stat(b"/log").expect("stat");
    assert_eq!(fs.read(inode, 0, expected.len()).expect("read after the cut"), expected);
    assert!(fs.pending_page_count() > 0, "replayed as pending pages");
    assert!(fs.fsck(true).expect("fsck").is_clean());
    // Truncate into a pending page, write again, then a destage (transact after a full commit).
    fs.truncate(inode, 20_000).expect("truncate");
    expected.truncate(20_000);
    let fd = fs.open(b"/log", fsoc_core::OpenFlags { write: true, ..Default::default() }, 0).expect("open");
    fs.pwrite(fd, 20_000, b"tail").expect("write");
    expected.extend_from_slice(b"tail");
    fs.fsync_fd(fd).expect("fsync");
    fs.close(fd).expect("close");
    fs.commit().expect("full commit");
    assert_eq!(fs.pending_page_count(), 0, "a flash commit programs every pending page");
    assert_eq!(fs.read(inode, 0, expected.len() + 10).expect("read"), expected);
    let flash = fs.unmount().expect("unmount");
    let mut fs = mount(flash, &nvram);
    assert_eq!(fs.read(inode, 0, expected.len()).expect("read after remount"), expected);
    let report = fs.fsck(true).expect("fsck");
    assert!(report.is_clean(), "{:?}", report.violations);
    // Deleting a file with pending pages forgets them.
    let fd = fs.open(b"/log", fsoc_core::OpenFlags { write: true, ..Default::default() }, 0).expect("open");
    fs.pwrite(fd, 100, b"pending").expect("write");
    fs.close(fd).expect("close");
    assert!(fs.pending_page_count() > 0);
    fs.unlink(b"/log").expect("unlink");
    assert_eq!(fs.pending_page_count(), 0);
    fs.transact().expect("transact");
    let flash = fs.into_flash_without_commit();
    let mut fs = mount(flash, &reopened(&nvram));
    assert!(fs.stat(b"/log").is_err());
    assert!(fs.fsck(true).expect("fsck").is_clean());
}

/// More pending pages than `nvram_pending_pages_max`: they are programmed, RAM stays bounded.
#[test]
fn pending_pages_are_bounded() {
    let nvram = nvram(128 * 1024, 14);
    let config = FsConfig { nvram_pending_pages_max: 8, ..FsConfig::default() };
    let mut fs =
        FileSystem::format_with_nvram(sim(Profile::Mlc, 1, 64, 14), Some(Box::new(nvram.clone())), config, 14, 0)
            .expect("format");
    let fd = fs.open(b"/big", CREATE, 0o644).expect("create");
    fs.pwrite(fd, 0, &vec![1u8; 100 * 2048]).expect("write");
    for page in 0..100u64 {
        fs.pwrite(fd, page * 2048 + 10, b"small").expect("small write");
        assert!(fs.pending_page_count() <= 8, "{} pending", fs.pending_page_count());
    }
    fs.fsync_fd(fd).expect("fsync");
    let flash = fs.into_flash_without_commit();
    let fs = FileSystem::mount_with_nvram(flash, Some(Box::new(reopened(&nvram))), config).expect("mount");
    let (inode, _) = fs.stat(b"/big").expect("stat");
    for page in 0..100u64 {
        assert_eq!(fs.read(inode, page * 2048 + 8, 9).expect("read"), b"\x01\x01small\x01\x01", "page {page}");
    }
}

/// Damaged NVRAM logs, seeded (a failure prints its seed): bit flips, random words, records
/// whose body was changed and whose commit word was then made to match again ("valid checksum,
/// wrong meaning"), absurd lengths, a damaged header. Mount answers with a typed error or
/// mounts; fsck and a listing of what it mounted never panic.
#[test]
fn damaged_nvram_logs_are_refused_or_ignored_never_a_panic() {
    use fsoc_flash::codec::{crc32c, crc32c_append};
    use fsoc_media::rng::SeededRng;
    let size_bytes = 8192u64;
    let nvram = nvram(size_bytes, 21);
    let mut fs = format(sim(Profile::Mlc, 1, 64, 21), &nvram);
    let fd = fs.open(b"/big", CREATE, 0o644).expect("create");
    fs.pwrite(fd, 0, &vec![3u8; 6000]).expect("write");
    fs.fsync_fd(fd).expect("fsync");
    for index in 0..12u64 {
        fs.pwrite(fd, 6000 + index * 300, &[index as u8; 300]).expect("small write");
        fs.fsync_fd(fd).expect("fsync");
        let file = fs.open(format!("/f{index}").as_bytes(), CREATE, 0o644).expect("create");
        fs.close(file).expect("close");
        fs.transact().expect("transact");
    }
    let flash = fs.into_flash_without_commit();
    let (config, pristine) = nvram.with(|device| (*device.config(), device.backing().bytes().to_vec()));
    // Record boundaries: (offset, total length) from offset 32, as the reader walks them.
    let mut records = Vec::new();
    let mut offset = 32usize;
    while offset + 32 <= pristine.len() {
        let payload = u32::from_le_bytes(pristine[offset + 20..offset + 24].try_into().expect("4 bytes")) as usize;
        let total = 24 + payload.div_ceil(8) * 8 + 8;
        if offset + total > pristine.len() || pristine[offset + total - 4..offset + total] != *b"NVRC" {
            break;
        }
        records.push((offset, total));
        offset += total;
    }
    assert!(records.len() >= 5, "only {} records", records.len());
    let volume_id = 7u64;
    let base = u64::from_le_bytes(pristine[16..24].try_into().expect("8 bytes"));
    let mut outcomes = [0u32; 2]; // mounted, refused
    for seed in 0..400u64 {
        let mut rng = SeededRng::new(seed);
        let mut bytes = pristine.clone();
        let (record_offset, record_total) = records[rng.below(records.len() as u64) as usize];
        match seed % 6 {
            0 => {
                let bit = rng.below((offset * 8) as u64) as usize;
                bytes[bit / 8] ^= 1 << (bit % 8);
            }
            1 => {
                let word = rng.below((offset / 8) as u64) as usize * 8;
                bytes[word..word + 8].copy_from_slice(&rng.next_u64().to_le_bytes());
            }
            2 | 3 | 5 => {
                // Change the body, then make the commit word match again.
                let body_end = record_offset + record_total - 8;
                let at = record_offset + rng.below((record_total - 8) as u64) as usize;
                bytes[at] ^= 1 + rng.below(255) as u8;
                if seed % 6 == 3 {
                    // An absurd payload length too.
                    bytes[record_offset + 20..record_offset + 24].copy_from_slice(&u32::MAX.to_le_bytes());
                }
                if seed % 6 == 5 {
                    // The largest counter: the next commit's counter would not fit.
                    bytes[record_offset..record_offset + 8].copy_from_slice(&u64::MAX.to_le_bytes());
                }
                let mut head = [0u8; 16];
                head[..8].copy_from_slice(&volume_id.to_le_bytes());
                head[8..].copy_from_slice(&base.to_le_bytes());
                let crc = crc32c_append(crc32c(&head), &bytes[record_offset..body_end]);
                let word = (u64::from(u32::from_le_bytes(*b"NVRC")) << 32) | u64::from(crc);
                bytes[body_end..body_end + 8].copy_from_slice(&word.to_le_bytes());
            }
            _ => {
                let at = rng.below(32) as usize;
                bytes[at] ^= 1 + rng.below(255) as u8;
            }
        }
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut backing = fsoc_media::RamBacking::new(size_bytes).expect("backing");
            fsoc_media::NvramBacking::write_at(&mut backing, 0, &bytes).expect("copy");
            let device = SharedNvram::new(Nvram::new(config, backing).expect("nvram"));
            match FileSystem::mount_with_nvram(flash.clone(), Some(Box::new(device)), FsConfig::default()) {
                Ok(mut fs) => {
                    let _ = fs.fsck(true);
                    if let Ok(entries) = fs.readdir_path(b"/") {
                        for entry in entries {
                            if let Ok((inode, record)) =
                                fs.stat(format!("/{}", String::from_utf8_lossy(&entry.name)).as_bytes())
                            {
                                let _ = fs.read(inode, 0, usize::try_from(record.size.min(1 << 20)).unwrap_or(0));
                            }
                        }
                    }
                    0
                }
                Err(_) => 1,
            }
        }));
        match run {
            Ok(outcome) => outcomes[outcome] += 1,
            Err(panic) => {
                eprintln!("damaged NVRAM log, seed {seed} (kind {}): panicked", seed % 6);
                std::panic::resume_unwind(panic);
            }
        }
    }
    println!("400 damaged logs: {} mounted, {} refused", outcomes[0], outcomes[1]);
    assert!(outcomes[1] > 0, "a damaged header must be refused");
}
