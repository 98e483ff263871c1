//! `cargo +nightly fuzz run neigh_wire`: `deposit_transport::fuzzing::neigh_wire` (see
//! fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| deposit_transport::fuzzing::neigh_wire(data));
