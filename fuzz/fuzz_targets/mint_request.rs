#![no_main]

// Every input goes through the library's own entry point, which the regression replay in
// `cargo test -p kubeflavor-core` runs on the corpus and the regressions as well.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    kubeflavor_core::fuzzing::mint_request(data);
});
