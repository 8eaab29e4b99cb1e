//! `fsoc flash create|info`: make a simulated NAND device image and describe one (geometry,
//! capacity, wear, bad blocks). Functions return the text to print so main.rs stays thin.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use fsoc_media::image::ImageStore;
use fsoc_media::stats::EraseCountHistogram;
use fsoc_media::store::BadMark;
use fsoc_media::{Flash, Profile, SimConfig, SimFlash};

/// Creates a new image at `image` (which must not exist) for `chips` chips of `blocks` blocks
/// of the named profile, and returns its description.
pub fn create(image: &Path, profile: Profile, chips: u32, blocks: u32, seed: u64) -> Result<String, String> {
    if crate::volume_files::check_volume_path(image)? != crate::volume_files::PathKind::Missing {
        return Err(format!("{} exists; `fsoc flash create` makes a new image file", image.display()));
    }
    let config = SimConfig::new(profile, chips, blocks, seed);
    let mut flash = SimFlash::create_image(image, config).map_err(|error| format!("{}: {error}", image.display()))?;
    flash.flush().map_err(|error| format!("{}: {error}", image.display()))?;
    drop(flash);
    let description = info(image)?;
    Ok(format!("created {}\n{description}", image.display()))
}

/// Describes an existing image: geometry, profile, chips, capacity, wear and bad blocks.
pub fn info(image: &Path) -> Result<String, String> {
    // The one rule for mounted images: refused (the server holds an exclusive lock).
    let _lock = crate::volume_files::lock_image(image, false)?;
    let store = ImageStore::open(image).map_err(|error| crate::volume_files::describe_image_error(image, &error))?;
    let header = store.header();
    let geometry = header.geometry;
    let timing = header.profile.timing();
    let capacity_bytes = geometry.chip_data_bytes() * u64::from(header.chip_count);
    let metas = store.block_metas();
    let wear = EraseCountHistogram::from_erase_counts(metas.iter().map(|meta| meta.erase_count), 1);
    let factory_bad_count = metas.iter().filter(|meta| meta.bad_mark == BadMark::Factory).count();
    let grown_bad_count = metas.iter().filter(|meta| meta.bad_mark == BadMark::Grown).count();
    let erase_incomplete_count = metas.iter().filter(|meta| meta.erase_incomplete).count();
    let worn_count = metas.iter().filter(|meta| meta.erase_count >= header.endurance_cycles).count();
    let metadata = std::fs::metadata(image).map_err(|error| format!("{}: {error}", image.display()))?;

    let mut lines = vec![
        format!("profile:   {}", header.profile.name()),
        format!(
            "geometry:  {} chip(s) x {} blocks x {} pages x ({} + {} spare) bytes",
            header.chip_count,
            geometry.block_count,
            geometry.pages_per_block,
            geometry.page_data_bytes,
            geometry.spare_bytes
        ),
        format!(
            "capacity:  {} ({} bytes; {} per block)",
            human_bytes(capacity_bytes),
            capacity_bytes,
            human_bytes(geometry.block_data_bytes())
        ),
        format!(
            "timing:    read {} us, program {} us, erase {} us, bus {} ns/byte",
            timing.read_latency_ns / 1_000,
            timing.program_latency_ns / 1_000,
            timing.erase_latency_ns / 1_000,
            timing.bus_ns_per_byte
        ),
        format!(
            "ecc:       {} bits per 512 bytes; endurance {} cycles",
            header.ecc_correctable_bits_per_512, header.endurance_cycles
        ),
        format!("seed:      {:#x}", header.seed),
        format!(
            "wear:      erase count min {} / mean {:.1} / max {}; {} block(s) at or past endurance",
            wear.erase_count_min,
            wear.erase_count_mean(),
            wear.erase_count_max,
            worn_count
        ),
        format!(
            "bad:       {} block(s) ({} factory, {} grown); {} with an interrupted erase",
            factory_bad_count + grown_bad_count,
            factory_bad_count,
            grown_bad_count,
            erase_incomplete_count
        ),
        format!(
            "file:      {} long, {} on disk (sparse)",
            human_bytes(metadata.len()),
            human_bytes(metadata.blocks() * 512)
        ),
    ];
    lines.push(String::new());
    Ok(lines.join("\n"))
}

/// Bytes with a binary-unit suffix, e.g. "1.00 GiB".
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit_index = 0;
    while value >= 1024.0 && unit_index + 1 < UNITS.len() {
        value /= 1024.0;
        unit_index += 1;
    }
    let unit = UNITS.get(unit_index).copied().unwrap_or("bytes");
    if unit_index == 0 {
        format!("{bytes} {unit}")
    } else {
        format!("{value:.2} {unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path in the system temp directory unique to this process and test.
    fn scratch_path(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("fsoc-flash-cmd-{}-{name}.img", std::process::id()))
    }

    // Checks that create writes an image whose info reports the requested shape and a fresh
    // wear summary, and that a second create on the same path is refused.
    #[test]
    fn create_then_info() {
        let path = scratch_path("create");
        let _ = std::fs::remove_file(&path);
        let created = create(&path, Profile::Mlc8k, 2, 8, 7).expect("create");
        assert!(created.contains("profile:   mlc8k"), "{created}");
        assert!(created.contains("2 chip(s) x 8 blocks x 256 pages x (8192 + 448 spare) bytes"), "{created}");
        assert!(created.contains("capacity:  32.00 MiB"), "{created}");
        assert!(created.contains("erase count min 0 / mean 0.0 / max 0"), "{created}");
        assert!(create(&path, Profile::Mlc8k, 2, 8, 7).is_err(), "create must not overwrite");
        let described = info(&path).expect("info");
        assert!(described.contains("0 block(s) (0 factory, 0 grown)"), "{described}");
        std::fs::remove_file(&path).expect("cleanup");
    }

    #[test]
    fn bad_arguments_are_errors() {
        let path = scratch_path("bad");
        let _ = std::fs::remove_file(&path);
        assert!(create(&path, Profile::Slc, 1, 2, 0).is_err(), "too few blocks");
        assert!(info(&path).is_err(), "missing image");
    }

    #[test]
    fn human_bytes_units() {
        assert_eq!(human_bytes(512), "512 bytes");
        assert_eq!(human_bytes(1 << 30), "1.00 GiB");
        assert_eq!(human_bytes(3 << 19), "1.50 MiB");
    }
}
