//! Reads and atomics: read_lat / atomic_lat (ib_read_lat, ib_atomic_lat) and read_bw /
//! atomic_bw (ib_read_bw, ib_atomic_bw). Only the client acts; the server is passive.
//!
//! * Reads fetch `size` bytes at offset 0 of the server's endpoint (remote-read
//!   rights for these tests) into the client's receive region.
//! * Atomics run `-A FETCH_AND_ADD` (add 1) or `-A CMP_AND_SWAP` (compare k, swap k+1:
//!   a chain that succeeds when every request executes once and in order) on the word
//!   at offset 0 of the server (remote-atomic rights) and return the old value; the
//!   size is always 8 (`-s` is ignored, like perftest). After each round, outside the
//!   timed span, one RDMA read of the server's word must give the number of atomics.
//!
//! The latency tests post one signaled request and poll the completion queue; the
//! time from the post to the completion is one sample, reported as the FULL round trip
//! (perftest reports reads and atomics unhalved). The bandwidth tests stream
//! ([`crate::stream`]); the table is write_bw's (MiB/s of the size, Mpps).
//!
//! `--verify`: the server's receive region holds a body keyed by the absolute offset.
//! read_lat zeroes its landing bytes before each read (not timed) and checks them after
//! the completion; read_bw reads slot `j` of the server into slot `j` of the client and
//! checks every slot after the round; atomic_lat checks each old value, atomic_bw the
//! last old value of each of 4096 result slots (atomic `i` returns into slot
//! `(i-1) mod 4096`), both the server's word.

use std::time::Instant;

use deposit::WorkRequest;

use crate::error::{PerfError, Result, Wait};
use crate::harness::{At, Bench, Layout, Local, Round, Setup, Side, Stats};
use crate::report::{LatStats, Reporter};
use crate::setup::EMPTY_WC;
use crate::stream::Stream;
use crate::verify::{self, Outcome};
use crate::warmup::LatRound;
use crate::{AtomicOp, Params, Test};

/// A read or atomic test; `k` counts the atomics executed so far (the server's word).
#[derive(Clone)]
pub struct Rd {
    atomic: bool,
    k: u64,
}

impl Rd {
    pub fn new(test: Test) -> Rd {
        Rd {
            atomic: matches!(test, Test::AtomicLat | Test::AtomicBw),
            k: 0,
        }
    }

    /// The request of atomic `k` (0-based over the run) or a read of `size` bytes at
    /// `remote` into `local`; an atomic returns its old value into `local`.
    #[inline]
    fn request(
        &self,
        p: &Params,
        s: &Side,
        size: u64,
        k: u64,
        local: u64,
        remote: u32,
    ) -> WorkRequest {
        match (self.atomic, p.atomic) {
            (false, _) => WorkRequest::read(0, &s.ep, local, size as u32, remote),
            (_, AtomicOp::FetchAndAdd) => WorkRequest::fetch_add(0, &s.ep, local, 0, 1),
            (_, AtomicOp::CmpAndSwap) => WorkRequest::cmp_swap(0, &s.ep, local, 0, k, k + 1),
        }
    }

    /// Reads the server's word into offset 8 here: one signaled read.
    fn read_word(&self, s: &Side, p: &Params) -> Result<u64> {
        const ID: u64 = u64::MAX - 10;
        s.conn()
            .post(&WorkRequest::read(ID, &s.ep, 8, 8, 0).signaled())?;
        let mut wait = Wait::new(p.timeout, "the read of the final atomic counter");
        let mut wcs = [EMPTY_WC; 16];
        loop {
            let n = s.conn().cq().poll(&mut wcs);
            if let Some(wc) = wcs[..n].iter().find(|w| w.wr_id == ID) {
                if !wc.status.is_ok() {
                    return Err(PerfError::Failed(format!(
                        "the read of the final atomic counter completed with {:?}",
                        wc.status
                    )));
                }
                return Ok(s.ep.load_u64(8)?);
            }
            s.dev.progress();
            wait.tick()?;
        }
    }

    /// After a round: the server's word must be the number of atomics.
    fn check_word(&self, s: &Side, p: &Params, out: &mut Outcome) -> Result<()> {
        let word = self.read_word(s, p)?;
        let k = self.k;
        if p.verify {
            verify::check_word(word, k, "the server's word", out);
        } else if word == k {
            eprintln!(
                "ddperf: final counter {word}: OK ({k} atomics, {})",
                p.atomic.name()
            );
        } else {
            eprintln!(
                "ddperf: warning: final counter {word}, expected {k} ({})",
                p.atomic.name()
            );
        }
        Ok(())
    }

    fn lat_round(&mut self, s: &Side, p: &Params, size: u64, out: &mut Outcome) -> Result<Round> {
        let reads = p.verify && !self.atomic;
        let (want, mut got, zeros) = if reads {
            (
                verify::body(read_seed(), size as usize),
                vec![0; size as usize],
                vec![0; size as usize],
            )
        } else {
            Default::default()
        };
        let mut rtts: Vec<u64> = Vec::with_capacity(LatRound::capacity(p));
        let mut wcs = [EMPTY_WC; 1];
        let mut lr = LatRound::start(p);
        let mut n = 0u64;
        while lr.more() {
            n += 1;
            if reads {
                s.ep.write(0, &zeros)?; // not timed: the check needs fresh landing bytes
            }
            let mut req = self.request(p, s, size, self.k, 0, 0).signaled();
            req.set_wr_id(n);
            let t0 = Instant::now();
            s.conn().post(&req)?;
            let mut wait = Wait::since(t0, p.timeout, "the completion of a read or atomic");
            while s.conn().cq().poll(&mut wcs) == 0 {
                if wait.tick()? {
                    s.check_open()?;
                }
            }
            let t1 = Instant::now();
            if !wcs[0].status.is_ok() {
                return Err(PerfError::Failed(format!(
                    "request {n} completed with {:?}",
                    wcs[0].status
                )));
            }
            if self.atomic {
                let old = s.ep.load_u64(0)?;
                if p.verify {
                    verify::check_word(old, self.k, "atomic's old value", out);
                } else if old != self.k {
                    out.add(0, 0, 1);
                    out.note(format!("atomic {n}: old value {old}, expected {}", self.k));
                }
                self.k += 1;
            }
            if reads {
                s.ep.read(0, &mut got)?;
                verify::check_message(&got, &want, || format!("{size} B: read {n}"), out);
            }
            if lr.sample(&mut rtts, t0, t1) {
                break;
            }
        }
        lr.report_cut(size);
        Ok(Round {
            count: lr.iterations(),
            stats: Stats::Lat(LatStats::from_full_rtts(size, &mut rtts)),
        })
    }

    fn bw_round(&mut self, s: &Side, p: &Params, size: u64, out: &mut Outcome) -> Result<Round> {
        let base = self.k;
        // --verify: request i uses slot (i-1) mod slots (reads: `stride` apart on both
        // sides; atomics: 8-byte result slots), cleared before the round, not timed.
        let (slots, stride) = match (p.verify, self.atomic) {
            (false, _) => (1, 0),
            (true, false) => (verify::slots(size, s.lay.send), verify::stride(size)),
            (true, true) => (verify::MAX_SLOTS, 8),
        };
        if p.verify {
            s.ep.write(0, &vec![if self.atomic { 0xFF } else { 0 }; slots * stride])?;
        }
        let stats = Stream {
            size,
            req: self.request(p, s, size, base, 0, 0),
            depth_cap: None,
            laps: None,
            prepare: |id, _, req: &mut WorkRequest| {
                let off = ((id - 1) % slots as u64) * stride as u64;
                let remote = if self.atomic { 0 } else { off as u32 };
                *req = self.request(p, s, size, base + id - 1, off, remote);
                Ok(())
            },
        }
        .run(s, p)?;
        if p.verify {
            let mut region = Vec::new();
            verify::read_region(&s.ep, 0, slots * stride, &mut region)?;
            if self.atomic {
                let results: Vec<u64> = region
                    .chunks_exact(8)
                    .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
                    .collect();
                verify::check_atomic_slots(&results, base, stats.iterations, out);
            } else {
                verify::check_read_slots(&region, size, slots, stats.iterations, read_seed(), out);
            }
        }
        if self.atomic {
            self.k += stats.iterations;
        }
        Ok(Round::bw(stats))
    }
}

/// The seed of the server's receive region in read_* under `--verify`.
fn read_seed() -> u64 {
    verify::seed(verify::kind::READ, 0, 0)
}

impl Bench for Rd {
    fn layout(&self, p: &Params, _server: bool) -> Layout {
        let max = p.max_size();
        let region = if p.verify && !p.test.is_lat() {
            verify::region_len(max)
        } else {
            0
        };
        Layout::new(max, region, 0)
    }

    fn setup(&mut self, s: &Local<'_>, p: &Params, server: bool) -> Result<Setup> {
        if server && p.verify && !self.atomic {
            verify::fill(s.ep, 0, s.lay.send, read_seed())?;
        }
        Ok(Setup::default())
    }

    fn info(&self, _s: &Side, p: &Params, rep: &mut Reporter) {
        if self.atomic {
            rep.info("Atomic type", p.atomic.name());
        }
    }

    fn dial_round(&mut self, at: &At<'_>, out: &mut Outcome) -> Result<Round> {
        let At { s, p, size, .. } = *at;
        let r = if p.test.is_lat() {
            self.lat_round(s, p, size, out)?
        } else {
            self.bw_round(s, p, size, out)?
        };
        if self.atomic {
            self.check_word(s, p, out)?;
        }
        if !p.verify && !out.ok() {
            eprintln!(
                "ddperf: warning: {} (and {} more)",
                out.notes[0],
                out.bad.saturating_sub(1)
            );
        }
        Ok(r)
    }
}
