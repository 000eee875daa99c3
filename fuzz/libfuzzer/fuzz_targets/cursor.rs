#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| threadstream_fuzz::cursor_target(data));
