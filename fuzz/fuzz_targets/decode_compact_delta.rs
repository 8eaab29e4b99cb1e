#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fsoc_fuzz_targets::decode_compact_delta(data));
