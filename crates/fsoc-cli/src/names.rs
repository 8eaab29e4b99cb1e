//! Names read from an image are hostile input: a crafted image may hold an entry named `..`,
//! `/etc/x` or `a/../../b`, or bytes that drive a terminal. This module decides which names the
//! tools may follow or create locally, and how to print any name safely (as `ls -b` does).

/// Longest name a directory entry may have (as on Linux).
pub const NAME_BYTES_MAX: usize = 255;

/// Why a name from an image cannot be used, or `None` if it can. A usable name is one path
/// component: 1..=255 bytes, not `.` or `..`, without `/` or NUL.
pub fn invalid_name_reason(name: &[u8]) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty name")
    } else if name == b"." || name == b".." {
        Some("`.` or `..` as an entry name")
    } else if name.contains(&b'/') {
        Some("name contains `/`")
    } else if name.contains(&0) {
        Some("name contains a NUL byte")
    } else if name.len() > NAME_BYTES_MAX {
        Some("name longer than 255 bytes")
    } else {
        None
    }
}

/// `name` for a terminal: printable text as it is, everything else as a C escape (`\n`, `\t`,
/// `\\`, `\ooo` octal per byte), like `ls -b`. Valid UTF-8 letters stay readable; the
/// bidirectional-text controls are escaped too, since they make a terminal show a name's
/// characters in another order than they are (`evil\u{202E}txt.exe` shown as `evilexe.txt`).
pub fn escaped(name: &[u8]) -> String {
    let mut text = String::with_capacity(name.len());
    for chunk in name.utf8_chunks() {
        for character in chunk.valid().chars() {
            match character {
                '\\' => text.push_str("\\\\"),
                '\n' => text.push_str("\\n"),
                '\t' => text.push_str("\\t"),
                '\r' => text.push_str("\\r"),
                character if character.is_control() || is_bidirectional_control(character) => {
                    let mut buffer = [0u8; 4];
                    for byte in character.encode_utf8(&mut buffer).bytes() {
                        text.push_str(&format!("\\{byte:03o}"));
                    }
                }
                character => text.push(character),
            }
        }
        for byte in chunk.invalid() {
            text.push_str(&format!("\\{byte:03o}"));
        }
    }
    text
}

/// Unicode's explicit bidirectional formatting characters (marks, embeddings, overrides,
/// isolates).
fn is_bidirectional_control(character: char) -> bool {
    matches!(character, '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// A path inside an image for messages, escaped like a name.
pub fn shown(path: &[u8]) -> String {
    escaped(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_single_components_are_usable() {
        for bad in [&b""[..], b".", b"..", b"a/b", b"/etc/passwd", b"../../x", b"nul\0", &[b'x'; 256]] {
            assert!(invalid_name_reason(bad).is_some(), "{bad:?} accepted");
        }
        for good in [&b"a"[..], b"...", b".hidden", b"with space", "ünïcode".as_bytes(), &[b'x'; 255], b"\x1b[31m"] {
            assert_eq!(invalid_name_reason(good), None, "{good:?} refused");
        }
    }

    #[test]
    fn unprintable_bytes_are_escaped() {
        assert_eq!(escaped(b"plain.txt"), "plain.txt");
        assert_eq!(escaped(b"a\nb"), "a\\nb");
        assert_eq!(escaped(b"back\\slash"), "back\\\\slash");
        assert_eq!(escaped(b"\x1b[31mred"), "\\033[31mred");
        assert_eq!(escaped(b"\xff\xfe"), "\\377\\376");
        assert_eq!(escaped("ünïcode".as_bytes()), "ünïcode");
        assert_eq!(escaped(b"nul\0"), "nul\\000");
        assert_eq!(escaped("evil\u{202E}txt.exe".as_bytes()), "evil\\342\\200\\256txt.exe");
        assert_eq!(escaped("\u{2067}x".as_bytes()), "\\342\\201\\247x");
    }
}
