//! FUSE over io_uring as the mount sees it: the kernel's switch for it and the log line that
//! says a mount got it (`MountConfig::io_uring`, docs/MOUNT.md "FUSE over io_uring").

use std::fs;

/// The fuse module's switch (Linux 6.14 on, `CONFIG_FUSE_IO_URING`): the kernel offers FUSE
/// over io_uring only while it reads `Y`.
pub const IO_URING_SWITCH: &str = "/sys/module/fuse/parameters/enable_uring";

/// What `fsoc mount` logs (at info level) when the kernel granted FUSE over io_uring.
pub const IO_URING_GRANTED: &str = "FUSE over io_uring: requests and replies travel through io_uring";

/// The kernel's switch set for a while, and put back as it was when dropped.
pub struct IoUringSwitch {
    was_on: bool,
    on: bool,
}

impl IoUringSwitch {
    /// Sets the switch. Fails when the kernel has none (older than 6.14, or built without it)
    /// or it cannot be written (not root).
    pub fn set(on: bool) -> Result<IoUringSwitch, String> {
        let value = fs::read_to_string(IO_URING_SWITCH).map_err(|error| {
            format!("{IO_URING_SWITCH}: {error} (the kernel has no FUSE over io_uring: it needs Linux 6.14 or later)")
        })?;
        let was_on = value.trim() == "Y";
        if was_on != on {
            write(on).map_err(|error| format!("{IO_URING_SWITCH}: {error}"))?;
        }
        Ok(IoUringSwitch { was_on, on })
    }

    /// Whether the switch was on before `set`.
    pub fn was_on(&self) -> bool {
        self.was_on
    }
}

impl Drop for IoUringSwitch {
    fn drop(&mut self) {
        if self.was_on != self.on {
            let _ = write(self.was_on);
        }
    }
}

fn write(on: bool) -> std::io::Result<()> {
    fs::write(IO_URING_SWITCH, if on { "Y\n" } else { "N\n" })
}
