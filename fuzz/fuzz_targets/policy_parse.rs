#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fjord_fuzz::policy_parse(data));
