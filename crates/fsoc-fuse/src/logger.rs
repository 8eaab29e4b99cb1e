//! A minimal `log` backend for the mount: warnings and errors from fsoc-fuse and fuser go to
//! stderr as one line each, prefixed with the program name and the mount point.

use std::io::Write;
use std::sync::OnceLock;

struct StderrLogger {
    prefix: String,
    level: log::LevelFilter,
}

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= self.level
    }

    fn log(&self, record: &log::Record) {
        // fuser warns about requests it answers by default (unimplemented calls, an unmount
        // attempt after the kernel already unmounted): routine for this mount, so shown only
        // with the informational lines.
        let from_fuser = record.target().starts_with("fuser");
        // After `fusermount3 -u` the kernel has already dropped the mount, so fuser's own
        // unmount on shutdown fails with EINVAL: routine on every clean unmount, not an error.
        let routine_unmount = from_fuser && record.args().to_string().starts_with("Failed to umount filesystem");
        let level = if from_fuser && (record.level() == log::Level::Warn || routine_unmount) {
            log::Level::Info
        } else {
            record.level()
        };
        if level <= self.level {
            // A log line that cannot be written (stderr closed) is dropped, not a failure.
            let _ = writeln!(
                std::io::stderr().lock(),
                "{}: {}: {}",
                self.prefix,
                level.as_str().to_lowercase(),
                record.args()
            );
        }
    }

    fn flush(&self) {}
}

static LOGGER: OnceLock<StderrLogger> = OnceLock::new();

/// Installs the logger once per process (later calls keep the first prefix). `verbose` adds
/// informational lines (mount, unmount) to warnings and errors.
pub fn install(prefix: &str, verbose: bool) {
    let level = if verbose { log::LevelFilter::Info } else { log::LevelFilter::Warn };
    let logger = LOGGER.get_or_init(|| StderrLogger { prefix: prefix.to_string(), level });
    if log::set_logger(logger).is_ok() {
        log::set_max_level(logger.level);
    }
}
