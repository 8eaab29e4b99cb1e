//! `fsoc bench fsoc` (seed 000's Fig. 15) counts real protocol bytes: both modes move bytes
//! for every operation, the file system on the chip moves far fewer for metadata operations
//! when each is made durable (the conventional host sends whole metadata pages), and about the
//! payload for reads and writes. Deterministic counts, so the same run twice gives the same
//! figures.

use fsoc_bench::on_chip::{run, OnChipConfig, Regime, OPERATIONS};

fn report() -> serde_json::Value {
    let directory = tempfile::tempdir().expect("tempdir");
    let config = OnChipConfig { operations: 20, ..OnChipConfig::quick(3) };
    run(&config, directory.path(), &mut |_| {}).expect("bench fsoc")
}

#[test]
fn wire_bytes_per_operation_in_both_modes() {
    let first = report();
    for regime in Regime::ALL {
        for operation in OPERATIONS {
            let row = &first["regimes"][regime.name()][operation];
            let number = |key: &str| row[key].as_f64().unwrap_or_else(|| panic!("{regime:?} {operation}: {key}"));
            assert!(number("fsoc_bytes_per_op") > 0.0, "{regime:?} {operation}: {row}");
            assert!(number("conventional_bytes_per_op") > 0.0, "{regime:?} {operation}: {row}");
            let ratio = number("bytes_ratio");
            match operation {
                // The payload dominates: 64 KiB each way, plus each protocol's own overhead.
                "read" | "write" => assert!((0.85..=1.05).contains(&ratio), "{regime:?} {operation}: {ratio}"),
                _ if regime == Regime::DurableEach => {
                    assert!(ratio < 0.1, "{regime:?} {operation}: FSOC/conventional {ratio}")
                }
                _ => assert!(ratio < 1.0, "{regime:?} {operation}: FSOC/conventional {ratio}"),
            }
        }
    }
    assert_eq!(report()["regimes"], first["regimes"], "the counts are deterministic");
}
