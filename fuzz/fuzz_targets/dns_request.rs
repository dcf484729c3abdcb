#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fjord_fuzz::dns_request(data));
