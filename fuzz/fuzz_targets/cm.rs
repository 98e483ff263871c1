//! `cargo +nightly fuzz run cm`: `deposit_transport::fuzzing::cm` (see fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| deposit_transport::fuzzing::cm(data));
