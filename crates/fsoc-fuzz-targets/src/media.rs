//! The target for fsoc-media's image-file header (docs/FORMAT.md, "Image file"), the first
//! bytes of any file a user hands `fsoc` as an image.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::host_endian_bytes)]

use std::ops::Range;

use fsoc_media::image::{ImageHeader, HEADER_BYTES, HEADER_CRC_COVERED_BYTES};
use fsoc_media::ImageError;

use crate::input::{fix_checksum_after, u64_at, with_and_without_checksum, zeroed};

/// Header bytes 44..48 are reserved (written as zero, ignored on reading).
const HEADER_RESERVED: Range<usize> = 44..48;
/// Where the header records the file's size (the last of the four layout fields).
const FILE_SIZE_OFFSET: usize = 80;

/// The header, checked against a file size: the one the header records (so a consistent
/// header decodes), that plus one (which must then be refused) and zero.
pub fn decode_image_header(data: &[u8]) {
    with_and_without_checksum(
        data,
        |bytes| fix_checksum_after(bytes, HEADER_CRC_COVERED_BYTES, HEADER_CRC_COVERED_BYTES),
        check_image_header,
    );
}

fn check_image_header(bytes: &[u8]) {
    let recorded_size_bytes = u64_at(bytes, FILE_SIZE_OFFSET).unwrap_or(0);
    let _ = ImageHeader::decode(bytes, 0);
    let Ok((header, layout)) = ImageHeader::decode(bytes, recorded_size_bytes) else {
        return;
    };
    assert_eq!(layout.file_size_bytes, recorded_size_bytes, "decoded layout disagrees with the recorded size");
    assert!(
        matches!(
            ImageHeader::decode(bytes, recorded_size_bytes.wrapping_add(1)),
            Err(ImageError::FileSizeMismatch { .. })
        ),
        "a file of the wrong size was accepted"
    );
    let mut canonical = zeroed(bytes.get(..HEADER_BYTES).unwrap_or_default(), &[HEADER_RESERVED]);
    assert!(fix_checksum_after(&mut canonical, HEADER_CRC_COVERED_BYTES, HEADER_CRC_COVERED_BYTES));
    let encoded = header.encode(&layout);
    assert_eq!(encoded.as_slice(), canonical.as_slice(), "image header {header:?} re-encodes differently");
    assert_eq!(
        ImageHeader::decode(&encoded, recorded_size_bytes),
        Ok((header, layout)),
        "re-encoded image header decodes differently"
    );
}
