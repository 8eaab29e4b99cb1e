//! The superblock: volume identity and geometry, written once at format into pages 0 and 1 of
//! block 0 on every chip, never rewritten (docs/FORMAT.md, "Superblock").
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use alloc::vec::Vec;

use fsoc_flash::Geometry;

use crate::segment::layout::{Redundancy, SUPERBLOCK_HOMES};

use fsoc_flash::codec::{crc32c, crc32c_excluding, DecodeError, Reader, Writer};

pub const SUPERBLOCK_MAGIC: u64 = u64::from_le_bytes(*b"FSOCVOL\0");
/// The format version this build writes (docs/FORMAT.md lists what each version added).
/// Version 2: a segment table too large for the metaroot is named through index pages.
/// Version 3: extent records carry a CRC-32C of each file data page.
/// Version 4: extended attributes (allocation record kind 6).
/// Version 5: 80-byte inode records (signed times, birth time, mapped data pages).
/// Version 6: the NVRAM commit tier (the superblock names the NVRAM, metaroots carry
/// `nvram_lag`).
/// Version 7: redundancy across chips (superblock bytes 64..72: the mode and a second
/// checksum; metaroot twins; parity pages in log rows).
/// Version 8: mirror-meta (redundancy code 1): tree nodes and segment-table pages written
/// twice, the second copy tagged `0x81`/`0x83` in its spare area.
/// Version 9: two superblock homes (block 0 and block 4) take the generations in turn, so the
/// superblock can be rewritten without end, and the metaroot areas move for wear levelling.
/// Version 10: the largest file is at least ext4's, 16 TiB − 4 KiB, at every page size (2^32
/// − 1 pages before, 8 TiB − 2 KiB with 2 KiB pages); a data page's spare tag carries bits
/// 32–39 of its page index in byte 3.
/// Version 11: delta commits' payloads in the compact encoding (NVRAM records stay plain), which
/// predicts each record from the previous one of its kind (a durable file create takes about
/// 40 bytes of a metaroot page instead of 170). Version 12: a delta commit whose changes no
/// longer fit one page may extend the previous delta commit (a chained record), on flash
/// without paired pages, so twice the changes wait between full commits. Version 13: short
/// pages, a file page whose bytes fit a tree entry kept in the allocation tree instead of a
/// data page of its own (a small file's last, partial page costs no program).
pub const FORMAT_VERSION: u32 = 13;
/// The first format version with redundancy across chips.
pub const FORMAT_VERSION_REDUNDANCY: u32 = 7;
/// The first format version with mirror-meta (a version-7 superblock naming it is refused).
pub const FORMAT_VERSION_MIRROR_META: u32 = 8;
/// The first format version with two superblock homes and wear-levelled metaroot areas.
pub const FORMAT_VERSION_SUPERBLOCK_HOMES: u32 = 9;
/// The first format version whose largest file is at least ext4's (16 TiB − 4 KiB).
pub const FORMAT_VERSION_LARGE_FILES: u32 = 10;
/// The first format version whose delta payloads use the compact encoding.
pub const FORMAT_VERSION_COMPACT_DELTA: u32 = 11;
/// Delta commits chained to an earlier record (docs/FORMAT.md, "Chained delta commits").
pub const FORMAT_VERSION_CHAINED_DELTA: u32 = 12;
/// Short pages: inline records at any page of a file that is not inline (docs/FORMAT.md,
/// "Tree records").
pub const FORMAT_VERSION_SHORT_PAGES: u32 = 13;
/// The first format version that may keep commits in NVRAM.
pub const FORMAT_VERSION_NVRAM: u32 = 6;
/// The oldest format version this build reads (and keeps writing in that version's format).
pub const FORMAT_VERSION_OLDEST: u32 = 1;
pub const SUPERBLOCK_BYTES: usize = 64;
const CHECKSUM_OFFSET: usize = 60;
/// Version 7 on: bytes 64..68 the redundancy code, 68..72 the superblock's generation,
/// 72..84 the three metaroot areas' segments, 84..88 the CRC-32C of bytes 0..84.
pub const EXTENSION_BYTES: usize = 88;
const EXTENSION_CHECKSUM_OFFSET: usize = 84;
/// The metaroot areas of every volume before version 7, and of a version-7 volume until one
/// of them goes bad.
pub const DEFAULT_METAROOT_AREAS: [u32; 3] = [1, 2, 3];

/// Most chips a volume may span (docs/FORMAT.md, "Superblock").
pub const CHIP_COUNT_MAX: u32 = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// The volume's format version, fixed at format: a volume written by an older build keeps
    /// its version (and that version's structures) when a newer build writes to it.
    pub format_version: u32,
    pub geometry: Geometry,
    pub chip_count: u32,
    pub chip_index: u32,
    pub volume_id: u64,
    pub metaroot_area_count: u32,
    pub first_log_segment: u32,
    /// Format version 6 on: bytes of the NVRAM holding the commit log (0: none; then the
    /// volume keeps every commit on flash).
    pub nvram_bytes: u32,
    /// `NvramDevice::technology_code` of that NVRAM (0 when there is none).
    pub nvram_technology: u32,
    /// Format version 7 on: what the volume keeps on two chips or under parity (always
    /// `Redundancy::None` before).
    pub redundancy: Redundancy,
    /// Format version 7 on: 0 as formatted (pages 0 and 1 of block 0), then one more for each
    /// rewrite (pages 2g and 2g + 1), which a metaroot area's move makes (docs/DESIGN.md,
    /// "Grown bad blocks"). Always 0 before.
    pub generation: u32,
    /// Format version 7 on: the segments of metaroot areas A, B and C (`DEFAULT_METAROOT_AREAS`
    /// until one moves). Always the default before.
    pub metaroot_areas: [u32; 3],
}

impl Superblock {
    pub fn encode(&self, page_size_bytes: usize) -> Vec<u8> {
        let mut writer = Writer::with_capacity(page_size_bytes);
        writer.u64_le(SUPERBLOCK_MAGIC);
        writer.u32_le(self.format_version);
        writer.u32_le(self.geometry.page_data_bytes);
        writer.u32_le(self.geometry.spare_bytes);
        writer.u32_le(self.geometry.pages_per_block);
        writer.u32_le(self.geometry.block_count);
        writer.u32_le(self.chip_count);
        writer.u32_le(self.chip_index);
        writer.u64_le(self.volume_id);
        writer.u32_le(self.metaroot_area_count);
        writer.u32_le(self.first_log_segment);
        // Versions 1-5: reserved, 0.
        writer.u32_le(self.nvram_bytes);
        writer.u32_le(self.nvram_technology);
        assert_eq!(writer.bytes.len(), CHECKSUM_OFFSET, "superblock layout drifted from FORMAT.md");
        writer.u32_le(0); // checksum placeholder
        let checksum = crc32c_excluding(&writer.bytes, CHECKSUM_OFFSET);
        let mut bytes = writer.bytes;
        bytes.splice(CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4, checksum.to_le_bytes());
        if self.format_version >= FORMAT_VERSION_REDUNDANCY {
            bytes.extend_from_slice(&self.redundancy.code().to_le_bytes());
            bytes.extend_from_slice(&self.generation.to_le_bytes());
            for segment in self.metaroot_areas {
                bytes.extend_from_slice(&segment.to_le_bytes());
            }
            let extension_checksum = crc32c(&bytes);
            bytes.extend_from_slice(&extension_checksum.to_le_bytes());
            assert_eq!(bytes.len(), EXTENSION_BYTES, "superblock extension drifted from FORMAT.md");
        }
        bytes.resize(page_size_bytes, 0xFF);
        bytes
    }

    /// Whether `page` holds a valid superblock of generation `generation` of this volume
    /// (the same identity and geometry as `self`), decoded.
    pub fn generation_on(&self, page: &[u8], generation: u32) -> Option<Superblock> {
        Superblock::decode(page).ok().filter(|found| {
            found.generation == generation
                && found.volume_id == self.volume_id
                && found.geometry == self.geometry
                && found.chip_count == self.chip_count
                && found.format_version == self.format_version
        })
    }

    /// Where generation `generation` lives: the segment whose block (on every chip) holds it,
    /// and the first of its two pages (docs/FORMAT.md, "Superblock generations"). Versions 7
    /// and 8: pages 2g and 2g + 1 of block 0, `None` past the block. Version 9 on: the two
    /// homes take `pages_per_block / 2` generations each, in turn: home `(g div S) mod 2`,
    /// pages 2(g mod S) and 2(g mod S) + 1, with S = `pages_per_block / 2`.
    pub fn generation_place(&self, generation: u32) -> Option<(u32, u32)> {
        let pages_per_block = self.geometry.pages_per_block;
        if self.format_version >= FORMAT_VERSION_SUPERBLOCK_HOMES {
            let slots = (pages_per_block / 2).max(1);
            let home = SUPERBLOCK_HOMES.get(((generation / slots) % 2) as usize).copied().unwrap_or(0);
            Some((home, 2 * (generation % slots)))
        } else {
            let page = generation.checked_mul(2)?;
            (page.checked_add(1)? < pages_per_block).then_some((SUPERBLOCK_HOMES[0], page))
        }
    }

    /// Generations each superblock home holds (version 9 on; one home, block 0, before).
    pub fn generations_per_home(&self) -> u32 {
        (self.geometry.pages_per_block / 2).max(1)
    }

    pub fn decode(bytes: &[u8]) -> Result<Superblock, DecodeError> {
        let head = bytes.get(..SUPERBLOCK_BYTES).ok_or(DecodeError::Truncated {
            structure: "superblock",
            needed_bytes: SUPERBLOCK_BYTES,
            actual_bytes: bytes.len(),
        })?;
        let mut reader = Reader::new("superblock", head);
        let magic = reader.u64_le()?;
        if magic != SUPERBLOCK_MAGIC {
            return Err(DecodeError::BadMagic { structure: "superblock", found: magic });
        }
        // Every version keeps the magic, the version and the checksum rule (CRC-32C of bytes
        // 0..64 at offset 60) where version 1 put them, so a newer volume is recognised and
        // refused by name rather than called corrupt.
        let format_version = reader.u32_le()?;
        let geometry = Geometry {
            page_data_bytes: reader.u32_le()?,
            spare_bytes: reader.u32_le()?,
            pages_per_block: reader.u32_le()?,
            block_count: reader.u32_le()?,
        };
        let chip_count = reader.u32_le()?;
        let chip_index = reader.u32_le()?;
        let volume_id = reader.u64_le()?;
        let metaroot_area_count = reader.u32_le()?;
        let first_log_segment = reader.u32_le()?;
        let nvram_bytes = reader.u32_le()?;
        let nvram_technology = reader.u32_le()?;
        let stored = reader.u32_le()?;
        let computed = crc32c_excluding(head, CHECKSUM_OFFSET);
        if stored != computed {
            return Err(DecodeError::ChecksumMismatch { structure: "superblock", stored, computed });
        }
        if !(FORMAT_VERSION_OLDEST..=FORMAT_VERSION).contains(&format_version) {
            return Err(DecodeError::UnsupportedVersion {
                structure: "superblock",
                found: format_version,
                oldest: FORMAT_VERSION_OLDEST,
                newest: FORMAT_VERSION,
            });
        }
        if geometry.validate().is_err() {
            return Err(DecodeError::InvalidField { structure: "superblock", field: "geometry", value: 0 });
        }
        if chip_count == 0 || chip_count > CHIP_COUNT_MAX || chip_index >= chip_count {
            return Err(DecodeError::InvalidField {
                structure: "superblock",
                field: "chip_index",
                value: u64::from(chip_index),
            });
        }
        if metaroot_area_count != 3 || first_log_segment != 4 {
            return Err(DecodeError::InvalidField {
                structure: "superblock",
                field: "first_log_segment",
                value: u64::from(first_log_segment),
            });
        }
        if format_version < FORMAT_VERSION_NVRAM && (nvram_bytes != 0 || nvram_technology != 0) {
            return Err(DecodeError::InvalidField {
                structure: "superblock",
                field: "nvram_bytes",
                value: u64::from(nvram_bytes),
            });
        }
        if nvram_bytes != 0 && !(1024..=16 * 1024 * 1024).contains(&nvram_bytes) {
            return Err(DecodeError::InvalidField {
                structure: "superblock",
                field: "nvram_bytes",
                value: u64::from(nvram_bytes),
            });
        }
        let (redundancy, generation, metaroot_areas) = if format_version >= FORMAT_VERSION_REDUNDANCY {
            let extension = bytes.get(..EXTENSION_BYTES).ok_or(DecodeError::Truncated {
                structure: "superblock",
                needed_bytes: EXTENSION_BYTES,
                actual_bytes: bytes.len(),
            })?;
            let mut reader = Reader::new("superblock", extension.get(SUPERBLOCK_BYTES..).unwrap_or(&[]));
            let code = reader.u32_le()?;
            let generation = reader.u32_le()?;
            let metaroot_areas = [reader.u32_le()?, reader.u32_le()?, reader.u32_le()?];
            let stored = reader.u32_le()?;
            let computed = crc32c(extension.get(..EXTENSION_CHECKSUM_OFFSET).unwrap_or(&[]));
            if stored != computed {
                return Err(DecodeError::ChecksumMismatch { structure: "superblock extension", stored, computed });
            }
            let redundancy = Redundancy::from_code(code).ok_or(DecodeError::InvalidField {
                structure: "superblock",
                field: "redundancy",
                value: u64::from(code),
            })?;
            let mirror_too_old = redundancy == Redundancy::MirrorMeta && format_version < FORMAT_VERSION_MIRROR_META;
            if (redundancy != Redundancy::None && chip_count < 2) || mirror_too_old {
                return Err(DecodeError::InvalidField {
                    structure: "superblock",
                    field: "redundancy",
                    value: u64::from(code),
                });
            }
            let [a, b, c] = metaroot_areas;
            let homes = format_version >= FORMAT_VERSION_SUPERBLOCK_HOMES;
            let valid_area = |segment: u32| {
                segment < geometry.block_count
                    && !(segment == SUPERBLOCK_HOMES[0] || homes && segment == SUPERBLOCK_HOMES[1])
            };
            if !metaroot_areas.iter().all(|&segment| valid_area(segment)) || a == b || b == c || a == c {
                return Err(DecodeError::InvalidField {
                    structure: "superblock",
                    field: "metaroot_areas",
                    value: u64::from(a),
                });
            }
            // Before version 9 a generation lives on pages 2g and 2g + 1 of block 0.
            if !homes && u64::from(generation) * 2 + 1 >= u64::from(geometry.pages_per_block) {
                return Err(DecodeError::InvalidField {
                    structure: "superblock",
                    field: "generation",
                    value: u64::from(generation),
                });
            }
            (redundancy, generation, metaroot_areas)
        } else {
            (Redundancy::None, 0, DEFAULT_METAROOT_AREAS)
        };
        Ok(Superblock {
            redundancy,
            generation,
            metaroot_areas,
            format_version,
            geometry,
            chip_count,
            chip_index,
            volume_id,
            metaroot_area_count,
            first_log_segment,
            nvram_bytes,
            nvram_technology,
        })
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use super::*;

    fn example() -> Superblock {
        Superblock {
            format_version: FORMAT_VERSION,
            geometry: Geometry { page_data_bytes: 2048, spare_bytes: 64, pages_per_block: 64, block_count: 128 },
            chip_count: 2,
            chip_index: 1,
            volume_id: 0xDEAD_BEEF,
            metaroot_area_count: 3,
            first_log_segment: 4,
            nvram_bytes: 0,
            nvram_technology: 0,
            redundancy: Redundancy::Parity,
            generation: 0,
            metaroot_areas: DEFAULT_METAROOT_AREAS,
        }
    }

    #[test]
    fn round_trips_and_rejects_every_single_bit_flip_in_the_header() {
        let bytes = example().encode(2048);
        assert_eq!(Superblock::decode(&bytes), Ok(example()));
        for bit in 0..EXTENSION_BYTES * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(Superblock::decode(&flipped).is_err(), "flip of bit {bit} accepted");
        }
        assert!(Superblock::decode(&bytes[..10]).is_err());
    }

    // A well-formed superblock of a version this build does not read is refused by name, with
    // the versions it does read; an older supported version decodes.
    #[test]
    fn unknown_versions_are_refused_by_name() {
        for version in [0, FORMAT_VERSION + 1, u32::MAX] {
            let bytes = Superblock { format_version: version, ..example() }.encode(2048);
            assert_eq!(
                Superblock::decode(&bytes),
                Err(DecodeError::UnsupportedVersion {
                    structure: "superblock",
                    found: version,
                    oldest: 1,
                    newest: FORMAT_VERSION
                })
            );
        }
        let old = Superblock { format_version: 1, redundancy: Redundancy::None, ..example() };
        let moved = Superblock { generation: 3, metaroot_areas: [1, 57, 3], ..example() };
        assert_eq!(Superblock::decode(&moved.encode(2048)), Ok(moved));
        assert_eq!(Superblock::decode(&old.encode(2048)), Ok(old));
    }
}
