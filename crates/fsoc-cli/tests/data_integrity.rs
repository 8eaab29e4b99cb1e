//! The corrupted-image experiment of issue 12, through the image tools as a user runs them: a
//! tree is put into an image, the image is copied, and in each copy the stored bytes of one
//! file data page in use are changed behind the simulated ECC's back (bit flips, or a 512-byte
//! overwrite). `fsoc get -r --keep-going` must never write bytes that differ from the source:
//! the damaged file is reported and left out, every other file comes out whole; `fsoc fsck`
//! must flag the copy. (fsoc-core's tests/data_checksums.rs runs 1,000 such copies in
//! process; this test shows the same through the command, on image files.)

#[path = "../../fsoc-core/tests/common/data_pages.rs"]
mod shared_pages;
mod support;

use std::fs;
use std::path::{Path, PathBuf};

use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::rng::SeededRng;
use fsoc_media::store::PageStore;
use fsoc_media::PageAddress;
use fsoc_media::SimFlash;
use support::fsoc;

/// Damaged copies made (the core test makes 1,000; each copy here costs two processes).
const COPIES: u64 = 40;

/// A source tree: files from a few bytes to several extents, in nested directories.
fn source_tree(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut rng = SeededRng::new(12);
    for index in 0..24u64 {
        let directory = root.join(format!("d{}", index % 4)).join(format!("e{}", index % 3));
        fs::create_dir_all(&directory).expect("mkdir");
        let size = [300usize, 2048, 5000, 20_000, 70_000, 200_000][index as usize % 6] + index as usize;
        let data: Vec<u8> = (0..size).map(|_| rng.next_u64() as u8).collect();
        let path = directory.join(format!("f{index}.bin"));
        fs::write(&path, &data).expect("write source");
        files.push((path.strip_prefix(root).expect("inside").to_path_buf(), data));
    }
    files
}

/// Every data page in use: (inode, physical page).
fn data_pages(image: &Path) -> Vec<(u64, PageAddress)> {
    let mut fs =
        FileSystem::mount(SimFlash::open_image(image).expect("open image"), FsConfig::default()).expect("mount");
    shared_pages::data_pages(&mut fs).into_iter().map(|(inode, _, page)| (inode, page)).collect()
}

#[test]
fn damaged_pages_never_reach_extracted_files_and_fsck_flags_them() {
    let directory = tempfile::tempdir().expect("tempdir");
    let source = directory.path().join("source");
    let files = source_tree(&source);
    let image = directory.path().join("tree.img");
    let image_arg = image.to_str().expect("utf-8");
    assert!(fsoc(&["mkfs", image_arg, "--size", "16M", "--seed", "4"]).status.success());
    let output = fsoc(&["put", "-r", source.to_str().expect("utf-8"), &format!("{image_arg}:/")]);
    assert!(output.status.success(), "put: {}", output.text());
    let output = fsoc(&["fsck", image_arg]);
    assert!(output.status.success() && output.stdout.contains(", 0 failing their checksum"), "{}", output.text());
    let pages = data_pages(&image);
    assert!(pages.len() > 100, "{} data pages", pages.len());

    let copy = directory.path().join("copy.img");
    let copy_arg = copy.to_str().expect("utf-8").to_string();
    let mut skipped_files = 0;
    for seed in 0..COPIES {
        let context = format!("copy {seed}");
        let mut rng = SeededRng::new(seed);
        fs::copy(&image, &copy).expect("copy image");
        let (_, page) = pages[rng.below(pages.len() as u64) as usize];
        {
            let mut flash = SimFlash::open_image(&copy).expect("open copy");
            let store = flash.store_mut();
            let geometry = store.geometry();
            let mut data = vec![0u8; geometry.page_data_bytes as usize];
            let mut spare = vec![0u8; geometry.spare_bytes as usize];
            store.read_contents(page, &mut data, &mut spare).expect("read page");
            if rng.below(2) == 0 {
                for _ in 0..1 + rng.below(8) {
                    let bit = rng.below(data.len() as u64 * 8) as usize;
                    data[bit / 8] ^= 1 << (bit % 8);
                }
            } else {
                let start = rng.below((data.len() - 512) as u64) as usize;
                data[start..start + 512].iter_mut().for_each(|byte| *byte = !*byte);
            }
            store.write_contents(page, &data, &spare).expect("write page");
            fsoc_media::Flash::flush(&mut flash).expect("flush");
        }
        let destination = directory.path().join(format!("out{seed}"));
        fs::create_dir_all(&destination).expect("destination");
        let output =
            fsoc(&["get", "-r", "--keep-going", &format!("{copy_arg}:/source"), destination.to_str().expect("utf-8")]);
        assert_eq!(output.status.code(), Some(2), "{context}: get must report the damaged file\n{}", output.text());
        let mut missing = 0;
        for (relative, data) in &files {
            match fs::read(destination.join("source").join(relative)) {
                Ok(bytes) => assert!(&bytes == data, "{context}: {} extracted with other bytes", relative.display()),
                Err(_) => missing += 1,
            }
        }
        assert_eq!(missing, 1, "{context}: exactly the damaged file is left out\n{}", output.text());
        skipped_files += missing;
        let output = fsoc(&["fsck", &copy_arg]);
        assert_eq!(output.status.code(), Some(1), "{context}: fsck must flag the copy\n{}", output.text());
        assert!(output.stdout.contains(", 1 failing their checksum"), "{context}: {}", output.text());
        fs::remove_dir_all(&destination).expect("clean up");
    }
    println!("{COPIES} damaged copies: {skipped_files} files refused, every other file extracted exact, fsck flagged every copy");
}
