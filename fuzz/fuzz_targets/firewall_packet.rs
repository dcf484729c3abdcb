#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fjord_fuzz::firewall_packet(data));
