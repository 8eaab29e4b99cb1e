//! `fsoc ls [-l] [-r] IMAGE:/path`: lists a directory (and, with -r, every directory under
//! it) or describes a file, in ls's formats; a closed pipe ends the listing quietly.

use std::io::Write;

use fsoc_core::fs::{FileKind, InodeRecord};
use fsoc_core::FileSystem;

use crate::image_target::{parse_target, split_last};
use crate::image_walk::{Step, Walk, DEPTH_MAX};
use crate::names::{escaped, invalid_name_reason, shown};
use crate::tools_cmd::{bad_name, resolve, Session};
use crate::volume_files::VolumeFlash;

/// Standard output for listings: a closed pipe (`fsoc ls … | head`) ends the listing quietly,
/// as it ends `ls`.
struct Listing<W: Write> {
    out: W,
    closed: bool,
}

impl<W: Write> Listing<W> {
    fn write_line(&mut self, line: &[u8]) -> Result<(), String> {
        if self.closed {
            return Ok(());
        }
        match self.out.write_all(line) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            Err(error) => Err(format!("stdout: {error}")),
        }
    }

    fn finish(mut self) -> Result<(), String> {
        match self.out.flush() {
            Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("stdout: {error}")),
            _ => Ok(()),
        }
    }
}

pub fn ls(target: &str, long: bool, recursive: bool, skip_bad_names: bool) -> Result<(), String> {
    let (image, path) = parse_target(target)?;
    let mut session = Session::open(&image, false)?;
    let (inode, kind) = resolve(&mut session.fs, &path).map_err(|error| session.error(&path, error))?;
    let stdout = std::io::stdout();
    let mut out = Listing { out: std::io::BufWriter::new(stdout.lock()), closed: false };
    if kind != FileKind::Directory {
        let record = session.fs.getattr(inode).map_err(|error| session.error(&path, error))?;
        let name = split_last(&path).map_or(&path[..], |(_, name)| name).to_vec();
        print_entry(&mut session.fs, &mut out, &name, inode, &record, long)?;
    } else {
        list_tree(&mut session, &mut out, &path, inode, long, recursive, skip_bad_names)?;
    }
    out.finish()?;
    session.finish()
}

/// Lists a directory, and with `recursive` every directory under it, each entry before what
/// is under it (as `find` does). The walk is iterative, bounded in depth and memory, and never
/// enters a directory twice (see image_walk.rs), so a crafted cycle is reported, not followed.
fn list_tree(
    session: &mut Session,
    out: &mut Listing<impl Write>,
    path: &[u8],
    directory: u64,
    long: bool,
    recursive: bool,
    skip_bad_names: bool,
) -> Result<(), String> {
    let image = session.image.clone();
    let mut walk = Walk::new(directory, path, DEPTH_MAX);
    while !out.closed {
        let entry = match walk.next(&mut session.fs) {
            Step::Done => break,
            Step::Leave => continue,
            Step::Unreadable(error) => return Err(session.error(walk.directory_path(), error)),
            Step::Entry(entry) => entry,
        };
        if let Some(reason) = invalid_name_reason(&entry.name) {
            bad_name(&image, walk.directory_path(), &entry.name, reason, skip_bad_names, "ls")?;
            continue;
        }
        let entry_path = walk.entry_path(&entry.name);
        let record = session.fs.getattr(entry.inode).map_err(|error| session.error(&entry_path, error))?;
        let shown_name = if recursive { &entry_path } else { &entry.name };
        print_entry(&mut session.fs, out, shown_name, entry.inode, &record, long)?;
        if recursive && entry.kind == FileKind::Directory {
            walk.enter(&mut session.fs, &entry)
                .map_err(|error| format!("{}:{}: {}", image.display(), shown(&entry_path), error.describe()))?;
        }
    }
    Ok(())
}

fn print_entry(
    fs: &mut FileSystem<VolumeFlash>,
    out: &mut Listing<impl Write>,
    name: &[u8],
    inode: u64,
    record: &InodeRecord,
    long: bool,
) -> Result<(), String> {
    let mut line = Vec::new();
    if long {
        let type_char = match record.kind {
            FileKind::File => '-',
            FileKind::Directory => 'd',
            FileKind::Symlink => 'l',
            FileKind::CharDevice => 'c',
            FileKind::BlockDevice => 'b',
            FileKind::Fifo => 'p',
            FileKind::Socket => 's',
        };
        // A device node shows its numbers where a file shows its size, as ls -l does.
        let size = if record.kind.is_device() {
            let (major, minor) = fsoc_core::fs::records::split_device_number(record.rdev());
            format!("{major:>5}, {minor:>3}")
        } else {
            record.size.to_string()
        };
        line.extend_from_slice(
            format!(
                "{type_char}{} {:>3} {:>5} {:>5} {:>10} {} ",
                mode_string(record.mode),
                record.nlink,
                record.uid,
                record.gid,
                size,
                format_time(record.mtime_ns)
            )
            .as_bytes(),
        );
    }
    // Names and link targets come from the image: unprintable bytes are escaped (ls -b).
    line.extend_from_slice(escaped(name).as_bytes());
    match record.kind {
        FileKind::Directory if !long => line.push(b'/'),
        FileKind::Symlink if long => {
            let target = fs.readlink(inode).map_err(|error| format!("readlink: {error}"))?;
            line.extend_from_slice(b" -> ");
            line.extend_from_slice(escaped(&target).as_bytes());
        }
        _ => {}
    }
    line.push(b'\n');
    out.write_line(&line)
}

fn mode_string(mode: u32) -> String {
    let mut text = String::with_capacity(9);
    for (shift, special, special_char) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
        let bits = (mode >> shift) & 0o7;
        text.push(if bits & 4 != 0 { 'r' } else { '-' });
        text.push(if bits & 2 != 0 { 'w' } else { '-' });
        text.push(match (bits & 1 != 0, mode & special != 0) {
            (true, true) => special_char,
            (false, true) => special_char.to_ascii_uppercase(),
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    text
}

/// `YYYY-MM-DD HH:MM` in UTC, as `ls -l --time-style=+%Y-%m-%d %H:%M` shows it.
fn format_time(time_ns: i64) -> String {
    // Every i64 of nanoseconds (the years 1678 to 2262) is a valid date.
    let time = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(time_ns))
        .expect("i64 nanoseconds since 1970 stay within time's range");
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}",
        time.year(),
        u8::from(time.month()),
        time.day(),
        time.hour(),
        time.minute()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_times_print_like_ls() {
        assert_eq!(mode_string(0o755), "rwxr-xr-x");
        assert_eq!(mode_string(0o4754), "rwsr-xr--");
        assert_eq!(mode_string(0o1777), "rwxrwxrwt");
        assert_eq!(mode_string(0o2644), "rw-r-Sr--");
        assert_eq!(format_time(0), "1970-01-01 00:00");
        assert_eq!(format_time(951_782_400 * 1_000_000_000 + 3_660_000_000_000), "2000-02-29 01:01");
        assert_eq!(format_time(i64::MAX), "2262-04-11 23:47");
        assert_eq!(format_time(-86_400_000_000_000), "1969-12-31 00:00");
    }
}
