//! The command line's value parsers, shared by every command that takes the value: each
//! refuses a bad value while clap parses, with one message that states what is valid, so no
//! command parses or checks it again.

use fsoc_media::Profile;
use fsoc_sim::workloads::Workload;

/// Erase blocks per chip any simulated chip may have (fsoc-media's `Geometry::validate`).
const BLOCK_COUNT_MIN: u32 = 4;
const BLOCK_COUNT_MAX: u32 = 1 << 24;

/// `--profile`: one of the simulator's NAND profiles.
pub fn profile(text: &str) -> Result<Profile, String> {
    Profile::from_name(text).ok_or_else(|| {
        let names: Vec<&str> = Profile::ALL.iter().map(|profile| profile.name()).collect();
        format!("unknown profile {text:?}: give one of {}", names.join(", "))
    })
}

/// The workloads `--workload` names: `all`, or one of fsoc-sim's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workloads(pub Vec<Workload>);

/// `--workload`: `all` or one of fsoc-sim's workloads.
pub fn workloads(text: &str) -> Result<Workloads, String> {
    if text == "all" {
        return Ok(Workloads(Workload::ALL.to_vec()));
    }
    match Workload::from_name(text) {
        Some(workload) => Ok(Workloads(vec![workload])),
        None => {
            let names: Vec<&str> = Workload::ALL.iter().map(|workload| workload.name()).collect();
            Err(format!("unknown workload {text:?}: give all or one of {}", names.join(", ")))
        }
    }
}

/// `--chips`: 1 to 64 (what the superblock allows).
pub fn chip_count(text: &str) -> Result<u32, String> {
    let max = fsoc_core::txn::superblock::CHIP_COUNT_MAX;
    match text.parse::<u32>() {
        Ok(count) if (1..=max).contains(&count) => Ok(count),
        _ => Err(format!("{text} is not a chip count: give 1 to {max}")),
    }
}

/// `--blocks`: what any chip may have (4 to 2^24 erase blocks). Whether a volume fits is the
/// format's rule, which depends on the profile and chips; the commands check it and state it.
pub fn block_count(text: &str) -> Result<u32, String> {
    let (min, max) = (BLOCK_COUNT_MIN, BLOCK_COUNT_MAX);
    // The same range as the simulator's own rule, checked on both ends.
    for (blocks, valid) in [(min - 1, false), (min, true), (max, true), (max + 1, false)] {
        assert_eq!(
            Profile::Mlc.geometry(blocks).validate().is_ok(),
            valid,
            "block range drifted from Geometry::validate at {blocks}"
        );
    }
    match text.parse::<u32>() {
        Ok(count) if (min..=max).contains(&count) => Ok(count),
        _ => Err(format!("{text} is not a block count: give {min} to {max} erase blocks per chip")),
    }
}

/// `--volume-id`: decimal or 0x-prefixed hex, not zero.
pub fn volume_id(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    match parsed {
        Ok(0) => Err("the volume id must not be 0".into()),
        Ok(id) => Ok(id),
        Err(_) => Err(format!("{text:?} is not a number (decimal, or hex with 0x)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each parser accepts its valid values and names them when it refuses one.
    #[test]
    fn refusals_state_what_is_valid() {
        assert_eq!(profile("mlc8k"), Ok(Profile::Mlc8k));
        assert!(profile("qlc").unwrap_err().contains("give one of slc, mlc, tlc, mlc8k, mlc16k"));
        assert_eq!(workloads("all").map(|workloads| workloads.0.len()), Ok(Workload::ALL.len()));
        assert_eq!(workloads("churn"), Ok(Workloads(vec![Workload::Churn])));
        assert!(workloads("nope").unwrap_err().contains("give all or one of small-files"));
        assert_eq!(chip_count("64"), Ok(64));
        assert!(chip_count("0").unwrap_err().contains("give 1 to 64"));
        assert_eq!(block_count("4"), Ok(4));
        assert!(block_count("3").unwrap_err().contains("give 4 to 16777216"));
        assert_eq!(volume_id("0x1f"), Ok(31));
        assert!(volume_id("0").is_err());
    }
}
