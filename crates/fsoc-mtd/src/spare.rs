//! fsoc's spare bytes in the free OOB bytes, with their own CRC-32C. The kernel's ECC covers
//! the page data but, for its software Hamming and BCH engines and many hardware ones, not
//! the free OOB bytes; yet fsoc's cleaner finds a live page's owner from its tag there. So
//! the backend stores the layers' `SPARE_BYTES` (the page tag) followed by a CRC-32C of them
//! (little-endian) and, on read, corrects a single flipped bit in those 20 bytes (trying each
//! bit, 160 CRCs, only when the CRC does not match) and reports more as uncorrectable: a
//! wrong tag is never handed up. The rest of the free OOB bytes stay 0xFF (the kernel fills
//! them in MTD_OPS_AUTO_OOB mode).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use fsoc_flash::codec::crc32c;

/// Spare bytes per page the layers above get (fsoc-core's `SPARE_TAG_BYTES`).
pub const SPARE_BYTES: usize = 16;
/// Free OOB bytes used per page: the spare bytes and their CRC-32C.
pub const OOB_BYTES: usize = SPARE_BYTES + 4;

/// What reading the protected spare bytes found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpareOutcome {
    Clean,
    /// One bit was flipped (in the spare bytes or the CRC) and is corrected.
    Corrected,
    /// More than one bit is wrong: the spare bytes cannot be trusted.
    Uncorrectable,
}

/// The OOB bytes to program for `spare`.
pub fn encode(spare: &[u8; SPARE_BYTES]) -> [u8; OOB_BYTES] {
    let mut oob = [0xFF; OOB_BYTES];
    let (head, tail) = oob.split_at_mut(SPARE_BYTES);
    head.copy_from_slice(spare);
    tail.copy_from_slice(&crc32c(spare).to_le_bytes());
    oob
}

fn crc_matches(oob: &[u8; OOB_BYTES]) -> bool {
    let (spare, stored) = oob.split_at(SPARE_BYTES);
    stored.try_into().is_ok_and(|stored: [u8; 4]| crc32c(spare) == u32::from_le_bytes(stored))
}

/// Checks and corrects the OOB bytes read from a programmed page; `spare` gets the spare
/// bytes (corrected, or as read when uncorrectable).
pub fn decode(oob: &[u8; OOB_BYTES], spare: &mut [u8; SPARE_BYTES]) -> SpareOutcome {
    let mut candidate = *oob;
    let outcome = if crc_matches(&candidate) {
        SpareOutcome::Clean
    } else {
        let corrected = (0..OOB_BYTES * 8).find(|&bit| {
            let mut trial = *oob;
            if let Some(byte) = trial.get_mut(bit / 8) {
                *byte ^= 1 << (bit % 8);
            }
            let found = crc_matches(&trial);
            if found {
                candidate = trial;
            }
            found
        });
        if corrected.is_some() {
            SpareOutcome::Corrected
        } else {
            SpareOutcome::Uncorrectable
        }
    };
    if let Some(head) = candidate.first_chunk::<SPARE_BYTES>() {
        *spare = *head;
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag() -> [u8; SPARE_BYTES] {
        let mut tag = [0u8; SPARE_BYTES];
        tag.iter_mut().enumerate().for_each(|(index, byte)| *byte = (index as u8).wrapping_mul(37).wrapping_add(2));
        tag
    }

    #[test]
    fn clean_spare_bytes_round_trip() {
        let mut spare = [0u8; SPARE_BYTES];
        assert_eq!(decode(&encode(&tag()), &mut spare), SpareOutcome::Clean);
        assert_eq!(spare, tag());
    }

    /// Every single flipped bit, in the tag or in its CRC, is found and corrected.
    #[test]
    fn every_single_bit_flip_is_corrected() {
        let stored = encode(&tag());
        for bit in 0..OOB_BYTES * 8 {
            let mut read = stored;
            read[bit / 8] ^= 1 << (bit % 8);
            let mut spare = [0u8; SPARE_BYTES];
            assert_eq!(decode(&read, &mut spare), SpareOutcome::Corrected, "bit {bit}");
            assert_eq!(spare, tag(), "bit {bit}");
        }
    }

    /// Two flipped bits are never "corrected" into a wrong tag: they are uncorrectable, for
    /// every pair in the tag's first bytes and the CRC.
    #[test]
    fn two_flipped_bits_are_uncorrectable_not_miscorrected() {
        let stored = encode(&tag());
        for first in 0..OOB_BYTES * 8 {
            for second in (first + 1..OOB_BYTES * 8).step_by(7) {
                let mut read = stored;
                read[first / 8] ^= 1 << (first % 8);
                read[second / 8] ^= 1 << (second % 8);
                let mut spare = [0u8; SPARE_BYTES];
                assert_eq!(decode(&read, &mut spare), SpareOutcome::Uncorrectable, "bits {first} and {second}");
            }
        }
    }
}
