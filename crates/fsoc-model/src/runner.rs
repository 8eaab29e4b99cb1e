//! The comparison runner: drives a file system under test and the model through the same
//! operations at the same logical times and reports the first disagreement.

use std::fmt;

use crate::listing::{Listing, ListingDifference};
use crate::model::ModelFs;
use crate::operation::{comparable_outcome, display_outcome, Operation, Outcome, Output};

/// What the runner needs from a file system: apply one operation, list the visible tree.
pub trait FsUnderTest {
    /// Applies `operation` at logical time `now_ns` (harness events included).
    fn apply(&mut self, operation: &Operation, now_ns: i64) -> Outcome;

    /// The canonical snapshot of the visible tree; `listing::listing_through_calls`
    /// builds one from `apply` alone.
    fn listing(&mut self) -> Listing;

    /// Commits the file system made during the last `apply` beyond the model's rules
    /// (after `fsync`, `transact`, `Remount`), e.g. because a space or dirty-node limit
    /// was reached. The runner mirrors them into the model so a later `PowerCut` still
    /// agrees. Called once after every `apply`.
    fn extra_commits(&mut self) -> ExtraCommits {
        ExtraCommits::NONE
    }
}

/// Where a spontaneous commit happened relative to the operation just applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtraCommits {
    /// The state before the operation was committed.
    pub before_operation: bool,
    /// The state after the operation was committed.
    pub after_operation: bool,
}

impl ExtraCommits {
    pub const NONE: ExtraCommits = ExtraCommits { before_operation: false, after_operation: false };
}

impl FsUnderTest for ModelFs {
    fn apply(&mut self, operation: &Operation, now_ns: i64) -> Outcome {
        ModelFs::apply(self, operation, now_ns)
    }

    fn listing(&mut self) -> Listing {
        ModelFs::listing(self)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunOptions {
    /// Compare listings after every this many operations; 0 compares only at the end.
    pub listing_interval_steps: usize,
    /// Also compare listings right after every `Remount` and `PowerCut`.
    pub listing_after_harness_events: bool,
    /// Compare atime, mtime and ctime (in outcomes and listings).
    pub compare_timestamps: bool,
    /// Run `ModelFs::check` after every operation.
    pub check_model: bool,
    /// Operation `step` (0-based) runs at `start_time_ns + (step + 1) * time_step_ns`.
    pub start_time_ns: i64,
    pub time_step_ns: i64,
    /// How many preceding operations a `Mismatch` shows.
    pub context_operation_count: usize,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            listing_interval_steps: 50,
            listing_after_harness_events: true,
            compare_timestamps: true,
            check_model: true,
            start_time_ns: 0,
            time_step_ns: 1_000,
            context_operation_count: 12,
        }
    }
}

impl RunOptions {
    /// The logical time operation `step` runs at.
    pub fn time_ns(&self, step: usize) -> i64 {
        self.start_time_ns + (step as i64 + 1) * self.time_step_ns
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MismatchKind {
    /// The operation returned different outcomes.
    Outcome,
    /// The outcomes agreed but the listings taken after the operation did not.
    Listing,
}

/// The first disagreement of a run, with everything needed to understand it; the caller
/// adds the seed that replays it.
#[derive(Clone, Debug)]
pub struct Mismatch {
    pub kind: MismatchKind,
    /// 0-based index of the operation after which the disagreement showed.
    pub step: usize,
    pub operation_count: usize,
    pub now_ns: i64,
    pub operation: Operation,
    pub fs_outcome: Outcome,
    pub model_outcome: Outcome,
    /// For `MismatchKind::Listing`.
    pub listing_difference: Option<ListingDifference>,
    /// The operations before `step`, oldest first, with their steps.
    pub recent_operations: Vec<(usize, Operation)>,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            MismatchKind::Outcome => "outcomes",
            MismatchKind::Listing => "listings",
        };
        writeln!(
            formatter,
            "fs and model {what} disagree at step {} of {} (now_ns {})",
            self.step, self.operation_count, self.now_ns
        )?;
        writeln!(formatter, "operation: {:?}", self.operation)?;
        writeln!(formatter, "  fs:    {}", display_outcome(&self.fs_outcome))?;
        writeln!(formatter, "  model: {}", display_outcome(&self.model_outcome))?;
        if let (Ok(Output::Bytes(fs_bytes)), Ok(Output::Bytes(model_bytes))) = (&self.fs_outcome, &self.model_outcome) {
            writeln!(formatter, "  {}", describe_byte_difference(fs_bytes, model_bytes))?;
        }
        if let Some(difference) = &self.listing_difference {
            writeln!(formatter, "listing difference (fs vs model):")?;
            write!(formatter, "{difference}")?;
        }
        if !self.recent_operations.is_empty() {
            writeln!(formatter, "preceding operations:")?;
            for (step, operation) in &self.recent_operations {
                writeln!(formatter, "  {step}: {operation:?}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for Mismatch {}

/// Where two byte strings first differ, for read mismatches.
fn describe_byte_difference(fs_bytes: &[u8], model_bytes: &[u8]) -> String {
    let first_difference = fs_bytes.iter().zip(model_bytes).position(|(a, b)| a != b);
    match first_difference {
        Some(index) => format!(
            "bytes first differ at index {index}: fs {:#04x}, model {:#04x} (lengths {} and {})",
            fs_bytes[index],
            model_bytes[index],
            fs_bytes.len(),
            model_bytes.len()
        ),
        None => format!("common prefix equal; lengths fs {} and model {}", fs_bytes.len(), model_bytes.len()),
    }
}

/// Applies each operation to `fs` and then to `model` at the same logical time and
/// compares: outcomes exactly (descriptor numbers included) except inode numbers,
/// timestamps unless `compare_timestamps`, and statfs numbers (not modelled); listings
/// every `listing_interval_steps` operations, after harness events, and at the end.
// A mismatch ends the run and is printed once, so its size on the cold error path is moot.
#[allow(clippy::result_large_err)]
pub fn run_and_compare<F: FsUnderTest + ?Sized>(
    fs: &mut F,
    model: &mut ModelFs,
    operations: &[Operation],
    options: &RunOptions,
) -> Result<(), Mismatch> {
    for (step, operation) in operations.iter().enumerate() {
        let now_ns = options.time_ns(step);
        let fs_outcome = fs.apply(operation, now_ns);
        let extra_commits = fs.extra_commits();
        if extra_commits.before_operation {
            model.commit();
        }
        let model_outcome = model.apply(operation, now_ns);
        if extra_commits.after_operation {
            model.commit();
        }
        if options.check_model {
            model.check();
        }
        let mismatch = |kind, listing_difference| Mismatch {
            kind,
            step,
            operation_count: operations.len(),
            now_ns,
            operation: operation.clone(),
            fs_outcome: fs_outcome.clone(),
            model_outcome: model_outcome.clone(),
            listing_difference,
            recent_operations: recent_operations(operations, step, options),
        };
        let compare_timestamps = options.compare_timestamps;
        if comparable_outcome(&fs_outcome, compare_timestamps) != comparable_outcome(&model_outcome, compare_timestamps)
        {
            return Err(mismatch(MismatchKind::Outcome, None));
        }
        let interval_reached = options.listing_interval_steps != 0 && (step + 1) % options.listing_interval_steps == 0;
        let harness_event = operation.kind().is_harness_event();
        let last = step + 1 == operations.len();
        if interval_reached || (harness_event && options.listing_after_harness_events) || last {
            if let Some(difference) = compare_listings(fs, model, compare_timestamps) {
                return Err(mismatch(MismatchKind::Listing, Some(difference)));
            }
        }
    }
    if operations.is_empty() {
        // No operations: still require the two file systems to start out equal. There is
        // no operation to blame, so the mismatch names a harmless `Statfs`.
        if let Some(difference) = compare_listings(fs, model, options.compare_timestamps) {
            return Err(Mismatch {
                kind: MismatchKind::Listing,
                step: 0,
                operation_count: 0,
                now_ns: options.start_time_ns,
                operation: Operation::Statfs,
                fs_outcome: Ok(Output::Unit),
                model_outcome: Ok(Output::Unit),
                listing_difference: Some(difference),
                recent_operations: Vec::new(),
            });
        }
    }
    Ok(())
}

fn compare_listings<F: FsUnderTest + ?Sized>(
    fs: &mut F,
    model: &ModelFs,
    compare_timestamps: bool,
) -> Option<ListingDifference> {
    let (mut fs_listing, mut model_listing) = (fs.listing(), model.listing());
    if !compare_timestamps {
        fs_listing = fs_listing.without_timestamps();
        model_listing = model_listing.without_timestamps();
    }
    if fs_listing == model_listing {
        return None;
    }
    let difference = Listing::difference(&fs_listing, &model_listing);
    assert!(!difference.is_empty(), "unequal listings must differ somewhere");
    Some(difference)
}

fn recent_operations(operations: &[Operation], step: usize, options: &RunOptions) -> Vec<(usize, Operation)> {
    let first = step.saturating_sub(options.context_operation_count);
    (first..step).map(|index| (index, operations[index].clone())).collect()
}
