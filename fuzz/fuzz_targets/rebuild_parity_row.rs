#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fsoc_fuzz_targets::rebuild_parity_row(data));
