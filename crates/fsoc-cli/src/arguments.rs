//! The command line's value parsers, shared by every command that takes the value: each
//! refuses a bad value while clap parses, with one message that states what is valid, so no
//! command parses or checks it again.

use fsoc_core::segment::Redundancy;
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

/// `--redundancy`: none, parity or mirror-meta. Whether a volume can have the mode (chips, a
/// mode not built yet) is the format's rule, which the commands check and state.
pub fn redundancy(text: &str) -> Result<Redundancy, String> {
    Redundancy::from_name(text).ok_or_else(|| {
        let names: Vec<&str> =
            [Redundancy::None, Redundancy::Parity, Redundancy::MirrorMeta].iter().map(|mode| mode.name()).collect();
        format!("unknown redundancy {text:?}: give one of {}", names.join(", "))
    })
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

/// A map of user or group ids (`--uid-map`, `--gid-map`): ranges `FROM:TO[:COUNT]`, each
/// taking the COUNT ids from FROM on to the COUNT ids from TO on (as /etc/subuid and
/// newuidmap count them); an id no range names stays as it is. The first range that names an
/// id wins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdMap {
    /// (first id mapped, first id it becomes, how many).
    ranges: Vec<(u32, u32, u32)>,
}

impl IdMap {
    /// The id `id` becomes.
    pub fn map(&self, id: u32) -> u32 {
        self.ranges
            .iter()
            .find(|&&(from, _, count)| id >= from && id - from < count)
            .map_or(id, |&(from, to, _)| to + (id - from))
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

/// `--uid-map`, `--gid-map`: comma-separated `FROM:TO[:COUNT]` ranges of ids (COUNT 1 when
/// left out), e.g. `1000:0` or `1000:0,100000:1:65536`; no range may run past 2^32 - 2.
pub fn id_map(text: &str) -> Result<IdMap, String> {
    let mut ranges = Vec::new();
    for part in text.split(',').map(str::trim).filter(|part| !part.is_empty()) {
        let fields: Vec<&str> = part.split(':').collect();
        let number = |field: &str| field.trim().parse::<u32>().ok();
        let parsed = match fields[..] {
            [from, to] => number(from).zip(number(to)).map(|(from, to)| (from, to, 1)),
            [from, to, count] => {
                number(from).zip(number(to)).zip(number(count)).map(|((from, to), count)| (from, to, count))
            }
            _ => None,
        };
        let Some((from, to, count)) = parsed else {
            return Err(format!("{part:?} is not an id range: give FROM:TO or FROM:TO:COUNT, e.g. 1000:0"));
        };
        // u32::MAX is the "no id" value of chown(2): no range may reach it.
        if count == 0
            || u64::from(from) + u64::from(count) > u64::from(u32::MAX)
            || u64::from(to) + u64::from(count) > u64::from(u32::MAX)
        {
            return Err(format!("{part:?}: COUNT must be at least 1 and the ids stay below {}", u32::MAX));
        }
        ranges.push((from, to, count));
    }
    if ranges.is_empty() {
        return Err("give at least one FROM:TO range, e.g. 1000:0".into());
    }
    Ok(IdMap { ranges })
}

/// `--free-margin`: a whole percentage, 0 to 90.
pub fn free_margin(text: &str) -> Result<u32, String> {
    match text.trim().trim_end_matches('%').parse::<u32>() {
        Ok(percent) if percent <= 90 => Ok(percent),
        _ => Err(format!("{text} is not a margin: give a percentage of the volume to keep free, 0 to 90")),
    }
}

/// `--nvram-technology`: feram, mram or pcm.
pub fn nvram_technology(text: &str) -> Result<fsoc_media::NvramTechnology, String> {
    fsoc_media::NvramTechnology::from_name(&text.to_ascii_lowercase())
        .ok_or_else(|| format!("{text} is not an NVRAM technology: give feram, mram or pcm"))
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
        let map = id_map("1000:0, 100000:1:3").expect("two ranges");
        assert_eq!(
            (map.map(1000), map.map(1001), map.map(100000), map.map(100002), map.map(100003)),
            (0, 1001, 1, 3, 100003)
        );
        for bad in ["", "1000", "a:b", "1:2:0", "1:2:3:4", "4294967290:0:10"] {
            assert!(id_map(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(free_margin("20%"), Ok(20));
        assert!(free_margin("95").unwrap_err().contains("0 to 90"));
    }
}
