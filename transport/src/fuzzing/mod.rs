//! Fuzz targets of the DPDK-free core (issue 14): plain functions of the input bytes,
//! so that the `fuzz/` crate (cargo-fuzz, nightly) runs them under libFuzzer and the
//! committed corpora replay under stable `cargo test` (`tests/fuzz_corpora.rs`).
//!
//! Each target panics only when a property it checks fails (that panic is the bug
//! report); bad input is otherwise just input. What each checks:
//!
//! | target     | input                                        | properties in module |
//! |------------|----------------------------------------------|----------------------|
//! | frame      | a frame, with optional fix-ups               | `wire`               |
//! | cell       | a control part and a transport header        | `wire`               |
//! | compound   | a compound descriptor, registers, an operand | `wire`, `plan`       |
//! | cm         | a CM control part and payload                | `wire`               |
//! | neigh_wire | an ARP, ICMP or ICMPv6 frame, with fix-ups   | `wire`               |
//! | plan       | registers, an endpoint, a message            | `plan`               |
//! | node       | frames, clock steps and host calls in turn   | `node`               |
//!
//! `seeds` gives each target's hand-made starting inputs (frames a `FrameWriter`
//! built, real CM messages, messages of every opcode, ARP, ping, neighbour discovery
//! and ping6 frames as Linux sends them), written into `fuzz/corpus` by
//! `scripts/fuzz.sh --seed`.

pub mod node;
pub mod plan;
mod seeds;
pub mod wire;

pub use node::node;
pub use plan::plan;
pub use seeds::seeds;
pub use wire::{cell, cm, compound, frame, neigh_wire};

/// A fuzz target: a function of the input bytes that panics when a property fails.
pub type Target = fn(&[u8]);

/// Every target, by the name of its `fuzz/fuzz_targets/<name>.rs` and corpus directory.
pub const TARGETS: [(&str, Target); 7] = [
    ("frame", frame),
    ("cell", cell),
    ("compound", compound),
    ("cm", cm),
    ("plan", plan),
    ("node", node),
    ("neigh_wire", neigh_wire),
];

/// Runs target `name` on `data`; false when there is no such target.
pub fn run(name: &str, data: &[u8]) -> bool {
    match TARGETS.iter().find(|(n, _)| *n == name) {
        Some((_, f)) => {
            f(data);
            true
        }
        None => false,
    }
}

/// Reads structured values off the fuzzer's bytes; past the end everything reads as 0
/// (so every input is a valid one, and a shorter input means "the rest zero").
#[derive(Debug, Clone)]
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.data
    }

    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 != 0
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.array())
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.array())
    }

    pub fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        for b in &mut a {
            *b = self.u8();
        }
        a
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    /// A value in `0..n` (`n > 0`) from one byte.
    pub fn below(&mut self, n: u8) -> u8 {
        self.u8() % n
    }
}
