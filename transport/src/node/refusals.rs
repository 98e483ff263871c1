//! Refused messages whose NAK the peer may not have seen: the receive side's record
//! that makes refusals reliable.
//!
//! A receiver that refuses message `s` (an error trap) moves on to `s + 1`, so its
//! later cumulative acknowledgements cover `s`. Were the frame with the NAK lost, the
//! sender would take such an acknowledgement for success. So a refusal is kept here
//! until the peer shows that an acknowledgement past it arrived — every frame carries
//! the low 16 bits of its sender's send base (the "ack of ack", `TransportRepr::acked`)
//! — and until then:
//!
//! * every acknowledgement frame carries a NAK cell for each kept refusal, ahead of its
//!   cumulative acknowledgement (a frame that cannot carry them all acknowledges only
//!   up to the first it leaves out);
//! * a data frame, which carries no NAK cells, acknowledges only up to the first kept
//!   refusal.
//!
//! The sender applies the NAK cells of a frame before its acknowledgement, so no
//! acknowledgement it takes passes a refusal it was not told of. The record is bounded
//! ([`MAX_REFUSALS`]): a message that would need a refusal while it is full is not run
//! yet (it waits, as for a read reply's acknowledgement, until the peer's echo frees
//! room).

use crate::reliability::seq_lt;
use crate::status::{Nak, RemoteStatus};

/// Most refusals a connection keeps unconfirmed (they all fit one acknowledgement
/// frame beside its selective part at the smallest frame size).
pub const MAX_REFUSALS: usize = 16;

/// Up to `N` (sequence number, NAK) pairs, oldest first, allocated at the first and given
/// back when the last goes: a connection that owes none pays one pointer for them.
/// [`Refusals`] keep them until the peer confirms; receiver-not-ready NAKs
/// (`node::conn::Naks`) until an acknowledgement frame carries them.
#[derive(Debug, Clone, Default)]
pub struct NakList<const N: usize> {
    list: Option<Box<[(u32, Nak); N]>>,
    len: u8,
}

impl<const N: usize> NakList<N> {
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len() == N
    }

    /// Appends `(seq, nak)`; false when full.
    pub fn push(&mut self, seq: u32, nak: Nak) -> bool {
        if self.is_full() {
            return false;
        }
        let at = self.len();
        let list = self
            .list
            .get_or_insert_with(|| Box::new([(0, RemoteStatus::Ok.into()); N]));
        list[at] = (seq, nak);
        self.len += 1;
        true
    }

    /// The entries, oldest first.
    #[inline]
    pub fn as_slice(&self) -> &[(u32, Nak)] {
        self.list.as_ref().map_or(&[], |l| &l[..self.len()])
    }

    /// The oldest `n` went (all, when `n` is larger); the memory goes with the last.
    pub fn drop_front(&mut self, n: usize) {
        let (n, len) = (n.min(self.len()), self.len());
        self.len -= n as u8;
        if self.len == 0 {
            self.list = None;
        } else if let Some(l) = &mut self.list {
            l.copy_within(n..len, 0);
        }
    }
}

/// Refusals not yet confirmed by the peer, in sequence order (allocated at the first
/// refusal and given back when the last one is confirmed).
#[derive(Debug, Clone, Default)]
pub struct Refusals {
    list: NakList<MAX_REFUSALS>,
}

impl Refusals {
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
    #[inline]
    pub fn len(&self) -> usize {
        self.list.len()
    }
    #[inline]
    pub fn is_full(&self) -> bool {
        self.list.is_full()
    }

    /// Records the refusal of message `seq` (refusals come in sequence order); false
    /// when full.
    pub fn push(&mut self, seq: u32, nak: Nak) -> bool {
        self.list.push(seq, nak)
    }

    /// The kept refusals, oldest first.
    #[inline]
    pub fn as_slice(&self) -> &[(u32, Nak)] {
        self.list.as_slice()
    }

    /// The cumulative acknowledgement a frame may carry when it holds NAK cells for the
    /// first `told` kept refusals: `expected`, or the first refusal left out.
    #[inline]
    pub fn ack_point(&self, expected: u32, told: usize) -> u32 {
        self.as_slice().get(told).map_or(expected, |r| r.0)
    }

    /// The peer's send base reached `base`: the refusals before it were told. Returns
    /// whether any went.
    pub fn confirm(&mut self, base: u32) -> bool {
        let gone = self
            .as_slice()
            .iter()
            .take_while(|r| seq_lt(r.0, base))
            .count();
        if gone == 0 {
            return false;
        }
        self.list.drop_front(gone);
        true
    }
}

/// The peer's send base from the low 16 bits it echoes, given our receive point
/// `expected`: the base is at most `expected` and (the send window being at most
/// `MAX_WINDOW` requests plus as many replies) less than 2^16 behind it.
#[inline]
pub fn echoed_base(expected: u32, low: u16) -> u32 {
    expected.wrapping_sub(u32::from((expected as u16).wrapping_sub(low)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::DropReason;

    #[test]
    fn the_echo_rebuilds_a_base_at_or_behind_the_receive_point() {
        for expected in [0u32, 5, 0xffff, 0x1_0000, 0x1_0003, u32::MAX, 7_000_000] {
            for behind in [0u32, 1, 3, 4095, 32768, 65535] {
                let base = expected.wrapping_sub(behind);
                assert_eq!(
                    echoed_base(expected, base as u16),
                    base,
                    "{expected} {behind}"
                );
            }
        }
    }

    #[test]
    fn refusals_go_when_the_base_passes_them_and_cap_the_ack_until_then() {
        let mut r = Refusals::default();
        assert_eq!(r.ack_point(100, 0), 100);
        let bad = Nak::new(RemoteStatus::RemoteInvalidRequest, DropReason::BadLength);
        assert!(r.push(10, RemoteStatus::RemoteAccessError.into()));
        assert!(r.push(12, bad));
        assert_eq!(r.ack_point(100, 0), 10, "nothing told: up to the first");
        assert_eq!(r.ack_point(100, 1), 12);
        assert_eq!(r.ack_point(100, 2), 100, "all told");
        assert!(!r.confirm(10), "a base at 10 has not passed 10");
        assert!(r.confirm(11));
        assert_eq!(r.as_slice(), &[(12, bad)]);
        assert!(r.confirm(u32::MAX.wrapping_add(200)) || r.is_empty());
        assert!(r.is_empty());
    }

    #[test]
    fn a_full_record_refuses_more_and_wraps_in_sequence_space() {
        let mut r = Refusals::default();
        let start = u32::MAX - 5;
        for i in 0..MAX_REFUSALS as u32 {
            assert!(r.push(
                start.wrapping_add(i),
                RemoteStatus::RemoteAccessError.into()
            ));
        }
        assert!(r.is_full());
        assert!(!r.push(
            start.wrapping_add(100),
            RemoteStatus::RemoteAccessError.into()
        ));
        assert!(r.confirm(start.wrapping_add(8)), "across the wrap");
        assert_eq!(r.len(), MAX_REFUSALS - 8);
        assert_eq!(r.as_slice()[0].0, start.wrapping_add(8));
    }
}
