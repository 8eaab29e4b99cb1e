//! Chip files driven by worker threads give exactly the RAM simulator's results: the same file
//! system workload on `ThreadedFlash` and on `SimFlash` ends with equal counters, per-chip
//! clocks, file-system clocks, mount reports and physical page states and contents — also
//! after closing and reopening the files, and after power cuts (torn pages included).

use fsoc_array::{chip_file_path, chip_file_paths, ThreadedFlash};
use fsoc_core::{FileSystem, FsConfig, OpenFlags};
use fsoc_media::store::{BlockMeta, PageState, PageStore};
use fsoc_media::FlashStats;
use fsoc_media::{BlockAddress, ChipIndex, Flash, PageAddress, Profile, SimConfig, SimFlash};

const VOLUME_ID: u64 = 0xA77A_0004;

fn config(chips: u32) -> SimConfig {
    SimConfig::new(Profile::Mlc, chips, 24, 0x5EED_0004)
}

/// Everything observable about a workload run, to compare between backends.
#[derive(Debug, Default, PartialEq)]
struct Trace {
    clocks_ns: Vec<u64>,
    mount_page_reads: Vec<u64>,
    commit_counters: Vec<u64>,
    file_bytes: Vec<Vec<u8>>,
    errors: Vec<String>,
}

fn flags_create() -> OpenFlags {
    OpenFlags { read: true, write: true, create: true, ..OpenFlags::default() }
}

/// Byte `index` of the test pattern `tag` (deterministic, not constant).
fn pattern(tag: u64, length: usize) -> Vec<u8> {
    (0..length as u64).map(|index| (index.wrapping_mul(2_654_435_761) ^ tag.wrapping_mul(40_503)) as u8).collect()
}

/// Formats and fills a volume: small inline files and multi-page files, each synced.
fn populate<F: Flash>(flash: F, trace: &mut Trace) -> F {
    let mut fs = FileSystem::format(flash, FsConfig::default(), VOLUME_ID).expect("format");
    for index in 0..12u64 {
        let path = format!("/f{index}");
        let fd = fs.open(path.as_bytes(), flags_create(), 0o644).expect("open");
        let length = (index as usize * 7_919) % 40_000 + 1;
        fs.pwrite(fd, 0, &pattern(index, length)).expect("pwrite");
        fs.fsync_fd(fd).expect("fsync");
        fs.close(fd).expect("close");
        trace.clocks_ns.push(fs.device_now_ns());
    }
    trace.commit_counters.push(fs.commit_counter());
    fs.unmount().expect("unmount")
}

/// Mounts, overwrites one file record by record (synced), deletes two, reads everything.
fn churn<F: Flash>(flash: F, trace: &mut Trace) -> F {
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    trace.mount_page_reads.push(fs.mount_report().page_reads);
    let fd = fs.open(b"/f3", flags_create(), 0o644).expect("open");
    for record in 0..24u64 {
        fs.pwrite(fd, record * 4096, &pattern(100 + record, 4096)).expect("pwrite");
        fs.fsync_fd(fd).expect("fsync");
    }
    fs.close(fd).expect("close");
    fs.unlink(b"/f5").expect("unlink");
    fs.unlink(b"/f7").expect("unlink");
    fs.transact().expect("transact");
    trace.clocks_ns.push(fs.device_now_ns());
    read_all(&mut fs, trace);
    trace.commit_counters.push(fs.commit_counter());
    fs.unmount().expect("unmount")
}

/// Reads every file (in name order) into the trace.
fn read_all<F: Flash>(fs: &mut FileSystem<F>, trace: &mut Trace) {
    let mut entries = fs.readdir_path(b"/").expect("readdir");
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for entry in entries {
        let path = [b"/".as_slice(), &entry.name].concat();
        let fd = fs.open(&path, OpenFlags { read: true, ..OpenFlags::default() }, 0).expect("open");
        let (_, record) = fs.fstat(fd).expect("fstat");
        trace.file_bytes.push(fs.pread(fd, 0, record.size as usize).expect("pread"));
        fs.close(fd).expect("close");
    }
    trace.clocks_ns.push(fs.device_now_ns());
}

/// Every block's metadata, then every page that holds contents with its state and bytes.
type PhysicalState = (Vec<BlockMeta>, Vec<(PageAddress, PageState, Vec<u8>)>);

/// Physical state of the whole array: every block's metadata, every page's state and stored
/// contents (read straight from the store: no counters, no clocks).
fn dump<S: PageStore>(flash: &SimFlash<S>) -> PhysicalState {
    let geometry = flash.geometry();
    let mut blocks = Vec::new();
    let mut pages = Vec::new();
    let mut data = vec![0u8; geometry.page_data_bytes as usize];
    let mut spare = vec![0u8; geometry.spare_bytes as usize];
    for chip in 0..flash.chip_count() {
        for block in 0..geometry.block_count {
            blocks.push(flash.block_meta(BlockAddress::new(chip, block)).expect("block meta"));
            for page_index in 0..geometry.pages_per_block {
                let page = PageAddress::new(chip, block, page_index);
                let state = flash.page_state(page).expect("page state");
                if state.has_contents() {
                    flash.inspect_store(|store| store.read_contents(page, &mut data, &mut spare)).expect("contents");
                    pages.push((page, state, [data.as_slice(), spare.as_slice()].concat()));
                }
            }
        }
    }
    (blocks, pages)
}

/// Asserts two arrays are in the same state, clocks and counters included.
fn check_same(label: &str, threaded: &ThreadedFlash, simulated: &SimFlash) {
    assert_eq!(threaded.counters(), simulated.counters(), "{label}: counters");
    for chip in 0..simulated.chip_count() {
        assert_eq!(
            threaded.busy_until_ns(ChipIndex(chip)),
            simulated.busy_until_ns(ChipIndex(chip)),
            "{label}: clock of chip {chip}"
        );
    }
    assert_eq!(threaded.sim().operations_count(), simulated.operations_count(), "{label}: operations");
    assert!(dump(threaded.sim()) == dump(simulated), "{label}: physical page states or contents differ");
}

// Runs format + 12 synced files + remount + synced overwrites + unlinks + reads on 4 chip
// files with worker threads and on the RAM simulator; everything observable must agree.
#[test]
fn threaded_chip_files_match_the_simulator() {
    let directory = tempfile::tempdir().expect("tempdir");
    let base = directory.path().join("array");
    let mut threaded = ThreadedFlash::create(&base, config(4)).expect("create");
    let mut simulated = SimFlash::create(config(4)).expect("simulator");
    assert_eq!(chip_file_paths(&base).len(), 4, "one file per chip");
    let (mut threaded_trace, mut simulated_trace) = (Trace::default(), Trace::default());
    threaded = populate(threaded, &mut threaded_trace);
    simulated = populate(simulated, &mut simulated_trace);
    check_same("after populate", &threaded, &simulated);
    threaded = churn(threaded, &mut threaded_trace);
    simulated = churn(simulated, &mut simulated_trace);
    check_same("after churn", &threaded, &simulated);
    assert_eq!(threaded_trace, simulated_trace);
    assert_eq!(threaded_trace.file_bytes.len(), 10, "12 files, 2 deleted");
    assert!(simulated.counters().totals().erases > 0, "the workload must reuse segments");
}

// Closes the chip files and opens them again: the reopened array holds the same pages as a
// RAM device reopened from its store (fresh clocks and RNG on both), and both continue alike.
#[test]
fn reopened_chip_files_match_a_reopened_simulator() {
    let directory = tempfile::tempdir().expect("tempdir");
    let base = directory.path().join("array");
    let mut trace = Trace::default();
    let threaded = populate(ThreadedFlash::create(&base, config(2)).expect("create"), &mut trace);
    let simulated = populate(SimFlash::create(config(2)).expect("simulator"), &mut trace);
    threaded.close().expect("close");
    let reopened_simulated = SimFlash::with_store(config(2), simulated.into_store()).expect("reopen simulator");
    let reopened_threaded = ThreadedFlash::open(&base).expect("reopen");
    assert_eq!(reopened_threaded.config(), &config(2), "configuration read back from the chip files");
    check_same("reopened", &reopened_threaded, &reopened_simulated);
    let (mut threaded_trace, mut simulated_trace) = (Trace::default(), Trace::default());
    let threaded = churn(reopened_threaded, &mut threaded_trace);
    let simulated = churn(reopened_simulated, &mut simulated_trace);
    check_same("churn after reopen", &threaded, &simulated);
    assert_eq!(threaded_trace, simulated_trace);
}

// Cuts power at several points of the churn phase (mid-stripe programs and erases, with torn
// pages), remounts both backends and compares recovery and the physical state.
#[test]
fn power_cuts_match_the_simulator() {
    let directory = tempfile::tempdir().expect("tempdir");
    // Points inside the churn phase's ~75 programs and erases (with delta commits, a synced
    // 4 KiB record costs its data pages plus one metaroot page).
    for (round, cut_after) in [3u64, 17, 29, 42, 61].into_iter().enumerate() {
        let base = directory.path().join(format!("cut{round}"));
        let mut trace = Trace::default();
        let mut threaded = populate(ThreadedFlash::create(&base, config(4)).expect("create"), &mut trace);
        let mut simulated = populate(SimFlash::create(config(4)).expect("simulator"), &mut trace);
        threaded.sim_mut().schedule_power_cut(cut_after);
        simulated.schedule_power_cut(cut_after);
        let mut outcomes = Vec::new();
        let mut recovered = Vec::new();
        let threaded = run_until_cut(threaded, &mut outcomes, &mut recovered);
        let simulated = run_until_cut(simulated, &mut outcomes, &mut recovered);
        assert_eq!(outcomes[0], outcomes[1], "cut {cut_after}: where the workload stopped");
        assert!(outcomes[0].contains("PowerLost"), "cut {cut_after} must interrupt the workload: {}", outcomes[0]);
        assert_eq!(recovered[0], recovered[1], "cut {cut_after}: recovered state");
        check_same(&format!("cut after {cut_after}"), &threaded, &simulated);
        threaded.close().expect("close");
        // The files hold the torn state too: reopening them mounts to the same recovery.
        let reopened = ThreadedFlash::open(&base).expect("reopen");
        let mut fs = FileSystem::mount(reopened, FsConfig::default()).expect("mount reopened");
        let mut trace = Trace::default();
        read_all(&mut fs, &mut trace);
        assert_eq!(trace.file_bytes, recovered[0].file_bytes, "cut {cut_after}: reopened files");
    }
}

/// Runs the churn phase with a scheduled power cut, then restores power, remounts, reads.
fn run_until_cut<F: PowerSwitch>(flash: F, outcomes: &mut Vec<String>, recovered: &mut Vec<Trace>) -> F {
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    let result = (|| -> Result<(), fsoc_core::FsError> {
        let fd = fs.open(b"/f3", flags_create(), 0o644)?;
        for record in 0..24u64 {
            fs.pwrite(fd, record * 4096, &pattern(100 + record, 4096))?;
            fs.fsync_fd(fd)?;
        }
        fs.unlink(b"/f5")?;
        fs.transact()
    })();
    outcomes.push(format!("{result:?} at commit {}", fs.commit_counter()));
    let mut flash = fs.into_flash_without_commit();
    flash.restore();
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount after cut");
    let mut trace = Trace::default();
    trace.mount_page_reads.push(fs.mount_report().page_reads);
    read_all(&mut fs, &mut trace);
    recovered.push(trace);
    fs.unmount().expect("unmount")
}

/// Restoring power on either backend.
trait PowerSwitch: Flash {
    fn restore(&mut self);
}

impl PowerSwitch for ThreadedFlash {
    fn restore(&mut self) {
        self.sim_mut().restore_power();
    }
}

impl PowerSwitch for SimFlash {
    fn restore(&mut self) {
        self.restore_power();
    }
}

// Chip files are one-chip fsoc-media images named BASE.chipN.
#[test]
fn chip_files_are_one_chip_images() {
    let directory = tempfile::tempdir().expect("tempdir");
    let base = directory.path().join("vol");
    ThreadedFlash::create(&base, config(3)).expect("create").close().expect("close");
    for chip in 0..3 {
        let path = chip_file_path(&base, chip);
        assert!(path.to_string_lossy().ends_with(&format!("vol.chip{chip}")));
        let image = SimFlash::open_image(&path).expect("a chip file is an image");
        assert_eq!(image.chip_count(), 1);
    }
    assert!(!chip_file_path(&base, 3).exists());
}

// A blank chip file is a new chip in a lost one's place: the same description as the chip it
// was made like, every page erased and no block bad, opened in the array beside the others;
// an existing file is never overwritten.
#[test]
fn a_blank_chip_file_is_an_erased_chip_like_the_others() {
    let directory = tempfile::tempdir().expect("tempdir");
    let base = directory.path().join("vol");
    let mut flash = ThreadedFlash::create(&base, config(2)).expect("create");
    let geometry = flash.geometry();
    let data = vec![0x5Au8; geometry.page_data_bytes as usize];
    let spare = vec![0xFFu8; geometry.spare_bytes as usize];
    flash.program_page(0, PageAddress::new(1, 3, 0), &data, &spare).expect("program");
    flash.close().expect("close");
    let blank = directory.path().join("new-chip");
    fsoc_array::create_blank_chip_file(&blank, &chip_file_path(&base, 1)).expect("blank chip");
    assert!(fsoc_array::create_blank_chip_file(&blank, &chip_file_path(&base, 1)).is_err(), "exists");
    let flash = ThreadedFlash::open_files(&[chip_file_path(&base, 0), blank], fsoc_array::ArrayConfig::default())
        .expect("the blank chip opens beside chip 0");
    assert_eq!(flash.geometry(), geometry);
    let (mut read_data, mut read_spare) = (data.clone(), spare.clone());
    for block in 0..geometry.block_count {
        assert!(!flash.is_bad_block(BlockAddress::new(1, block)).expect("bad-block query"));
        let status = flash.read_page(0, PageAddress::new(1, block, 0), &mut read_data, &mut read_spare);
        assert_eq!(status.expect("read").value, fsoc_media::ReadStatus::Erased, "block {block}");
    }
    flash.close().expect("close");
}
