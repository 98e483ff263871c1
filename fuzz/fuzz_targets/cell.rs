//! `cargo +nightly fuzz run cell`: `deposit_transport::fuzzing::cell` (see fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| deposit_transport::fuzzing::cell(data));
