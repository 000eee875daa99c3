#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| threadstream_fuzz::openai_stream_target(data));
