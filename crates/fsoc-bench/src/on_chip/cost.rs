//! Turns counted quantities into time: the host–device bus (bandwidth and a latency per
//! message), the host's and the device's CPUs (clock rates, and a cycle cost per counted unit
//! of work), and the chips' simulated time, which the simulator already gives in nanoseconds.
//!
//! The CPU is a deterministic proxy, not a measurement: the file system's work is counted in
//! calls (the workload's own calls: the same number in both modes, since the same engine runs
//! on either side of the bus) and in pages it checksums and copies (from the meter); protocol
//! work in frames sent or received (the 9P walks and clunks that the conventional host does not
//! need are frames); each unit costs a fixed number of cycles (`CpuCost`). The defaults come
//! from fsoc's engine on the development machine (2.45 GHz x86-64, local `FileSystem` over the
//! RAM simulator): a cached lookup 0.9 µs (2,300 cycles), a create and close 5.5 µs (6,700 per
//! call), a cached 4 KiB read 4.5 µs, CRC-32C of a 2 KiB page 1.1 µs (2,600 cycles). Frames
//! were not measured: 1,000 cycles each is an assumption (parse or build ~100 bytes, an
//! interrupt). A commit costs more than the proxy says (35 µs for open, close and a delta
//! commit: the proxy gives 3 calls and 1–2 pages, about 20,000 cycles), which flatters the side
//! that runs the file system in the same measure in both modes. `--cpu-*` options change them.
//!
//! Invariant: every time here is a sum of counts times constants; nothing reads a clock.

use serde_json::{json, Value};

use super::harness::{MeterReading, Traffic};

/// The bus between host and device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bus {
    pub bandwidth_bytes_per_s: f64,
    /// Command set-up, interrupt and status per frame, in either direction.
    pub latency_per_message_ns: f64,
}

impl Bus {
    pub fn time_ns(&self, traffic: &Traffic) -> f64 {
        traffic.bytes as f64 * 1e9 / self.bandwidth_bytes_per_s + traffic.messages as f64 * self.latency_per_message_ns
    }
}

/// Cycles per counted unit of work (the same for host and device: the same code runs on both,
/// as in seed 000's prototype).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuCost {
    /// One file-system call (lookup, create, one read or write of a unit, commit ...).
    pub cycles_per_call: f64,
    /// One flash page the file system checksums and copies (read or programmed).
    pub cycles_per_page: f64,
    /// One frame built or parsed, with its interrupt and DMA set-up (the driver, the stub,
    /// or the device's protocol handler).
    pub cycles_per_message: f64,
}

impl Default for CpuCost {
    fn default() -> Self {
        CpuCost { cycles_per_call: 5_000.0, cycles_per_page: 3_000.0, cycles_per_message: 1_000.0 }
    }
}

/// One setting of seed 000's experiment: bus, clocks, costs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Setting {
    pub name: &'static str,
    pub bus: Bus,
    pub host_clock_hz: f64,
    pub device_clock_hz: f64,
    pub cpu: CpuCost,
}

impl Setting {
    /// Seed 000's prototype: a CompactFlash card on PCMCIA. The seed's Fig. 11 parameters give
    /// Tmedia + Ttrans = 5.6 ms per 4 KB with flash reading at 42 MB/s, so the bus moved about
    /// 750 KB/s (the text: 700 KB/s to 1 MB/s with the host clock); host ARM920T at 56 MHz,
    /// device core at 24 MHz. The per-message latency (task-file writes, an interrupt, the
    /// status read of a PC Card ATA command) is our assumption: 50 µs.
    pub fn seed() -> Setting {
        Setting {
            name: "seed_cf_pcmcia",
            bus: Bus { bandwidth_bytes_per_s: 750e3, latency_per_message_ns: 50_000.0 },
            host_clock_hz: 56e6,
            device_clock_hz: 24e6,
            cpu: CpuCost::default(),
        }
    }

    /// A modern card: a 40 MB/s bus with 5 µs per message, a 2 GHz host and a 400 MHz
    /// controller core (5× slower).
    pub fn modern() -> Setting {
        Setting {
            name: "modern_40mb_s",
            bus: Bus { bandwidth_bytes_per_s: 40e6, latency_per_message_ns: 5_000.0 },
            host_clock_hz: 2e9,
            device_clock_hz: 400e6,
            cpu: CpuCost::default(),
        }
    }

    pub fn host_ns(&self, cycles: f64) -> f64 {
        cycles * 1e9 / self.host_clock_hz
    }

    pub fn device_ns(&self, cycles: f64) -> f64 {
        cycles * 1e9 / self.device_clock_hz
    }

    pub fn to_json(&self) -> Value {
        json!({
            "bus_bandwidth_bytes_per_s": self.bus.bandwidth_bytes_per_s,
            "bus_latency_per_message_us": self.bus.latency_per_message_ns / 1e3,
            "host_clock_mhz": self.host_clock_hz / 1e6,
            "device_clock_mhz": self.device_clock_hz / 1e6,
            "device_cpu_slowdown": self.host_clock_hz / self.device_clock_hz,
            "cycles_per_call": self.cpu.cycles_per_call,
            "cycles_per_page": self.cpu.cycles_per_page,
            "cycles_per_message": self.cpu.cycles_per_message,
        })
    }
}

/// Where the file system runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// On the chip (FSOC): the host runs the stub only.
    OnChip,
    /// On the host (conventional device): the device runs a raw page server only.
    Conventional,
}

impl Mode {
    pub const BOTH: [Mode; 2] = [Mode::OnChip, Mode::Conventional];

    pub fn name(self) -> &'static str {
        match self {
            Mode::OnChip => "fsoc",
            Mode::Conventional => "conventional",
        }
    }
}

/// The counts of a piece of work in one mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    pub traffic: Traffic,
    pub chips: MeterReading,
    /// File-system calls: the workload's calls of the engine's API (the same in both modes).
    pub fs_calls: u64,
}

impl Work {
    pub fn add(&mut self, other: &Work) {
        self.traffic.bytes += other.traffic.bytes;
        self.traffic.messages += other.traffic.messages;
        self.chips.pages_read += other.chips.pages_read;
        self.chips.pages_programmed += other.chips.pages_programmed;
        self.chips.blocks_erased += other.chips.blocks_erased;
        self.chips.done_max_ns += other.chips.done_max_ns;
        self.fs_calls += other.fs_calls;
    }
}

/// A piece of work's time in its parts (Eqs. (1)–(2) of seed 000: nothing overlaps).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Elapsed {
    /// Host CPU in the file system (conventional only): TFS_host.
    pub host_fs_ns: f64,
    /// Host CPU in the driver or stub: Tdriver, Tstub.
    pub host_io_ns: f64,
    /// Device CPU in the file system (FSOC only): TFS_FSOC.
    pub device_fs_ns: f64,
    /// Device CPU handling frames (both modes).
    pub device_io_ns: f64,
    /// Simulated chip time: Tmedia.
    pub media_ns: f64,
    /// The bus: Ttrans.
    pub transfer_ns: f64,
}

impl Elapsed {
    pub fn of(work: &Work, mode: Mode, setting: &Setting) -> Elapsed {
        let cpu = setting.cpu;
        let fs_cycles = work.fs_calls as f64 * cpu.cycles_per_call + work.chips.pages() as f64 * cpu.cycles_per_page;
        let io_cycles = work.traffic.messages as f64 * cpu.cycles_per_message;
        let (host_fs_ns, device_fs_ns) = match mode {
            Mode::OnChip => (0.0, setting.device_ns(fs_cycles)),
            Mode::Conventional => (setting.host_ns(fs_cycles), 0.0),
        };
        Elapsed {
            host_fs_ns,
            host_io_ns: setting.host_ns(io_cycles),
            device_fs_ns,
            device_io_ns: setting.device_ns(io_cycles),
            media_ns: work.chips.done_max_ns as f64,
            transfer_ns: setting.bus.time_ns(&work.traffic),
        }
    }

    /// Host CPU time (what the host spends on this I/O instead of the application).
    pub fn host_ns(&self) -> f64 {
        self.host_fs_ns + self.host_io_ns
    }

    /// What happens outside the host CPU: device CPU, chips and bus.
    pub fn outside_host_ns(&self) -> f64 {
        self.device_fs_ns + self.device_io_ns + self.media_ns + self.transfer_ns
    }

    pub fn total_ns(&self) -> f64 {
        self.host_ns() + self.outside_host_ns()
    }

    pub fn to_json(&self) -> Value {
        json!({
            "total_ms": self.total_ns() / 1e6,
            "host_fs_ms": self.host_fs_ns / 1e6,
            "host_io_ms": self.host_io_ns / 1e6,
            "device_fs_ms": self.device_fs_ns / 1e6,
            "device_io_ms": self.device_io_ns / 1e6,
            "media_ms": self.media_ns / 1e6,
            "transfer_ms": self.transfer_ns / 1e6,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One 4 KiB read's worth of counts: the parts land on the side of the bus the file system
    // runs on, and the bus and chips cost the same in both modes.
    #[test]
    fn parts_follow_the_mode() {
        let work = Work {
            traffic: Traffic { bytes: 4_096, messages: 2 },
            chips: MeterReading { pages_read: 2, done_max_ns: 80_000, ..MeterReading::default() },
            fs_calls: 1,
        };
        let setting = Setting::seed();
        let chip = Elapsed::of(&work, Mode::OnChip, &setting);
        let host = Elapsed::of(&work, Mode::Conventional, &setting);
        assert_eq!((chip.host_fs_ns, host.device_fs_ns), (0.0, 0.0));
        assert!((chip.device_fs_ns / host.host_fs_ns - 56.0 / 24.0).abs() < 1e-9);
        assert_eq!(chip.transfer_ns, host.transfer_ns);
        let expected_transfer_ns = 4_096.0 * 1e9 / 750e3 + 2.0 * 50_000.0;
        assert!((chip.transfer_ns - expected_transfer_ns).abs() < 1e-6, "{}", chip.transfer_ns);
        assert_eq!(chip.media_ns, 80_000.0);
    }
}
