//! `--verify`: after the run, every deposited byte and every atomic target is checked
//! against what was posted; `--faults`: the fault counters. Both end up on stderr and,
//! with `--json`, as extra keys of every JSON object (`"verify": "ok" | "mismatch"`,
//! `faults_dropped`, `faults_duplicated`, `faults_reordered`, `faults_corrupted`,
//! `faults_delayed`, `retransmits`); a mismatch makes the run exit 1.
//!
//! ## What every message carries
//!
//! A verified message of `len` bytes is a **body** — a pseudo-random byte stream keyed
//! by a seed ([`body`]) — whose first `min(8, len)` bytes are overwritten by a
//! **stamp** naming the message (round and number, [`stamp`]). Bodies are written into
//! the source buffers before a round starts (not timed); stamps, 8 bytes, are written
//! per posted message (one small copy in the posting loop). A body catches corrupted,
//! truncated and misplaced bytes; a stamp catches a stale message (an old duplicate or
//! retransmission) overwriting a newer one, or a lost last write to a slot.
//!
//! Each test module says what it checks (slots, rings, queues, old values). The side
//! that checks counts bytes and items in an [`Outcome`]; the client's travels in its
//! end-of-round message, the server's in its answer (see [`crate::harness`]), so both
//! sides report the run's whole outcome.
//!
//! What it costs: untimed, filling bodies before each round (at most [`REGION`] bytes
//! a side) and every end-of-round check; timed, one 8-byte stamp copy per posted
//! message, the streams' depth capped at their slot count, and a ping-pong server's
//! check of each ping before it answers.

use std::fmt::Write as _;
use std::ops::Range;

use deposit::{Endpoint, FaultStats};
use serde_json::json;

use crate::error::{PerfError, Result};
use crate::report::Reporter;
use crate::Params;

/// Bytes of a slot region (receive, and send, of the bandwidth tests) under --verify.
pub const REGION: usize = 16 << 20;
/// Most slots of a slot region.
pub const MAX_SLOTS: usize = 4096;
/// Bytes of a stamp.
pub const STAMP: usize = 8;

/// Length of the slot region for sizes up to `max_size`.
pub fn region_len(max_size: u64) -> usize {
    let stride = stride(max_size);
    (stride * MAX_SLOTS).min(REGION.max(stride))
}

/// Distance between two slots of messages of `size` bytes.
pub fn stride(size: u64) -> usize {
    (size.max(1) as usize).next_multiple_of(64)
}

/// Slots of `size` bytes in a region of `region` bytes.
pub fn slots(size: u64, region: usize) -> usize {
    (region / stride(size)).clamp(1, MAX_SLOTS)
}

/// Seed of a body: test-specific `kind`, round, slot (or side).
pub fn seed(kind: u64, round: usize, slot: u64) -> u64 {
    (kind << 56) ^ ((round as u64 + 1) << 40) ^ slot
}

/// The stamp of message `id` (1-based) of `round`.
pub fn stamp(round: usize, id: u64) -> [u8; STAMP] {
    (((round as u64 + 1) << 48) ^ id).to_le_bytes()
}

#[inline]
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fills `out` with the body of `seed`, starting at byte `from` of the stream.
pub fn body_into(seed: u64, from: usize, out: &mut [u8]) {
    let mut i = 0;
    while i < out.len() {
        let pos = from + i;
        let word = mix(seed ^ mix(pos as u64 / 8)).to_le_bytes();
        let k = pos % 8;
        let n = (8 - k).min(out.len() - i);
        out[i..i + n].copy_from_slice(&word[k..k + n]);
        i += n;
    }
}

/// The body of `seed`, `len` bytes.
pub fn body(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    body_into(seed, 0, &mut v);
    v
}

/// A message: the body of `seed` with `stamp` over its first bytes.
pub fn message(seed: u64, st: &[u8; STAMP], len: usize) -> Vec<u8> {
    let mut v = body(seed, len);
    let n = len.min(STAMP);
    v[..n].copy_from_slice(&st[..n]);
    v
}

/// Writes the body of `seed` (`len` bytes) into `ep` at `off`.
pub fn fill(ep: &Endpoint, off: usize, len: usize, seed: u64) -> Result<()> {
    ep.write(off as u64, &body(seed, len))?;
    Ok(())
}

/// Ping-pong tests: fills this side's `len`-byte message at `off` with the body of
/// `mine` for `round`, and sets `want` to the body the peer's messages carry (`peer`)
/// and `got` to a buffer of the same length to read them into.
pub fn ping_pong_bodies(
    ep: &Endpoint,
    off: usize,
    len: usize,
    round: usize,
    (mine, peer): (u64, u64),
    want: &mut Vec<u8>,
    got: &mut Vec<u8>,
) -> Result<()> {
    fill(ep, off, len, seed(mine, round, 0))?;
    *want = body(seed(peer, round, 0), len);
    got.resize(len, 0);
    Ok(())
}

/// Writes the stamp over the first bytes of a `len`-byte message at `off`.
#[inline]
pub fn put_stamp(ep: &Endpoint, off: usize, len: usize, st: &[u8; STAMP]) -> Result<()> {
    ep.write(off as u64, &st[..len.min(STAMP)])?;
    Ok(())
}

/// Test-specific body keys ([`seed`]'s `kind`).
pub mod kind {
    pub const WRITE_BW: u64 = 1;
    pub const WRITE_PING: u64 = 2;
    pub const WRITE_PONG: u64 = 3;
    pub const READ: u64 = 4;
    pub const SEND_BW: u64 = 7;
    pub const APPEND: u64 = 8;
    pub const IP_BW: u64 = 9;
}

/// Fills slots `0..k` (`stride(size)` apart from `base`) with the bodies of
/// `seed(kind, round, j)`, `size` bytes each (before a round, not timed).
pub fn fill_slots(
    ep: &Endpoint,
    base: usize,
    size: u64,
    k: usize,
    kind: u64,
    round: usize,
) -> Result<()> {
    for j in 0..k {
        fill(
            ep,
            base + j * stride(size),
            size as usize,
            seed(kind, round, j as u64),
        )?;
    }
    Ok(())
}

/// The 1-based number of the last of `count` messages to use slot `j` when message
/// `i` uses slot `(i-1) mod k`; `None` when no message used it.
pub fn last_user(count: u64, k: usize, j: usize) -> Option<u64> {
    last_in(0..count, k, j).map(|g| g + 1)
}

/// The last of the messages `msgs` (0-based) to use slot `j` when message `g` uses
/// slot `g mod k`; `None` when none of them did.
pub fn last_in(msgs: Range<u64>, k: usize, j: usize) -> Option<u64> {
    let (k, j) = (k as u64, j as u64);
    let top = msgs.end.checked_sub(1)?;
    // The largest g <= top with g mod k == j.
    let r = top % k;
    let g = if r >= j {
        top - (r - j)
    } else {
        top.checked_sub(r + k - j)?
    };
    (g >= msgs.start).then_some(g)
}

/// Turns `img` (a message's body) into the image of a ping-pong message: `st` over
/// its first bytes, then `last` in its last byte (write_lat's counter).
pub fn ping_image(img: &mut [u8], st: &[u8; STAMP], last: u8) {
    let n = img.len().min(STAMP);
    img[..n].copy_from_slice(&st[..n]);
    if let Some(b) = img.last_mut() {
        *b = last;
    }
}

/// Checks `got` against `want`, adds the result to `out` (`what` names the message).
pub fn check_message(got: &[u8], want: &[u8], what: impl FnOnce() -> String, out: &mut Outcome) {
    let bad = count_diff(got, want);
    if bad > 0 {
        out.note(format!("{}: {bad} of {} bytes differ", what(), want.len()));
    }
    out.add(1, want.len() as u64, bad);
}

/// Bytes of `got` that differ from `want` (a length difference counts as different
/// bytes too).
pub fn count_diff(got: &[u8], want: &[u8]) -> u64 {
    if got == want {
        return 0;
    }
    let common = got.iter().zip(want).filter(|(a, b)| a != b).count();
    (common + got.len().abs_diff(want.len())) as u64
}

/// Checks a slot region after `count` messages of `size` bytes went round its `k`
/// slots (write_bw, send_bw's laps): slot `j` must hold the message of the LAST
/// message that used it, `message(seed(kind, round, j), stamp(round, id), size)`.
/// `region` starts at slot 0. Pure, so the tests can corrupt it.
pub fn check_slots(
    region: &[u8],
    size: u64,
    k: usize,
    count: u64,
    kind: u64,
    round: usize,
    out: &mut Outcome,
) {
    let ring = Ring {
        stride: stride(size),
        slots: k,
    };
    check_ring(region, ring, size, 0..count, kind, round, out);
}

/// A ring of `slots` slots `stride` bytes apart that messages fill in turn: message
/// `g` (0-based) lands in slot `g mod slots` (ip_bw's, see [`crate::bw::ring`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ring {
    pub stride: usize,
    pub slots: usize,
}

impl Ring {
    /// Bytes of the ring.
    pub fn len(&self) -> usize {
        self.stride * self.slots
    }
}

/// [`check_slots`] for messages `msgs` (0-based, counted over the run) of `size`
/// bytes in `ring`: slot `j` must hold the last of them to use it, message `g` being
/// `message(seed(kind, round, j), stamp(round, g + 1), size)`; slots none of them used
/// are not looked at.
pub fn check_ring(
    region: &[u8],
    ring: Ring,
    size: u64,
    msgs: Range<u64>,
    kind: u64,
    round: usize,
    out: &mut Outcome,
) {
    let (size, st) = (size as usize, ring.stride);
    for j in 0..ring.slots {
        let Some(g) = last_in(msgs.clone(), ring.slots, j) else {
            continue;
        };
        let id = g + 1;
        let want = message(seed(kind, round, j as u64), &stamp(round, id), size);
        let got = region.get(j * st..j * st + size).unwrap_or(&[]);
        let bad = count_diff(got, &want);
        if bad > 0 {
            out.note(format!(
                "slot {j} (message {id} of {size} B): {bad} bytes differ"
            ));
        }
        out.add(1, size as u64, bad);
    }
}

/// Checks slots `0..min(count, k)` of `region` (read_bw's landing slots) against the
/// position-keyed body of `seed` the server's region holds: slot `j` read the bytes
/// at `j * stride(size)`.
pub fn check_read_slots(
    region: &[u8],
    size: u64,
    k: usize,
    count: u64,
    seed: u64,
    out: &mut Outcome,
) {
    let (sz, st) = (size as usize, stride(size));
    let mut want = vec![0u8; sz];
    for j in 0..k.min(count as usize) {
        body_into(seed, j * st, &mut want);
        let got = region.get(j * st..j * st + sz).unwrap_or(&[]);
        let bad = count_diff(got, &want);
        if bad > 0 {
            out.note(format!("read slot {j} ({size} B): {bad} bytes differ"));
        }
        out.add(1, size, bad);
    }
}

/// Checks atomic_bw's result slots after a round of `count` atomics, the first of
/// which saw the value `base`: slot `j` must hold the old value returned to the last
/// atomic that used it (atomic `i` saw `base + i - 1`).
pub fn check_atomic_slots(results: &[u64], base: u64, count: u64, out: &mut Outcome) {
    let k = results.len();
    for (j, &got) in results.iter().enumerate() {
        let Some(id) = last_user(count, k, j) else {
            break;
        };
        let want = base + id - 1;
        if got != want {
            out.note(format!(
                "atomic result slot {j}: {got}, expected {want} (atomic {id})"
            ));
        }
        out.add(1, 8, u64::from(got != want));
    }
}

/// Checks an atomic target's final value.
pub fn check_word(got: u64, want: u64, what: &str, out: &mut Outcome) {
    if got != want {
        out.note(format!("{what}: {got}, expected {want}"));
    }
    out.add(1, 8, u64::from(got != want));
}

/// Reads `len` bytes of `ep` at `off` into `buf` (resized).
pub fn read_region(ep: &Endpoint, off: usize, len: usize, buf: &mut Vec<u8>) -> Result<()> {
    buf.resize(len, 0);
    ep.read(off as u64, buf)?;
    Ok(())
}

/// Whether the run's JSON must wait for the end (the keys of [`conclude`]).
pub fn defers(p: &Params) -> bool {
    p.verify || p.faults.is_some()
}

/// What one side's checks found.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Bytes (or atomic words × 8) checked.
    pub bytes: u64,
    /// Messages / words checked.
    pub items: u64,
    /// Bytes or words found wrong.
    pub bad: u64,
    /// The first few problems, for the MISMATCH line.
    pub notes: Vec<String>,
}

impl Outcome {
    /// Records `items` items of `bytes` bytes checked, `bad` of them wrong.
    pub fn add(&mut self, items: u64, bytes: u64, bad: u64) {
        self.items += items;
        self.bytes += bytes;
        self.bad += bad;
    }
    /// Notes a problem (kept for the first 8).
    pub fn note(&mut self, s: impl Into<String>) {
        if self.notes.len() < 8 {
            self.notes.push(s.into());
        }
    }
    pub fn ok(&self) -> bool {
        self.bad == 0
    }
    /// Adds another outcome (one round's) to this one.
    pub fn merge(&mut self, o: Outcome) {
        self.add(o.items, o.bytes, o.bad);
        for n in o.notes {
            self.note(n);
        }
    }
    /// What travels to the peer.
    pub fn verdict(&self) -> Verdict {
        Verdict {
            items: self.items,
            bytes: self.bytes,
            bad: self.bad,
        }
    }
    /// Adds what the peer found (a verdict or a marker).
    pub fn merge_peer(&mut self, v: &Verdict, who: &str) {
        self.add(v.items, v.bytes, v.bad);
        if v.bad > 0 {
            self.note(format!(
                "{who}: {} of {} bytes / words wrong",
                v.bad, v.bytes
            ));
        }
    }
}

/// One round's outcome as it travels between the sides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verdict {
    pub items: u64,
    pub bytes: u64,
    pub bad: u64,
}

/// Ends a run: prints the fault counters (with `--faults`) and the verify line (with
/// `--verify`) on stderr, adds them to the JSON objects, closes the table. Fails on a
/// verify mismatch.
pub fn conclude(rep: &mut Reporter, p: &Params) -> Result<()> {
    if p.faults.is_some() {
        let mut total = FaultStats::default();
        let mut retx = 0;
        for (name, d) in crate::setup::opened() {
            let f = d.fault_stats();
            let r = d.stats().retransmits;
            eprintln!(
                "ddperf: faults ({name}): dropped {}, duplicated {}, reordered {}, corrupted {}, delayed {}; retransmits {r}",
                f.dropped, f.duplicated, f.reordered, f.corrupted, f.delayed
            );
            total.dropped += f.dropped;
            total.duplicated += f.duplicated;
            total.reordered += f.reordered;
            total.corrupted += f.corrupted;
            total.delayed += f.delayed;
            retx += r;
        }
        rep.extra("faults_dropped", json!(total.dropped));
        rep.extra("faults_duplicated", json!(total.duplicated));
        rep.extra("faults_reordered", json!(total.reordered));
        rep.extra("faults_corrupted", json!(total.corrupted));
        rep.extra("faults_delayed", json!(total.delayed));
        rep.extra("retransmits", json!(retx));
    }
    let mut failed = None;
    if p.verify {
        let o = rep.outcome().clone();
        if o.ok() {
            eprintln!(
                "ddperf: verify: OK ({} bytes in {} messages/words checked)",
                o.bytes, o.items
            );
            rep.extra("verify", json!("ok"));
        } else {
            let mut notes = String::new();
            for n in &o.notes {
                let _ = write!(notes, "; {n}");
            }
            eprintln!(
                "ddperf: verify: MISMATCH ({} of {} bytes/words wrong in {} messages/words{notes})",
                o.bad, o.bytes, o.items
            );
            rep.extra("verify", json!("mismatch"));
            failed = Some(o.bad);
        }
    }
    rep.finish()?;
    match failed {
        Some(bad) => Err(PerfError::Failed(format!(
            "verify: {bad} bytes/words differ from what was posted"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_is_position_keyed() {
        let whole = body(7, 100);
        let mut part = vec![0u8; 50];
        body_into(7, 37, &mut part);
        assert_eq!(&whole[37..87], &part[..]);
        assert_ne!(body(7, 64), body(8, 64));
    }

    #[test]
    fn slots_fit_the_region() {
        assert_eq!(slots(4096, region_len(4096)), 4096);
        assert_eq!(slots(32, region_len(32)), 4096);
        assert!(slots(65536, region_len(65536)) * 65536 <= REGION);
        assert_eq!(slots(1 << 23, region_len(1 << 23)), 2);
        // -a: smaller sizes in the largest size's region.
        assert_eq!(slots(2, region_len(1 << 23)), 4096);
    }

    fn written_slots(k: usize, count: u64, size: u64, round: usize) -> Vec<u8> {
        let st = stride(size);
        let mut region = vec![0u8; k * st];
        for i in 1..=count {
            let j = ((i - 1) % k as u64) as usize;
            let m = message(
                seed(kind::WRITE_BW, round, j as u64),
                &stamp(round, i),
                size as usize,
            );
            region[j * st..j * st + size as usize].copy_from_slice(&m);
        }
        region
    }

    #[test]
    fn last_user_is_the_last_message_of_the_slot() {
        assert_eq!(last_user(10, 4, 0), Some(9));
        assert_eq!(last_user(10, 4, 1), Some(10));
        assert_eq!(last_user(10, 4, 2), Some(7));
        assert_eq!(last_user(3, 4, 3), None);
    }

    #[test]
    fn last_in_finds_the_last_message_of_a_slot_in_a_range() {
        // Messages 10..21 in 4 slots: slot 0 last got 20, slot 1 17, slot 3 19.
        assert_eq!(last_in(10..21, 4, 0), Some(20));
        assert_eq!(last_in(10..21, 4, 1), Some(17));
        assert_eq!(last_in(10..21, 4, 3), Some(19));
        // Messages 5..7 touch slots 1 and 2 only.
        assert_eq!(last_in(5..7, 4, 0), None);
        assert_eq!(last_in(5..7, 4, 3), None);
        assert_eq!(last_in(5..7, 4, 2), Some(6));
        assert_eq!(last_in(3..3, 4, 3), None);
    }

    /// A ring after messages `msgs` (0-based over the run) went round it.
    fn written_ring(ring: Ring, msgs: Range<u64>, size: u64, round: usize) -> Vec<u8> {
        let mut region = vec![0u8; ring.len()];
        for g in msgs {
            let j = (g % ring.slots as u64) as usize;
            let m = message(
                seed(kind::IP_BW, round, j as u64),
                &stamp(round, g + 1),
                size as usize,
            );
            let at = j * ring.stride;
            region[at..at + size as usize].copy_from_slice(&m);
        }
        region
    }

    #[test]
    fn ring_check_follows_the_pointer_across_rounds() {
        let ring = Ring {
            stride: 128,
            slots: 8,
        };
        // Round 0 wrote messages 0..13, round 1 continues with 13..18 (5 slots).
        let mut region = written_ring(ring, 0..13, 100, 0);
        let later = written_ring(ring, 13..18, 100, 1);
        for g in 13..18u64 {
            let at = (g % 8) as usize * 128;
            region[at..at + 128].copy_from_slice(&later[at..at + 128]);
        }
        let mut o = Outcome::default();
        check_ring(&region, ring, 100, 13..18, kind::IP_BW, 1, &mut o);
        assert!(o.ok(), "{o:?}");
        assert_eq!(o.items, 5);
        // Slot 1 still holding round 0's message (9) where round 1 wrote 17 is caught.
        let stale = written_ring(ring, 0..13, 100, 0);
        region[128..256].copy_from_slice(&stale[128..256]);
        let mut o = Outcome::default();
        check_ring(&region, ring, 100, 13..18, kind::IP_BW, 1, &mut o);
        assert!(!o.ok());
        assert!(o.notes[0].contains("slot 1"), "{:?}", o.notes);
    }

    #[test]
    fn slot_check_passes_what_was_written() {
        let region = written_slots(8, 21, 100, 1);
        let mut o = Outcome::default();
        check_slots(&region, 100, 8, 21, kind::WRITE_BW, 1, &mut o);
        assert!(o.ok(), "{o:?}");
        assert_eq!((o.items, o.bytes), (8, 800));
    }

    #[test]
    fn slot_check_catches_a_corrupted_byte() {
        let mut region = written_slots(8, 21, 100, 0);
        region[3 * stride(100) + 57] ^= 0x10;
        let mut o = Outcome::default();
        check_slots(&region, 100, 8, 21, kind::WRITE_BW, 0, &mut o);
        assert_eq!(o.bad, 1);
        assert!(!o.ok());
        assert!(o.notes[0].contains("slot 3"), "{:?}", o.notes);
    }

    #[test]
    fn slot_check_catches_a_stale_message() {
        // Slot 2's last write was 19; an old duplicate of write 11 landed after it.
        let mut region = written_slots(8, 21, 100, 0);
        let old = message(seed(kind::WRITE_BW, 0, 2), &stamp(0, 11), 100);
        region[2 * stride(100)..2 * stride(100) + 100].copy_from_slice(&old);
        let mut o = Outcome::default();
        check_slots(&region, 100, 8, 21, kind::WRITE_BW, 0, &mut o);
        assert!(!o.ok());
        // A message of the previous round in the right slot is caught too.
        let region = written_slots(8, 21, 100, 0);
        let mut o = Outcome::default();
        check_slots(&region, 100, 8, 21, kind::WRITE_BW, 1, &mut o);
        assert!(o.bad > 0);
    }

    #[test]
    fn slot_check_catches_a_lost_write() {
        let region = written_slots(8, 20, 100, 0); // write 21 never landed
        let mut o = Outcome::default();
        check_slots(&region, 100, 8, 21, kind::WRITE_BW, 0, &mut o);
        assert!(!o.ok());
    }

    #[test]
    fn read_check_catches_a_misplaced_read() {
        let s = seed(kind::READ, 0, 0);
        let st = stride(64);
        let mut server = vec![0u8; 4 * st];
        body_into(s, 0, &mut server);
        let mut o = Outcome::default();
        check_read_slots(&server, 64, 4, 9, s, &mut o);
        assert!(o.ok());
        // Slot 1 holding the bytes of slot 2 (a read with the wrong offset).
        let mut client = server.clone();
        client.copy_within(2 * st..2 * st + 64, st);
        let mut o = Outcome::default();
        check_read_slots(&client, 64, 4, 9, s, &mut o);
        assert!(!o.ok());
    }

    #[test]
    fn atomic_checks_catch_a_wrong_value() {
        // 10 atomics into 4 result slots from base 100: slot j holds the old value of
        // the last atomic i with (i-1) mod 4 == j, i.e. 100 + i - 1.
        let good = [108, 109, 106, 107];
        let mut o = Outcome::default();
        check_atomic_slots(&good, 100, 10, &mut o);
        check_word(110, 110, "word", &mut o);
        assert!(o.ok(), "{o:?}");
        let mut o = Outcome::default();
        check_atomic_slots(&[108, 105, 106, 107], 100, 10, &mut o);
        assert_eq!(o.bad, 1);
        let mut o = Outcome::default();
        check_word(109, 110, "the server's word", &mut o);
        assert!(!o.ok());
    }

    #[test]
    fn ping_check_catches_a_wrong_counter_or_stamp() {
        let mut want = body(3, 32);
        ping_image(&mut want, &stamp(0, 5), 5);
        let got = want.clone();
        let mut o = Outcome::default();
        check_message(&got, &want, || "ping".into(), &mut o);
        assert!(o.ok());
        let mut stale = body(3, 32);
        ping_image(&mut stale, &stamp(0, 4), 5);
        check_message(&stale, &want, || "ping".into(), &mut o);
        assert!(!o.ok());
        // A mismatch reported by the peer fails this side too.
        let mut mine = Outcome::default();
        mine.merge_peer(
            &Verdict {
                items: 3,
                bytes: 96,
                bad: 2,
            },
            "server",
        );
        assert!(!mine.ok());
    }

    #[test]
    fn message_stamps_its_first_bytes() {
        let st = stamp(0, 5);
        let m = message(3, &st, 4);
        assert_eq!(&m[..], &st[..4]);
        let m = message(3, &st, 20);
        assert_eq!(&m[..8], &st[..]);
        assert_eq!(&m[8..], &body(3, 20)[8..]);
    }
}
