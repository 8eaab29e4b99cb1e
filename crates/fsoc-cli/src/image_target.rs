//! `IMAGE:/path` arguments of the image tools: which file is the image, and the absolute,
//! normalized path inside it; and the byte-path helpers the tools build paths with.

use std::path::{Path, PathBuf};

use crate::volume_files;

/// `IMAGE:/path` split into the image file and a normalized absolute path (no trailing or
/// repeated slashes). The image is the shortest prefix before a `:` that names an existing
/// file or MTD raw NAND (`/dev/mtd0`, `/dev/mtd0,/dev/mtd1`), so image names may contain
/// colons. A prefix naming anything else that exists (a FIFO, a directory, another device)
/// is refused with what it is.
pub fn parse_target(text: &str) -> Result<(PathBuf, Vec<u8>), String> {
    let mut fallback = None;
    for (index, _) in text.match_indices(':') {
        let (image, path) = (&text[..index], &text[index + 1..]);
        if image.is_empty() {
            continue;
        }
        if Path::new(image).is_file() || volume_files::mtd_devices(Path::new(image)).is_some() {
            return Ok((PathBuf::from(image), normalize(path)?));
        }
        fallback.get_or_insert((image, path));
    }
    match fallback {
        Some((image, _)) => {
            volume_files::check_volume_path(Path::new(image))?;
            volume_files::refuse_array_chip(Path::new(image))?;
            Err(format!("{image}: no such image file"))
        }
        None => Err(format!("{text:?}: expected IMAGE:/path (for example disk.img:/docs/a.txt)")),
    }
}

pub fn normalize(path: &str) -> Result<Vec<u8>, String> {
    let path = if path.is_empty() { "/" } else { path };
    if !path.starts_with('/') {
        return Err(format!("{path:?}: the path inside the image must be absolute (start with /)"));
    }
    let parts: Vec<&str> = path.split('/').filter(|part| !part.is_empty() && *part != ".").collect();
    if parts.contains(&"..") {
        return Err(format!("{path:?}: `..` is not supported in image paths"));
    }
    Ok(format!("/{}", parts.join("/")).into_bytes())
}

/// Splits targets that must all be in one image.
pub fn parse_targets(texts: &[String]) -> Result<(PathBuf, Vec<Vec<u8>>), String> {
    let mut image: Option<PathBuf> = None;
    let mut paths = Vec::new();
    for text in texts {
        let (this_image, path) = parse_target(text)?;
        match &image {
            Some(first) if first != &this_image => {
                return Err(format!(
                    "all paths must be in one image ({} and {})",
                    first.display(),
                    this_image.display()
                ))
            }
            _ => image = Some(this_image),
        }
        paths.push(path);
    }
    let image = image.ok_or("no IMAGE:/path given")?;
    Ok((image, paths))
}

pub fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut path = parent.to_vec();
    if path.last() != Some(&b'/') {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}

/// (parent path, final name) of a normalized path other than the root.
pub fn split_last(path: &[u8]) -> Option<(&[u8], &[u8])> {
    let slash = path.iter().rposition(|&byte| byte == b'/')?;
    let name = &path[slash + 1..];
    if name.is_empty() {
        return None;
    }
    Some((if slash == 0 { b"/" } else { &path[..slash] }, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_split_at_the_image_file() {
        let directory = tempfile::tempdir().expect("tempdir");
        let image = directory.path().join("a:b.img");
        std::fs::write(&image, b"").expect("write");
        let text = format!("{}:/x//y/", image.display());
        assert_eq!(parse_target(&text).expect("parse"), (image.clone(), b"/x/y".to_vec()));
        assert_eq!(parse_target(&format!("{}:", image.display())).expect("parse").1, b"/".to_vec());
        assert!(parse_target("missing.img:/x").unwrap_err().contains("no such image"));
        assert!(parse_target("plain").unwrap_err().contains("IMAGE:/path"));
        assert!(parse_target(&format!("{}:relative", image.display())).unwrap_err().contains("absolute"));
    }

    #[test]
    fn paths_split_into_parent_and_name() {
        assert_eq!(split_last(b"/a"), Some((&b"/"[..], &b"a"[..])));
        assert_eq!(split_last(b"/a/b"), Some((&b"/a"[..], &b"b"[..])));
        assert_eq!(split_last(b"/"), None);
        assert_eq!(join(b"/", b"x"), b"/x".to_vec());
        assert_eq!(join(b"/a", b"x"), b"/a/x".to_vec());
    }
}
