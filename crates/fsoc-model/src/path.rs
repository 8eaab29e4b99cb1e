//! Path syntax: absolute byte strings split into validated components, before any lookup.
//!
//! The rules are deliberately stricter than Linux so both file systems can implement them
//! in a few lines: every path starts with `/`; `/` alone is the root; no empty component
//! (so no `//` and no trailing `/`); no `.` or `..`; no NUL; at most
//! [`NAME_SIZE_MAX_BYTES`] per component and [`PATH_SIZE_MAX_BYTES`] in all.

use crate::types::{errno, Errno, NAME_SIZE_MAX_BYTES, PATH_SIZE_MAX_BYTES};

/// Splits `path` into its components (empty for the root).
///
/// Errors, checked in this order: not starting with `/` (including empty) → `EINVAL`;
/// longer than [`PATH_SIZE_MAX_BYTES`] → `ENAMETOOLONG`; then each component from left to
/// right: empty, `.`, `..` or containing NUL → `EINVAL`, longer than
/// [`NAME_SIZE_MAX_BYTES`] → `ENAMETOOLONG`.
pub fn components(path: &[u8]) -> Result<Vec<&[u8]>, Errno> {
    let Some(rest) = path.strip_prefix(b"/") else {
        return Err(errno::EINVAL);
    };
    if path.len() > PATH_SIZE_MAX_BYTES {
        return Err(errno::ENAMETOOLONG);
    }
    if rest.is_empty() {
        return Ok(Vec::new());
    }
    let mut components = Vec::new();
    for name in rest.split(|&byte| byte == b'/') {
        check_name(name)?;
        components.push(name);
    }
    Ok(components)
}

/// Checks one directory entry name: 1..=255 bytes, no `/` or NUL, not `.` or `..`.
pub fn check_name(name: &[u8]) -> Result<(), Errno> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&0) {
        return Err(errno::EINVAL);
    }
    if name.contains(&b'/') {
        return Err(errno::EINVAL);
    }
    if name.len() > NAME_SIZE_MAX_BYTES {
        return Err(errno::ENAMETOOLONG);
    }
    Ok(())
}

/// Checks a symlink target: `ENOENT` if empty, `ENAMETOOLONG` beyond
/// [`PATH_SIZE_MAX_BYTES`], `EINVAL` if it contains NUL. Anything else is stored verbatim
/// and never interpreted.
pub fn check_symlink_target(target: &[u8]) -> Result<(), Errno> {
    if target.is_empty() {
        return Err(errno::ENOENT);
    }
    if target.len() > PATH_SIZE_MAX_BYTES {
        return Err(errno::ENAMETOOLONG);
    }
    if target.contains(&0) {
        return Err(errno::EINVAL);
    }
    Ok(())
}

/// Joins a parent path and a child name (`/` + `a` = `/a`, `/a` + `b` = `/a/b`).
pub fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut path = parent.to_vec();
    if path != b"/" {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}

/// The number of components of a syntactically valid path (`/` is 0, `/a/b` is 2).
pub fn depth(path: &[u8]) -> usize {
    if path == b"/" {
        0
    } else {
        path.iter().filter(|&&byte| byte == b'/').count()
    }
}

/// Renders bytes as a readable string: printable ASCII as is, anything else escaped, and
/// long runs of one byte shortened to `a×200` so 255-byte names stay legible.
pub fn display_bytes(bytes: &[u8]) -> String {
    let mut text = String::new();
    let mut index = 0;
    while let Some(&byte) = bytes.get(index) {
        let run_count = bytes[index..].iter().take_while(|&&other| other == byte).count();
        if run_count >= 8 {
            push_byte(&mut text, byte);
            text.push_str(&format!("×{run_count}"));
            index += run_count;
        } else {
            push_byte(&mut text, byte);
            index += 1;
        }
    }
    text
}

fn push_byte(text: &mut String, byte: u8) {
    if byte.is_ascii_graphic() || byte == b' ' {
        if byte == b'\\' || byte == b'"' {
            text.push('\\');
        }
        text.push(byte as char);
    } else {
        text.push_str(&format!("\\x{byte:02x}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_accept_root_and_plain_names() {
        assert_eq!(components(b"/"), Ok(vec![]));
        assert_eq!(components(b"/a/bc"), Ok(vec![&b"a"[..], &b"bc"[..]]));
    }

    #[test]
    fn components_reject_bad_syntax_with_the_documented_errno() {
        for bad in [&b""[..], b"a", b"//", b"/a/", b"/a//b", b"/.", b"/a/..", b"/a\0b"] {
            assert_eq!(components(bad), Err(errno::EINVAL), "{}", display_bytes(bad));
        }
        let long_name = [b'x'; 256];
        assert_eq!(components(&join(b"/", &long_name)), Err(errno::ENAMETOOLONG));
        // The first bad component decides: EINVAL at `.` comes before the long name.
        let mut path = b"/./".to_vec();
        path.extend_from_slice(&long_name);
        assert_eq!(components(&path), Err(errno::EINVAL));
        let long_path: Vec<u8> = b"/a".iter().copied().cycle().take(4096).collect();
        assert_eq!(components(&long_path), Err(errno::ENAMETOOLONG));
    }

    #[test]
    fn join_and_depth_agree() {
        assert_eq!(join(b"/", b"a"), b"/a");
        assert_eq!(join(b"/a", b"b"), b"/a/b");
        assert_eq!(depth(b"/"), 0);
        assert_eq!(depth(b"/a/b"), 2);
    }

    #[test]
    fn display_bytes_shortens_runs() {
        assert_eq!(display_bytes(b"/a"), "/a");
        assert_eq!(display_bytes(&[b'q'; 200]), "q×200");
        assert_eq!(display_bytes(b"\x00\""), "\\x00\\\"");
    }
}
