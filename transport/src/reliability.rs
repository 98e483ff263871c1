//! Per-connection reliability as a sans-IO state machine (docs/design.md §5; quinn-proto's
//! shape): sequence numbers and the clock go in, decisions come out — which message to
//! (re)transmit next, what to acknowledge, when the next timer is due. No sockets, no
//! mbufs, no clock of its own; the worker is the driver, and the tests below drive two
//! of these over a simulated lossy link, deterministically.
//!
//! * Every message (not frame) has a sequence number; the receiver executes in order.
//! * Acknowledgements are cumulative (everything before `ack`) plus a selective part:
//!   a bitmap of messages received beyond it ([`SACK_BITS`]), so the sender resends only
//!   what is missing (selective repeat, not go-back-N).
//! * Loss is detected by a later message being acknowledged while an earlier one is not
//!   ([`DUP_THRESHOLD`] messages later: reordering is not loss), or by the
//!   retransmission timer (exponential back-off, bounded retries). Over several paths
//!   (frames sprayed over them: `node::cc`), a hole must also be older than its path's
//!   expected round trip before it counts as lost (RACK's idea, by time: a frame on a
//!   slower path is late, not lost); the sender then has a second, earlier timer for
//!   the holes still waiting on time ([`Timeout::Lost`]).
//! * A bulk frame's bytes leave the bytes in flight when all its messages are
//!   acknowledged, cumulatively or selectively (a frame delivered beyond a hole is no
//!   longer on the wire), and each delivered frame is reported once
//!   ([`OnDelivery`]) with its path and, unless resent, its round trip.
//! * The receiver keeps messages that arrive ahead of a gap (the worker stores them)
//!   within its window, so one loss costs one retransmission, not a window.

/// Messages the selective part of an acknowledgement covers beyond the cumulative one.
pub const SACK_BITS: u32 = 256;
/// Frames carrying fewer new bytes than this are left out of the unacknowledged-bytes
/// cap ([`Sender::with_max_bytes_in_flight`]).
pub const BDP_MIN_FRAME: u64 = 1024;
/// A message counts as lost when one this many sequence numbers later has arrived.
pub const DUP_THRESHOLD: u32 = 3;

/// Sequence comparison modulo 2^32.
#[inline]
pub fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// A bitmap over the sequence numbers following a base.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SeqBits {
    words: [u64; (SACK_BITS / 64) as usize],
}

impl SeqBits {
    #[inline]
    pub fn get(&self, off: u32) -> bool {
        off < SACK_BITS && self.words[(off / 64) as usize] & (1 << (off % 64)) != 0
    }
    #[inline]
    pub fn set(&mut self, off: u32) {
        if off < SACK_BITS {
            self.words[(off / 64) as usize] |= 1 << (off % 64);
        }
    }
    /// Drops the first `n` offsets (the base moved forward by `n`).
    pub fn shift(&mut self, n: u32) {
        if n >= SACK_BITS || self.is_empty() {
            *self = SeqBits::default();
            return;
        }
        let (w, b) = ((n / 64) as usize, n % 64);
        let len = self.words.len();
        for i in 0..len {
            let lo = self.words.get(i + w).copied().unwrap_or(0);
            let hi = self.words.get(i + w + 1).copied().unwrap_or(0);
            self.words[i] = if b == 0 {
                lo
            } else {
                (lo >> b) | (hi << (64 - b))
            };
        }
    }
    /// Number of leading set offsets (0, 1, 2, ... all set).
    pub fn leading_ones(&self) -> u32 {
        let mut n = 0;
        for w in self.words {
            if w == u64::MAX {
                n += 64;
            } else {
                return n + w.trailing_ones();
            }
        }
        n
    }
    /// The highest set offset, if any.
    pub fn highest(&self) -> Option<u32> {
        self.words
            .iter()
            .enumerate()
            .rev()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i as u32 * 64 + 63 - w.leading_zeros())
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.words.iter().fold(0, |a, w| a | w) == 0
    }
    /// Sets every offset set in `other`.
    #[inline]
    pub fn union_with(&mut self, other: &SeqBits) {
        for (w, o) in self.words.iter_mut().zip(other.words) {
            *w |= o;
        }
    }
    /// As 32-bit words (the wire form: one SACK cell each).
    pub fn words32(&self) -> impl Iterator<Item = u32> + '_ {
        self.words
            .iter()
            .flat_map(|w| [*w as u32, (*w >> 32) as u32])
    }
    /// Sets word `i` (32 bits) from the wire.
    pub fn set_word32(&mut self, i: usize, v: u32) {
        if let Some(w) = self.words.get_mut(i / 2) {
            if i % 2 == 0 {
                *w = (*w & !0xffff_ffff) | u64::from(v);
            } else {
                *w = (*w & 0xffff_ffff) | (u64::from(v) << 32);
            }
        }
    }
}

/// Where a received message falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The next expected message: execute it.
    InOrder,
    /// Ahead of a gap, `offset` past the expected one: keep it for later.
    Ahead { offset: u32 },
    /// Already received (a retransmission or a duplicate): acknowledge again.
    Duplicate,
    /// Outside the window: refuse.
    OutOfWindow,
}

/// The receiving half.
#[derive(Debug, Clone)]
pub struct Receiver {
    expected: u32,
    /// Received beyond `expected` (offset 0 = expected + 1): out of line, made by the
    /// first message kept ahead of a gap and dropped when the gap closes.
    ahead: Option<Box<SeqBits>>,
    window: u32,
}

impl Receiver {
    /// `isn`: the peer's initial sequence number; `window`: how far ahead messages are
    /// kept (at most [`SACK_BITS`]; 0: none — out-of-order messages are refused and the
    /// sender goes back to the gap, as go-back-N).
    pub fn new(isn: u32, window: u32) -> Receiver {
        Receiver {
            expected: isn,
            ahead: None,
            window: window.min(SACK_BITS),
        }
    }
    /// How far ahead messages are kept.
    pub fn window(&self) -> u32 {
        self.window
    }
    /// The next sequence number to execute.
    pub fn expected(&self) -> u32 {
        self.expected
    }
    /// Classifies a message without changing anything.
    pub fn classify(&self, seq: u32, duplicate_window: u32) -> Arrival {
        if seq == self.expected {
            return Arrival::InOrder;
        }
        let ahead = seq.wrapping_sub(self.expected);
        if seq_lt(seq, self.expected) {
            return if self.expected.wrapping_sub(seq) <= duplicate_window {
                Arrival::Duplicate
            } else {
                Arrival::OutOfWindow
            };
        }
        if ahead > self.window {
            return Arrival::OutOfWindow;
        }
        if self.ahead().get(ahead - 1) {
            Arrival::Duplicate
        } else {
            Arrival::Ahead { offset: ahead }
        }
    }
    /// Records a message kept ahead of a gap.
    pub fn keep_ahead(&mut self, offset: u32) {
        if offset >= 1 {
            self.ahead.get_or_insert_with(Box::default).set(offset - 1);
        }
    }
    /// The expected message ran: moves on. Returns how many kept messages directly
    /// follow it (the worker runs those next, in order, calling `executed` again).
    #[inline]
    pub fn executed(&mut self) -> bool {
        self.expected = self.expected.wrapping_add(1);
        let Some(ahead) = &mut self.ahead else {
            return false; // the common, in-order case
        };
        let next_kept = ahead.get(0);
        ahead.shift(1);
        if ahead.is_empty() {
            self.ahead = None; // the gap closed
        }
        next_kept
    }
    /// The acknowledgement to send: cumulative and selective.
    pub fn ack(&self) -> (u32, &SeqBits) {
        (self.expected, self.ahead())
    }
    /// Whether anything is kept ahead of a gap.
    pub fn has_gap(&self) -> bool {
        self.ahead.is_some()
    }
    /// What is kept ahead of a gap (nothing, without one).
    #[inline]
    fn ahead(&self) -> &SeqBits {
        static NONE: SeqBits = SeqBits {
            words: [0; (SACK_BITS / 64) as usize],
        };
        self.ahead.as_deref().unwrap_or(&NONE)
    }
}

/// One bulk frame's first transmissions, kept from when it is sent until it is
/// acknowledged cumulatively.
#[derive(Debug, Clone, Copy)]
struct FrameOut {
    /// Its new messages: `start..end`.
    start: u32,
    end: u32,
    /// `bytes_sent` after it.
    cum: u64,
    /// Its bytes (first transmissions).
    bytes: u32,
    /// The path it took (its place in its peer's set; 0 on one path).
    path: u8,
    /// One of its messages was queued to go again (Karn: its round trip says nothing).
    resent: bool,
    /// Every one of its messages is acknowledged (reported; its bytes are out of
    /// flight).
    delivered: bool,
    /// When it was sent.
    sent_at: u64,
}

/// What the sender tells its driver of each bulk frame's fate, for congestion control
/// over several paths (`node::cc`); `()` ignores it.
pub trait OnDelivery {
    /// The frame of `bytes` bytes that went on `path` is acknowledged: `rtt` ticks
    /// after it was sent (0: resent, no sample).
    fn delivered(&mut self, path: u8, bytes: u64, rtt: u64);
    /// A message of a frame that went on `path` was found lost.
    fn lost(&mut self, path: u8);
    /// The frame's bytes are no longer in flight without an acknowledgement (rewound,
    /// or the connection went).
    fn forgot(&mut self, path: u8, bytes: u64);
}

impl OnDelivery for () {
    #[inline]
    fn delivered(&mut self, _: u8, _: u64, _: u64) {}
    #[inline]
    fn lost(&mut self, _: u8) {}
    #[inline]
    fn forgot(&mut self, _: u8, _: u64) {}
}

/// What an acknowledgement did on the sending side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Acked {
    /// The cumulative point moved from `from` to `to`.
    pub from: u32,
    pub to: u32,
    /// Messages found lost (queued for retransmission) by this acknowledgement.
    pub lost: u32,
    /// Bytes of first transmissions it acknowledged (the frames it completed, as
    /// [`Sender::bytes_in_flight`] counts them).
    pub bytes: u64,
    /// A round-trip sample for congestion control (clock ticks, 0: none): from when
    /// the newest frame it completed was sent. Only while nothing was lost or resent
    /// (Karn's rule, per frame): a frame retransmitted since, or one acknowledged late
    /// behind a hole, would read as queueing.
    pub rtt: u64,
}

/// What the retransmission timer decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeout {
    /// Nothing due.
    Idle,
    /// The oldest unacknowledged messages will be sent again.
    Retransmit,
    /// Out of retries: the connection goes to error.
    GiveUp,
    /// Holes that waited on their paths' round trips are now lost and queued (not a
    /// timeout: no back-off).
    Lost,
}

/// What a sender knows of losses: kept out of line and only while there is some (a
/// selective acknowledgement beyond a gap, a retransmission queued, a timeout being
/// recovered from), so that a connection that loses nothing — most of them, and every
/// idle one — carries a pointer for it instead of ~110 bytes.
#[derive(Debug, Clone, Default)]
struct Loss {
    /// Acknowledged selectively beyond `acked` (offset 0 = acked + 1).
    sacked: SeqBits,
    /// Messages to send again, oldest first (sequence numbers).
    resend: std::collections::VecDeque<u32>,
    /// Bytes of the frames delivered beyond `acked` (out of flight, still kept).
    bytes_sacked: u64,
    /// When the oldest hole waiting on its path's round trip counts as lost (0: none).
    rack_due: u64,
    /// By path: when the newest frame delivered on it since the loss state began was
    /// sent (a path keeps its frames in order: a hole sent before is lost).
    path_seen: Vec<u64>,
    /// Queued for resending (offset from `acked`), to queue each once.
    queued: SeqBits,
    /// After a timeout, which resends the oldest message only: (the end of what the
    /// peer was known to hold with that message — the selectively acknowledged run
    /// after it —, the end of everything sent before the timeout). The first progress
    /// after it decides whether the rest goes again (see [`Sender::on_timer`]).
    recovery: Option<(u32, u32)>,
}

impl Loss {
    /// A frame sent at `sent_at` on `path` was delivered.
    fn saw_on(&mut self, path: u8, sent_at: u64) {
        let i = usize::from(path);
        if self.path_seen.len() <= i {
            self.path_seen.resize(i + 1, 0);
        }
        self.path_seen[i] = self.path_seen[i].max(sent_at);
    }

    /// Whether a frame sent at `sent_at` on `path` is behind one delivered on it.
    fn passed_on(&self, path: u8, sent_at: u64) -> bool {
        self.path_seen
            .get(usize::from(path))
            .is_some_and(|&t| t > sent_at)
    }

    /// Whether it holds nothing (the sender may drop it).
    fn is_clear(&self) -> bool {
        self.sacked.is_empty()
            && self.bytes_sacked == 0
            && self.rack_due == 0
            && self.resend.is_empty()
            && self.queued.is_empty()
            && self.recovery.is_none()
    }
}

/// The sending half.
#[derive(Debug, Clone)]
pub struct Sender {
    /// Next new sequence number.
    next: u32,
    /// Everything before this is acknowledged.
    acked: u32,
    /// Sent at least once: everything before this.
    sent_to: u32,
    /// Bytes of first transmissions so far (wire bytes, counted per frame).
    bytes_sent: u64,
    /// Of those, the bytes of frames whose messages are all acknowledged.
    bytes_acked: u64,
    /// The bulk frames not yet acknowledged cumulatively, oldest first.
    frames_out: std::collections::VecDeque<FrameOut>,
    /// `sent_to` after the last frame (where the next frame's new messages start).
    frame_mark: u32,
    /// The configured cap; `max_bytes_in_flight` is the smaller of it and the peer's
    /// credit (see [`Sender::on_credit`]).
    max_bytes_cap: u64,
    /// New messages wait while this many bytes are unacknowledged (a
    /// bandwidth-delay-product cap, as IRN's BDP-FC: bounds what one connection keeps
    /// queued in the port ahead of others' messages).
    max_bytes_in_flight: u64,
    /// Selective acknowledgements and retransmissions, while there are any.
    loss: Option<Box<Loss>>,
    /// Current retransmission timeout (before back-off): adaptive between `rto_min`
    /// and `rto_max` from round-trip samples (RFC 6298), `rto_max` until the first.
    rto: u64,
    rto_min: u64,
    /// The configured timeout: the ceiling of `rto`, and the unit of the give-up budget.
    rto_max: u64,
    /// Smoothed round-trip time and its variation (0: no sample yet).
    srtt: u64,
    rttvar: u64,
    /// The message being timed: (sequence number, first sent at). Karn's rule: a
    /// retransmission or rewind forgets it.
    probe: Option<(u32, u64)>,
    retries: u32,
    /// (At most 65 535: kept small beside the flag after it.)
    max_retries: u16,
    /// Frames delivered beyond a hole leave [`Sender::bytes_in_flight`] (default);
    /// without, they count until the hole closes (the transport before issue 38, which
    /// a node without congestion control keeps).
    sacked_leave_flight: bool,
    /// Since when nothing was acknowledged while the timer kept firing (the give-up
    /// budget counts from here).
    stalled_since: Option<u64>,
    /// When the oldest unacknowledged message was last (re)sent, or the last progress.
    timer_start: u64,
}

impl Sender {
    pub fn new(isn: u32, rto: u64, max_retries: u32) -> Sender {
        Sender {
            next: isn,
            acked: isn,
            sent_to: isn,
            bytes_sent: 0,
            bytes_acked: 0,
            frames_out: std::collections::VecDeque::new(),
            frame_mark: isn,
            sacked_leave_flight: true,
            max_bytes_in_flight: u64::MAX,
            max_bytes_cap: u64::MAX,
            loss: None,
            rto: rto.max(1),
            rto_min: rto.max(1),
            rto_max: rto.max(1),
            srtt: 0,
            rttvar: 0,
            probe: None,
            retries: 0,
            max_retries: max_retries.min(u32::from(u16::MAX)) as u16,
            stalled_since: None,
            timer_start: 0,
        }
    }
    /// Lets the retransmission timeout adapt to measured round trips, down to `rto_min`
    /// (the configured timeout stays the ceiling). The give-up point does not move:
    /// a connection fails after the time `max_retries` back-offs of the configured
    /// timeout take, however many faster retries fit in it.
    pub fn with_min_rto(mut self, rto_min: u64) -> Sender {
        self.rto_min = rto_min.clamp(1, self.rto_max);
        self
    }
    /// The current retransmission timeout (before back-off).
    pub fn rto(&self) -> u64 {
        self.rto
    }
    /// Smoothed round-trip time (0 before the first sample).
    pub fn srtt(&self) -> u64 {
        self.srtt
    }
    /// A round-trip sample (RFC 6298's estimator, clock granularity 0).
    fn on_rtt(&mut self, r: u64) {
        if self.srtt == 0 {
            self.srtt = r.max(1);
            self.rttvar = r / 2;
        } else {
            let d = self.srtt.abs_diff(r);
            self.rttvar = (3 * self.rttvar + d) / 4;
            self.srtt = (7 * self.srtt + r) / 8;
        }
        self.rto = (self.srtt + 4 * self.rttvar).clamp(self.rto_min, self.rto_max);
    }
    /// Whether frames delivered beyond a hole leave the bytes in flight at once (the
    /// default) or only when the hole closes.
    pub fn with_sacked_leaving_flight(mut self, yes: bool) -> Sender {
        self.sacked_leave_flight = yes;
        self
    }
    /// Caps the unacknowledged bytes of first transmissions (see
    /// [`Sender::on_frame_sent`]); retransmissions are never held back by it.
    pub fn with_max_bytes_in_flight(mut self, bytes: u64) -> Sender {
        self.max_bytes_cap = bytes.max(1);
        self.max_bytes_in_flight = self.max_bytes_cap;
        self
    }
    /// The peer's credit: the bytes of its receive buffers it grants this connection
    /// (its share of its receive queue). New messages wait while that much bulk data is
    /// unacknowledged, so the receiver never has to drop for lack of buffers; the
    /// configured cap still applies. 0: no advertisement (nothing changes).
    pub fn on_credit(&mut self, bytes: u64) {
        if bytes > 0 {
            self.max_bytes_in_flight = self.max_bytes_cap.min(bytes);
        }
    }
    pub fn next_seq(&self) -> u32 {
        self.next
    }
    /// A frame went out at `now` whose new (never sent) messages end before `new_end`,
    /// carrying `bytes` bytes of them, on `path` of its peer's (`None`: on one path);
    /// returns the bytes it added to [`Sender::bytes_in_flight`]. Frames under
    /// [`BDP_MIN_FRAME`] bytes are not counted: the cap is for bulk data, and a
    /// latency-bound ping-pong should not pay for it. Over several paths every frame
    /// with new messages is kept (its path and time find its losses), small ones
    /// counting no bytes.
    #[inline]
    pub fn on_frame_sent(&mut self, new_end: u32, bytes: u64, now: u64, path: Option<u8>) -> u64 {
        let start = std::mem::replace(&mut self.frame_mark, new_end);
        let counted = if bytes < BDP_MIN_FRAME { 0 } else { bytes };
        if counted == 0 && (path.is_none() || !seq_lt(start, new_end)) {
            return 0;
        }
        self.bytes_sent += counted;
        self.frames_out.push_back(FrameOut {
            start: if seq_lt(start, new_end) {
                start
            } else {
                new_end
            },
            end: new_end,
            cum: self.bytes_sent,
            bytes: counted.min(u64::from(u32::MAX)) as u32,
            path: path.unwrap_or(0),
            resent: false,
            delivered: false,
            sent_at: now,
        });
        counted
    }
    /// Unacknowledged bytes of first transmissions (frame granularity: a frame counts
    /// until all its messages are acknowledged cumulatively).
    #[inline]
    pub fn bytes_in_flight(&self) -> u64 {
        let sacked = match self.sacked_leave_flight {
            true => self.loss.as_ref().map_or(0, |l| l.bytes_sacked),
            false => 0,
        };
        self.bytes_sent - self.bytes_acked - sacked
    }
    #[inline]
    fn may_send_new(&self) -> bool {
        seq_lt(self.sent_to, self.next)
            && self.bytes_in_flight() < self.max_bytes_in_flight
            && !self.beyond_span()
    }
    /// Whether the next new message would be more than [`SACK_BITS`] past a known gap:
    /// the receiver keeps nothing that far ahead of one (it refuses it), so it waits
    /// for the gap to close.
    #[inline]
    fn beyond_span(&self) -> bool {
        self.sent_to.wrapping_sub(self.acked) > SACK_BITS
            && self.loss.as_ref().is_some_and(|l| !l.sacked.is_empty())
    }
    pub fn acked(&self) -> u32 {
        self.acked
    }
    /// Messages assigned and not yet acknowledged.
    pub fn in_flight(&self) -> u32 {
        self.next.wrapping_sub(self.acked)
    }
    /// Assigns `n` new sequence numbers; returns the first.
    pub fn assign(&mut self, n: u32) -> u32 {
        let first = self.next;
        self.next = self.next.wrapping_add(n);
        first
    }
    /// Whether `seq` was acknowledged (cumulatively or selectively).
    pub fn is_acked(&self, seq: u32) -> bool {
        seq_lt(seq, self.acked) || {
            let off = seq.wrapping_sub(self.acked);
            off >= 1 && seq_lt(seq, self.next) && self.sacked(off - 1)
        }
    }
    /// Selective bit `off` (offset 0 = acked + 1).
    #[inline]
    fn sacked(&self, off: u32) -> bool {
        self.loss.as_ref().is_some_and(|l| l.sacked.get(off))
    }
    /// The loss state, made when first needed.
    fn loss_mut(&mut self) -> &mut Loss {
        self.loss.get_or_insert_with(Box::default)
    }
    /// Drops the loss state once it holds nothing.
    #[inline]
    fn tidy_loss(&mut self) {
        if self.loss.as_ref().is_some_and(|l| l.is_clear()) {
            self.loss = None;
        }
    }
    /// The next message to put on the wire: a retransmission if one is due, else the
    /// next never-sent one. `None`: nothing to send.
    #[inline]
    pub fn next_to_send(&mut self) -> Option<u32> {
        if self.loss.is_some() {
            while let Some(s) = self.loss.as_ref().and_then(|l| l.resend.front().copied()) {
                if self.is_acked(s) || !seq_lt(s, self.sent_to) {
                    self.loss_mut().resend.pop_front();
                    continue;
                }
                return Some(s);
            }
        }
        self.may_send_new().then_some(self.sent_to)
    }
    /// Whether [`Sender::next_to_send`] may have something (without dropping stale
    /// retransmissions): a cheap check between frames.
    #[inline]
    pub fn has_to_send(&self) -> bool {
        self.loss.as_ref().is_some_and(|l| !l.resend.is_empty()) || self.may_send_new()
    }
    /// `seq` went on the wire at `now`; returns whether that was its first
    /// transmission (since the last rewind).
    pub fn on_sent(&mut self, seq: u32, now: u64) -> bool {
        if let Some(l) = &mut self.loss {
            if l.resend.front() == Some(&seq) {
                l.resend.pop_front();
            }
        }
        let new = seq == self.sent_to;
        if new {
            self.sent_to = self.sent_to.wrapping_add(1);
            if self.probe.is_none() && self.retries == 0 {
                self.probe = Some((seq, now));
            }
        }
        if self.acked == seq || self.timer_start == 0 || self.in_flight_sent() == 1 {
            self.timer_start = now;
        }
        new
    }
    fn in_flight_sent(&self) -> u32 {
        self.sent_to.wrapping_sub(self.acked)
    }
    /// An acknowledgement: cumulative `ack` and selective bits beyond it (one path:
    /// see [`Sender::on_ack_paths`]).
    pub fn on_ack(&mut self, ack: u32, sack: &SeqBits, now: u64) -> Acked {
        self.on_ack_paths(ack, sack, now, &[], &mut ())
    }

    /// An acknowledgement, for frames sent over several paths: `waits[p]` is how long
    /// after it was sent a frame on path `p` may still arrive (its expected round
    /// trip, `u64::MAX`: not known); a hole counts as lost only once that passed
    /// (empty: at once, on one path). What each frame came to goes to `out`.
    pub fn on_ack_paths(
        &mut self,
        ack: u32,
        sack: &SeqBits,
        now: u64,
        waits: &[u64],
        out: &mut impl OnDelivery,
    ) -> Acked {
        let mut res = Acked {
            from: self.acked,
            to: self.acked,
            ..Acked::default()
        };
        if seq_lt(self.next, ack) {
            return res; // acknowledges what was never sent
        }
        let mut newest = 0;
        if seq_lt(self.acked, ack) {
            let (bytes, sent_at) = self.advance_to(ack, now, out);
            res.to = ack;
            res.bytes = bytes;
            newest = sent_at;
        } else if ack != self.acked {
            return res; // an old acknowledgement
        }
        // Merge the selective part (it is relative to `ack`, which now equals `acked`).
        if sack.is_empty() && self.loss.as_ref().is_none_or(|l| l.sacked.is_empty()) {
            self.tidy_loss();
            res.rtt = sample(now, newest);
            return res; // in-order delivery: no gap, nothing lost
        }
        self.loss_mut().sacked.union_with(sack);
        let (bytes, sent_at) = self.deliver_sacked(now, out);
        res.bytes += bytes;
        res.rtt = sample(now, newest.max(sent_at));
        res.lost = self.queue_lost(now, waits, out);
        self.tidy_loss();
        res
    }
    /// The cumulative point moves forward to `ack`: the bitmaps follow it, the timer
    /// and retries restart, a round-trip probe it covers is sampled and the frames it
    /// completes leave the unacknowledged bytes. Returns the bytes that left flight
    /// and when the newest of those frames that was not resent was sent (0: none).
    #[inline]
    fn advance_to(&mut self, ack: u32, now: u64, out: &mut impl OnDelivery) -> (u64, u64) {
        let n = ack.wrapping_sub(self.acked);
        let recovery = self.loss.as_mut().and_then(|l| {
            l.sacked.shift(n);
            l.queued.shift(n);
            l.recovery.take()
        });
        self.acked = ack;
        if let Some((known, point)) = recovery {
            // The first progress since a timeout: if it covers no more than the resent
            // message and what the peer was known to hold, what followed was lost too
            // (go back); if more, the originals are arriving and the timeout was
            // spurious (the selective bits find any hole left).
            if !seq_lt(known, ack) && seq_lt(ack, point) {
                self.resend_unacked(point);
            }
        }
        if seq_lt(self.sent_to, ack) {
            self.sent_to = ack;
        }
        if seq_lt(self.frame_mark, ack) {
            self.frame_mark = ack;
        }
        self.retries = 0;
        self.stalled_since = None;
        self.timer_start = now;
        if let Some((s, at)) = self.probe {
            if seq_lt(s, ack) {
                self.probe = None;
                self.on_rtt(now.saturating_sub(at));
            }
        }
        self.retire_frames(ack, now, out)
    }
    /// Retires the frames whose messages are all before `ack`; returns the bytes that
    /// left flight (those not delivered before, selectively) and when the newest of
    /// those not resent was sent (0: none).
    #[inline]
    fn retire_frames(&mut self, ack: u32, now: u64, out: &mut impl OnDelivery) -> (u64, u64) {
        let (mut left, mut sent_at) = (0, 0);
        while let Some(&f) = self.frames_out.front() {
            // (empty unless bulk frames are out: the in-order path skips this)
            if seq_lt(ack, f.end) {
                break;
            }
            self.bytes_acked = f.cum;
            if f.delivered {
                if let Some(l) = &mut self.loss {
                    l.bytes_sacked -= u64::from(f.bytes);
                }
            } else {
                left += u64::from(f.bytes);
                let rtt = if f.resent {
                    0
                } else {
                    now.saturating_sub(f.sent_at).max(1)
                };
                out.delivered(f.path, u64::from(f.bytes), rtt);
                if !f.resent {
                    sent_at = sent_at.max(f.sent_at);
                    if let Some(l) = &mut self.loss {
                        l.saw_on(f.path, f.sent_at);
                    }
                }
            }
            self.frames_out.pop_front();
        }
        (left, sent_at)
    }
    /// Marks delivered the frames beyond `acked` whose messages the selective bits
    /// now all show; returns their bytes and when the newest not resent was sent.
    fn deliver_sacked(&mut self, now: u64, out: &mut impl OnDelivery) -> (u64, u64) {
        let Some(high) = self.loss.as_ref().and_then(|l| l.sacked.highest()) else {
            return (0, 0);
        };
        // Selective bit i is message acked + 1 + i.
        let end = self.acked.wrapping_add(high + 2);
        let (mut bytes, mut sent_at) = (0, 0);
        for i in 0..self.frames_out.len() {
            let f = self.frames_out[i];
            if !seq_lt(f.start, end) {
                break;
            }
            if f.delivered || seq_lt(end, f.end) {
                continue;
            }
            // (A frame the cumulative point is inside of starts at the hole: position 0.)
            let lo = if seq_lt(f.start, self.acked) {
                0
            } else {
                f.start.wrapping_sub(self.acked)
            };
            let all =
                (lo..f.end.wrapping_sub(self.acked)).all(|off| off >= 1 && self.sacked(off - 1));
            if !all {
                continue;
            }
            self.frames_out[i].delivered = true;
            let l = self.loss_mut();
            l.bytes_sacked += u64::from(f.bytes);
            if !f.resent {
                l.saw_on(f.path, f.sent_at);
            }
            bytes += u64::from(f.bytes);
            let rtt = if f.resent {
                0
            } else {
                now.saturating_sub(f.sent_at).max(1)
            };
            out.delivered(f.path, u64::from(f.bytes), rtt);
            if !f.resent {
                sent_at = sent_at.max(f.sent_at);
            }
        }
        (bytes, sent_at)
    }
    /// The frame holding message `seq`, if it was a recorded (bulk) one.
    fn frame_of(&self, seq: u32) -> Option<usize> {
        let i = self.frames_out.partition_point(|f| !seq_lt(seq, f.end));
        self.frames_out
            .get(i)
            .filter(|f| !seq_lt(seq, f.start))
            .map(|_| i)
    }
    /// Queues the messages the selective bits show lost for resending; returns how many.
    ///
    /// Lost: a message [`DUP_THRESHOLD`] or more before the highest selectively
    /// acknowledged one, sent, not acknowledged, not yet queued — and, over several
    /// paths (`waits` not empty), sent longer ago than its path's wait; the earliest
    /// of those still waiting sets the loss timer (`rack_due`). Positions count from
    /// `acked` (0: the cumulative hole itself); selective bit i is position i + 1.
    fn queue_lost(&mut self, now: u64, waits: &[u64], out: &mut impl OnDelivery) -> u32 {
        if let Some(l) = &mut self.loss {
            l.rack_due = 0;
        }
        let Some(high) = self
            .loss
            .as_ref()
            .and_then(|l| l.sacked.highest())
            .map(|h| h + 1)
            .filter(|h| *h >= DUP_THRESHOLD)
        else {
            return 0;
        };
        let (mut lost, mut due) = (0, u64::MAX);
        for off in 0..=high - DUP_THRESHOLD {
            let seq = self.acked.wrapping_add(off);
            let sacked = off >= 1 && self.sacked(off - 1);
            if sacked || !seq_lt(seq, self.sent_to) || self.queued_has(off) {
                continue;
            }
            let frame = self.frame_of(seq);
            if let (false, Some(i), Some(l)) = (waits.is_empty(), frame, self.loss.as_deref()) {
                // Over several paths: lost once a frame sent after it on its own path
                // arrived (a path keeps order; another may be faster or slower), or
                // once its path's wait passed without that (RACK's idea, per path).
                let f = &self.frames_out[i];
                if !l.passed_on(f.path, f.sent_at) {
                    let wait = waits.get(usize::from(f.path)).copied().unwrap_or(u64::MAX);
                    let at = f.sent_at.saturating_add(wait);
                    if now < at {
                        due = due.min(at); // late, perhaps, on a slower path: not yet lost
                        continue;
                    }
                }
            }
            if let Some(i) = frame {
                out.lost(self.frames_out[i].path);
            }
            self.queue_resend(off, seq);
            lost += 1;
        }
        if due != u64::MAX {
            self.loss_mut().rack_due = due;
        }
        lost
    }
}

/// A round-trip sample from a frame sent at `sent_at` (0: none).
#[inline]
fn sample(now: u64, sent_at: u64) -> u64 {
    if sent_at == 0 {
        0
    } else {
        now.saturating_sub(sent_at).max(1)
    }
}

impl Sender {
    fn queued_has(&self, off: u32) -> bool {
        self.loss.as_ref().is_some_and(|l| l.queued.get(off))
    }
    fn queue_resend(&mut self, off: u32, seq: u32) {
        if let Some(i) = self.frame_of(seq) {
            self.frames_out[i].resent = true;
        }
        let l = self.loss_mut();
        l.queued.set(off);
        l.resend.push_back(seq);
    }
    /// When the retransmission timer fires (`None`: nothing unacknowledged on the
    /// wire), or earlier the loss timer of a hole waiting on its path's round trip.
    pub fn deadline(&self) -> Option<u64> {
        (self.in_flight_sent() > 0).then(|| {
            let timer = self.rto_deadline();
            match self.loss.as_ref().map_or(0, |l| l.rack_due) {
                0 => timer,
                due => timer.min(due),
            }
        })
    }
    /// The retransmission timer (with something unacknowledged on the wire).
    fn rto_deadline(&self) -> u64 {
        let timer = self.timer_start + (self.rto << self.retries.min(6));
        match self.stalled_since {
            // The next expiry may give up: no later than the end of the budget, so
            // that the give-up comes when the budget says, not a back-off after.
            Some(since) if self.retries >= u32::from(self.max_retries) => {
                timer.min(since.saturating_add(self.budget()))
            }
            _ => timer,
        }
    }
    /// The give-up budget: what `max_retries` back-offs of the configured timeout take.
    fn budget(&self) -> u64 {
        (0..=u32::from(self.max_retries))
            .fold(0u64, |b, i| b.saturating_add(self.rto_max << i.min(6)))
    }
    /// Checks the timer: on expiry the unacknowledged, unselectively-acked messages
    /// are queued again (each once per expiry), with exponential back-off — all of
    /// them, also those beyond the span the selective part describes (the receiver
    /// refuses what arrives that far ahead of a gap, so nothing is known of them).
    pub fn on_timer(&mut self, now: u64) -> Timeout {
        self.on_timer_paths(now, &[], &mut ())
    }

    /// [`Sender::on_timer`] over several paths (`waits` as [`Sender::on_ack_paths`]):
    /// the loss timer first, when due: the holes whose paths' waits passed are queued
    /// ([`Timeout::Lost`], no back-off).
    pub fn on_timer_paths(
        &mut self,
        now: u64,
        waits: &[u64],
        out: &mut impl OnDelivery,
    ) -> Timeout {
        if self.in_flight_sent() == 0 {
            return Timeout::Idle;
        }
        let due = self.loss.as_ref().map_or(0, |l| l.rack_due);
        if due != 0 && now >= due && now < self.rto_deadline() {
            let n = self.queue_lost(now, waits, out);
            return if n > 0 { Timeout::Lost } else { Timeout::Idle };
        }
        if now < self.rto_deadline() {
            return Timeout::Idle;
        }
        self.retries += 1;
        self.probe = None;
        let since = *self.stalled_since.get_or_insert(self.timer_start);
        if self.retries > u32::from(self.max_retries) && now.saturating_sub(since) >= self.budget()
        {
            return Timeout::GiveUp;
        }
        if let Some(i) = self.frame_of(self.acked) {
            out.lost(self.frames_out[i].path); // its path is suspect
        }
        // The oldest message only, as TCP after a timeout: a late acknowledgement (a
        // peer or link that paused) costs one message again, not the whole window,
        // and what follows is resent once the peer shows it lacks it.
        self.resend_unacked(self.acked.wrapping_add(1));
        let held = self.loss.as_ref().map_or(0, |l| l.sacked.leading_ones());
        let known = self.acked.wrapping_add(1 + held);
        let point = self.sent_to;
        self.loss_mut().recovery = Some((known, point));
        self.timer_start = now;
        Timeout::Retransmit
    }
    /// Queues every sent message before `end` that is not acknowledged, cumulatively
    /// or selectively, for resending.
    fn resend_unacked(&mut self, end: u32) {
        let l = self.loss_mut();
        l.resend.clear();
        l.queued = SeqBits::default();
        let n = end.wrapping_sub(self.acked);
        for off in 0..n {
            let seq = self.acked.wrapping_add(off);
            if off == 0 || !self.sacked(off - 1) {
                self.queue_resend(off, seq);
            }
        }
        if let Some(l) = &mut self.loss {
            l.rack_due = 0;
        }
    }
    /// Pauses sending until later (receiver not ready): the timer restarts then, and
    /// everything from `seq` on is sent again.
    pub fn rewind_to(&mut self, seq: u32, now: u64) {
        self.rewind_to_paths(seq, now, &mut ())
    }

    /// [`Sender::rewind_to`], telling `out` of the frames forgotten.
    pub fn rewind_to_paths(&mut self, seq: u32, now: u64, out: &mut impl OnDelivery) {
        if seq_lt(seq, self.acked) || !seq_lt(seq, self.next) {
            return;
        }
        self.sent_to = seq;
        self.frame_mark = seq;
        if let Some(l) = &mut self.loss {
            l.resend.clear();
            l.queued = SeqBits::default();
            l.recovery = None;
            l.rack_due = 0;
        }
        self.probe = None;
        // What is sent again from here counts as new: forget the frames it was in.
        while let Some(f) = self
            .frames_out
            .back()
            .copied()
            .filter(|f| seq_lt(seq, f.end))
        {
            self.frames_out.pop_back();
            if f.delivered {
                if let Some(l) = &mut self.loss {
                    l.bytes_sacked -= u64::from(f.bytes);
                }
            } else {
                out.forgot(f.path, u64::from(f.bytes));
            }
        }
        self.bytes_sent = self.frames_out.back().map_or(self.bytes_acked, |f| f.cum);
        self.tidy_loss();
        self.timer_start = now;
    }
    /// The connection failed or closed: nothing it sent counts as in flight any more.
    /// Returns the bytes that did.
    pub fn drop_flight(&mut self) -> u64 {
        self.drop_flight_paths(&mut ())
    }

    /// [`Sender::drop_flight`], telling `out` of the frames forgotten.
    pub fn drop_flight_paths(&mut self, out: &mut impl OnDelivery) -> u64 {
        let b = self.bytes_in_flight();
        for f in self.frames_out.drain(..).filter(|f| !f.delivered) {
            out.forgot(f.path, u64::from(f.bytes));
        }
        self.bytes_acked = self.bytes_sent;
        if let Some(l) = &mut self.loss {
            l.bytes_sacked = 0;
        }
        b
    }
    /// Retries spent on the current oldest message.
    pub fn retries(&self) -> u32 {
        self.retries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmaps_shift_and_count() {
        let mut b = SeqBits::default();
        for i in [0, 1, 2, 5, 64, 65, 200] {
            b.set(i);
        }
        assert_eq!(b.leading_ones(), 3);
        assert_eq!(b.highest(), Some(200));
        b.shift(3);
        assert!(!b.get(0) && b.get(2) && b.get(61) && b.get(62) && b.get(197));
        b.shift(70);
        assert_eq!(b.highest(), Some(127));
        let words: Vec<u32> = b.words32().collect();
        let mut c = SeqBits::default();
        for (i, w) in words.iter().enumerate() {
            c.set_word32(i, *w);
        }
        assert_eq!(b, c);
    }

    #[test]
    fn receiver_classifies_and_moves_over_kept_messages() {
        let mut r = Receiver::new(100, 64);
        assert_eq!(r.classify(100, 1000), Arrival::InOrder);
        assert_eq!(r.classify(102, 1000), Arrival::Ahead { offset: 2 });
        r.keep_ahead(2);
        assert_eq!(r.classify(102, 1000), Arrival::Duplicate);
        assert_eq!(r.classify(99, 1000), Arrival::Duplicate);
        assert_eq!(r.classify(100 + 65, 1000), Arrival::OutOfWindow);
        assert_eq!(
            r.classify(100u32.wrapping_sub(5000), 1000),
            Arrival::OutOfWindow
        );
        assert!(!r.executed()); // 100 ran; 101 missing
        assert_eq!(r.expected(), 101);
        assert_eq!(r.classify(102, 1000), Arrival::Duplicate);
        assert!(r.executed()); // 101 ran; 102 is kept: run it next
        assert!(!r.executed());
        assert_eq!(r.expected(), 103);
        assert!(!r.has_gap());
    }

    /// A sender (timeout `rto`, 5 retries) that sent messages 0..n at time 1, in order.
    fn all_sent(n: u32, rto: u64) -> Sender {
        let mut s = Sender::new(0, rto, 5);
        s.assign(n);
        for seq in 0..n {
            assert_eq!(s.next_to_send(), Some(seq));
            s.on_sent(seq, 1);
        }
        s
    }

    /// A sender that loses nothing carries no loss state (issue 36: a connection's
    /// memory); a loss makes it, and the acknowledgement that ends the loss drops it.
    #[test]
    fn the_loss_state_lives_only_while_there_is_a_loss() {
        let mut s = all_sent(10, 1000);
        s.on_ack(2, &SeqBits::default(), 2);
        assert!(s.loss.is_none());
        let mut sack = SeqBits::default();
        for off in 0..6 {
            sack.set(off); // 4..9 arrived, 3 did not
        }
        assert_eq!(s.on_ack(3, &sack, 3).lost, 1);
        assert!(s.loss.is_some());
        assert_eq!(s.next_to_send(), Some(3));
        s.on_sent(3, 4);
        s.on_ack(10, &SeqBits::default(), 5);
        assert!(s.loss.is_none(), "{:?}", s.loss);
        // A timeout's recovery too.
        let mut s = all_sent(4, 10);
        assert_eq!(s.on_timer(100), Timeout::Retransmit);
        assert!(s.loss.is_some());
        let again = s.next_to_send().unwrap();
        s.on_sent(again, 101);
        s.on_ack(4, &SeqBits::default(), 102);
        assert!(s.loss.is_none(), "{:?}", s.loss);
        // Out of line, the loss state costs a sender 8 bytes, not 104 (280 before).
        assert!(std::mem::size_of::<Sender>() < 200);
    }

    #[test]
    fn selective_acks_queue_only_the_missing_message() {
        let mut s = all_sent(10, 1000);
        assert_eq!(s.next_to_send(), None);
        // 3 lost; 0..3 acked cumulatively, 4..10 selectively.
        let mut sack = SeqBits::default();
        for off in 0..6 {
            sack.set(off); // offsets past ack=3: 4..9
        }
        let a = s.on_ack(3, &sack, 2);
        assert_eq!((a.from, a.to, a.lost), (0, 3, 1));
        assert_eq!(s.next_to_send(), Some(3));
        s.on_sent(3, 3);
        assert_eq!(s.next_to_send(), None);
        let a = s.on_ack(10, &SeqBits::default(), 4);
        assert_eq!(a.to, 10);
        assert_eq!(s.in_flight(), 0);
        assert_eq!(s.deadline(), None);
    }

    #[test]
    fn a_timeout_resends_the_oldest_then_everything_unacknowledged_even_beyond_the_selective_span()
    {
        let n = SACK_BITS + 100;
        let mut s = Sender::new(0, 10, 5);
        s.assign(n);
        for seq in 0..n {
            assert!(s.has_to_send());
            assert_eq!(s.next_to_send(), Some(seq));
            s.on_sent(seq, 1);
        }
        assert!(!s.has_to_send());
        // 0 lost; 1..=3 acknowledged selectively; nothing known beyond.
        let mut sack = SeqBits::default();
        (0..3).for_each(|o| sack.set(o));
        s.on_ack(0, &sack, 2);
        assert_eq!(s.next_to_send(), Some(0), "lost by the duplicate threshold");
        s.on_sent(0, 3);
        assert_eq!(s.on_timer(100), Timeout::Retransmit);
        assert_eq!(s.next_to_send(), Some(0), "the oldest first");
        s.on_sent(0, 100);
        assert_eq!(s.next_to_send(), None, "and only it until the peer answers");
        // The peer acknowledges that one and the three it was known to hold, no
        // more: the rest was lost too.
        s.on_ack(4, &SeqBits::default(), 110);
        let mut again = Vec::new();
        while let Some(seq) = s.next_to_send() {
            again.push(seq);
            s.on_sent(seq, 110);
        }
        let want: Vec<u32> = (4..n).collect();
        assert_eq!(again, want);
    }

    #[test]
    fn a_spurious_timeout_costs_one_message_again() {
        // 100 messages out; the peer paused and its acknowledgement comes after the
        // timer fired: it covers more than the message resent, so nothing else goes.
        let mut s = all_sent(100, 10);
        assert_eq!(s.on_timer(20), Timeout::Retransmit);
        assert_eq!(s.next_to_send(), Some(0));
        s.on_sent(0, 20);
        s.on_ack(60, &SeqBits::default(), 21);
        assert_eq!(s.next_to_send(), None, "60..100 are still on their way");
        s.on_ack(100, &SeqBits::default(), 22);
        assert_eq!(s.in_flight(), 0);
        // A second timeout while the first one's resend is unanswered: the go-back
        // covers everything sent before it, new messages sent meanwhile included.
        s.assign(10);
        for seq in 100..105 {
            s.on_sent(seq, 30);
        }
        assert_eq!(s.on_timer(40), Timeout::Retransmit);
        assert_eq!(s.next_to_send(), Some(100));
        s.on_sent(100, 40);
        for seq in 105..110 {
            assert_eq!(s.next_to_send(), Some(seq), "new messages still go");
            s.on_sent(seq, 41);
        }
        assert_eq!(s.on_timer(60), Timeout::Retransmit, "backed off: 40 + 20");
        assert_eq!(s.next_to_send(), Some(100));
        s.on_sent(100, 60);
        s.on_ack(101, &SeqBits::default(), 61);
        let again: Vec<u32> = std::iter::from_fn(|| {
            let seq = s.next_to_send()?;
            s.on_sent(seq, 61);
            Some(seq)
        })
        .collect();
        assert_eq!(again, (101..110).collect::<Vec<_>>());
    }

    #[test]
    fn the_timeout_adapts_to_round_trips_but_the_give_up_point_does_not() {
        // Configured 10_000, floor 50: round trips of 20 bring the timeout to the floor.
        let mut s = Sender::new(0, 10_000, 3).with_min_rto(50);
        assert_eq!(s.rto(), 10_000, "no sample yet: the configured timeout");
        let mut t = 0;
        for seq in 0..20 {
            s.assign(1);
            assert_eq!(s.next_to_send(), Some(seq));
            s.on_sent(seq, t);
            t += 20;
            s.on_ack(seq + 1, &SeqBits::default(), t);
        }
        assert_eq!(s.srtt(), 20);
        assert_eq!(s.rto(), 50, "srtt + 4 rttvar, floored");
        // A slower round trip raises it again (variation).
        s.assign(1);
        s.on_sent(20, t);
        t += 400;
        s.on_ack(21, &SeqBits::default(), t);
        assert!(s.rto() > 300, "{}", s.rto());
        // Silence: retransmissions come at the adaptive pace with back-off, but the
        // connection fails only after 10_000 x (1 + 2 + 4 + 8) of no progress.
        s.assign(1);
        s.on_sent(21, t);
        let start = t;
        let mut fired = 0;
        loop {
            t += 10;
            match s.on_timer(t) {
                Timeout::Idle => {}
                Timeout::Retransmit => {
                    fired += 1;
                    let r = s.next_to_send().expect("a retransmission");
                    s.on_sent(r, t);
                }
                Timeout::GiveUp => break,
                Timeout::Lost => unreachable!("one path: no loss timer"),
            }
            assert!(t - start < 1_000_000, "never gave up");
        }
        assert!(
            fired > 4,
            "faster retries than the configured timeout allows: {fired}"
        );
        assert!(t - start >= 150_000, "gave up after {} only", t - start);
        // At the budget's end (the loop's step late at most), not a back-off after it.
        assert!(t - start <= 150_000 + 10, "gave up late: {}", t - start);
    }

    #[test]
    fn a_retransmitted_message_gives_no_round_trip_sample() {
        let mut s = Sender::new(0, 1_000, 5).with_min_rto(1);
        s.assign(1);
        s.on_sent(0, 0);
        assert_eq!(s.on_timer(1_000), Timeout::Retransmit);
        let r = s.next_to_send().unwrap();
        s.on_sent(r, 1_000);
        s.on_ack(1, &SeqBits::default(), 1_010);
        assert_eq!(s.srtt(), 0, "Karn: an ambiguous sample is not taken");
    }

    #[test]
    fn an_acknowledgement_reports_the_bytes_it_retired_and_a_clean_sample() {
        let mut s = Sender::new(0, 1_000_000, 5).with_min_rto(1);
        s.assign(6);
        for (seq, at) in [(0, 100), (1, 200), (2, 300), (3, 400), (4, 500), (5, 600)] {
            s.on_sent(seq, at);
            assert_eq!(s.on_frame_sent(seq + 1, 4096, at, None), 4096);
        }
        // Frames 0 and 1 acknowledged at 1 200: the sample is the newer one's.
        let a = s.on_ack(2, &SeqBits::default(), 1_200);
        assert_eq!((a.bytes, a.rtt), (8192, 1_000));
        // A hole (2 lost, 3 4 5 arrived): the frames delivered beyond it leave the
        // flight at once, and the newest of them gives its own round trip.
        let mut sack = SeqBits::default();
        for off in 0..3 {
            sack.set(off);
        }
        let a = s.on_ack(2, &sack, 1_300);
        assert_eq!((a.bytes, a.rtt, a.lost), (3 * 4096, 700, 1));
        assert_eq!(s.bytes_in_flight(), 4096);
        // They are not counted again when the hole closes; the resent frame gives no
        // sample (Karn).
        let r = s.next_to_send().unwrap();
        s.on_sent(r, 1_400);
        let a = s.on_ack(6, &SeqBits::default(), 2_000);
        assert_eq!((a.bytes, a.rtt), (4096, 0));
        assert_eq!(s.bytes_in_flight(), 0);
        // Small frames are not counted and give no sample.
        s.assign(1);
        s.on_sent(6, 2_100);
        assert_eq!(s.on_frame_sent(7, 64, 2_100, None), 0);
        assert_eq!(s.on_ack(7, &SeqBits::default(), 2_500).rtt, 0);
    }

    #[test]
    fn bulk_data_waits_for_the_peers_credit_and_the_configured_cap() {
        let mut s = Sender::new(0, 1_000, 5).with_max_bytes_in_flight(1 << 20);
        s.on_credit(8 * 9000); // the receiver grants 8 frames of 9000 bytes
        s.assign(100);
        let mut frames = 0;
        while let Some(seq) = s.next_to_send() {
            s.on_sent(seq, 1);
            s.on_frame_sent(seq + 1, 9000, 1, None);
            frames += 1;
        }
        assert_eq!(frames, 8, "one frame per message of 9000 bytes, 8 granted");
        assert_eq!(s.bytes_in_flight(), 72_000);
        // Two frames acknowledged: two more may go.
        s.on_ack(2, &SeqBits::default(), 2);
        assert_eq!(s.next_to_send(), Some(8));
        s.on_sent(8, 3);
        s.on_frame_sent(9, 9000, 1, None);
        assert_eq!(s.next_to_send(), Some(9));
        s.on_sent(9, 3);
        s.on_frame_sent(10, 9000, 1, None);
        assert_eq!(s.next_to_send(), None);
        // A larger credit than the configured cap does not lift the cap; 0 changes
        // nothing.
        s.on_credit(u64::MAX);
        s.on_credit(0);
        assert!(s.has_to_send());
        // Small frames (latency traffic) never wait for credit.
        let mut t = Sender::new(0, 1_000, 5);
        t.on_credit(1);
        t.assign(3);
        for seq in 0..3 {
            assert_eq!(t.next_to_send(), Some(seq));
            t.on_sent(seq, 1);
            t.on_frame_sent(seq + 1, 48, 1, None);
        }
    }

    #[test]
    fn reordering_below_the_threshold_is_not_loss() {
        let mut s = Sender::new(0, 1000, 5);
        s.assign(4);
        for seq in 0..4 {
            s.on_sent(seq, 1);
        }
        let mut sack = SeqBits::default();
        sack.set(0); // 1 arrived before 0
        assert_eq!(s.on_ack(0, &sack, 2).lost, 0);
        assert_eq!(s.next_to_send(), None);
    }

    /// Records what a sender says of its frames.
    #[derive(Default)]
    struct Fates {
        delivered: Vec<(u8, u64, u64)>,
        lost: Vec<u8>,
        forgot: Vec<(u8, u64)>,
    }

    impl OnDelivery for Fates {
        fn delivered(&mut self, path: u8, bytes: u64, rtt: u64) {
            self.delivered.push((path, bytes, rtt));
        }
        fn lost(&mut self, path: u8) {
            self.lost.push(path);
        }
        fn forgot(&mut self, path: u8, bytes: u64) {
            self.forgot.push((path, bytes));
        }
    }

    /// `n` frames of one 4096-byte message each, frame i on path `path(i)`, sent at
    /// 10 × i + 1.
    fn sprayed_by(n: u32, path: impl Fn(u32) -> u8) -> Sender {
        let mut s = Sender::new(0, 1_000_000, 5).with_min_rto(1);
        s.assign(n);
        for seq in 0..n {
            s.on_sent(seq, 10 * u64::from(seq) + 1);
            s.on_frame_sent(seq + 1, 4096, 10 * u64::from(seq) + 1, Some(path(seq)));
        }
        s
    }

    /// [`sprayed_by`] round-robin over `paths`.
    fn sprayed(n: u32, paths: u8) -> Sender {
        sprayed_by(n, |seq| (seq % u32::from(paths)) as u8)
    }

    /// Selective bits `0..n` (messages acked + 1 ..= acked + n arrived).
    fn sacked(n: u32) -> SeqBits {
        let mut sack = SeqBits::default();
        for off in 0..n {
            sack.set(off);
        }
        sack
    }

    #[test]
    fn a_frame_late_on_a_slower_path_is_not_lost_until_its_paths_wait_passed() {
        // Frame 0 went on path 0 (slow: expected within 500), 1..8 on path 1 (fast:
        // within 50); 1..8 arrive first.
        let mut s = sprayed_by(8, |seq| u8::from(seq != 0));
        let waits = [500, 50];
        let sack = sacked(7);
        let mut fates = Fates::default();
        let a = s.on_ack_paths(0, &sack, 100, &waits, &mut fates);
        assert_eq!(
            a.lost, 0,
            "seven later frames, but frame 0's path may take 500"
        );
        assert_eq!(
            a.bytes,
            7 * 4096,
            "the seven delivered frames left the flight"
        );
        assert_eq!(s.bytes_in_flight(), 4096);
        assert_eq!(fates.delivered.len(), 7);
        assert!(fates
            .delivered
            .iter()
            .all(|&(p, b, rtt)| p == 1 && b == 4096 && rtt > 0));
        assert_eq!(s.next_to_send(), None);
        // The loss timer is set for when frame 0's wait ends, before the RTO.
        assert_eq!(s.deadline(), Some(501));
        assert_eq!(s.on_timer_paths(400, &waits, &mut fates), Timeout::Idle);
        // It arrives in time: delivered, no retransmission at all.
        let a = s.on_ack_paths(8, &SeqBits::default(), 450, &waits, &mut fates);
        assert_eq!((a.bytes, a.lost), (4096, 0));
        assert_eq!(fates.delivered.last(), Some(&(0, 4096, 449)));
        assert!(fates.lost.is_empty());
        assert_eq!(s.deadline(), None);
    }

    #[test]
    fn a_hole_behind_a_later_frame_of_its_own_path_is_lost_at_once() {
        // Frames alternate over two paths; 0 is missing, 2 4 6 (its path's) arrived.
        let mut s = sprayed(8, 2);
        let sack = sacked(7);
        let mut fates = Fates::default();
        let a = s.on_ack_paths(0, &sack, 100, &[10_000, 10_000], &mut fates);
        assert_eq!(a.lost, 1, "a path keeps order: frame 0 is lost");
        assert_eq!(fates.lost, vec![0]);
    }

    #[test]
    fn a_hole_past_its_paths_wait_is_lost_by_the_loss_timer_without_back_off() {
        // Frame 0 alone on path 0: nothing later on its path says it is lost.
        let mut s = sprayed_by(8, |seq| u8::from(seq != 0));
        let waits = [200, 200];
        let sack = sacked(7);
        let mut fates = Fates::default();
        assert_eq!(s.on_ack_paths(0, &sack, 100, &waits, &mut fates).lost, 0);
        assert_eq!(s.deadline(), Some(201));
        assert_eq!(s.on_timer_paths(201, &waits, &mut fates), Timeout::Lost);
        assert_eq!(fates.lost, vec![0]);
        assert_eq!(s.retries(), 0, "not a timeout");
        assert_eq!(s.next_to_send(), Some(0));
        s.on_sent(0, 210);
        // Delivered at last: resent, so no sample.
        let a = s.on_ack_paths(8, &SeqBits::default(), 300, &waits, &mut fates);
        assert_eq!((a.bytes, a.rtt), (4096, 0));
        assert_eq!(fates.delivered.last(), Some(&(0, 4096, 0)));
    }

    #[test]
    fn on_one_path_a_hole_three_behind_is_lost_at_once() {
        let mut s = sprayed(8, 1);
        assert_eq!(s.on_ack(0, &sacked(3), 40).lost, 1);
    }

    #[test]
    fn forgotten_frames_are_told_with_their_paths() {
        let mut s = sprayed(6, 3);
        let mut fates = Fates::default();
        let mut sack = SeqBits::default();
        sack.set(0); // frame 1 delivered beyond the hole at 0
        s.on_ack_paths(0, &sack, 50, &[u64::MAX; 3], &mut fates);
        s.rewind_to_paths(4, 60, &mut fates);
        assert_eq!(fates.forgot, vec![(2, 4096), (1, 4096)]);
        assert_eq!(s.bytes_in_flight(), 3 * 4096);
        fates.forgot.clear();
        s.drop_flight_paths(&mut fates);
        assert_eq!(
            fates.forgot,
            vec![(0, 4096), (2, 4096), (0, 4096)],
            "not the delivered one"
        );
        assert_eq!(s.bytes_in_flight(), 0);
    }

    #[test]
    fn the_timer_resends_with_back_off_then_gives_up() {
        let mut s = Sender::new(7, 100, 2);
        s.assign(2);
        s.on_sent(7, 10);
        s.on_sent(8, 10);
        assert_eq!(s.deadline(), Some(110));
        assert_eq!(s.on_timer(50), Timeout::Idle);
        assert_eq!(s.on_timer(110), Timeout::Retransmit);
        assert_eq!(s.next_to_send(), Some(7));
        s.on_sent(7, 111);
        assert_eq!(s.next_to_send(), None, "the oldest only");
        assert_eq!(s.deadline(), Some(111 + 200), "backed off");
        assert_eq!(s.on_timer(311), Timeout::Retransmit);
        assert_eq!(s.on_timer(311 + 400), Timeout::GiveUp);
    }

    /// Two endpoints over a simulated link that loses, duplicates and reorders,
    /// deterministically: every message is executed exactly once, in order.
    #[test]
    fn a_lossy_link_delivers_everything_once_and_in_order() {
        for (loss, seed) in [(0.0, 1u64), (0.01, 2), (0.05, 3), (0.10, 4), (0.30, 5)] {
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut rnd = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 11) as f64 / (1u64 << 53) as f64
            };
            let total = 5000u32;
            let isn = u32::MAX - 100; // wraps
            let mut s = Sender::new(isn, 50, 1000);
            let mut r = Receiver::new(isn, SACK_BITS);
            let mut kept = std::collections::BTreeSet::new();
            let mut executed = Vec::new();
            let mut wire: Vec<(u64, u32)> = Vec::new(); // (arrival time, seq)
            let mut acks: Vec<(u64, u32, SeqBits)> = Vec::new();
            let mut now = 1u64;
            let mut assigned = 0;
            while executed.len() < total as usize {
                now += 1;
                assert!(
                    now < 10_000_000,
                    "stalled at {} (loss {loss})",
                    executed.len()
                );
                if assigned < total && s.in_flight() < 200 {
                    s.assign(1);
                    assigned += 1;
                }
                for _ in 0..4 {
                    let Some(seq) = s.next_to_send() else { break };
                    s.on_sent(seq, now);
                    if rnd() >= loss {
                        let delay = 5 + (rnd() * 10.0) as u64; // reordering
                        wire.push((now + delay, seq));
                        if rnd() < 0.02 {
                            wire.push((now + delay + 3, seq)); // duplicate
                        }
                    }
                }
                // Deliver what is due.
                wire.sort_by_key(|w| w.0);
                let due: Vec<u32> = wire
                    .iter()
                    .take_while(|w| w.0 <= now)
                    .map(|w| w.1)
                    .collect();
                wire.drain(..due.len());
                let mut owe = false;
                for seq in due {
                    owe = true;
                    match r.classify(seq, 1 << 20) {
                        Arrival::InOrder => {
                            executed.push(seq);
                            let mut next = r.executed();
                            while next {
                                let e = r.expected();
                                assert!(kept.remove(&e));
                                executed.push(e);
                                next = r.executed();
                            }
                        }
                        Arrival::Ahead { offset } => {
                            r.keep_ahead(offset);
                            kept.insert(seq);
                        }
                        Arrival::Duplicate | Arrival::OutOfWindow => {}
                    }
                }
                if owe && rnd() >= loss {
                    let (a, bits) = r.ack();
                    acks.push((now + 5, a, bits.clone()));
                }
                acks.sort_by_key(|a| a.0);
                while acks.first().is_some_and(|a| a.0 <= now) {
                    let (_, a, bits) = acks.remove(0);
                    s.on_ack(a, &bits, now);
                }
                assert_ne!(s.on_timer(now), Timeout::GiveUp);
            }
            let want: Vec<u32> = (0..total).map(|i| isn.wrapping_add(i)).collect();
            assert_eq!(executed, want, "loss {loss}");
        }
    }
}
