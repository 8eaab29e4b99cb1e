//! Crash-test workloads: deterministic step lists generated from a seed, and the executor that
//! applies a step to a file system. Steps are generated up front so a reference run and every
//! power-cut run perform exactly the same calls.

use fsoc_core::fs::FsError;
use fsoc_core::{FileHandle, FileSystem, OpenFlags};
use fsoc_media::Flash;

use fsoc_media::rng::SeededRng;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Mkdir(String),
    Rmdir(String),
    /// Create (or truncate) a file and write `size` bytes of a pattern chosen by `fill`.
    WriteFile {
        path: String,
        size: u64,
        fill: u8,
    },
    /// Overwrite `length` bytes at `offset` of an existing file.
    Overwrite {
        path: String,
        offset: u64,
        length: u64,
        fill: u8,
    },
    /// Append `length` bytes and fsync through the descriptor.
    AppendSync {
        path: String,
        length: u64,
        fill: u8,
    },
    Truncate {
        path: String,
        size: u64,
    },
    Unlink(String),
    Rename {
        from: String,
        to: String,
    },
    Link {
        existing: String,
        new: String,
    },
    Symlink {
        target: String,
        link: String,
    },
    Transact,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    SmallFiles,
    Overwrite,
    RenameStorm,
    DeepTree,
    FillAndDelete,
    Cleaner,
    Churn,
    SyncSmall,
}

impl Workload {
    pub const ALL: [Workload; 8] = [
        Workload::SmallFiles,
        Workload::Overwrite,
        Workload::RenameStorm,
        Workload::DeepTree,
        Workload::FillAndDelete,
        Workload::Cleaner,
        Workload::Churn,
        Workload::SyncSmall,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::SmallFiles => "small-files",
            Workload::Overwrite => "overwrite",
            Workload::RenameStorm => "rename-storm",
            Workload::DeepTree => "deep-tree",
            Workload::FillAndDelete => "fill-delete",
            Workload::Cleaner => "cleaner",
            Workload::Churn => "churn",
            Workload::SyncSmall => "sync-small",
        }
    }

    pub fn from_name(name: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|workload| workload.name() == name)
    }

    /// The step list for this workload and seed. `scale` multiplies the amount of work.
    pub fn steps(self, seed: u64, scale: u32) -> Vec<Step> {
        let mut rng = SeededRng::new(seed ^ (self as u64).wrapping_mul(0x9E37_79B9));
        let scale = u64::from(scale.max(1));
        let mut steps = Vec::new();
        match self {
            Workload::SmallFiles => {
                steps.push(Step::Mkdir("/a".into()));
                steps.push(Step::Mkdir("/b".into()));
                for round in 0..(40 * scale) {
                    let directory = if rng.chance_ratio(1, 2) { "/a" } else { "/b" };
                    let path = format!("{directory}/f{}", rng.below(12));
                    if rng.chance_ratio(2, 3) {
                        let size = if rng.chance_ratio(1, 3) { rng.range(600, 6000) } else { rng.range(0, 400) };
                        steps.push(Step::WriteFile { path, size, fill: round as u8 });
                    } else {
                        steps.push(Step::Unlink(path));
                    }
                    if rng.chance_ratio(1, 4) {
                        steps.push(Step::Transact);
                    }
                }
            }
            Workload::Overwrite => {
                steps.push(Step::WriteFile { path: "/big".into(), size: 96 * 1024, fill: 1 });
                steps.push(Step::Transact);
                for round in 0..(30 * scale) {
                    let length = rng.range(1, 9000);
                    let offset = rng.below(96 * 1024 - length);
                    steps.push(Step::Overwrite { path: "/big".into(), offset, length, fill: round as u8 + 2 });
                    if rng.chance_ratio(1, 3) {
                        steps.push(Step::AppendSync {
                            path: "/big".into(),
                            length: rng.range(1, 300),
                            fill: round as u8,
                        });
                    }
                    if rng.chance_ratio(1, 5) {
                        steps.push(Step::Truncate { path: "/big".into(), size: rng.range(90 * 1024, 110 * 1024) });
                    }
                }
            }
            Workload::RenameStorm => {
                steps.push(Step::Mkdir("/x".into()));
                steps.push(Step::Mkdir("/y".into()));
                for index in 0..8 {
                    steps.push(Step::WriteFile {
                        path: format!("/x/n{index}"),
                        size: rng.range(0, 3000),
                        fill: index as u8,
                    });
                }
                steps.push(Step::Transact);
                for _round in 0..(40 * scale) {
                    let from = format!("/{}/n{}", if rng.chance_ratio(1, 2) { "x" } else { "y" }, rng.below(10));
                    let to = format!("/{}/n{}", if rng.chance_ratio(1, 2) { "x" } else { "y" }, rng.below(10));
                    match rng.below(6) {
                        0 => steps.push(Step::Unlink(from)),
                        1 => steps.push(Step::Link { existing: from, new: to }),
                        2 => steps.push(Step::Symlink { target: from, link: to }),
                        3 => steps.push(Step::WriteFile {
                            path: to,
                            size: rng.range(0, 2500),
                            fill: rng.below(250) as u8,
                        }),
                        _ => steps.push(Step::Rename { from, to }),
                    }
                    if rng.chance_ratio(1, 3) {
                        steps.push(Step::Transact);
                    }
                }
            }
            Workload::DeepTree => {
                let mut path = String::new();
                for depth in 0..(10 * scale).min(40) {
                    path.push_str(&format!("/d{depth}"));
                    steps.push(Step::Mkdir(path.clone()));
                    steps.push(Step::WriteFile {
                        path: format!("{path}/file"),
                        size: rng.range(0, 5000),
                        fill: depth as u8,
                    });
                    if depth % 3 == 2 {
                        steps.push(Step::Transact);
                    }
                }
                steps.push(Step::Rename { from: "/d0/d1".into(), to: "/moved".into() });
                steps.push(Step::Transact);
                steps.push(Step::Mkdir("/d0/d1".into()));
                steps.push(Step::Rename { from: "/moved/d2".into(), to: "/d0/d1/d2".into() });
                steps.push(Step::Unlink("/moved/file".into()));
                steps.push(Step::Rmdir("/moved".into()));
                steps.push(Step::Transact);
            }
            Workload::FillAndDelete => {
                // Files of 24 KiB until the volume refuses, then delete every other one and
                // write again: exercises ENOSPC and the cleaner near a full volume.
                for index in 0..(200 * scale) {
                    steps.push(Step::WriteFile { path: format!("/fill{index}"), size: 24 * 1024, fill: index as u8 });
                    if index % 8 == 7 {
                        steps.push(Step::Transact);
                    }
                }
                steps.push(Step::Transact);
                for index in (0..(200 * scale)).step_by(2) {
                    steps.push(Step::Unlink(format!("/fill{index}")));
                }
                steps.push(Step::Transact);
                for index in 0..(40 * scale) {
                    steps.push(Step::WriteFile { path: format!("/again{index}"), size: 20 * 1024, fill: index as u8 });
                    if index % 5 == 4 {
                        steps.push(Step::Transact);
                    }
                }
            }
            Workload::Cleaner => {
                // Rewrite a working set several times the free space, so segments must be
                // cleaned while live data sits in them.
                for index in 0..6 {
                    steps.push(Step::WriteFile { path: format!("/keep{index}"), size: 40 * 1024, fill: index as u8 });
                }
                steps.push(Step::Transact);
                for round in 0..(60 * scale) {
                    let index = rng.below(6);
                    if rng.chance_ratio(1, 2) {
                        steps.push(Step::WriteFile {
                            path: format!("/keep{index}"),
                            size: 40 * 1024,
                            fill: round as u8,
                        });
                    } else {
                        let offset = rng.below(36 * 1024);
                        steps.push(Step::Overwrite {
                            path: format!("/keep{index}"),
                            offset,
                            length: 4096,
                            fill: round as u8,
                        });
                    }
                    if rng.chance_ratio(1, 3) {
                        steps.push(Step::Transact);
                    }
                }
            }
            Workload::Churn => {
                // Rewrite a 200 KiB file more times per transaction than the free space holds,
                // so whole segments become unreferenced by the working state while the
                // committed state still needs them: reusing one before a commit loses data.
                steps.push(Step::WriteFile { path: "/churn".into(), size: 200 * 1024, fill: 1 });
                steps.push(Step::Transact);
                for round in 0..(50 * scale) {
                    steps.push(Step::WriteFile { path: "/churn".into(), size: 200 * 1024, fill: round as u8 + 2 });
                    if round % 25 == 24 {
                        steps.push(Step::Transact);
                    }
                }
            }
            Workload::SyncSmall => {
                // Seed 004's sync case: small files, every change made durable at once
                // (fsync after each append, a transaction point after each create, rename
                // and unlink), so each change is one transaction point of its own.
                steps.push(Step::Mkdir("/s".into()));
                steps.push(Step::Transact);
                for round in 0..(50 * scale) {
                    let path = format!("/s/f{}", rng.below(16));
                    match rng.below(8) {
                        0..=2 => steps.push(Step::AppendSync {
                            path,
                            length: if rng.chance_ratio(1, 8) { rng.range(2000, 9000) } else { rng.range(1, 512) },
                            fill: round as u8,
                        }),
                        3 | 4 => {
                            steps.push(Step::WriteFile { path, size: rng.range(0, 700), fill: round as u8 });
                            steps.push(Step::Transact);
                        }
                        5 => {
                            steps.push(Step::Rename { from: path, to: format!("/s/f{}", rng.below(16)) });
                            steps.push(Step::Transact);
                        }
                        _ => {
                            steps.push(Step::Unlink(path));
                            steps.push(Step::Transact);
                        }
                    }
                }
            }
        }
        steps.push(Step::Transact);
        steps
    }
}

fn pattern(length: u64, fill: u8, offset: u64) -> Vec<u8> {
    (0..length).map(|index| fill.wrapping_add(((offset + index) % 251) as u8)).collect()
}

const READ_WRITE: OpenFlags = OpenFlags {
    read: true,
    write: true,
    create: false,
    exclusive: false,
    truncate: false,
    append: false,
    directory: false,
};

/// Called after every file-system call a step makes, with whether that call's purpose was a
/// commit (fsync, transact): a commit inside any other call happens before it changes anything.
pub type CallObserver<'o, F> = dyn FnMut(&mut FileSystem<F>, bool) -> Result<(), FsError> + 'o;

/// Applies one step. Ordinary refusals (ENOENT, EEXIST, ENOSPC, …) are part of the workload
/// and returned as `Ok(Err(..))`; I/O errors (power lost) end the run.
pub fn apply<F: Flash>(
    fs: &mut FileSystem<F>,
    step: &Step,
    observer: &mut CallObserver<'_, F>,
) -> Result<Result<(), FsError>, FsError> {
    let result = apply_inner(fs, step, observer);
    match result {
        Err(FsError::Io(_) | FsError::Corrupt(_) | FsError::CorruptFile { .. }) => {
            Err(result.expect_err("matched an error"))
        }
        other => Ok(other),
    }
}

/// Runs one call and reports it to the observer (even when it failed: a failed call may have
/// committed before failing, e.g. ENOSPC after the cleaner ran).
fn call<F: Flash, T>(
    fs: &mut FileSystem<F>,
    observer: &mut CallObserver<'_, F>,
    commits_at_end: bool,
    body: impl FnOnce(&mut FileSystem<F>) -> Result<T, FsError>,
) -> Result<T, FsError> {
    let result = body(fs);
    if !matches!(result, Err(FsError::Io(_) | FsError::Corrupt(_) | FsError::CorruptFile { .. })) {
        observer(fs, commits_at_end)?;
    }
    result
}

fn with_file<F: Flash>(
    fs: &mut FileSystem<F>,
    observer: &mut CallObserver<'_, F>,
    path: &str,
    flags: OpenFlags,
    body: impl FnOnce(&mut FileSystem<F>, &mut CallObserver<'_, F>, FileHandle) -> Result<(), FsError>,
) -> Result<(), FsError> {
    let fd = call(fs, observer, false, |fs| fs.open(path.as_bytes(), flags, 0o644))?;
    let result = body(fs, observer, fd);
    if matches!(result, Err(FsError::Io(_) | FsError::Corrupt(_) | FsError::CorruptFile { .. })) {
        return result;
    }
    let closed = call(fs, observer, false, |fs| fs.close(fd));
    result.and(closed)
}

fn apply_inner<F: Flash>(
    fs: &mut FileSystem<F>,
    step: &Step,
    observer: &mut CallObserver<'_, F>,
) -> Result<(), FsError> {
    let o = observer;
    match step {
        Step::Mkdir(path) => call(fs, o, false, |fs| fs.mkdir(path.as_bytes(), 0o755).map(|_| ())),
        Step::Rmdir(path) => call(fs, o, false, |fs| fs.rmdir(path.as_bytes())),
        Step::WriteFile { path, size, fill } => {
            let flags = OpenFlags { create: true, truncate: true, ..READ_WRITE };
            with_file(fs, o, path, flags, |fs, o, fd| {
                let data = pattern(*size, *fill, 0);
                call(fs, o, false, |fs| fs.pwrite(fd, 0, &data).map(|_| ()))
            })
        }
        Step::Overwrite { path, offset, length, fill } => with_file(fs, o, path, READ_WRITE, |fs, o, fd| {
            let data = pattern(*length, *fill, *offset);
            call(fs, o, false, |fs| fs.pwrite(fd, *offset, &data).map(|_| ()))
        }),
        Step::AppendSync { path, length, fill } => {
            let flags = OpenFlags { append: true, ..READ_WRITE };
            with_file(fs, o, path, flags, |fs, o, fd| {
                call(fs, o, false, |fs| fs.write_fd(fd, &pattern(*length, *fill, 0)).map(|_| ()))?;
                call(fs, o, true, |fs| fs.fsync_fd(fd))
            })
        }
        Step::Truncate { path, size } => call(fs, o, false, |fs| fs.truncate_path(path.as_bytes(), *size)),
        Step::Unlink(path) => call(fs, o, false, |fs| fs.unlink(path.as_bytes())),
        Step::Rename { from, to } => call(fs, o, false, |fs| fs.rename_path(from.as_bytes(), to.as_bytes())),
        Step::Link { existing, new } => call(fs, o, false, |fs| fs.link_path(existing.as_bytes(), new.as_bytes())),
        Step::Symlink { target, link } => {
            call(fs, o, false, |fs| fs.symlink_path(target.as_bytes(), link.as_bytes()).map(|_| ()))
        }
        Step::Transact => call(fs, o, true, |fs| fs.transact()),
    }
}
