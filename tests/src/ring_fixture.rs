//! A served ring pair for operation-level tests: the server gives the client's
//! connection a register window (and whatever else the test sets in its options), and
//! the test drives requests, then inspects the server's memory, registers and events.

use std::time::Duration;

use deposit::*;

use crate::{memory_snapshot, wait_completions, Conns, RingPair};

/// Bytes of each side's endpoint.
pub const FIXTURE_LEN: usize = 64 * 1024;
const T: Duration = Duration::from_secs(10);
const SERVICE: u32 = 11;

/// A ring pair with one connection whose server side has `regs` registers.
pub struct RegFixture {
    pub pair: RingPair,
    pub c: Conns,
    pub regs: RegWindow,
    /// The server's completion queue.
    pub scq: CompletionQueue,
}

impl RegFixture {
    /// `nregs` registers for the client's messages, the server endpoint with `rights`;
    /// `tweak` adjusts the server's connection options (given the pair, to allocate
    /// what the options name).
    pub fn new(
        name: &str,
        nregs: u32,
        rights: Rights,
        tweak: impl FnOnce(&RingPair, &mut ConnOptions),
    ) -> RegFixture {
        let pair = RingPair::new(name);
        let regs = pair.server.alloc_registers(nregs).unwrap();
        let mut opts = ConnOptions {
            registers: Registers::Window(regs),
            ..ConnOptions::default()
        };
        tweak(&pair, &mut opts);
        let (c, scq) = pair.connect_with(FIXTURE_LEN, SERVICE, rights, &opts);
        RegFixture { pair, c, regs, scq }
    }

    /// Sets server register `i` of the window and its protection.
    pub fn set(&self, i: u32, v: u64, p: RegProt) {
        self.pair.server.write_register(self.regs, i, v).unwrap();
        self.pair
            .server
            .set_register_protection(self.regs, i, p)
            .unwrap();
    }

    /// Server register `i` of the window.
    pub fn reg(&self, i: u32) -> u64 {
        self.pair.server.read_register(self.regs, i).unwrap()
    }

    /// Posts every request signaled and waits until all completed with `want`.
    pub fn run(&self, reqs: &[WorkRequest], want: WcStatus) -> Vec<Completion> {
        for r in reqs {
            self.c.client.post(&r.signaled()).unwrap();
        }
        let wcs = wait_completions(&self.c.ccq, reqs.len(), T);
        for wc in &wcs {
            assert_eq!(wc.status, want, "{wc:?}");
        }
        wcs
    }

    /// Every event now on the server endpoint's queue (after the work completed, so
    /// every event it raised is already queued).
    pub fn events(&self) -> Vec<Event> {
        let q = self.c.sep.events();
        std::iter::from_fn(|| q.poll()).collect()
    }

    /// The server endpoint's bytes.
    pub fn mem(&self) -> Vec<u8> {
        memory_snapshot(&self.c.sep, FIXTURE_LEN)
    }

    /// Server refusals of one reason.
    pub fn drops(&self, r: DropReason) -> u64 {
        self.pair.server.stats().dropped(r)
    }
}
