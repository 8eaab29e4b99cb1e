//! `fsoc rebuild`: writes a lost chip of a volume with redundancy (`mkfs --redundancy parity`)
//! again from the other chips (`fsoc_core::txn::rebuild_chip`), offline, then mounts the volume
//! to check that it is whole and runs fsck on it.
//!
//! Where the new chip is, by kind of volume: in an image file (every chip in one file), chip
//! K's part of the file, rebuilt in place; in an array of chip files, `BASE.chipK` (rebuilt in
//! place), or a blank chip file made for it when it is missing, or the `--replacement` file;
//! on MTD raw NAND, the device in position K of the list.
//!
//! Invariants: every file of the volume (and the new chip's) is locked exclusively for the
//! whole rebuild, so no mount or tool sees a chip half written; nothing is erased unless every
//! other chip is in place (holds a readable superblock of the same volume naming its own
//! position: `check_other_chips`), since a chip rebuilt while a second one is lost would be
//! written from nothing; the volume's other chips are only read (the core's rule), so an
//! interrupted rebuild can be run again; a chip file this command creates is written under a
//! name no volume uses (the replacement's own, or a hidden temporary beside the array) and
//! renamed to `BASE.chipK` only once its rebuild is complete, so until then the array stays as
//! it was (degraded) rather than showing a chip half rebuilt.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use fsoc_array::{chip_file_path, create_blank_chip_file, ArrayConfig, ThreadedFlash};
use fsoc_core::txn::{rebuild_chip, RebuildReport, Superblock};
use fsoc_media::{Flash, PageAddress, ReadStatus, SimFlash};
use indicatif::{ProgressBar, ProgressStyle};

use crate::volume_files::{self, ImageLock, OpenVolume, PathKind, VolumeFiles};

/// Largest chip position an array's files are looked for at (the superblock's limit).
const CHIP_COUNT_MAX: u32 = fsoc_core::txn::superblock::CHIP_COUNT_MAX;

/// `fsoc rebuild VOLUME --chip K [--replacement NEW]`: answers whether the volume came out
/// whole and clean (every page rebuilt, mounted with every chip, fsck without violations).
pub fn rebuild(volume: &Path, chip: u32, replacement: Option<&Path>) -> Result<bool, String> {
    if let Some(base) = array_base(volume) {
        return rebuild_array(&base, chip, replacement);
    }
    let files = VolumeFiles::locate(volume);
    let name = files.name().to_path_buf();
    if replacement.is_some() {
        return Err(match files {
            VolumeFiles::Mtd { .. } => format!(
                "{}: --replacement names a new chip file of an array; on MTD the new chip is the device in \
                 position {chip} of the list: put it there and run without --replacement",
                name.display()
            ),
            _ => format!(
                "{}: an image file holds every chip of its volume, so chip {chip} is rebuilt in place (its part of \
                 the file is erased and written again); --replacement is for arrays of chip files (fsoc array mkfs)",
                name.display()
            ),
        });
    }
    let locks = files.lock(true)?;
    let flash = volume_files::open_flash(&files, false)?;
    let others: Vec<(u32, Option<Superblock>)> = (0..flash.chip_count())
        .filter(|&other| other != chip)
        .map(|other| (other, superblock_on(&flash, other)))
        .collect();
    let checked = check_position(&name, chip, flash.chip_count())
        .and_then(|()| check_other_chips(&name, chip, flash.chip_count(), &others));
    if let Err(refusal) = checked {
        let _ = flash.close();
        return Err(refusal);
    }
    let (flash, result) = run_rebuild(flash, chip, &name);
    let closed = flash.close().map_err(|error| format!("{}: close: {error}", name.display()));
    let report = result?;
    closed?;
    drop(locks);
    print_report(&name, chip, &report);
    verify(&name, &report)
}

/// Refuses a chip position the volume does not have.
fn check_position(name: &Path, chip: u32, chip_count: u32) -> Result<(), String> {
    if chip < chip_count {
        return Ok(());
    }
    Err(format!(
        "{}: --chip {chip}: the volume has {chip_count} chip(s), numbered 0 to {}",
        name.display(),
        chip_count.saturating_sub(1)
    ))
}

/// Refuses to rebuild chip `chip` of a volume of `chip_count` chips unless every other chip is
/// in place: `others` (each other position with the superblock it holds, if any) must all hold
/// a superblock of one volume of `chip_count` chips, each naming its own position. A chip is
/// rebuilt from all the others, so with a second chip blank, dead, damaged, foreign or out of
/// order the rebuild would erase chip `chip` and write it from nothing: two chips lost instead
/// of one (as when the wrong position is given). Nothing has been written when this refuses.
fn check_other_chips(
    name: &Path,
    chip: u32,
    chip_count: u32,
    others: &[(u32, Option<Superblock>)],
) -> Result<(), String> {
    let refuse = |what: String| {
        Err(format!(
            "{}: cannot rebuild chip {chip}: {what}; a chip is rebuilt from all the others, so they must all be in \
             place; nothing was written",
            name.display()
        ))
    };
    let Some((reference_position, reference)) =
        others.iter().find_map(|(position, superblock)| superblock.as_ref().map(|superblock| (*position, superblock)))
    else {
        return refuse(format!("no chip other than chip {chip} holds a readable fsoc superblock"));
    };
    if reference.chip_count != chip_count {
        return refuse(format!(
            "chip {reference_position} says the volume has {} chips, but {chip_count} were given",
            reference.chip_count
        ));
    }
    for (position, superblock) in others {
        let Some(superblock) = superblock else {
            return refuse(format!(
                "chip {position} holds no readable fsoc superblock either (blank, dead or damaged); if chip {position} \
                 is the lost one, rebuild it instead: `fsoc rebuild {} --chip {position}`",
                name.display()
            ));
        };
        if superblock.volume_id != reference.volume_id {
            return refuse(format!(
                "chip {position} belongs to volume {:#018x}, chip {reference_position} to {:#018x}: chips from \
                 different volumes",
                superblock.volume_id, reference.volume_id
            ));
        }
        if superblock.chip_index != *position || superblock.chip_count != chip_count {
            return refuse(format!(
                "the chip in position {position} is chip {} of {} of its volume: give the volume's chips in chip order",
                superblock.chip_index, superblock.chip_count
            ));
        }
    }
    Ok(())
}

/// The base of the chip-file array `path` names, even when some of its chip files (chip 0's
/// included) are missing: `path` as a chip file `BASE.chipN`, or a `BASE` that does not exist
/// beside at least one `BASE.chipN`. `None` for an image file or MTD.
fn array_base(path: &Path) -> Option<PathBuf> {
    if volume_files::mtd_devices(path).is_some() {
        return None;
    }
    if let Some(base) = volume_files::array_base(path) {
        return Some(base);
    }
    let has_chip_files = |base: &Path| (0..CHIP_COUNT_MAX).any(|chip| chip_file_path(base, chip).exists());
    let chip_base = volume_files::chip_file_base(path).filter(|base| has_chip_files(base));
    chip_base.or_else(|| (!path.exists() && has_chip_files(path)).then(|| path.to_path_buf()))
}

/// The superblock a chip file holds (see `superblock_on`).
fn chip_superblock(path: &Path) -> Option<Superblock> {
    superblock_on(&SimFlash::open_image(path).ok()?, 0)
}

/// The superblock chip `chip` of `flash` holds: copy 0 or copy 1, pages 0 and 1 of the chip's
/// block 0 (docs/FORMAT.md, "Superblock"); `None` when neither reads back and decodes (a blank,
/// dead or damaged chip).
fn superblock_on<F: Flash>(flash: &F, chip: u32) -> Option<Superblock> {
    let geometry = flash.geometry();
    let mut data = vec![0u8; geometry.page_data_bytes as usize];
    let mut spare = vec![0u8; geometry.spare_bytes as usize];
    (0..2).find_map(|page_index| {
        let status = flash.read_page(0, PageAddress::new(chip, 0, page_index), &mut data, &mut spare).ok()?.value;
        match status {
            ReadStatus::Clean | ReadStatus::Corrected { .. } => Superblock::decode(&data).ok(),
            ReadStatus::Erased | ReadStatus::Uncorrectable => None,
        }
    })
}

/// `path` with `suffix` added to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// The file system a path is on (of its directory, for a path that does not exist yet).
fn file_system_of(path: &Path) -> Option<u64> {
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    std::fs::metadata(directory).ok().map(|metadata| metadata.dev())
}

/// Where an array's new chip is written, and what becomes of it after the rebuild.
struct NewChip {
    /// The file rebuilt in position K.
    path: PathBuf,
    /// Made by this command (removed again if the rebuild fails).
    created: bool,
}

/// Rebuilds chip `chip` of the array `base` (see the module's description).
fn rebuild_array(base: &Path, chip: u32, replacement: Option<&Path>) -> Result<bool, String> {
    let present: Vec<u32> = (0..CHIP_COUNT_MAX).filter(|&index| chip_file_path(base, index).exists()).collect();
    for &index in &present {
        volume_files::check_volume_path(&chip_file_path(base, index))?;
    }
    let mut locks: Vec<ImageLock> = present
        .iter()
        .map(|&index| volume_files::lock_image(&chip_file_path(base, index), true))
        .collect::<Result<_, _>>()?;
    // The volume's description, from a chip other than the one to rebuild (which may be blank,
    // foreign or damaged).
    let others: Vec<u32> = present.iter().copied().filter(|&index| index != chip).collect();
    let (model, superblock) = others
        .iter()
        .find_map(|&index| chip_superblock(&chip_file_path(base, index)).map(|superblock| (index, superblock)))
        .ok_or_else(|| {
            format!(
                "{}: no chip file other than chip {chip}'s holds a readable fsoc superblock: there is nothing to \
                 rebuild chip {chip} from",
                base.display()
            )
        })?;
    let chip_count = superblock.chip_count;
    check_position(base, chip, chip_count)?;
    let absent: Vec<String> = (0..chip_count)
        .filter(|&index| index != chip && !present.contains(&index))
        .map(|index| chip_file_path(base, index).display().to_string())
        .collect();
    if !absent.is_empty() {
        return Err(format!(
            "{}: {} missing too: a chip is rebuilt from all the others, so only one may be lost; put the others back \
             first",
            base.display(),
            absent.join(", ")
        ));
    }
    if let Some(&extra) = present.iter().find(|&&index| index >= chip_count) {
        return Err(format!(
            "{}: not a chip of this volume, which has {chip_count} chips (0 to {}): move it away first",
            chip_file_path(base, extra).display(),
            chip_count - 1
        ));
    }
    let in_place: Vec<(u32, Option<Superblock>)> = (0..chip_count)
        .filter(|&index| index != chip)
        .map(|index| (index, chip_superblock(&chip_file_path(base, index))))
        .collect();
    check_other_chips(base, chip, chip_count, &in_place)?;
    let old = chip_file_path(base, chip);
    let failed = with_suffix(&old, ".failed");
    let model = chip_file_path(base, model);
    let new_chip = match replacement {
        Some(new) => {
            if volume_files::array_base(new).as_deref() == Some(base) || new == old {
                return Err(format!(
                    "{}: --replacement is a chip file of {} itself; name a new file (it takes chip {chip}'s place)",
                    new.display(),
                    base.display()
                ));
            }
            if old.exists() && failed.exists() {
                return Err(format!(
                    "{}: exists; the old chip file is kept there after the rebuild: move it away first",
                    failed.display()
                ));
            }
            if file_system_of(new) != file_system_of(&old) {
                return Err(format!(
                    "{}: not on the same file system as {}: the rebuilt chip is renamed to {}, so put the new chip \
                     file beside the others",
                    new.display(),
                    base.display(),
                    old.display()
                ));
            }
            match volume_files::check_volume_path(new)? {
                PathKind::Missing => {
                    create_blank_chip_file(new, &model).map_err(|error| format!("{}: {error}", new.display()))?;
                    NewChip { path: new.to_path_buf(), created: true }
                }
                PathKind::Regular => NewChip { path: new.to_path_buf(), created: false },
                PathKind::Mtd => {
                    return Err(format!(
                        "{}: an MTD device cannot replace a chip file; --replacement names a chip file",
                        new.display()
                    ))
                }
            }
        }
        // In place: the chip file is there (damaged, blank or whole).
        None if old.exists() => NewChip { path: old.clone(), created: false },
        None => {
            let file_name = old.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
            let temporary = old.with_file_name(format!(".{file_name}.rebuild-{}", std::process::id()));
            let _ = std::fs::remove_file(&temporary);
            create_blank_chip_file(&temporary, &model).map_err(|error| format!("{}: {error}", temporary.display()))?;
            NewChip { path: temporary, created: true }
        }
    };
    let rebuilt = (|| {
        if new_chip.path != old {
            locks.push(volume_files::lock_image(&new_chip.path, true)?);
        }
        let paths: Vec<PathBuf> = (0..chip_count)
            .map(|index| if index == chip { new_chip.path.clone() } else { chip_file_path(base, index) })
            .collect();
        let flash = ThreadedFlash::open_files(&paths, ArrayConfig::default())
            .map_err(|error| format!("{}: {error}", base.display()))?;
        let (flash, result) = run_rebuild(flash, chip, base);
        let closed = flash.close().map_err(|error| format!("{}: close: {error}", base.display()));
        let report = result?;
        closed?;
        Ok(report)
    })();
    let report = match rebuilt {
        Ok(report) => report,
        Err(message) => {
            if new_chip.created {
                let _ = std::fs::remove_file(&new_chip.path);
            }
            return Err(message);
        }
    };
    print_report(base, chip, &report);
    if new_chip.path != old {
        install(&new_chip.path, &old, replacement.is_some().then_some(failed.as_path()))?;
    }
    drop(locks);
    verify(base, &report)
}

/// Puts the rebuilt chip file `new` in its place `old`, keeping a replaced `old` as `failed`
/// (with --replacement; a missing chip has nothing to keep).
fn install(new: &Path, old: &Path, failed: Option<&Path>) -> Result<(), String> {
    let kept = match failed {
        Some(failed) if old.exists() => {
            std::fs::rename(old, failed).map_err(|error| format!("{}: {error}", old.display()))?;
            Some(failed)
        }
        _ => None,
    };
    if let Err(error) = std::fs::rename(new, old) {
        // Put the old chip back so the array is as it was; the rebuilt chip stays where it is.
        if let Some(failed) = kept {
            let _ = std::fs::rename(failed, old);
        }
        return Err(format!(
            "{}: cannot rename to {}: {error}; the rebuilt chip is {}: move it there yourself",
            new.display(),
            old.display(),
            new.display()
        ));
    }
    match kept {
        Some(failed) => println!(
            "{}: the rebuilt chip ({} renamed); the old chip file is kept as {}",
            old.display(),
            new.display(),
            failed.display()
        ),
        None => println!("{}: the rebuilt chip (it was missing)", old.display()),
    }
    Ok(())
}

/// Rebuilds chip `chip` on `flash` under a progress bar of segments done.
fn run_rebuild<F: Flash>(flash: F, chip: u32, name: &Path) -> (F, Result<RebuildReport, String>) {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("rebuilding chip {msg} [{bar:40}] {pos}/{len} segments ({eta})")
            .unwrap_or(ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(chip.to_string());
    let (flash, result) = rebuild_chip(flash, chip, &mut |done, total| {
        bar.set_length(u64::from(total));
        bar.set_position(u64::from(done));
    });
    bar.finish_and_clear();
    (flash, result.map_err(|error| format!("{}: {error}", name.display())))
}

/// Prints what the rebuild did, and warns of pages that could not be rebuilt.
fn print_report(name: &Path, chip: u32, report: &RebuildReport) {
    println!(
        "{}: chip {chip} rebuilt from the other chips: {} pages written ({} read), {} rows left unsealed (written \
         after the last commit: nothing committed there), {} bad blocks on the new chip",
        name.display(),
        report.pages_written,
        report.pages_read,
        report.unsealed_rows,
        report.bad_blocks
    );
    if report.bad_blocks > 0 {
        println!(
            "note: {} blocks of the new chip could not be erased (marked bad): their segments held nothing for chip \
             {chip} (a block that had pages to hold stops the rebuild), and the log retires them when it next uses \
             them",
            report.bad_blocks
        );
    }
    if report.unrecoverable_pages > 0 {
        println!(
            "warning: {} pages could not be rebuilt (a page of their row on another chip is unreadable too): \
             committed data on them is lost; fsck below says where",
            report.unrecoverable_pages
        );
    }
}

/// Mounts the rebuilt volume to check it has every chip, then runs fsck (which prints its
/// result); answers whether all is well.
fn verify(name: &Path, report: &RebuildReport) -> Result<bool, String> {
    let OpenVolume { files, fs, locks } = volume_files::open(name, true, false)?;
    let missing = fs.missing_chip();
    volume_files::close(fs, files.name())?;
    drop(locks);
    match missing {
        None => println!("{}: mounted whole: every chip is present", name.display()),
        Some(chip) => {
            println!("{}: still degraded: chip {chip} is missing or unreadable after the rebuild", name.display())
        }
    }
    let clean = crate::volume_cmd::fsck(name, true)?;
    Ok(missing.is_none() && clean && report.unrecoverable_pages == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fsoc_core::segment::Redundancy;
    use fsoc_core::FileSystem;
    use fsoc_media::{ChipIndex, Profile, RamStore, SimConfig};

    /// A volume of three chips with parity, formatted in RAM.
    fn parity_flash() -> SimFlash<RamStore> {
        let flash = SimFlash::create(SimConfig::new(Profile::Slc, 3, 64, 1)).expect("flash");
        let config = crate::volume_cmd::format_config(Redundancy::Parity);
        FileSystem::format(flash, config, 0x5eed).expect("format").unmount().expect("unmount")
    }

    fn others(flash: &SimFlash<RamStore>, chip: u32) -> Vec<(u32, Option<Superblock>)> {
        (0..flash.chip_count())
            .filter(|&other| other != chip)
            .map(|other| (other, superblock_on(flash, other)))
            .collect()
    }

    /// With chip 1 blank, a rebuild of chip 1 may run, and one of chip 2 (the wrong position)
    /// is refused, naming chip 1: it would erase chip 2 and write it from nothing.
    #[test]
    fn a_rebuild_needs_every_other_chip_in_place() {
        let mut flash = parity_flash();
        let name = Path::new("/dev/mtd0,/dev/mtd1,/dev/mtd2");
        for chip in 0..3 {
            assert_eq!(superblock_on(&flash, chip).map(|superblock| superblock.chip_index), Some(chip));
            check_other_chips(name, chip, 3, &others(&flash, chip)).expect("whole: any chip may be rebuilt");
        }
        flash.replace_chip(ChipIndex(1)).expect("blank chip 1");
        assert_eq!(superblock_on(&flash, 1), None);
        check_other_chips(name, 1, 3, &others(&flash, 1)).expect("the blank chip is the one rebuilt");
        let refusal = check_other_chips(name, 2, 3, &others(&flash, 2)).expect_err("chip 1 is lost too");
        assert!(refusal.contains("chip 1 holds no readable fsoc superblock"), "{refusal}");
        assert!(refusal.contains("fsoc rebuild /dev/mtd0,/dev/mtd1,/dev/mtd2 --chip 1"), "{refusal}");
        assert!(refusal.contains("nothing was written"), "{refusal}");
        flash.fail_chip(ChipIndex(0)).expect("chip 0 dead");
        let refusal = check_other_chips(name, 1, 3, &others(&flash, 1)).expect_err("chip 0 is dead");
        assert!(refusal.contains("chip 0 holds no readable fsoc superblock"), "{refusal}");
    }

    /// A chip of another volume, a chip out of order and a chip count other than the volume's
    /// are refused, each by what is wrong.
    #[test]
    fn foreign_misplaced_and_missing_chips_are_refused() {
        let flash = parity_flash();
        let name = Path::new("volume");
        let whole = others(&flash, 1);
        let superblock = |position: usize| whole[position].1.expect("superblock");
        let foreign = [(0, Some(superblock(0))), (2, Some(Superblock { volume_id: 7, ..superblock(1) }))];
        let refusal = check_other_chips(name, 1, 3, &foreign).expect_err("foreign chip");
        assert!(refusal.contains("chip 2 belongs to volume 0x0000000000000007"), "{refusal}");
        let swapped = [(0, Some(superblock(1))), (2, Some(superblock(0)))];
        let refusal = check_other_chips(name, 1, 3, &swapped).expect_err("out of order");
        assert!(refusal.contains("the chip in position 0 is chip 2 of 3"), "{refusal}");
        let refusal = check_other_chips(name, 1, 2, &whole[..1]).expect_err("a chip short");
        assert!(refusal.contains("the volume has 3 chips, but 2 were given"), "{refusal}");
        let refusal = check_other_chips(name, 1, 3, &[(0, None), (2, None)]).expect_err("nothing to rebuild from");
        assert!(refusal.contains("no chip other than chip 1 holds a readable fsoc superblock"), "{refusal}");
    }
}
