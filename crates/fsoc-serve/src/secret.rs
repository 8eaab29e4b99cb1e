//! The pre-shared key of a non-loopback listener: read from a file, compared in constant time
//! against what a client gives as uname or aname at attach (docs/PROTOCOL.md).

use std::path::Path;

/// Shortest secret accepted: 16 bytes (128 bits if random).
pub const SECRET_LENGTH_MIN_BYTES: usize = 16;
/// Longest secret: it must fit an aname, and Linux keeps mount options short.
pub const SECRET_LENGTH_MAX_BYTES: usize = 255;

/// The secret in `path`: the file's bytes without one trailing newline, 16 to 255 bytes, no
/// NUL, comma or whitespace (so it can be given as `-o aname=SECRET` to the Linux client).
pub fn read_secret_file(path: &Path) -> Result<Vec<u8>, String> {
    let mut bytes = std::fs::read(path).map_err(|error| format!("{}: {error}", path.display()))?;
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
    }
    if bytes.len() < SECRET_LENGTH_MIN_BYTES || bytes.len() > SECRET_LENGTH_MAX_BYTES {
        return Err(format!(
            "{}: the secret is {} bytes; it must be {SECRET_LENGTH_MIN_BYTES} to {SECRET_LENGTH_MAX_BYTES}",
            path.display(),
            bytes.len()
        ));
    }
    if bytes.iter().any(|&byte| byte == 0 || byte == b',' || byte.is_ascii_whitespace()) {
        return Err(format!(
            "{}: the secret holds a NUL, comma or whitespace byte (it must pass as a mount option)",
            path.display()
        ));
    }
    Ok(bytes)
}

/// Whether `given` equals `secret`, in time that depends on their lengths only.
pub(crate) fn matches(secret: &[u8], given: &[u8]) -> bool {
    if secret.len() != given.len() {
        return false;
    }
    secret.iter().zip(given).fold(0u8, |difference, (a, b)| difference | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_read_checked_and_compared() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("secret");
        std::fs::write(&path, b"0123456789abcdef\n").expect("write");
        assert_eq!(read_secret_file(&path).expect("read"), b"0123456789abcdef");
        std::fs::write(&path, b"short").expect("write");
        assert!(read_secret_file(&path).unwrap_err().contains("5 bytes"));
        std::fs::write(&path, b"0123456789 abcdef").expect("write");
        assert!(read_secret_file(&path).unwrap_err().contains("whitespace"));
        assert!(read_secret_file(&directory.path().join("missing")).is_err());
        assert!(matches(b"0123456789abcdef", b"0123456789abcdef"));
        assert!(!matches(b"0123456789abcdef", b"0123456789abcdeF"));
        assert!(!matches(b"0123456789abcdef", b"0123456789abcde"));
    }
}
