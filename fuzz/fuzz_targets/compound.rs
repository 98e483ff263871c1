//! `cargo +nightly fuzz run compound`: `deposit_transport::fuzzing::compound` (see fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| deposit_transport::fuzzing::compound(data));
