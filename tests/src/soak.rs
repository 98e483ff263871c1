//! The soak workload (issue 4): a seeded mix of writes (1 B to 1 MiB, skewed towards
//! small), reads, fetch-and-add, compare-and-swap and post-increment appends on one
//! connection, run in rounds and checked exactly after each round:
//!
//! * every byte of every write's destination range holds the bytes posted (within a
//!   round, writes go to distinct ranges, so a lost, duplicated, stale or corrupted
//!   deposit cannot hide behind a later one);
//! * every read returns what the receiver held at that point of the connection's
//!   order (the sender keeps a shadow of the receiver's write region);
//! * fetch-and-add `k` of the run returns exactly `k` (in-order, exactly-once) and the
//!   counter ends at the number of adds; each compare-and-swap (some meant to fail)
//!   returns the value the chain predicts and the word ends where the chain does;
//! * appends land exactly once, in posting order, in consecutive queue slots, and the
//!   queue pointer moved by exactly their number;
//! * every work request completes once, with success.
//!
//! Both nodes derive the same [`Plan`] from the seed, so the receiver can check its
//! memory on its own (memif: another process) and the sender checks what came back.
//! Between rounds the receiver checks and resets its queue pointer; the sender starts
//! the next round only after that.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use deposit::{
    CompletionQueue, ConnOptions, Connection, Device, Endpoint, Error, FaultStats, Listener,
    RegProt, RegWindow, Registers, Rights, WcStatus, WorkRequest,
};

/// Service number the soak receiver listens on.
pub const SERVICE: u32 = 23;
/// Work requests per round (at most; a round also ends when its ranges run out).
pub const ROUND_OPS: usize = 512;
/// The 1 % / 5 % / 10 % fault mixes of the soak tests (loss plus reordering,
/// duplication and corruption); `seed=` is appended per node.
pub fn fault_spec(loss_pct: u32) -> String {
    format!(
        "loss={},reorder=0.02,dup=0.02,corrupt=0.001",
        f64::from(loss_pct) / 100.0
    )
}

// Receiver endpoint layout.
/// The fetch-and-add counter.
pub const FA_WORD: u32 = 0;
/// The compare-and-swap word.
pub const CAS_WORD: u32 = 8;
/// The append queue: register 0 points into it, register 1 is its stride.
pub const QUEUE_BASE: u64 = 4096;
pub const QUEUE_STRIDE: u64 = 64;
const QUEUE_LEN: usize = ROUND_OPS * QUEUE_STRIDE as usize;
/// The region writes land in and reads read from.
pub const WRITE_BASE: usize = QUEUE_BASE as usize + QUEUE_LEN;
pub const WRITE_LEN: usize = 4 << 20;
/// Receiver endpoint size.
pub const SERVER_LEN: usize = WRITE_BASE + WRITE_LEN;

// Sender endpoint layout.
/// Source bytes of writes and appends (seeded random; never changes).
pub const POOL_LEN: usize = 4 << 20;
/// Where fetch-and-add / compare-and-swap old values land (8 bytes per request).
pub const RESULT_BASE: usize = POOL_LEN;
/// Where reads land.
pub const LAND_BASE: usize = RESULT_BASE + 8 * ROUND_OPS;
pub const LAND_LEN: usize = 4 << 20;
/// Sender endpoint size.
pub const CLIENT_LEN: usize = LAND_BASE + LAND_LEN;

const MIB: u32 = 1 << 20;

/// Total operations of a soak run: `DEPOSIT_SOAK_OPS` or `default`.
pub fn ops_from_env(default: u64) -> u64 {
    std::env::var("DEPOSIT_SOAK_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Time bound of a soak run: `DEPOSIT_SOAK_SECS` or `default` seconds.
pub fn deadline_from_env(default: u64) -> Duration {
    Duration::from_secs(
        std::env::var("DEPOSIT_SOAK_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

/// splitmix64: small, seeded, good enough to pick sizes and offsets.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5EED_50A4_D3B0_5171)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + self.below(u64::from(hi - lo) + 1) as u32
    }
}

/// The source pool of a run: the bytes every write and append copies from.
pub fn source_pool(seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ 0x900);
    let mut v = Vec::with_capacity(POOL_LEN);
    while v.len() < POOL_LEN {
        v.extend_from_slice(&rng.next_u64().to_ne_bytes());
    }
    v
}

/// One work request of the plan. Offsets are from the start of the endpoint named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `len` bytes from the sender's pool at `src` to the receiver at `dst`.
    Write { src: u32, dst: u32, len: u32 },
    /// `len` bytes of the receiver at `src` into the sender at `land`.
    Read { src: u32, land: u32, len: u32 },
    /// Adds 1 to [`FA_WORD`]; must return `old`.
    FetchAdd { result: u32, old: u64 },
    /// Compare-and-swap on [`CAS_WORD`]; must return `old`.
    CmpSwap {
        result: u32,
        compare: u64,
        swap: u64,
        old: u64,
    },
    /// `len` bytes from the pool at `src` appended at the receiver's queue pointer.
    Append { src: u32, len: u32 },
}

/// One round of the plan.
#[derive(Debug, Clone)]
pub struct Round {
    pub index: u64,
    /// The work request id of `ops[0]` (ids are consecutive through the run).
    pub first_id: u64,
    pub ops: Vec<Op>,
    /// The fetch-and-add counter and the compare-and-swap word after this round.
    pub fa_after: u64,
    pub cas_after: u64,
}

/// The whole run, round by round, from a seed.
#[derive(Debug, Clone)]
pub struct Plan {
    rng: Rng,
    total: u64,
    next_id: u64,
    rounds: u64,
    fa: u64,
    cas: u64,
    /// An operation that did not fit in the previous round.
    carry: Option<OpKind>,
}

#[derive(Debug, Clone, Copy)]
enum OpKind {
    Write(u32),
    Read(u32),
    FetchAdd,
    CmpSwap,
    Append,
}

/// A size from 1 B to 1 MiB, skewed towards small: 84 % up to 64 B, 15 % up to
/// 4 KiB, 1 % up to 64 KiB, 0.05 % up to 1 MiB.
fn skewed_size(rng: &mut Rng) -> u32 {
    match rng.below(10_000) {
        0..5 => rng.range(65_537, MIB),
        5..105 => rng.range(4097, 65_536),
        105..1605 => rng.range(65, 4096),
        _ => rng.range(1, 64),
    }
}

impl Plan {
    pub fn new(seed: u64, total: u64) -> Plan {
        Plan {
            rng: Rng::new(seed),
            total,
            next_id: 0,
            rounds: 0,
            fa: 0,
            cas: 0,
            // The run starts with the largest write, then reads it back whole.
            carry: Some(OpKind::Write(MIB)),
        }
    }

    fn pick(&mut self) -> OpKind {
        if self.next_id == 1 {
            return OpKind::Read(MIB);
        }
        match self.rng.below(100) {
            0..45 => OpKind::Write(skewed_size(&mut self.rng)),
            45..60 => OpKind::Read(skewed_size(&mut self.rng)),
            60..75 => OpKind::FetchAdd,
            75..85 => OpKind::CmpSwap,
            _ => OpKind::Append,
        }
    }

    /// The next round, or `None` when the run is complete.
    pub fn next_round(&mut self) -> Option<Round> {
        if self.next_id >= self.total {
            return None;
        }
        let mut round = Round {
            index: self.rounds,
            first_id: self.next_id,
            ops: Vec::with_capacity(ROUND_OPS),
            fa_after: 0,
            cas_after: 0,
        };
        self.rounds += 1;
        // Writes go to distinct ranges of the write region, reads land in distinct
        // ranges of the landing region; both start at a random offset.
        let mut wcur = self.rng.below(4096) as usize;
        let mut lcur = self.rng.below(4096) as usize;
        while round.ops.len() < ROUND_OPS && self.next_id < self.total {
            let kind = match self.carry.take() {
                Some(k) => k,
                None => self.pick(),
            };
            let slot = (RESULT_BASE + 8 * round.ops.len()) as u32;
            let op = match kind {
                OpKind::Write(len) => {
                    if wcur + len as usize > WRITE_LEN {
                        self.carry = Some(kind);
                        break;
                    }
                    let dst = (WRITE_BASE + wcur) as u32;
                    wcur += len as usize + self.rng.below(16) as usize;
                    let src = self.rng.below((POOL_LEN - len as usize) as u64 + 1) as u32;
                    Op::Write { src, dst, len }
                }
                OpKind::Read(len) => {
                    if lcur + len as usize > LAND_LEN {
                        self.carry = Some(kind);
                        break;
                    }
                    let land = (LAND_BASE + lcur) as u32;
                    lcur += len as usize + self.rng.below(16) as usize;
                    let src = if len == MIB {
                        WRITE_BASE as u32
                    } else {
                        (WRITE_BASE as u64 + self.rng.below((WRITE_LEN - len as usize) as u64 + 1))
                            as u32
                    };
                    Op::Read { src, land, len }
                }
                OpKind::FetchAdd => {
                    self.fa += 1;
                    Op::FetchAdd {
                        result: slot,
                        old: self.fa - 1,
                    }
                }
                OpKind::CmpSwap => {
                    let old = self.cas;
                    // One in four is meant to fail (a stale compare value).
                    let (compare, swap) = if self.rng.below(4) == 0 {
                        (old.wrapping_add(1 + self.rng.below(5)), self.rng.next_u64())
                    } else {
                        (old, old.wrapping_mul(31).wrapping_add(self.next_id | 1))
                    };
                    if compare == old {
                        self.cas = swap;
                    }
                    Op::CmpSwap {
                        result: slot,
                        compare,
                        swap,
                        old,
                    }
                }
                OpKind::Append => {
                    let len = self.rng.range(1, QUEUE_STRIDE as u32);
                    let src = self.rng.below((POOL_LEN - len as usize) as u64 + 1) as u32;
                    Op::Append { src, len }
                }
            };
            round.ops.push(op);
            self.next_id += 1;
        }
        round.fa_after = self.fa;
        round.cas_after = self.cas;
        Some(round)
    }
}

/// The work request of `op` (signaled), with id `id`.
pub fn work_request(op: &Op, id: u64, cep: &Endpoint) -> WorkRequest {
    match *op {
        Op::Write { src, dst, len } => WorkRequest::write(id, cep, src.into(), len, dst),
        Op::Read { src, land, len } => WorkRequest::read(id, cep, land.into(), len, src),
        Op::FetchAdd { result, .. } => WorkRequest::fetch_add(id, cep, result.into(), FA_WORD, 1),
        Op::CmpSwap {
            result,
            compare,
            swap,
            ..
        } => WorkRequest::cmp_swap(id, cep, result.into(), CAS_WORD, compare, swap),
        Op::Append { src, len } => WorkRequest::send(id, cep, src.into(), len, 0),
    }
    .signaled()
}

/// The receiver's side: endpoint, queue registers and listener.
pub struct Receiver {
    pub ep: Endpoint,
    pub regs: RegWindow,
    pub cq: CompletionQueue,
    pub listener: Listener,
}

/// Sets up the receiver on `dev`: the endpoint (all rights), register 0 the queue
/// pointer (indirect only) and register 1 its stride, a listener on [`SERVICE`].
pub fn receiver(dev: &Device) -> Result<Receiver, Error> {
    let ep = dev.alloc_endpoint(SERVER_LEN as u64, Rights::ALL)?;
    ep.fill(0, SERVER_LEN as u64, 0)?;
    let regs = dev.alloc_registers(2)?;
    dev.write_register(regs, 0, QUEUE_BASE)?;
    dev.set_register_protection(regs, 0, RegProt::INDIRECT)?;
    dev.write_register(regs, 1, QUEUE_STRIDE)?;
    dev.set_register_protection(regs, 1, RegProt::NONE)?;
    let cq = dev.create_cq(64);
    let opts = ConnOptions {
        registers: Registers::Window(regs),
        ..ConnOptions::default()
    };
    let listener = dev.listen_with(SERVICE, &ep, &cq, &opts)?;
    Ok(Receiver {
        ep,
        regs,
        cq,
        listener,
    })
}

/// The receiver's check after `round` (all its requests completed at the sender, so
/// all ran here): writes, appends, queue pointer, atomic words. Then clears the queue
/// slots used and resets the queue pointer for the next round.
pub fn verify_round(dev: &Device, rx: &Receiver, pool: &[u8], round: &Round) -> Result<(), String> {
    let ctx = |what: String| {
        format!(
            "round {} (ids from {}): {what}",
            round.index, round.first_id
        )
    };
    let mut buf = Vec::new();
    let mut appends = 0u64;
    for (k, op) in round.ops.iter().enumerate() {
        let id = round.first_id + k as u64;
        match *op {
            Op::Write { src, dst, len } => {
                buf.resize(len as usize, 0);
                rx.ep
                    .read(dst as u64, &mut buf)
                    .map_err(|e| ctx(e.to_string()))?;
                let want = &pool[src as usize..(src + len) as usize];
                if buf != want {
                    let i = first_difference(&buf, want);
                    return Err(ctx(format!(
                        "write {id} ({len} B at {dst}): byte {i} is {:#04x}, posted {:#04x}",
                        buf[i], want[i]
                    )));
                }
            }
            Op::Append { src, len } => {
                let at = QUEUE_BASE + appends * QUEUE_STRIDE;
                appends += 1;
                buf.resize(len as usize, 0);
                rx.ep.read(at, &mut buf).map_err(|e| ctx(e.to_string()))?;
                let want = &pool[src as usize..(src + len) as usize];
                if buf != want {
                    let i = first_difference(&buf, want);
                    return Err(ctx(format!(
                        "append {id} (#{} of the round, {len} B at {at}): byte {i} is {:#04x}, \
                         posted {:#04x}",
                        appends - 1,
                        buf[i],
                        want[i]
                    )));
                }
            }
            _ => {}
        }
    }
    let ptr = dev
        .read_register(rx.regs, 0)
        .map_err(|e| ctx(e.to_string()))?;
    let want_ptr = QUEUE_BASE + appends * QUEUE_STRIDE;
    if ptr != want_ptr {
        return Err(ctx(format!(
            "queue pointer {ptr}, want {want_ptr} ({appends} appends)"
        )));
    }
    let fa = rx
        .ep
        .load_u64(FA_WORD as u64)
        .map_err(|e| ctx(e.to_string()))?;
    if fa != round.fa_after {
        return Err(ctx(format!(
            "fetch-and-add counter {fa}, want {} (adds so far)",
            round.fa_after
        )));
    }
    let cas = rx
        .ep
        .load_u64(CAS_WORD as u64)
        .map_err(|e| ctx(e.to_string()))?;
    if cas != round.cas_after {
        return Err(ctx(format!(
            "compare-and-swap word {cas:#x}, want {:#x}",
            round.cas_after
        )));
    }
    rx.ep
        .fill(QUEUE_BASE, QUEUE_LEN as u64, 0)
        .map_err(|e| ctx(e.to_string()))?;
    dev.write_register(rx.regs, 0, QUEUE_BASE)
        .map_err(|e| ctx(e.to_string()))?;
    Ok(())
}

/// For a failed read: the writes posted after it in its round that overlap the
/// wrong byte (a read must not see them).
fn later_writes(round: &Round, land: u32, byte: usize) -> String {
    let Some(k) = round
        .ops
        .iter()
        .position(|op| matches!(*op, Op::Read { land: l, .. } if l == land))
    else {
        return String::new();
    };
    let Op::Read { src, .. } = round.ops[k] else {
        return String::new();
    };
    let at = src as usize + byte;
    let later: Vec<u64> = round.ops[k + 1..]
        .iter()
        .enumerate()
        .filter(|(_, op)| {
            matches!(**op, Op::Write { dst, len, .. }
                if (dst as usize..(dst + len) as usize).contains(&at))
        })
        .map(|(j, _)| round.first_id + (k + 1 + j) as u64)
        .collect();
    format!(
        " (read request {}; writes posted after it over that byte: {later:?})",
        round.first_id + k as u64
    )
}

fn first_difference(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(0)
}

/// The sender's side of a run: the endpoint (pool, result slots, landing region) and
/// a shadow of the receiver's write region.
pub struct Sender<'a> {
    pub dev: &'a Device,
    pub conn: &'a Connection,
    pub cep: &'a Endpoint,
    pub cq: &'a CompletionQueue,
    pub pool: &'a [u8],
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub ops: u64,
    pub rounds: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub reads: u64,
    pub read_bytes: u64,
    pub fetch_adds: u64,
    pub cmp_swaps: u64,
    pub appends: u64,
    pub elapsed: Duration,
}

/// The endpoint the sender needs (its pool written in).
pub fn sender_endpoint(dev: &Device, pool: &[u8]) -> Result<Endpoint, Error> {
    let cep = dev.alloc_endpoint(CLIENT_LEN as u64, Rights::REMOTE_WRITE)?;
    cep.write(0, pool)?;
    Ok(cep)
}

impl Sender<'_> {
    /// Runs `plan` to the end or fails (by `deadline` at the latest). After each
    /// round's completions have been checked, `receiver_check` must confirm the
    /// receiver's side of the round (and reset its queue pointer) before the next.
    pub fn run(
        &self,
        mut plan: Plan,
        deadline: Instant,
        mut receiver_check: impl FnMut(&Round) -> Result<(), String>,
    ) -> Result<Report, String> {
        let start = Instant::now();
        let mut report = Report::default();
        let mut shadow = vec![0u8; WRITE_LEN];
        let mut expected_reads: Vec<(u32, Vec<u8>)> = Vec::new();
        let mut done: HashSet<u64> = HashSet::with_capacity(ROUND_OPS);
        let mut buf = Vec::new();
        while let Some(round) = plan.next_round() {
            let ctx = |what: String| {
                format!(
                    "round {} (ids from {}): {what}",
                    round.index, round.first_id
                )
            };
            expected_reads.clear();
            done.clear();
            // Result slots hold a value no atomic of the run returns until one lands.
            self.cep
                .fill(RESULT_BASE as u64, 8 * ROUND_OPS as u64, 0xA5)
                .map_err(|e| ctx(e.to_string()))?;
            let in_round = round.first_id..round.first_id + round.ops.len() as u64;
            let take = |wc: deposit::Completion, done: &mut HashSet<u64>| -> Result<(), String> {
                if wc.status != WcStatus::Success {
                    return Err(ctx(format!("work request completed {wc:?}")));
                }
                if !in_round.contains(&wc.wr_id) || !done.insert(wc.wr_id) {
                    return Err(ctx(format!("unexpected or repeated completion {wc:?}")));
                }
                Ok(())
            };
            for (k, op) in round.ops.iter().enumerate() {
                let id = round.first_id + k as u64;
                match *op {
                    Op::Write { src, dst, len } => {
                        let d = dst as usize - WRITE_BASE;
                        shadow[d..d + len as usize]
                            .copy_from_slice(&self.pool[src as usize..(src + len) as usize]);
                        report.writes += 1;
                        report.write_bytes += u64::from(len);
                    }
                    Op::Read { src, land, len } => {
                        let s = src as usize - WRITE_BASE;
                        let want = shadow[s..s + len as usize].to_vec();
                        // Poison the landing range, so a read that never lands shows.
                        let poison: Vec<u8> = want.iter().map(|b| !b).collect();
                        self.cep
                            .write(land as u64, &poison)
                            .map_err(|e| ctx(e.to_string()))?;
                        expected_reads.push((land, want));
                        report.reads += 1;
                        report.read_bytes += u64::from(len);
                    }
                    Op::FetchAdd { .. } => report.fetch_adds += 1,
                    Op::CmpSwap { .. } => report.cmp_swaps += 1,
                    Op::Append { .. } => report.appends += 1,
                }
                let wr = work_request(op, id, self.cep);
                loop {
                    match self.conn.post(&wr) {
                        Ok(()) => break,
                        Err(Error::SendQueueFull { .. }) => {
                            while let Some(wc) = self.cq.poll_one() {
                                take(wc, &mut done)?;
                            }
                            if Instant::now() > deadline {
                                return Err(ctx(format!(
                                    "send queue still full at the deadline (request {id})"
                                )));
                            }
                        }
                        Err(e) => return Err(ctx(format!("posting request {id}: {e}"))),
                    }
                }
            }
            while done.len() < round.ops.len() {
                match self.cq.poll_one() {
                    Some(wc) => take(wc, &mut done)?,
                    None if Instant::now() > deadline => {
                        let missing: Vec<u64> = in_round
                            .clone()
                            .filter(|i| !done.contains(i))
                            .take(8)
                            .collect();
                        return Err(ctx(format!(
                            "{} of {} completions by the deadline; first missing {missing:?}; \
                             connection {:?}; cq overflows {}",
                            done.len(),
                            round.ops.len(),
                            self.conn.state(),
                            self.cq.overflows()
                        )));
                    }
                    None => {}
                }
            }
            // What came back: reads and atomic old values.
            for (land, want) in &expected_reads {
                buf.resize(want.len(), 0);
                self.cep
                    .read(*land as u64, &mut buf)
                    .map_err(|e| ctx(e.to_string()))?;
                if &buf != want {
                    let i = first_difference(&buf, want);
                    return Err(ctx(format!(
                        "read of {} B landed at {land}: byte {i} is {:#04x}, receiver held \
                         {:#04x}{}",
                        want.len(),
                        buf[i],
                        want[i],
                        later_writes(&round, *land, i)
                    )));
                }
            }
            for (k, op) in round.ops.iter().enumerate() {
                let (result, old, what) = match *op {
                    Op::FetchAdd { result, old } => (result, old, "fetch-and-add"),
                    Op::CmpSwap { result, old, .. } => (result, old, "compare-and-swap"),
                    _ => continue,
                };
                let got = self
                    .cep
                    .load_u64(result as u64)
                    .map_err(|e| ctx(e.to_string()))?;
                if got != old {
                    return Err(ctx(format!(
                        "{what} {} returned {got:#x}, want {old:#x}",
                        round.first_id + k as u64
                    )));
                }
            }
            receiver_check(&round)?;
            report.ops += round.ops.len() as u64;
            report.rounds += 1;
        }
        report.elapsed = start.elapsed();
        Ok(report)
    }
}

/// Checks that the fault layer really did its job on a node.
pub fn faults_were_injected(who: &str, fs: &FaultStats) -> Result<(), String> {
    if fs.dropped == 0 || fs.duplicated == 0 || fs.reordered == 0 {
        return Err(format!("{who}: faults not injected: {fs:?}"));
    }
    Ok(())
}
