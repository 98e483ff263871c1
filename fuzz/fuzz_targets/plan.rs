//! `cargo +nightly fuzz run plan`: `deposit_transport::fuzzing::plan` (see fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| deposit_transport::fuzzing::plan(data));
