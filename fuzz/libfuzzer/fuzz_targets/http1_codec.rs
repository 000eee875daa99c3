#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| threadstream_fuzz::http1_codec_target(data));
