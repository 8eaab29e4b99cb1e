//! Filling the volume: ENOSPC arrives cleanly, deleting makes room again, the cleaner runs.
mod common;
use common::*;
use fsoc_core::FsError;

#[test]
fn fill_to_enospc_then_delete_and_write_again() {
    let mut fs = fresh(40);
    let data = pattern(24 * 1024, 3);
    let mut written = 0;
    loop {
        match write_file(&mut fs, &format!("/fill{written}"), &data) {
            Ok(()) => written += 1,
            Err(FsError::NoSpace) => break,
            Err(error) => panic!("file {written}: unexpected {error:?}"),
        }
        assert!(written < 10_000, "never ran out of space");
    }
    assert!(written > 50, "only {written} files of 24 KiB fit in 5 MiB");
    assert_clean(&mut fs, "full");
    for index in (0..written).step_by(2) {
        fs.unlink(format!("/fill{index}").as_bytes()).expect("unlink");
    }
    fs.transact().expect("commit");
    for index in 0..written / 3 {
        write_file(&mut fs, &format!("/again{index}"), &data).unwrap_or_else(|error| panic!("again{index}: {error:?}"));
    }
    assert_clean(&mut fs, "after refill");
    assert!(fs.stats.cleaner_runs > 0, "the cleaner never ran");
    for index in (1..written).step_by(2) {
        assert_eq!(read_file(&mut fs, &format!("/fill{index}")).expect("read"), data, "fill{index}");
    }
}
