//! The NVRAM device model: size and bounds errors, timing and energy per technology, RAM and
//! file backings, power cuts after any write and torn writes at 8-byte granularity.

use fsoc_media::nvram::{ATOMIC_WORD_BYTES, NVRAM_SIZE_BYTES_MAX, NVRAM_SIZE_BYTES_MIN};
use fsoc_media::rng::SeededRng;
use fsoc_media::{
    ChipCounters, DeviceTotals, FileSection, NandError, Nvram, NvramBacking, NvramConfig, NvramCounters, NvramError,
    NvramTechnology, RamBacking, TearPattern,
};

fn feram(size_bytes: u64, seed: u64) -> Nvram {
    Nvram::in_ram(NvramConfig::new(size_bytes, NvramTechnology::FeRam, seed)).expect("valid config")
}

fn read_all<B: NvramBacking>(nvram: &mut Nvram<B>) -> Vec<u8> {
    let mut bytes = vec![0u8; nvram.size_bytes() as usize];
    nvram.read(0, 0, &mut bytes).expect("read whole region");
    bytes
}

// Checks the size rule: 1 KiB..=16 MiB in multiples of 8 bytes, anything else a typed error.
#[test]
fn sizes_outside_1_kib_to_16_mib_are_refused() {
    for size_bytes in [0, 8, NVRAM_SIZE_BYTES_MIN - 8, NVRAM_SIZE_BYTES_MAX + 8, 1 << 40, 1028] {
        let result = Nvram::in_ram(NvramConfig::new(size_bytes, NvramTechnology::Mram, 1));
        assert!(
            matches!(result, Err(NvramError::InvalidSize { size_bytes: reported, .. }) if reported == size_bytes),
            "size {size_bytes}: {result:?}"
        );
    }
    for size_bytes in [NVRAM_SIZE_BYTES_MIN, 128 * 1024, NVRAM_SIZE_BYTES_MAX] {
        let nvram = Nvram::in_ram(NvramConfig::new(size_bytes, NvramTechnology::Pcm, 1)).expect("size in range");
        assert_eq!(nvram.size_bytes(), size_bytes);
    }
    let config = NvramConfig::new(2048, NvramTechnology::FeRam, 1);
    let backing = RamBacking::new(1024).expect("backing");
    assert_eq!(
        Nvram::new(config, backing).map(|_| ()),
        Err(NvramError::BackingSize { expected_bytes: 2048, actual_bytes: 1024 })
    );
}

// Checks bounds: an access past the end (or whose end overflows) is refused with a typed error
// and changes nothing: no bytes, no time, no counters, no cut point.
#[test]
fn out_of_range_accesses_are_refused_and_change_nothing() {
    let mut nvram = feram(1024, 1);
    let mut buffer = [0u8; 2];
    let cases = [(1023, 2), (1024, 1), (u64::MAX, 1), (u64::MAX - 1, 2)];
    for (offset, length) in cases {
        let bytes = vec![0xA5u8; length];
        let expected = NvramError::OutOfRange { offset, length_bytes: length as u64, size_bytes: 1024 };
        assert_eq!(nvram.write(0, offset, &bytes), Err(expected.clone()));
        assert_eq!(nvram.read(0, offset, &mut buffer[..length]), Err(expected));
    }
    assert_eq!(nvram.counters(), NvramCounters::default());
    assert_eq!(nvram.busy_until_ns(), 0);
    assert_eq!(nvram.writes_count(), 0);
    assert!(read_all(&mut nvram).iter().all(|&byte| byte == 0));
    // The last byte itself is in range, and a zero-length access at the end is accepted.
    nvram.write(0, 1023, &[7]).expect("last byte");
    assert_eq!(nvram.write(0, 1024, &[]).map(|done| done.done_ns), Ok(0));
    let error: NandError = NvramError::OutOfRange { offset: 1023, length_bytes: 2, size_bytes: 1024 }.into();
    assert_eq!(error, NandError::OutOfRange { what: "NVRAM access end", value: 1025, limit: 1024 });
}

// Checks each technology's durations and energies against the figures documented in nvram.rs,
// by hand: 64 aligned bytes are 32 x16 words (4 PCM pages of 8 words).
#[test]
fn timing_and_energy_per_technology_are_the_documented_figures() {
    // (technology, write ns, write pJ, read ns, read pJ)
    let expected = [
        // FM22L16: 110 ns per word at 3.3 V × 8 mA = 2904 pJ per word, both ways.
        (NvramTechnology::FeRam, 32 * 110, 32 * 2_904, 32 * 110, 32 * 2_904),
        // MR4A16B: 35 ns per word; 3.3 V × 105 mA × 1120 ns written, × 55 mA read.
        (NvramTechnology::Mram, 32 * 35, 388_080, 32 * 35, 203_280),
        // P8P: 2 µs per word written; reads 115 + 7 × 25 ns per page; 3.3 V × 25 mA.
        (NvramTechnology::Pcm, 32 * 2_000, 5_280_000, 4 * (115 + 7 * 25), 95_700),
    ];
    for (technology, write_ns, write_pj, read_ns, read_pj) in expected {
        let mut nvram = Nvram::in_ram(NvramConfig::new(4096, technology, 3)).expect("config");
        let done = nvram.write(0, 0, &[0x5A; 64]).expect("write").done_ns;
        assert_eq!(done, write_ns, "{technology} write time");
        let mut buffer = [0u8; 64];
        // Issued at 0 while the device is busy: the read waits for the write.
        let done = nvram.read(0, 0, &mut buffer).expect("read").done_ns;
        assert_eq!(done, write_ns + read_ns, "{technology} read waits for the write");
        assert_eq!(buffer, [0x5A; 64]);
        // Issued after the device is idle: starts at its issue time.
        let later = 1_000_000;
        assert_eq!(nvram.read(later, 0, &mut buffer).expect("read").done_ns, later + read_ns);
        let counters = nvram.counters();
        assert_eq!((counters.reads, counters.writes), (2, 1), "{technology}");
        assert_eq!((counters.bytes_read, counters.bytes_written), (128, 64), "{technology}");
        assert_eq!(counters.busy_ns, write_ns + 2 * read_ns, "{technology}");
        assert_eq!(counters.energy_pj, write_pj + 2 * read_pj, "{technology} energy");
        nvram.reset_counters();
        assert_eq!(nvram.counters(), NvramCounters::default());
    }
    // The per-byte figures quoted in the documentation.
    let feram = NvramTechnology::FeRam.timing();
    assert_eq!(feram.write_energy_pj(feram.write_duration_ns(0, 2)) / 2, 1_452);
    let pcm = NvramTechnology::Pcm.timing();
    assert_eq!(pcm.write_duration_ns(0, 1), 2_000, "a lone byte still costs a whole word");
    assert_eq!(pcm.write_energy_pj(pcm.write_duration_ns(0, 2)) / 2, 82_500);
}

// Checks that flash and NVRAM accounting add up in one device total, in nJ.
#[test]
fn device_totals_add_flash_and_nvram() {
    let mut nvram = feram(1024, 1);
    nvram.write(0, 0, &[1; 1000]).expect("write");
    let nvram_counters = nvram.counters();
    assert_eq!(nvram_counters.energy_pj, 500 * 2_904);
    assert_eq!(nvram_counters.energy_nj(), 1_452);
    let flash = ChipCounters { programs: 1, busy_ns: 200_000, energy_nj: 16_500, ..ChipCounters::default() };
    let mut totals = DeviceTotals::new(flash, nvram_counters);
    assert_eq!(totals.energy_nj(), 16_500 + 1_452);
    assert_eq!(totals.busy_ns(), 200_000 + 500 * 110);
    totals.add(&totals.clone());
    assert_eq!((totals.flash.programs, totals.nvram.writes), (2, 2));
}

// Checks that the RAM and file backings give the same bytes, times and counters for the same
// seeded mix of unaligned reads and writes.
#[test]
fn ram_and_file_backings_agree() {
    let directory = tempfile::tempdir().expect("temp dir");
    let path = directory.path().join("device.nvram");
    let config = NvramConfig::new(8192, NvramTechnology::Mram, 9);
    let mut in_ram = Nvram::in_ram(config).expect("ram");
    let section = FileSection::create(&path, 512, 8192).expect("file section");
    let mut in_file = Nvram::new(config, section).expect("file");
    let mut rng = SeededRng::new(42);
    for step in 0..500u64 {
        let length = rng.range(1, 300);
        let offset = rng.below(8192 - length + 1);
        if rng.chance_percent(60) {
            let bytes = rng.bytes(length as usize);
            let ram_done = in_ram.write(step, offset, &bytes).expect("ram write");
            let file_done = in_file.write(step, offset, &bytes).expect("file write");
            assert_eq!(ram_done, file_done, "step {step}");
        } else {
            let mut ram_bytes = vec![0; length as usize];
            let mut file_bytes = vec![0; length as usize];
            let ram_done = in_ram.read(step, offset, &mut ram_bytes).expect("ram read");
            let file_done = in_file.read(step, offset, &mut file_bytes).expect("file read");
            assert_eq!((ram_done, &ram_bytes), (file_done, &file_bytes), "step {step}");
        }
    }
    assert_eq!(in_ram.counters(), in_file.counters());
    assert_eq!(read_all(&mut in_ram), read_all(&mut in_file));
}

// Checks persistence: bytes written through a file section are there after the device is
// dropped and the section re-opened, and the bytes around the section are untouched.
#[test]
fn file_section_persists_across_reopen() {
    let directory = tempfile::tempdir().expect("temp dir");
    let path = directory.path().join("image.bin");
    std::fs::write(&path, vec![0xEEu8; 4096]).expect("existing file contents");
    let config = NvramConfig::new(1024, NvramTechnology::FeRam, 2);
    {
        let section = FileSection::create(&path, 1000, 1024).expect("section inside the file");
        let mut nvram = Nvram::new(config, section).expect("nvram");
        // The section starts with the file's bytes, not zeros: nothing is re-initialised.
        let mut first = [0u8; 4];
        nvram.read(0, 0, &mut first).expect("read");
        assert_eq!(first, [0xEE; 4]);
        nvram.write(0, 3, b"committed record").expect("write");
        nvram.into_backing().sync().expect("sync");
    }
    let section = FileSection::open(&path, 1000, 1024).expect("reopen");
    let mut nvram = Nvram::new(config, section).expect("nvram");
    let mut record = [0u8; 16];
    nvram.read(0, 3, &mut record).expect("read");
    assert_eq!(&record, b"committed record");
    let file = std::fs::read(&path).expect("file");
    assert_eq!(file.len(), 4096, "the file is not resized when the section fits");
    assert!(file[..1003].iter().chain(&file[1019..]).all(|&byte| byte == 0xEE), "bytes outside the write changed");
    // A file too short for the section is refused on open, and extended by create.
    let short = directory.path().join("short.bin");
    std::fs::write(&short, [0u8; 100]).expect("short file");
    assert!(matches!(FileSection::open(&short, 0, 1024), Err(NvramError::BackingSize { .. })));
    let created = FileSection::create(&short, 4096, 1024).expect("create extends");
    assert_eq!(created.size_bytes(), 1024);
    assert_eq!(std::fs::metadata(&short).expect("stat").len(), 4096 + 1024);
}

/// The crash workload: `RECORD_COUNT` distinct 20-byte records at unaligned, non-overlapping
/// offsets, each written once.
const RECORD_COUNT: u64 = 24;
const RECORD_BYTES: u64 = 20;

fn record_offset(index: u64) -> u64 {
    3 + index * (RECORD_BYTES + 5)
}

fn record(index: u64) -> Vec<u8> {
    (0..RECORD_BYTES).map(|byte| (index * 31 + byte * 7 + 1) as u8 | 0x80).collect()
}

/// Runs the workload until the first error; returns how many writes succeeded.
fn run_records(nvram: &mut Nvram) -> u64 {
    for index in 0..RECORD_COUNT {
        if nvram.write(0, record_offset(index), &record(index)).is_err() {
            return index;
        }
    }
    RECORD_COUNT
}

// Checks the cut rule at every cut point of a workload: with a cut after k writes, writes
// 1..=k complete and survive a re-open, write k + 1 returns PowerLost and is torn word by
// word, every later access fails until power returns, and nothing later reaches the medium.
#[test]
fn cut_after_k_writes_keeps_earlier_writes_and_loses_later_ones() {
    let mut reference = feram(1024, 7);
    assert_eq!(run_records(&mut reference), RECORD_COUNT);
    let cut_points = reference.writes_count();
    assert_eq!(cut_points, RECORD_COUNT);
    for cut_after in 0..cut_points {
        let config = NvramConfig::new(1024, NvramTechnology::FeRam, 7 + cut_after);
        let mut nvram = Nvram::in_ram(config).expect("config");
        nvram.schedule_power_cut(cut_after);
        assert_eq!(run_records(&mut nvram), cut_after, "cut after {cut_after}");
        assert!(nvram.power_is_lost());
        assert_eq!(nvram.writes_count(), cut_after + 1);
        assert_eq!(nvram.write(0, 0, &[1]), Err(NvramError::PowerLost));
        assert_eq!(nvram.read(0, 0, &mut [0u8; 1]), Err(NvramError::PowerLost));
        assert_eq!(nvram.counters().writes, cut_after, "the torn write is not counted as done");
        let tear = nvram.last_tear().expect("a write was torn");
        assert_eq!((tear.write_index, tear.offset), (cut_after + 1, record_offset(cut_after)));

        // Re-open ("remount") the same backing: exactly the persisted bytes are there.
        let mut remounted = Nvram::new(config, nvram.into_backing()).expect("remount");
        let contents = read_all(&mut remounted);
        for index in 0..RECORD_COUNT {
            let start = record_offset(index) as usize;
            let stored = &contents[start..start + RECORD_BYTES as usize];
            if index < cut_after {
                assert_eq!(stored, record(index).as_slice(), "cut {cut_after}: record {index} lost");
            } else if index > cut_after {
                assert!(stored.iter().all(|&byte| byte == 0), "cut {cut_after}: record {index} written");
            }
        }
        // The torn record: each aligned word piece all new or all old (zero).
        let start = record_offset(cut_after);
        let new = record(cut_after);
        let mut landed = 0;
        for word in start / ATOMIC_WORD_BYTES..=(start + RECORD_BYTES - 1) / ATOMIC_WORD_BYTES {
            let piece_start = (word * ATOMIC_WORD_BYTES).max(start);
            let piece_end = ((word + 1) * ATOMIC_WORD_BYTES).min(start + RECORD_BYTES);
            let stored = &contents[piece_start as usize..piece_end as usize];
            let intended = &new[(piece_start - start) as usize..(piece_end - start) as usize];
            if stored == intended {
                landed += 1;
            } else {
                assert!(stored.iter().all(|&byte| byte == 0), "cut {cut_after}: word {word} mixed: {stored:?}");
            }
        }
        assert_eq!(landed, tear.words_landed, "cut {cut_after}: {tear:?}");
        // Gaps between records are never written.
        for index in 0..RECORD_COUNT {
            let gap = (record_offset(index) + RECORD_BYTES) as usize..record_offset(index + 1) as usize;
            assert!(contents[gap].iter().all(|&byte| byte == 0), "cut {cut_after}: gap after record {index}");
        }
    }
}

// Checks the tearing rule over many seeds and unaligned writes: after a torn overwrite every
// aligned 8-byte word of the region is entirely old or entirely new (never mixed inside a
// word), bytes outside the write are old, and the report counts the new words. Every outcome
// kind (nothing, everything, partial) occurs.
#[test]
fn torn_writes_leave_each_aligned_word_old_or_new() {
    let size_bytes = 2048u64;
    let (mut saw_nothing, mut saw_everything, mut saw_partial) = (false, false, false);
    for seed in 0..600u64 {
        let mut rng = SeededRng::new(seed);
        let technology = NvramTechnology::ALL[(seed % 3) as usize];
        let mut nvram = Nvram::in_ram(NvramConfig::new(size_bytes, technology, seed)).expect("config");
        let old = rng.bytes(size_bytes as usize);
        nvram.write(0, 0, &old).expect("fill");
        let length = rng.range(1, 200);
        let offset = rng.below(size_bytes - length + 1);
        let new: Vec<u8> = old[offset as usize..(offset + length) as usize].iter().map(|byte| !byte).collect();
        nvram.schedule_power_cut(0);
        assert_eq!(nvram.write(0, offset, &new), Err(NvramError::PowerLost), "seed {seed}");
        let tear = nvram.last_tear().expect("torn");
        nvram.restore_power();
        let contents = read_all(&mut nvram);
        let mut new_words = 0;
        for word in 0..size_bytes / ATOMIC_WORD_BYTES {
            let range = (word * ATOMIC_WORD_BYTES) as usize..((word + 1) * ATOMIC_WORD_BYTES) as usize;
            let changed = range.clone().filter(|&index| contents[index] != old[index]).count();
            let inside = range.clone().filter(|&index| (offset..offset + length).contains(&(index as u64))).count();
            assert!(
                changed == 0 || changed == inside,
                "seed {seed}: word {word} mixed ({changed} of {inside} bytes new), write {offset}+{length}, {tear:?}"
            );
            for index in range {
                let expected_if_new =
                    if (offset..offset + length).contains(&(index as u64)) { !old[index] } else { old[index] };
                assert!(
                    contents[index] == old[index] || contents[index] == expected_if_new,
                    "seed {seed}: byte {index} is neither old nor new"
                );
            }
            if changed > 0 {
                new_words += 1;
            }
        }
        assert_eq!(new_words, tear.words_landed, "seed {seed}: {tear:?}");
        let word_count = (offset + length - 1) / ATOMIC_WORD_BYTES - offset / ATOMIC_WORD_BYTES + 1;
        assert_eq!(tear.word_count, word_count, "seed {seed}");
        match tear.words_landed {
            0 => saw_nothing = true,
            landed if landed == word_count => saw_everything = true,
            _ => saw_partial = true,
        }
    }
    assert!(saw_nothing && saw_everything && saw_partial, "{saw_nothing} {saw_everything} {saw_partial}");
}

// Checks determinism: the same seed and workload tear the same words; another seed may not.
#[test]
fn tears_replay_from_the_seed() {
    let run = |seed: u64| {
        let mut nvram = feram(1024, seed);
        nvram.write(0, 0, &[0x11; 1024]).expect("fill");
        nvram.schedule_power_cut(1);
        nvram.write(0, 8, &[0x22; 16]).expect("write 2");
        assert_eq!(nvram.write(0, 5, &[0x33; 300]), Err(NvramError::PowerLost));
        nvram.restore_power();
        (nvram.last_tear(), read_all(&mut nvram))
    };
    assert_eq!(run(11), run(11));
    let patterns: Vec<_> = (0..16).map(|seed| run(seed).0.map(|tear| tear.pattern)).collect();
    assert!(patterns.iter().any(|pattern| *pattern != patterns[0]), "the seed changes the tear");
    // The pattern is a function of (seed, write index, word count) alone.
    assert_eq!(TearPattern::draw(3, 7, 40), TearPattern::draw(3, 7, 40));
}

// Checks the other ways power goes: reads are not cut points, a cut between writes tears
// nothing, and a cancelled cut never fires.
#[test]
fn reads_are_not_cut_points_and_cut_now_tears_nothing() {
    let mut nvram = feram(1024, 4);
    nvram.schedule_power_cut(1);
    let mut buffer = [0u8; 8];
    for _ in 0..5 {
        nvram.read(0, 0, &mut buffer).expect("reads do not count");
    }
    nvram.write(0, 0, &[9; 8]).expect("write 1 completes");
    assert_eq!(nvram.write(0, 8, &[9; 8]), Err(NvramError::PowerLost), "write 2 is cut");
    nvram.restore_power();
    nvram.write(0, 16, &[9; 8]).expect("a fired cut is consumed");

    nvram.cut_power_now();
    assert_eq!(nvram.write(0, 24, &[5; 8]), Err(NvramError::PowerLost));
    nvram.restore_power();
    nvram.read(0, 24, &mut buffer).expect("read");
    assert_eq!(buffer, [0; 8], "a cut between writes tears nothing");

    nvram.schedule_power_cut(0);
    nvram.cancel_power_cut();
    nvram.write(0, 24, &[5; 8]).expect("cancelled cut");
    assert_eq!(nvram.writes_count(), 4, "writes refused for lost power are not cut points");
}
