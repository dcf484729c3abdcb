#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fjord_fuzz::fake_tcp_segment(data));
