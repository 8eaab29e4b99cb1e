//! The runner must notice every kind of disagreement and ignore what it is told to:
//! each test wraps `ModelFs` in an adapter with one deliberate flaw and checks the
//! reported `Mismatch` (or its absence) through `check`.

use fsoc_model::{
    errno, run_and_compare, ExtraCommits, FsUnderTest, Listing, Mismatch, MismatchKind, ModelFs, OpenFlags, Operation,
    Outcome, Output, RunOptions,
};

/// A model with one configurable flaw, standing in for a buggy real file system.
#[derive(Default)]
struct FlawedFs {
    inner: ModelFs,
    flaw: Flaw,
    step: usize,
}

#[derive(Default, Clone, Copy, PartialEq)]
enum Flaw {
    #[default]
    None,
    /// Returns EIO instead of the outcome at this step.
    OutcomeAt(usize),
    /// Reports inode numbers shifted by 1000 (must be ignored).
    ShiftedInodes,
    /// Reports every timestamp one nanosecond late.
    LateTimestamps,
    /// Forgets to list the last entry.
    ListingDropsLast,
    /// Treats `PowerCut` like `Remount`: keeps uncommitted state.
    PowerCutKeepsState,
    /// Commits after every operation and says so.
    CommitsEveryOperation,
}

impl FsUnderTest for FlawedFs {
    fn apply(&mut self, operation: &Operation, now_ns: i64) -> Outcome {
        let step = self.step;
        self.step += 1;
        let operation = match (self.flaw, operation) {
            (Flaw::PowerCutKeepsState, Operation::PowerCut) => &Operation::Remount,
            _ => operation,
        };
        let outcome = self.inner.apply(operation, now_ns);
        if self.flaw == Flaw::CommitsEveryOperation {
            self.inner.commit();
        }
        match (self.flaw, outcome) {
            (Flaw::OutcomeAt(at), _) if at == step => Err(errno::EIO),
            (Flaw::ShiftedInodes, Ok(Output::Attributes(mut attributes))) => {
                attributes.ino += 1000;
                Ok(Output::Attributes(attributes))
            }
            (Flaw::LateTimestamps, Ok(Output::Attributes(mut attributes))) => {
                attributes.mtime_ns += 1;
                Ok(Output::Attributes(attributes))
            }
            (_, outcome) => outcome,
        }
    }

    fn listing(&mut self) -> Listing {
        let mut listing = self.inner.listing();
        if self.flaw == Flaw::ListingDropsLast {
            listing.entries.pop();
        }
        listing
    }

    fn extra_commits(&mut self) -> ExtraCommits {
        ExtraCommits { before_operation: false, after_operation: self.flaw == Flaw::CommitsEveryOperation }
    }
}

fn workload() -> Vec<Operation> {
    vec![
        Operation::Mkdir { path: b"/d".to_vec(), mode: 0o755 },
        Operation::Open { path: b"/d/f".to_vec(), flags: OpenFlags::CREATE, mode: 0o644 },
        Operation::Write { fd: 3, data: b"hello".to_vec() },
        Operation::Fstat { fd: 3 },
        Operation::Stat { path: b"/d".to_vec() },
        Operation::Fsync { fd: 3 },
        Operation::Write { fd: 3, data: b" world".to_vec() },
        Operation::Mkdir { path: b"/e".to_vec(), mode: 0o700 },
        Operation::PowerCut,
        Operation::Stat { path: b"/d/f".to_vec() },
    ]
}

/// Runs `workload()` against a `FlawedFs` with `flaw`.
#[allow(clippy::result_large_err)]
fn check(flaw: Flaw, options: RunOptions) -> Result<(), Mismatch> {
    let mut fs = FlawedFs { flaw, ..FlawedFs::default() };
    let mut model = ModelFs::default();
    run_and_compare(&mut fs, &mut model, &workload(), &options)
}

#[test]
fn identical_file_systems_agree() {
    check(Flaw::None, RunOptions::default()).expect("no flaw, no mismatch");
}

#[test]
fn a_wrong_outcome_is_reported_at_its_step() {
    let mismatch = check(Flaw::OutcomeAt(4), RunOptions::default()).expect_err("flawed");
    assert_eq!((mismatch.kind, mismatch.step), (MismatchKind::Outcome, 4));
    assert_eq!(mismatch.fs_outcome, Err(errno::EIO));
    assert!(matches!(mismatch.model_outcome, Ok(Output::Attributes(_))));
    let text = mismatch.to_string();
    assert!(text.contains("step 4 of 10"), "{text}");
    assert!(text.contains("Stat { path: \"/d\" }"), "{text}");
    assert!(text.contains("Err(EIO 5)"), "{text}");
    assert!(text.contains("3: Fstat { fd: 3 }"), "context is listed: {text}");
}

#[test]
fn inode_numbers_are_never_compared() {
    check(Flaw::ShiftedInodes, RunOptions::default()).expect("ino ignored");
}

#[test]
fn timestamps_are_compared_unless_disabled() {
    let mismatch = check(Flaw::LateTimestamps, RunOptions::default()).expect_err("flawed");
    assert_eq!((mismatch.kind, mismatch.step), (MismatchKind::Outcome, 3));
    let options = RunOptions { compare_timestamps: false, ..RunOptions::default() };
    check(Flaw::LateTimestamps, options).expect("timestamps ignored");
}

#[test]
fn listings_are_compared_at_the_interval_and_at_the_end() {
    let options = RunOptions { listing_interval_steps: 3, ..RunOptions::default() };
    let mismatch = check(Flaw::ListingDropsLast, options).expect_err("flawed");
    assert_eq!((mismatch.kind, mismatch.step), (MismatchKind::Listing, 2));
    let difference = mismatch.listing_difference.as_ref().expect("difference");
    assert_eq!(difference.only_in_model.len(), 1);
    assert_eq!(difference.only_in_model[0].path, b"/d/f");
    assert!(mismatch.to_string().contains("only in model: /d/f File"), "{mismatch}");
    let only_at_end =
        RunOptions { listing_interval_steps: 0, listing_after_harness_events: false, ..RunOptions::default() };
    let mismatch = check(Flaw::ListingDropsLast, only_at_end).expect_err("flawed");
    assert_eq!((mismatch.kind, mismatch.step), (MismatchKind::Listing, 9));
}

#[test]
fn a_power_cut_that_keeps_uncommitted_state_is_caught() {
    let options = RunOptions { listing_interval_steps: 0, ..RunOptions::default() };
    let mismatch = check(Flaw::PowerCutKeepsState, options).expect_err("flawed");
    assert_eq!((mismatch.kind, mismatch.step), (MismatchKind::Listing, 8));
    let difference = mismatch.listing_difference.expect("difference");
    assert_eq!(difference.only_in_fs.len(), 1, "/e survived");
    assert_eq!(difference.differing.len(), 2, "/ (nlink, mtime) and /d/f (size)");
}

#[test]
fn extra_commits_are_mirrored_into_the_model() {
    check(Flaw::CommitsEveryOperation, RunOptions::default()).expect("model follows commits");
}

#[test]
fn an_empty_run_still_compares_the_formatted_state() {
    let mut fs = FlawedFs { flaw: Flaw::ListingDropsLast, ..FlawedFs::default() };
    let mismatch = run_and_compare(&mut fs, &mut ModelFs::default(), &[], &RunOptions::default())
        .expect_err("the root is missing");
    assert_eq!(mismatch.kind, MismatchKind::Listing);
    run_and_compare(&mut ModelFs::default(), &mut ModelFs::default(), &[], &RunOptions::default()).expect("equal");
}
