//! The `-o` option list of `fsoc mount` and of the mount(8) helper `mount.fuse.fsoc`: one
//! parser for both, so an option name means the same on either path (docs/MOUNT.md).
//!
//! Invariants: an option this parser does not know is refused with its name (mount(8) does
//! the same), unless the caller asked for sloppy parsing (`mount -s`); a later option
//! overrides an earlier one (`ro,rw` is `rw`), as in mount(8); mount(8)'s own options
//! (`nofail`, `_netdev`, ...), which it hands to helpers, are accepted and change nothing here.

use std::path::PathBuf;

use fsoc_fuse::MountConfig;

/// Most receiving threads a mount may have (as `fsoc mount --threads`).
pub const THREAD_COUNT_MAX: u16 = 64;

/// The mount(8) names of the kernel's access-time modes, as `MountConfig::access_time` takes
/// them. `atime` asks for the kernel's default, which is `relatime`.
pub const ACCESS_TIME_RELATIVE: &str = "relatime";
pub const ACCESS_TIME_NEVER: &str = "noatime";
pub const ACCESS_TIME_STRICT: &str = "strictatime";

/// What an option list asks for; `None` leaves the setting as it was.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountOptions {
    pub read_only: Option<bool>,
    pub set_user_id: Option<bool>,
    pub devices: Option<bool>,
    pub execute: Option<bool>,
    pub access_time: Option<&'static str>,
    pub allow_other: Option<bool>,
    /// Seconds between periodic transaction points; 0: only on fsync and unmount.
    pub commit_interval_seconds: Option<u64>,
    pub thread_count: Option<u16>,
    /// Pages a second the background scrub reads; 0: no background scrub.
    pub scrub_pages_per_second: Option<u32>,
    pub writeback_cache: Option<bool>,
    /// FUSE over io_uring when the kernel offers it (`io_uring`/`no_io_uring`).
    pub io_uring: Option<bool>,
    /// Extended attributes served (`xattr`/`noxattr`, as ext4's `user_xattr`).
    pub xattrs: Option<bool>,
    /// POSIX ACLs enforced (`acl`/`noacl`, as ext4's).
    pub posix_acl: Option<bool>,
    /// Where the background server appends its log lines.
    pub log: Option<PathBuf>,
    /// Change the options of a live mount (`mount -o remount,...`).
    pub remount: bool,
}

/// mount(8)'s own options, which libmount passes to helpers (`nofail`, `_netdev`, `user`, as
/// `mount -t fuse.fsoc ... -o user,nofail` shows) and which ask nothing of the file system.
const MOUNT_PROGRAM_OPTIONS: [&str; 10] =
    ["defaults", "auto", "noauto", "nofail", "_netdev", "user", "nouser", "users", "owner", "group"];
const MOUNT_PROGRAM_PREFIXES: [&str; 4] = ["user=", "comment=", "x-", "X-"];

/// Options the kernel shows for every FUSE mount (in /proc/self/mountinfo), which mount(8)
/// repeats when it remounts: accepted on a remount, where they change nothing.
const FUSE_KERNEL_PREFIXES: [&str; 5] = ["user_id=", "group_id=", "rootmode=", "max_read=", "blksize="];

/// Every option name fsoc knows, for messages.
pub const KNOWN_OPTIONS: &str = "ro, rw, suid, nosuid, dev, nodev, exec, noexec, atime, noatime, relatime, \
     strictatime, allow_other, no_allow_other, default_permissions, commit=SECONDS, threads=N, writeback_cache, \
     no_writeback_cache, io_uring, no_io_uring, xattr, noxattr, acl, noacl, scrub=PAGES_PER_SECOND, log=PATH, remount";

/// Parses a comma-separated option list. With `sloppy` (mount -s), unknown options are
/// returned as warnings instead of refused.
pub fn parse(list: &str, sloppy: bool) -> Result<(MountOptions, Vec<String>), String> {
    let mut options = MountOptions::default();
    let mut warnings = Vec::new();
    for option in list.split(',').filter(|option| !option.is_empty()) {
        match options.apply(option) {
            Ok(()) => {}
            Err(Refusal::Unknown) if sloppy => warnings.push(format!("ignoring unknown mount option \"{option}\"")),
            Err(Refusal::Unknown) => {
                return Err(format!("unknown mount option \"{option}\" (fsoc knows: {KNOWN_OPTIONS})"))
            }
            Err(Refusal::BadValue(problem)) => return Err(format!("mount option \"{option}\": {problem}")),
        }
    }
    // Kernel options of a live FUSE mount mean something only when repeated on a remount.
    if !options.remount {
        if let Some(option) = list.split(',').find(|option| is_fuse_kernel_option(option)) {
            return Err(format!(
                "mount option \"{option}\" is set by the kernel's FUSE mount, not by the user (fsoc knows: {KNOWN_OPTIONS})"
            ));
        }
    }
    Ok((options, warnings))
}

/// For clap: a whole `-o` list, strictly parsed.
pub fn parse_strict(list: &str) -> Result<MountOptions, String> {
    parse(list, false).map(|(options, _)| options)
}

enum Refusal {
    Unknown,
    BadValue(String),
}

fn is_fuse_kernel_option(option: &str) -> bool {
    FUSE_KERNEL_PREFIXES.iter().any(|prefix| option.starts_with(prefix))
}

impl MountOptions {
    fn apply(&mut self, option: &str) -> Result<(), Refusal> {
        let (name, value) = match option.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (option, None),
        };
        let flag = |value: Option<&str>, setting: bool| match value {
            None => Ok(Some(setting)),
            Some(_) => Err(Refusal::BadValue("takes no value".into())),
        };
        match name {
            "ro" => self.read_only = flag(value, true)?,
            "rw" => self.read_only = flag(value, false)?,
            "suid" => self.set_user_id = flag(value, true)?,
            "nosuid" => self.set_user_id = flag(value, false)?,
            "dev" => self.devices = flag(value, true)?,
            "nodev" => self.devices = flag(value, false)?,
            "exec" => self.execute = flag(value, true)?,
            "noexec" => self.execute = flag(value, false)?,
            "atime" | "relatime" => {
                flag(value, true)?;
                self.access_time = Some(ACCESS_TIME_RELATIVE);
            }
            "noatime" => {
                flag(value, true)?;
                self.access_time = Some(ACCESS_TIME_NEVER);
            }
            "strictatime" => {
                flag(value, true)?;
                self.access_time = Some(ACCESS_TIME_STRICT);
            }
            "allow_other" => self.allow_other = flag(value, true)?,
            // Not `private`: mount(8) takes that as a propagation flag and never passes it on.
            "no_allow_other" => self.allow_other = flag(value, false)?,
            // Always on: the kernel checks permissions, and the server relies on it.
            "default_permissions" => {
                flag(value, true)?;
            }
            "writeback_cache" => self.writeback_cache = flag(value, true)?,
            "no_writeback_cache" => self.writeback_cache = flag(value, false)?,
            "io_uring" => self.io_uring = flag(value, true)?,
            "no_io_uring" => self.io_uring = flag(value, false)?,
            "xattr" | "user_xattr" => self.xattrs = flag(value, true)?,
            "noxattr" | "nouser_xattr" => self.xattrs = flag(value, false)?,
            "acl" => self.posix_acl = flag(value, true)?,
            "noacl" => self.posix_acl = flag(value, false)?,
            "remount" => {
                flag(value, true)?;
                self.remount = true;
            }
            "commit" => {
                let seconds = number(value, "SECONDS")?;
                if seconds > u64::from(u32::MAX) {
                    return Err(Refusal::BadValue(format!("{seconds} seconds is too long")));
                }
                self.commit_interval_seconds = Some(seconds);
            }
            "scrub" => {
                let rate = number(value, "PAGES_PER_SECOND")?;
                self.scrub_pages_per_second = Some(u32::try_from(rate).map_err(|_| {
                    Refusal::BadValue(format!("{rate} pages a second is more than the flash can read"))
                })?);
            }
            "threads" => {
                let count = number(value, "N")?;
                if !(1..=u64::from(THREAD_COUNT_MAX)).contains(&count) {
                    return Err(Refusal::BadValue(format!("threads must be 1 to {THREAD_COUNT_MAX}")));
                }
                self.thread_count = u16::try_from(count).ok();
            }
            "log" => match value {
                Some(path) if !path.is_empty() => self.log = Some(PathBuf::from(path)),
                _ => return Err(Refusal::BadValue("needs a path: log=PATH".into())),
            },
            _ if MOUNT_PROGRAM_OPTIONS.contains(&option) => {}
            _ if MOUNT_PROGRAM_PREFIXES.iter().any(|prefix| option.starts_with(prefix)) => {}
            _ if is_fuse_kernel_option(option) => {}
            _ => return Err(Refusal::Unknown),
        }
        Ok(())
    }

    /// `later` applied on top of `self`: what `later` sets wins.
    pub fn then(&self, later: &MountOptions) -> MountOptions {
        MountOptions {
            read_only: later.read_only.or(self.read_only),
            set_user_id: later.set_user_id.or(self.set_user_id),
            devices: later.devices.or(self.devices),
            execute: later.execute.or(self.execute),
            access_time: later.access_time.or(self.access_time),
            allow_other: later.allow_other.or(self.allow_other),
            commit_interval_seconds: later.commit_interval_seconds.or(self.commit_interval_seconds),
            thread_count: later.thread_count.or(self.thread_count),
            scrub_pages_per_second: later.scrub_pages_per_second.or(self.scrub_pages_per_second),
            writeback_cache: later.writeback_cache.or(self.writeback_cache),
            io_uring: later.io_uring.or(self.io_uring),
            xattrs: later.xattrs.or(self.xattrs),
            posix_acl: later.posix_acl.or(self.posix_acl),
            log: later.log.clone().or_else(|| self.log.clone()),
            remount: later.remount || self.remount,
        }
    }

    /// Sets what these options ask for in `config`.
    pub fn configure(&self, config: &mut MountConfig) {
        if let Some(read_only) = self.read_only {
            config.read_only = read_only;
        }
        if let Some(set_user_id) = self.set_user_id {
            config.set_user_id = set_user_id;
        }
        if let Some(devices) = self.devices {
            config.devices = devices;
        }
        if let Some(execute) = self.execute {
            config.execute = execute;
        }
        if let Some(access_time) = self.access_time {
            config.access_time = access_time;
        }
        if let Some(allow_other) = self.allow_other {
            config.allow_other = allow_other;
        }
        if let Some(seconds) = self.commit_interval_seconds {
            config.commit_interval = (seconds > 0).then(|| std::time::Duration::from_secs(seconds));
        }
        if let Some(thread_count) = self.thread_count {
            config.thread_count = usize::from(thread_count);
        }
        if let Some(rate) = self.scrub_pages_per_second {
            config.scrub_pages_per_second = rate;
        }
        if let Some(writeback_cache) = self.writeback_cache {
            config.writeback_cache = writeback_cache;
        }
        if let Some(io_uring) = self.io_uring {
            config.io_uring = io_uring;
        }
        if let Some(xattrs) = self.xattrs {
            config.xattrs = xattrs;
        }
        if let Some(posix_acl) = self.posix_acl {
            config.posix_acl = posix_acl;
        }
    }

    /// The same options as a list `parse` reads back (without `remount` and mount(8)'s own
    /// options): what the helper hands the server it starts. `None` if a path cannot be
    /// carried in an option list (a comma in it).
    pub fn to_list(&self) -> Option<String> {
        let mut names: Vec<String> = Vec::new();
        let mut push = |setting: Option<bool>, on: &str, off: &str| {
            if let Some(setting) = setting {
                names.push(if setting { on } else { off }.to_string());
            }
        };
        push(self.read_only, "ro", "rw");
        push(self.set_user_id, "suid", "nosuid");
        push(self.devices, "dev", "nodev");
        push(self.execute, "exec", "noexec");
        push(self.allow_other, "allow_other", "no_allow_other");
        push(self.writeback_cache, "writeback_cache", "no_writeback_cache");
        push(self.io_uring, "io_uring", "no_io_uring");
        push(self.xattrs, "xattr", "noxattr");
        push(self.posix_acl, "acl", "noacl");
        if let Some(access_time) = self.access_time {
            names.push(access_time.to_string());
        }
        if let Some(seconds) = self.commit_interval_seconds {
            names.push(format!("commit={seconds}"));
        }
        if let Some(count) = self.thread_count {
            names.push(format!("threads={count}"));
        }
        if let Some(rate) = self.scrub_pages_per_second {
            names.push(format!("scrub={rate}"));
        }
        if let Some(log) = &self.log {
            let log = log.to_str()?;
            if log.contains(',') {
                return None;
            }
            names.push(format!("log={log}"));
        }
        Some(names.join(","))
    }
}

fn number(value: Option<&str>, placeholder: &str) -> Result<u64, Refusal> {
    let text = value.ok_or_else(|| Refusal::BadValue(format!("needs a value: ={placeholder}")))?;
    text.parse::<u64>().map_err(|_| Refusal::BadValue(format!("\"{text}\" is not a whole number ({placeholder})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(list: &str) -> MountOptions {
        parse_strict(list).unwrap_or_else(|error| panic!("{list}: {error}"))
    }

    fn refused(list: &str) -> String {
        parse_strict(list).expect_err(list)
    }

    /// Reads one setting of parsed options.
    type Setting = fn(&MountOptions) -> Option<bool>;

    #[test]
    fn every_flag_option_sets_its_setting() {
        let on_off: [(&str, &str, Setting); 10] = [
            ("ro", "rw", |options| options.read_only),
            ("suid", "nosuid", |options| options.set_user_id),
            ("dev", "nodev", |options| options.devices),
            ("exec", "noexec", |options| options.execute),
            ("allow_other", "no_allow_other", |options| options.allow_other),
            ("writeback_cache", "no_writeback_cache", |options| options.writeback_cache),
            ("io_uring", "no_io_uring", |options| options.io_uring),
            ("xattr", "noxattr", |options| options.xattrs),
            ("acl", "noacl", |options| options.posix_acl),
            ("remount", "remount", |options| Some(options.remount)),
        ];
        for (on, off, setting) in on_off {
            assert_eq!(setting(&parsed(on)), Some(true), "{on}");
            if on != off {
                assert_eq!(setting(&parsed(off)), Some(false), "{off}");
                // The later of two contradicting options wins, as in mount(8).
                assert_eq!(setting(&parsed(&format!("{on},{off}"))), Some(false), "{on},{off}");
                assert_eq!(setting(&parsed(&format!("{off},{on}"))), Some(true), "{off},{on}");
            }
            let unset = if on == "remount" { Some(false) } else { None };
            assert_eq!(setting(&MountOptions::default()), unset, "{on}: nothing set without options");
            assert!(refused(&format!("{on}=1")).contains("takes no value"), "{on}=1");
        }
        assert_eq!(parsed("default_permissions"), MountOptions::default(), "always on: changes nothing");
    }

    #[test]
    fn access_time_options_name_the_kernel_modes() {
        assert_eq!(parsed("atime").access_time, Some("relatime"), "atime is the kernel's default, relatime");
        assert_eq!(parsed("relatime").access_time, Some("relatime"));
        assert_eq!(parsed("noatime").access_time, Some("noatime"));
        assert_eq!(parsed("strictatime").access_time, Some("strictatime"));
        assert_eq!(parsed("noatime,strictatime").access_time, Some("strictatime"));
        assert_eq!(parsed("ro").access_time, None);
    }

    #[test]
    fn valued_options_check_their_values() {
        assert_eq!(parsed("commit=0").commit_interval_seconds, Some(0));
        assert_eq!(parsed("commit=30").commit_interval_seconds, Some(30));
        assert_eq!(parsed("scrub=0").scrub_pages_per_second, Some(0));
        assert_eq!(parsed("scrub=512").scrub_pages_per_second, Some(512));
        assert!(parse("scrub=many", false).is_err());
        assert!(parse("scrub=99999999999", false).is_err());
        assert!(refused("commit").contains("needs a value"));
        assert!(refused("commit=soon").contains("not a whole number"));
        assert!(refused("commit=-1").contains("not a whole number"));
        assert!(refused("commit=99999999999").contains("too long"));
        assert_eq!(parsed("threads=1").thread_count, Some(1));
        assert_eq!(parsed("threads=64").thread_count, Some(64));
        assert!(refused("threads=0").contains("1 to 64"));
        assert!(refused("threads=65").contains("1 to 64"));
        assert_eq!(parsed("log=/var/log/fsoc.log").log, Some(PathBuf::from("/var/log/fsoc.log")));
        assert!(refused("log=").contains("needs a path"));
        assert!(refused("log").contains("needs a path"));
    }

    #[test]
    fn unknown_options_are_refused_by_name_unless_sloppy() {
        for unknown in ["sync", "data=ordered", "nosuch", "ro,bogus,rw", "Ro", "uid=0"] {
            let message = refused(unknown);
            assert!(message.contains("unknown mount option"), "{unknown}: {message}");
            let name = unknown.split(',').find(|name| !["ro", "rw"].contains(name)).unwrap_or(unknown);
            assert!(message.contains(&format!("\"{name}\"")), "{unknown}: {message}");
            assert!(message.contains("fsoc knows: ro, rw"), "lists the known options: {message}");
        }
        let (options, warnings) = parse("ro,bogus", true).expect("sloppy");
        assert_eq!(options.read_only, Some(true));
        assert_eq!(warnings, vec!["ignoring unknown mount option \"bogus\"".to_string()]);
    }

    #[test]
    fn mount_program_options_are_accepted_and_change_nothing() {
        // What libmount hands a helper for `-o user,nofail,_netdev,x-systemd.automount` etc.
        let list = "defaults,auto,noauto,nofail,_netdev,user,user=alice,nouser,users,owner,group,\
                    comment=systemd.automount,x-systemd.device-timeout=5,X-mount.mkdir";
        assert_eq!(parsed(list), MountOptions::default());
    }

    #[test]
    fn kernel_fuse_options_are_accepted_only_on_a_remount() {
        // mount(8) repeats /proc/self/mountinfo's super options when it remounts.
        let remount = parsed("remount,ro,user_id=0,group_id=0,default_permissions,allow_other");
        assert!(remount.remount);
        assert_eq!(remount.read_only, Some(true));
        let message = refused("user_id=0");
        assert!(message.contains("set by the kernel"), "{message}");
    }

    #[test]
    fn options_survive_a_round_trip_through_a_list() {
        let options = parsed(
            "ro,nosuid,dev,noexec,strictatime,no_allow_other,no_writeback_cache,noxattr,acl,commit=7,threads=3,scrub=9,log=/tmp/fsoc.log",
        );
        let list = options.to_list().expect("representable");
        assert_eq!(parsed(&list), options, "{list}");
        assert_eq!(MountOptions::default().to_list().as_deref(), Some(""));
        let comma = MountOptions { log: Some(PathBuf::from("/tmp/a,b")), ..MountOptions::default() };
        assert_eq!(comma.to_list(), None, "a comma cannot be carried in a list");
    }

    #[test]
    fn later_options_override_earlier_ones_and_configure_a_mount() {
        let flags = MountOptions { read_only: Some(true), thread_count: Some(2), ..MountOptions::default() };
        let list = parsed("rw,nosuid,commit=0");
        let combined = flags.then(&list);
        assert_eq!(combined.read_only, Some(false), "-o comes after the flags");
        assert_eq!(combined.thread_count, Some(2), "kept from the flags");
        let mut config = MountConfig::default();
        combined.configure(&mut config);
        assert!(!config.read_only);
        assert!(!config.set_user_id);
        assert_eq!(config.thread_count, 2);
        assert_eq!(config.commit_interval, None, "commit=0: only on fsync and unmount");
        parsed("commit=9,strictatime,noexec,allow_other,no_writeback_cache").configure(&mut config);
        assert_eq!(config.commit_interval, Some(std::time::Duration::from_secs(9)));
        assert_eq!(config.access_time, "strictatime");
        assert!(!config.execute && config.allow_other && !config.writeback_cache);
    }
}
