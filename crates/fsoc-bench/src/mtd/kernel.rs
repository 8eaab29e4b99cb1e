//! The Linux side of `fsoc bench mtd`: the kernel's nandsim loaded with a geometry and a
//! datasheet's delays, flash operations counted by kprobes on the raw-NAND layer, and the two
//! file systems set up on the simulated chip (fsoc through its FUSE mount, UBI + UBIFS through
//! mtd-utils and mount(8)). Knows nothing of the workloads or the report.
//!
//! Invariants: nandsim is loaded only when it was not loaded before the run, so a simulated
//! chip someone else uses is never replaced; only the MTD devices nandsim created are touched;
//! every guard undoes its set-up when dropped (unmount, detach UBI, unload nandsim, remove the
//! kprobes), also on error and on Ctrl-C.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::report::{Counted, FlashOps, Geometry, NandDelays};
use crate::fuse::mounts::{run_program, run_program_ok};

/// Limit for a set-up step (format, attach, mount); ubiformat of 8 GiB with delays on takes
/// about three minutes of erases alone.
const STEP_TIMEOUT: Duration = Duration::from_secs(1800);

/// The kprobe events this run adds (and removes), one per counted NAND operation.
const PROBES: [(&str, &str); 3] = [
    ("fsoc_bench_page_reads", "nand_read_page_op"),
    ("fsoc_bench_page_programs", "nand_prog_page_begin_op"),
    ("fsoc_bench_block_erases", "nand_erase_op"),
];

/// How kernel modules are loaded, and where set-up programs leave their output.
pub struct Kernel {
    /// `modprobe`, or the guest's `load-module` (scripts/vm/build-initramfs.sh).
    pub module_loader: String,
    pub scratch: PathBuf,
}

fn module_loaded(name: &str) -> bool {
    Path::new("/sys/module").join(name).exists()
}

fn read_trimmed(path: &Path) -> Result<String, String> {
    fs::read_to_string(path).map(|text| text.trim().to_string()).map_err(|error| format!("{}: {error}", path.display()))
}

fn read_number(path: &Path) -> Result<u64, String> {
    let text = read_trimmed(path)?;
    text.parse().map_err(|_| format!("{}: not a number: {text:?}", path.display()))
}

impl Kernel {
    /// Runs a program that must succeed, its output kept in the scratch directory.
    pub fn run(&self, command: &mut Command) -> Result<String, String> {
        run_program_ok(command, &self.scratch, STEP_TIMEOUT).map(|output| output.stdout)
    }

    /// Loads a module and its dependencies (those already loaded are left as they are).
    pub fn load_module(&self, name: &str, parameters: &[String]) -> Result<(), String> {
        // Loaded already (an earlier step or run): as modprobe, nothing to do. The guest's
        // insmod would answer EEXIST. (A module that takes parameters, nandsim, is refused
        // loaded by `problems`, since its chip would be replaced.)
        if parameters.is_empty() && module_loaded(name) {
            return Ok(());
        }
        self.run(Command::new(&self.module_loader).arg(name).args(parameters))
            .map(drop)
            .map_err(|error| format!("cannot load the kernel module {name}: {error}"))
    }

    /// Why this kernel cannot run the benchmark, if it cannot; loads nothing that stays.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        // SAFETY: geteuid(2) has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            problems.push("root (it loads nandsim, attaches UBI and mounts file systems)".into());
        }
        if module_loaded("nandsim") {
            problems.push(
                "nandsim not loaded yet: it is loaded already, and this run would replace its chip \
                 (rmmod nandsim first if nothing uses it)"
                    .into(),
            );
        }
        if !Path::new("/dev/fuse").exists() {
            problems.push("/dev/fuse (the fuse module) for fsoc's mount".into());
        }
        for program in ["ubiformat", "ubiattach", "ubidetach", "ubimkvol", "fusermount3", "postmark"] {
            if crate::fuse::workloads::find_program(program).is_none() {
                let package = match program {
                    "fusermount3" => "fuse3",
                    "postmark" => "postmark",
                    _ => "mtd-utils",
                };
                problems.push(format!("the program {program} (package {package})"));
            }
        }
        if crate::fuse::workloads::find_program(&self.module_loader).is_none() {
            problems.push(format!("the module loader {} on PATH", self.module_loader));
        }
        problems
    }

    /// Loads nandsim with `id_bytes`, `overridesize` (2^N erase blocks) and the delays, and
    /// returns its chip; the guard unloads it.
    pub fn load_nandsim(
        &self,
        id_bytes: &str,
        overridesize: Option<u32>,
        delays: &NandDelays,
    ) -> Result<Nandsim<'_>, String> {
        if module_loaded("nandsim") {
            return Err("nandsim is loaded already (a previous chip was not unloaded)".into());
        }
        let mut parameters = vec![format!("id_bytes={id_bytes}")];
        if let Some(exponent) = overridesize {
            parameters.push(format!("overridesize={exponent}"));
        }
        parameters.extend(delays.module_parameters());
        self.load_module("nandsim", &parameters)?;
        // The guard exists from here on, so an error below still unloads the module.
        let mut chip = Nandsim { kernel: self, device: PathBuf::new(), mtd_index: 0, geometry: Geometry::default() };
        let (index, device) = find_nandsim_device()?;
        let class = PathBuf::from(format!("/sys/class/mtd/mtd{index}"));
        chip.mtd_index = index;
        chip.device = device;
        chip.geometry = Geometry {
            nandsim_id_bytes: id_bytes.to_string(),
            page_size_bytes: read_number(&class.join("writesize"))?,
            oob_size_bytes: read_number(&class.join("oobsize"))?,
            oob_free_bytes: read_number(&class.join("oobavail"))?,
            erase_block_size_bytes: read_number(&class.join("erasesize"))?,
            size_bytes: read_number(&class.join("size"))?,
        };
        if chip.geometry.page_size_bytes == 0 || chip.geometry.erase_block_size_bytes == 0 {
            return Err(format!("nandsim's chip reports a zero page or block size: {:?}", chip.geometry));
        }
        Ok(chip)
    }

    /// Loads UBI and UBIFS (UBIFS's compressors are soft dependencies: zstd is tried, LZO, its
    /// default, is built into Debian's kernel).
    pub fn load_ubifs(&self) -> Result<(), String> {
        let _ = self.load_module("zstd", &[]);
        self.load_module("ubifs", &[])
    }
}

/// The MTD device nandsim registered: its partition is named "NAND simulator partition 0".
/// Waits for devtmpfs to create the node.
fn find_nandsim_device() -> Result<(u32, PathBuf), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut found = None;
        if let Ok(entries) = fs::read_dir("/sys/class/mtd") {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(index) = name.strip_prefix("mtd").and_then(|digits| digits.parse::<u32>().ok()) else {
                    continue;
                };
                let label = fs::read_to_string(entry.path().join("name")).unwrap_or_default();
                if label.starts_with("NAND simulator") && found.as_ref().is_none_or(|(lowest, _)| index < *lowest) {
                    found = Some((index, PathBuf::from(format!("/dev/mtd{index}"))));
                }
            }
        }
        if let Some((index, device)) = found.filter(|(_, device)| device.exists()) {
            return Ok((index, device));
        }
        if Instant::now() >= deadline {
            return Err("nandsim loaded but no /dev/mtdN named \"NAND simulator …\" appeared within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A loaded nandsim chip; dropped, the module is unloaded (and the chip's contents are gone).
pub struct Nandsim<'a> {
    kernel: &'a Kernel,
    pub device: PathBuf,
    pub mtd_index: u32,
    pub geometry: Geometry,
}

impl Drop for Nandsim<'_> {
    fn drop(&mut self) {
        // rmmod, not modprobe -r: the nand module stays, with the kprobes on its functions.
        for _ in 0..50 {
            let unloaded = run_program(Command::new("rmmod").arg("nandsim"), &self.kernel.scratch, STEP_TIMEOUT, false)
                .is_ok_and(|output| output.status.success());
            if unloaded || !module_loaded("nandsim") {
                return;
            }
            // Busy for a moment after the last user closed the device.
            std::thread::sleep(Duration::from_millis(200));
        }
        eprintln!("fsoc bench mtd: cannot unload nandsim (still in use?)");
    }
}

/// Kprobe events counting the raw-NAND layer's page reads, page programs and block erases
/// (`/sys/kernel/tracing/kprobe_profile`); removed when dropped.
pub struct Kprobes {
    tracing: PathBuf,
}

impl Kprobes {
    /// Adds and enables the three events. The probed functions are in the `nand` module, so
    /// nandsim (which loads it) must have been loaded once before.
    pub fn install() -> Result<Kprobes, String> {
        let tracing = PathBuf::from("/sys/kernel/tracing");
        if !tracing.join("kprobe_events").exists() {
            let output = Command::new("mount")
                .args(["-t", "tracefs", "nodev"])
                .arg(&tracing)
                .output()
                .map_err(|error| format!("cannot run mount -t tracefs: {error}"))?;
            if !output.status.success() || !tracing.join("kprobe_events").exists() {
                return Err(format!(
                    "no kprobe events: mount -t tracefs {} failed ({}); the kernel needs CONFIG_KPROBE_EVENTS",
                    tracing.display(),
                    String::from_utf8_lossy(&output.stderr).trim()
                ));
            }
        }
        let probes = Kprobes { tracing };
        probes.remove_events();
        let events = probes.tracing.join("kprobe_events");
        for (event, function) in PROBES {
            append(&events, &format!("p:{event} {function}\n"))
                .map_err(|error| format!("cannot add a kprobe on {function}: {error}"))?;
            let enable = probes.tracing.join("events/kprobes").join(event).join("enable");
            fs::write(&enable, "1\n").map_err(|error| format!("{}: {error}", enable.display()))?;
        }
        Ok(probes)
    }

    /// The hit counts so far.
    pub fn read(&self) -> Result<FlashOps, String> {
        let path = self.tracing.join("kprobe_profile");
        let profile = fs::read_to_string(&path).map_err(|error| format!("{}: {error}", path.display()))?;
        let hits = |event: &str| -> Result<u64, String> {
            profile
                .lines()
                .find_map(|line| {
                    let mut words = line.split_whitespace();
                    (words.next() == Some(event)).then(|| words.next().and_then(|hits| hits.parse().ok()))?
                })
                .ok_or_else(|| format!("{}: no count for {event}", path.display()))
        };
        Ok(FlashOps {
            page_reads: hits(PROBES[0].0)?,
            page_programs: hits(PROBES[1].0)?,
            block_erases: hits(PROBES[2].0)?,
        })
    }

    /// Runs `work`, counting the flash operations and the wall time it takes; the delays and
    /// page size give the part of the time nandsim's busy-waits account for.
    pub fn count<T>(
        &self,
        delays: &NandDelays,
        page_size_bytes: u64,
        work: impl FnOnce() -> Result<T, String>,
    ) -> Result<(Counted, T), String> {
        let before = self.read()?;
        let started = Instant::now();
        let value = work()?;
        let wall = started.elapsed();
        let after = self.read()?;
        let ops = after.since(&before);
        Ok((Counted::new(ops, wall.as_secs_f64(), delays, page_size_bytes), value))
    }

    fn remove_events(&self) {
        for (event, _) in PROBES {
            let enable = self.tracing.join("events/kprobes").join(event).join("enable");
            if enable.exists() {
                let _ = fs::write(&enable, "0\n");
                let _ = append(&self.tracing.join("kprobe_events"), &format!("-:{event}\n"));
            }
        }
    }
}

impl Drop for Kprobes {
    fn drop(&mut self) {
        self.remove_events();
    }
}

fn append(path: &Path, line: &str) -> std::io::Result<()> {
    use std::io::Write;
    fs::OpenOptions::new().append(true).open(path)?.write_all(line.as_bytes())
}

/// A file system on the chip that can be mounted and unmounted again and again.
pub trait Volume {
    /// Makes it usable at `root()`: fsoc's FUSE mount, or UBI's attach plus UBIFS's mount.
    fn mount(&mut self) -> Result<(), String>;
    /// Undoes `mount`, leaving everything committed on the chip.
    fn unmount(&mut self) -> Result<(), String>;
    fn root(&self) -> &Path;
}

/// An fsoc volume on the chip, mounted with `fsoc mount DEVICE DIR --daemon`.
pub struct FsocVolume<'a> {
    kernel: &'a Kernel,
    fsoc: PathBuf,
    device: PathBuf,
    mount_point: PathBuf,
    mounted: bool,
}

impl<'a> FsocVolume<'a> {
    /// `fsoc mkfs DEVICE` on the (fresh) chip; the mount point is made in the scratch directory.
    pub fn format(kernel: &'a Kernel, fsoc: &Path, device: &Path) -> Result<FsocVolume<'a>, String> {
        let mount_point = kernel.scratch.join("fsoc-mnt");
        fs::create_dir_all(&mount_point).map_err(|error| format!("{}: {error}", mount_point.display()))?;
        kernel.run(Command::new(fsoc).arg("mkfs").arg(device))?;
        Ok(FsocVolume { kernel, fsoc: fsoc.into(), device: device.into(), mount_point, mounted: false })
    }
}

impl Volume for FsocVolume<'_> {
    fn mount(&mut self) -> Result<(), String> {
        assert!(!self.mounted, "fsoc volume mounted twice");
        let log = self.kernel.scratch.join("fsoc-mount.log");
        // --daemon returns once the kernel has the mount (or with the server's error).
        self.kernel.run(
            Command::new(&self.fsoc)
                .arg("mount")
                .arg(&self.device)
                .arg(&self.mount_point)
                .arg("--daemon")
                .arg("--log")
                .arg(log),
        )?;
        self.mounted = true;
        Ok(())
    }

    fn unmount(&mut self) -> Result<(), String> {
        assert!(self.mounted, "fsoc volume unmounted while not mounted");
        // Returns once the server has committed and closed the device.
        self.kernel.run(Command::new(&self.fsoc).arg("umount").arg(&self.mount_point))?;
        self.mounted = false;
        Ok(())
    }

    fn root(&self) -> &Path {
        &self.mount_point
    }
}

impl Drop for FsocVolume<'_> {
    fn drop(&mut self) {
        if self.mounted {
            let _ = self.unmount();
        }
    }
}

/// A UBI device attached to the chip with one UBIFS volume filling it, as on a product:
/// `ubiformat` (erase counters on every block), `ubiattach`, `ubimkvol -m`, `mount -t ubifs`.
pub struct UbiVolume<'a> {
    kernel: &'a Kernel,
    mtd_index: u32,
    ubi_number: u32,
    mount_point: PathBuf,
    attached: bool,
    mounted: bool,
}

impl<'a> UbiVolume<'a> {
    /// Formats the chip for UBI and makes the volume; leaves it detached.
    pub fn format(kernel: &'a Kernel, chip: &Nandsim<'_>) -> Result<UbiVolume<'a>, String> {
        let mount_point = kernel.scratch.join("ubifs-mnt");
        fs::create_dir_all(&mount_point).map_err(|error| format!("{}: {error}", mount_point.display()))?;
        // The first UBI number nobody uses.
        let ubi_number = (0..32)
            .find(|number| !Path::new(&format!("/sys/class/ubi/ubi{number}")).exists())
            .ok_or("no free UBI device number (32 attached)")?;
        kernel.run(Command::new("ubiformat").arg("-y").arg("-q").arg(&chip.device))?;
        let mut volume =
            UbiVolume { kernel, mtd_index: chip.mtd_index, ubi_number, mount_point, attached: false, mounted: false };
        volume.attach()?;
        kernel.run(Command::new("ubimkvol").arg(format!("/dev/ubi{ubi_number}")).args(["-N", "bench", "-m"]))?;
        volume.detach()?;
        Ok(volume)
    }

    fn attach(&mut self) -> Result<(), String> {
        self.kernel.run(
            Command::new("ubiattach")
                .arg("-m")
                .arg(self.mtd_index.to_string())
                .arg("-d")
                .arg(self.ubi_number.to_string()),
        )?;
        self.attached = true;
        Ok(())
    }

    fn detach(&mut self) -> Result<(), String> {
        self.kernel.run(Command::new("ubidetach").arg("-d").arg(self.ubi_number.to_string()))?;
        self.attached = false;
        Ok(())
    }
}

impl Volume for UbiVolume<'_> {
    fn mount(&mut self) -> Result<(), String> {
        assert!(!self.attached && !self.mounted, "UBI volume mounted twice");
        self.attach()?;
        self.kernel.run(
            Command::new("mount")
                .args(["-t", "ubifs"])
                .arg(format!("ubi{}:bench", self.ubi_number))
                .arg(&self.mount_point),
        )?;
        self.mounted = true;
        Ok(())
    }

    fn unmount(&mut self) -> Result<(), String> {
        assert!(self.mounted, "UBIFS unmounted while not mounted");
        self.kernel.run(Command::new("umount").arg(&self.mount_point))?;
        self.mounted = false;
        self.detach()
    }

    fn root(&self) -> &Path {
        &self.mount_point
    }
}

impl Drop for UbiVolume<'_> {
    fn drop(&mut self) {
        if self.mounted {
            let _ = self.kernel.run(Command::new("umount").arg(&self.mount_point));
            self.mounted = false;
        }
        if self.attached {
            let _ = self.detach();
        }
    }
}
