//! `cargo +nightly fuzz run node`: `deposit_transport::fuzzing::node` (see fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| deposit_transport::fuzzing::node(data));
