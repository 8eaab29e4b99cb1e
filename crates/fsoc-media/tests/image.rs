//! Image-file backend: state survives reopen, new images are sparse, and malformed files are
//! refused with typed errors instead of panics.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use common::{erase, pattern, program, quiet_config, read};
use fsoc_media::image::{crc32c, ImageError, ImageStore, HEADER_BYTES, HEADER_CRC_COVERED_BYTES};
use fsoc_media::store::PageState;
use fsoc_media::{BlockAddress, Flash, NandError, PageAddress, Profile, ReadStatus, SimFlash};

fn small_image(path: &Path) -> SimFlash<ImageStore> {
    SimFlash::create_image(path, quiet_config(Profile::Slc, 2, 16, 99)).expect("create image")
}

fn patch(path: &Path, offset: u64, bytes: &[u8]) {
    let file = OpenOptions::new().write(true).open(path).expect("open for patch");
    file.write_all_at(bytes, offset).expect("patch");
}

/// Overwrites a little-endian u32 header field and recomputes the header CRC, so only the
/// field's own validity rule can reject the file.
fn patch_header_field(path: &Path, offset: u64, value: u32) {
    patch(path, offset, &value.to_le_bytes());
    let file = OpenOptions::new().read(true).write(true).open(path).expect("open");
    let mut covered = [0u8; HEADER_CRC_COVERED_BYTES];
    file.read_exact_at(&mut covered, 0).expect("read header");
    file.write_all_at(&crc32c(&covered).to_le_bytes(), HEADER_CRC_COVERED_BYTES as u64).expect("write crc");
}

/// Reads the pages `state_survives_reopen` compares: pages 0..=2 of chip 0 block 1, the torn
/// page, and page 0 of chip 1 block 5.
fn read_probes(flash: &mut SimFlash<ImageStore>, torn: PageAddress) -> Vec<(ReadStatus, Vec<u8>, Vec<u8>)> {
    let mut pages: Vec<PageAddress> = (0..3).map(|page_index| PageAddress::new(0, 1, page_index)).collect();
    pages.extend([torn, PageAddress::new(1, 5, 0)]);
    pages.into_iter().map(|page| read(flash, page).expect("read")).collect()
}

// Checks persistence: programs, erases, bad marks, injected flips and a torn page all read back
// the same after closing and reopening the image, and the header restores the configuration.
#[test]
fn state_survives_reopen() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("device.img");
    let torn = PageAddress::new(1, 2, 1);
    let expected_reads;
    {
        let mut flash = small_image(&path);
        for page_index in 0..3 {
            program(&mut flash, PageAddress::new(0, 1, page_index), page_index).expect("program");
        }
        for _ in 0..3 {
            erase(&mut flash, BlockAddress::new(1, 5)).expect("erase");
        }
        program(&mut flash, PageAddress::new(1, 5, 0), 50).expect("program after erases");
        flash.mark_bad_block(BlockAddress::new(0, 7)).expect("mark bad");
        flash.inject_bit_flips_at(PageAddress::new(0, 1, 2), &[1, 2, 3]).expect("inject");
        program(&mut flash, PageAddress::new(1, 2, 0), 7).expect("program");
        flash.schedule_power_cut(0);
        assert_eq!(program(&mut flash, torn, 8), Err(NandError::PowerLost));
        flash.restore_power();
        expected_reads = read_probes(&mut flash, torn);
        flash.flush().expect("flush");
    }
    let mut reopened = SimFlash::open_image(&path).expect("reopen");
    assert_eq!(reopened.config().seed, 99);
    assert_eq!(reopened.config().geometry, Profile::Slc.geometry(16));
    assert_eq!(reopened.chip_count(), 2);
    let reads = read_probes(&mut reopened, torn);
    assert_eq!(reads, expected_reads);
    assert_eq!(reads[2].0, ReadStatus::Corrected { bits: 3, max_per_sector: 3 });
    assert_eq!(reads[3].0, ReadStatus::Uncorrectable);
    assert_eq!((reads[4].1.clone(), reads[4].2.clone()), pattern(&reopened, 50));
    assert_eq!(reopened.erase_count(BlockAddress::new(1, 5)), Ok(3));
    assert_eq!(reopened.is_bad_block(BlockAddress::new(0, 7)), Ok(true));
    assert_eq!(reopened.is_bad_block(BlockAddress::new(0, 6)), Ok(false));
    assert_eq!(reopened.page_state(torn), Ok(PageState::Torn));
    // The order rule survives too: page 0 of block 1 is behind the last programmed page.
    let behind = PageAddress::new(0, 1, 1);
    assert_eq!(program(&mut reopened, behind, 1), Err(NandError::NotErased { page: behind }));
    program(&mut reopened, PageAddress::new(0, 1, 3), 3).expect("next page in order");
    assert_eq!(read(&mut reopened, PageAddress::new(0, 2, 0)).expect("read").0, ReadStatus::Erased);
}

// Checks sparseness: a 1 GiB SLC device (8192 blocks of 128 KiB) has a file of more than
// 1 GiB that uses under 16 MiB of disk, before and after a few writes.
#[test]
fn one_gib_image_is_sparse() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("big.img");
    let mut flash = SimFlash::create_image(&path, quiet_config(Profile::Slc, 1, 8192, 1)).expect("create");
    let metadata = std::fs::metadata(&path).expect("stat");
    assert!(metadata.len() > 1 << 30, "file length {}", metadata.len());
    let disk_bytes = metadata.blocks() * 512;
    assert!(disk_bytes < 16 << 20, "fresh 1 GiB image uses {disk_bytes} bytes of disk");
    for block in [0, 4000, 8191] {
        erase(&mut flash, BlockAddress::new(0, block)).expect("erase");
        program(&mut flash, PageAddress::new(0, block, 0), block).expect("program");
    }
    flash.flush().expect("flush");
    let disk_bytes = std::fs::metadata(&path).expect("stat").blocks() * 512;
    assert!(disk_bytes < 16 << 20, "used image uses {disk_bytes} bytes of disk");
}

#[test]
fn creating_over_an_existing_file_is_refused() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("device.img");
    drop(small_image(&path));
    let again = SimFlash::create_image(&path, quiet_config(Profile::Slc, 2, 16, 99));
    assert!(matches!(again, Err(ImageError::Io { operation: "create", .. })), "{again:?}");
}

/// Creates a valid small image, lets `damage` alter it, and returns the open result.
fn open_damaged(damage: impl FnOnce(&Path)) -> Result<SimFlash<ImageStore>, ImageError> {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("device.img");
    drop(small_image(&path));
    damage(&path);
    SimFlash::open_image(&path)
}

// Checks that each kind of malformed image is refused with its own typed error.
#[test]
fn invalid_images_are_refused() {
    let result = open_damaged(|path| patch(path, 0, b"NOTFSOC!"));
    assert!(matches!(result, Err(ImageError::BadMagic { found }) if &found == b"NOTFSOC!"), "{result:?}");

    let result = open_damaged(|path| std::fs::File::create(path).map(drop).expect("truncate to 0"));
    assert!(matches!(result, Err(ImageError::Truncated { actual_bytes: 0, .. })), "{result:?}");

    let result = open_damaged(|path| {
        let file = OpenOptions::new().write(true).open(path).expect("open");
        file.set_len(40).expect("truncate");
    });
    assert!(matches!(result, Err(ImageError::Truncated { actual_bytes: 40, .. })), "{result:?}");

    let result = open_damaged(|path| patch(path, 48, &[0xAB]));
    assert!(matches!(result, Err(ImageError::HeaderChecksumMismatch { .. })), "{result:?}");

    let result = open_damaged(|path| patch_header_field(path, 8, 2));
    assert_eq!(result.err(), Some(ImageError::UnsupportedVersion { found: 2 }));

    let result = open_damaged(|path| patch_header_field(path, 16, 1000));
    assert!(matches!(result, Err(ImageError::InvalidGeometry { .. })), "{result:?}");

    let result = open_damaged(|path| patch_header_field(path, 28, 17));
    assert!(matches!(result, Err(ImageError::LayoutMismatch { .. })), "{result:?}");

    let result = open_damaged(|path| patch_header_field(path, 12, 77));
    assert_eq!(result.err(), Some(ImageError::UnknownProfile { code: 77 }));

    let result = open_damaged(|path| {
        let file = OpenOptions::new().write(true).open(path).expect("open");
        let length = file.metadata().expect("stat").len();
        file.set_len(length - 1).expect("shorten");
    });
    assert!(matches!(result, Err(ImageError::FileSizeMismatch { .. })), "{result:?}");

    let directory = tempfile::tempdir().expect("tempdir");
    let result = SimFlash::open_image(&directory.path().join("missing.img"));
    assert!(matches!(result, Err(ImageError::Io { operation: "open", .. })), "{result:?}");
    assert_eq!(HEADER_BYTES, 92);
}

// Checks that a corrupt block-table entry is refused at open and a corrupt page-table entry
// turns the read of that page into a typed error, not a panic.
#[test]
fn corrupt_tables_give_typed_errors() {
    let result = open_damaged(|path| patch(path, 4096 + 4, &[9]));
    assert!(matches!(result, Err(ImageError::CorruptEntry { structure: "block table", index: 0, .. })), "{result:?}");

    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("device.img");
    let page_table_offset = small_image(&path).inspect_store(|store| store.layout().page_table_offset);
    patch(&path, page_table_offset, &[9]);
    let mut flash = SimFlash::open_image(&path).expect("block table is fine");
    let error = read(&mut flash, PageAddress::new(0, 0, 0)).expect_err("corrupt page entry");
    assert!(matches!(&error, NandError::Image(message) if message.contains("unknown page state")), "{error:?}");
}

// Checks docs/FORMAT.md against the code: the example header hex dump in the "Image file"
// section decodes to the documented device, and re-encoding gives the same bytes, so the
// document cannot drift from the implementation. Also checks the CRC-32C check value.
#[test]
fn format_doc_example_header_decodes() {
    use fsoc_media::image::{ImageHeader, ImageLayout};
    let document = include_str!("../../../docs/FORMAT.md");
    let section = document.split("## Image file (fsoc-media)").nth(1).expect("image section");
    let dump = section.split("Example:").nth(1).and_then(|rest| rest.split("```").nth(1)).expect("hex dump");
    let bytes: Vec<u8> = dump
        .lines()
        .filter(|line| !line.trim().is_empty())
        .flat_map(|line| line.split_whitespace().skip(1).map(|hex| u8::from_str_radix(hex, 16).expect("hex byte")))
        .collect();
    assert_eq!(bytes.len(), HEADER_BYTES);
    let (header, layout) = ImageHeader::decode(&bytes, 2_244_608).expect("documented header decodes");
    assert_eq!(header.profile, Profile::Slc);
    assert_eq!(header.geometry, Profile::Slc.geometry(16));
    assert_eq!((header.chip_count, header.seed, header.endurance_cycles), (1, 1, 100_000));
    assert_eq!(layout, ImageLayout::compute(&header.geometry, 1).expect("layout"));
    assert_eq!(header.encode(&layout).to_vec(), bytes);
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
}

/// `read_pages` of `pages` in one batch: status, data and spare of each.
fn read_batch(flash: &SimFlash<ImageStore>, pages: &[PageAddress]) -> Vec<(ReadStatus, Vec<u8>, Vec<u8>)> {
    let geometry = flash.geometry();
    let mut data: Vec<Vec<u8>> = vec![vec![0u8; geometry.page_data_bytes as usize]; pages.len()];
    let mut spares = vec![0u8; pages.len() * geometry.spare_bytes as usize];
    let mut completions = Vec::new();
    let mut targets: Vec<&mut [u8]> = data.iter_mut().map(Vec::as_mut_slice).collect();
    flash.read_pages(0, pages, &mut targets, &mut spares, &mut completions).expect("read batch");
    let spares = spares.chunks_exact(geometry.spare_bytes as usize).map(<[u8]>::to_vec);
    completions.iter().zip(data).zip(spares).map(|((done, data), spare)| (done.value, data, spare)).collect()
}

// Checks that a batch read gives what page-by-page reads give: neighbouring slots (read
// together), a gap, a page of another chip, an erased page, a page twice, out of order, and
// pages still in the store's write-behind buffer (read under the lock) as well as written
// back ones; and that wrong buffer counts are typed errors.
#[test]
fn batch_reads_match_page_reads() {
    let directory = tempfile::tempdir().expect("tempdir");
    let mut flash = small_image(&directory.path().join("device.img"));
    for page_index in 0..6 {
        program(&mut flash, PageAddress::new(0, 3, page_index), page_index).expect("program");
    }
    program(&mut flash, PageAddress::new(1, 4, 0), 40).expect("program");
    let pages = [
        PageAddress::new(0, 3, 0),
        PageAddress::new(0, 3, 1),
        PageAddress::new(0, 3, 2),
        PageAddress::new(0, 3, 4),
        PageAddress::new(1, 4, 0),
        PageAddress::new(0, 7, 0), // erased
        PageAddress::new(0, 3, 5),
        PageAddress::new(0, 3, 1), // again
        PageAddress::new(0, 3, 3),
    ];
    let expected: Vec<_> = pages.iter().map(|page| read(&mut flash, *page).expect("read")).collect();
    assert_eq!(expected[5].0, ReadStatus::Erased);
    // Pending in the write-behind buffer (programmed, no barrier since).
    assert_eq!(read_batch(&flash, &pages), expected);
    flash.write_barrier().expect("barrier");
    // Written back: read from the file, neighbours together.
    assert_eq!(read_batch(&flash, &pages), expected);

    let geometry = flash.geometry();
    let mut data = vec![0u8; geometry.page_data_bytes as usize];
    let mut spares = vec![0u8; 2 * geometry.spare_bytes as usize];
    let mut completions = Vec::new();
    let error = flash.read_pages(0, &pages[..2], &mut [&mut data[..]], &mut spares, &mut completions);
    assert!(matches!(error, Err(NandError::BufferSize { .. })), "{error:?}");
    let mut other = vec![0u8; geometry.page_data_bytes as usize];
    let error =
        flash.read_pages(0, &pages[..2], &mut [&mut data[..], &mut other[..]], &mut spares[1..], &mut completions);
    assert!(matches!(error, Err(NandError::BufferSize { .. })), "{error:?}");
}
