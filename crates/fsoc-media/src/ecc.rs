//! ECC outcome model: which bit errors a BCH code correcting `t` bits per 512-byte sector
//! hides, and how the raw bit error rate (RBER) rises with wear.
//!
//! Sector layout: data byte `i` belongs to sector `i / 512`; the spare area is covered by the
//! last sector's code (controllers keep a few metadata bytes there under ECC), so a spare bit
//! error counts against the last sector. Bit positions are numbered over data then spare:
//! bit `p` is bit `p % 8` of byte `p / 8`, data bytes first.

use alloc::vec;

use fsoc_flash::convert::u32_from_u64;

use crate::geometry::Geometry;
use crate::rng::SeededRng;
use crate::ReadStatus;

/// Bytes of data protected by one ECC codeword.
pub const SECTOR_DATA_BYTES: u32 = 512;

/// Bits per byte, named so conversions between byte and bit positions are visible.
pub const BITS_PER_BYTE: u32 = 8;

/// Number of ECC sectors in a page of this geometry.
pub fn sector_count(geometry: &Geometry) -> u32 {
    geometry.page_data_bytes / SECTOR_DATA_BYTES
}

/// Number of bit positions in a page (data plus spare).
pub fn page_bit_count(geometry: &Geometry) -> u32 {
    (geometry.page_data_bytes + geometry.spare_bytes) * BITS_PER_BYTE
}

/// Sector that protects bit position `bit_position` (see the module comment).
pub fn sector_of_bit(geometry: &Geometry, bit_position: u32) -> u32 {
    let byte_index = bit_position / BITS_PER_BYTE;
    let last_sector_index = sector_count(geometry).saturating_sub(1);
    (byte_index / SECTOR_DATA_BYTES).min(last_sector_index)
}

/// Bit positions covered by sector `sector_index`: `start..end`.
pub fn sector_bit_range(geometry: &Geometry, sector_index: u32) -> (u32, u32) {
    let start = sector_index * SECTOR_DATA_BYTES * BITS_PER_BYTE;
    let last_sector_index = sector_count(geometry).saturating_sub(1);
    let end = if sector_index >= last_sector_index {
        page_bit_count(geometry)
    } else {
        start + SECTOR_DATA_BYTES * BITS_PER_BYTE
    };
    (start, end)
}

/// Decides the read status for a programmed page with errors at the given bit positions
/// (duplicates must already be removed: an erroneous cell is one error however it was caused).
pub fn classify(geometry: &Geometry, correctable_bits_per_sector: u32, error_positions: &[u32]) -> ReadStatus {
    if error_positions.is_empty() {
        return ReadStatus::Clean;
    }
    let mut per_sector = vec![0u32; sector_count(geometry) as usize];
    for &position in error_positions {
        let sector_index = sector_of_bit(geometry, position) as usize;
        if let Some(count) = per_sector.get_mut(sector_index) {
            *count += 1;
        }
    }
    let max_per_sector = per_sector.iter().copied().max().unwrap_or(0);
    if max_per_sector > correctable_bits_per_sector {
        return ReadStatus::Uncorrectable;
    }
    let bits = per_sector.iter().sum();
    ReadStatus::Corrected { bits, max_per_sector }
}

/// Raw bit error rate as a function of wear:
/// `rber(n) = base + growth × (n / endurance)^exponent`.
///
/// Defaults (with t = 4 per 512-byte sector, ~4.2 kbit per sector with its spare share):
/// - fresh block: rber = 1e-9, about 4e-6 expected errors per sector, so a correction is a
///   one-in-100k-reads event and an uncorrectable sector (5 errors) essentially never happens;
/// - at rated endurance: rber ≈ 5e-6, about 0.02 errors per sector, so a few percent of reads
///   report corrected bits and uncorrectable reads stay below 1e-10;
/// - at 2× endurance rber = 8e-5 (0.33 per sector, uncorrectable ~1e-5 per sector);
/// - at 3× endurance rber ≈ 4e-4 (1.7 per sector): most reads need correction and a few
///   percent of sectors are uncorrectable.
///
/// The fourth power follows the steep late-life growth of MLC RBER curves in published
/// characterisations; it is an assumption, chosen to give the three regimes above.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BitErrorModel {
    /// False disables transient (wear) errors entirely; injected and torn errors still apply.
    pub enabled: bool,
    pub base_rber: f64,
    pub growth_rber: f64,
    pub wear_exponent: u32,
}

impl Default for BitErrorModel {
    fn default() -> Self {
        BitErrorModel { enabled: true, base_rber: 1e-9, growth_rber: 5e-6, wear_exponent: 4 }
    }
}

impl BitErrorModel {
    /// No transient errors: reads of intact pages are always Clean.
    pub fn disabled() -> Self {
        BitErrorModel { enabled: false, ..BitErrorModel::default() }
    }

    /// RBER for a block with `erase_count` erases and the given rated endurance.
    pub fn rber(&self, erase_count: u32, endurance_cycles: u32) -> f64 {
        if !self.enabled {
            return 0.0;
        }
        let wear_fraction = f64::from(erase_count) / f64::from(endurance_cycles.max(1));
        let mut wear_power = 1.0;
        for _ in 0..self.wear_exponent {
            wear_power *= wear_fraction;
        }
        self.base_rber + self.growth_rber * wear_power
    }

    /// Samples transient error positions for one read and appends them to `positions`. Each
    /// sector gets a Poisson count with mean `rber × sector bits`; positions are uniform in the
    /// sector. The count is capped at `2 × t + 2` per sector: beyond t + 1 the outcome is the
    /// same, and the cap bounds the work on a hopelessly worn block.
    pub fn sample_errors(
        &self,
        rng: &mut SeededRng,
        geometry: &Geometry,
        rber: f64,
        correctable_bits_per_sector: u32,
        positions: &mut alloc::vec::Vec<u32>,
    ) {
        if rber <= 0.0 {
            return;
        }
        let cap = 2 * correctable_bits_per_sector + 2;
        for sector_index in 0..sector_count(geometry) {
            let (start, end) = sector_bit_range(geometry, sector_index);
            let mean = rber * f64::from(end - start);
            let count = rng.poisson(mean, cap);
            for _ in 0..count {
                // Below `end - start`, a u32.
                positions.push(start + u32_from_u64(rng.below(u64::from(end - start))));
            }
        }
    }
}

/// Flips the given bit positions in a data+spare pair (positions past the end are ignored;
/// the simulator only produces in-range positions).
pub fn apply_bit_flips(positions: &[u32], data: &mut [u8], spare: &mut [u8]) {
    let data_bit_count = data.len() as u64 * u64::from(BITS_PER_BYTE);
    for &position in positions {
        let position = u64::from(position);
        let (area, bit_index) =
            if position < data_bit_count { (&mut *data, position) } else { (&mut *spare, position - data_bit_count) };
        let byte_index = usize::try_from(bit_index / u64::from(BITS_PER_BYTE)).ok();
        if let Some(byte) = byte_index.and_then(|index| area.get_mut(index)) {
            *byte ^= 1 << (bit_index % u64::from(BITS_PER_BYTE));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Profile;

    fn slc() -> Geometry {
        Profile::Slc.geometry(16)
    }

    #[test]
    fn sector_mapping_puts_spare_in_last_sector() {
        let geometry = slc();
        assert_eq!(sector_count(&geometry), 4);
        assert_eq!(sector_of_bit(&geometry, 0), 0);
        assert_eq!(sector_of_bit(&geometry, 512 * 8), 1);
        assert_eq!(sector_of_bit(&geometry, 2048 * 8 + 5), 3);
        assert_eq!(sector_bit_range(&geometry, 3), (3 * 4096, (2048 + 64) * 8));
    }

    // Checks the t / t+1 threshold in one sector and that errors spread over sectors add up.
    #[test]
    fn classify_thresholds() {
        let geometry = slc();
        assert_eq!(classify(&geometry, 4, &[]), ReadStatus::Clean);
        assert_eq!(classify(&geometry, 4, &[1, 2, 3, 4]), ReadStatus::Corrected { bits: 4, max_per_sector: 4 });
        assert_eq!(classify(&geometry, 4, &[1, 2, 3, 4, 5]), ReadStatus::Uncorrectable);
        let spread = [1, 2, 3, 4, 4097, 4098, 4099, 4100, 8193];
        assert_eq!(classify(&geometry, 4, &spread), ReadStatus::Corrected { bits: 9, max_per_sector: 4 });
    }

    // Checks the documented RBER regimes: tiny when fresh, rising steeply past endurance.
    #[test]
    fn rber_rises_with_wear() {
        let model = BitErrorModel::default();
        let fresh = model.rber(0, 10_000);
        let rated = model.rber(10_000, 10_000);
        let triple = model.rber(30_000, 10_000);
        assert!(fresh < 2e-9, "fresh rber {fresh}");
        assert!((5e-6..6e-6).contains(&rated), "rated rber {rated}");
        assert!(triple > 3e-4, "3x rber {triple}");
        assert_eq!(BitErrorModel::disabled().rber(30_000, 10_000), 0.0);
    }

    #[test]
    fn apply_bit_flips_reaches_spare() {
        let mut data = [0u8; 4];
        let mut spare = [0u8; 2];
        apply_bit_flips(&[0, 9, 32, 47], &mut data, &mut spare);
        assert_eq!(data, [1, 2, 0, 0]);
        assert_eq!(spare, [1, 0x80]);
    }
}
