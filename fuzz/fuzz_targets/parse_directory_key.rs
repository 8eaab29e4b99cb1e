#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fsoc_fuzz_targets::parse_directory_key(data));
