//! `cargo +nightly fuzz run frame`: `deposit_transport::fuzzing::frame` (see fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| deposit_transport::fuzzing::frame(data));
