//! What the tagged layer puts in a receive-ring slot: a 64-byte header, then (eager
//! messages) the payload. Little-endian integers.
//!
//! ```text
//!  0  kind      u8   EAGER 1, RTS 2 (ready to send: read it with the token), FIN 3
//!  1  flags     u8   TAGGED 1, DATA 2 (immediate data present)
//!  2  zero      u16
//!  4  service   u32  the sender's tagged endpoint (its service number)
//!  8  reserved  [4]  written zero, never read (senders before IPv6 wrote their IPv4
//!                    address here: the receiver knows a slot's sender from the
//!                    connection it came on, not from what the sender wrote)
//! 12  seq       u32  the sender's count of slots sent to this receiver before this one
//! 16  tag       u64
//! 24  data      u64  immediate data (0 without DATA)
//! 32  len       u64  EAGER: payload bytes that follow; RTS: the message's length;
//!                    FIN: the bytes the receiver took
//! 40  token     u64  RTS: a read token over the sender's buffer; FIN: status (0 done)
//! 48  cookie    u64  RTS, FIN: the sender's name for the send
//! 56  credit    u64  the slots of its own ring the sender grants the receiver in all
//!                    (its credit word for the receiver's connection; 0: none said):
//!                    credit that rides on traffic both ways needs no credit read
//! 64  payload   (EAGER)
//! ```
//!
//! [`Header::decode`] refuses what a correct sender never writes (an unknown kind or
//! flag, non-zero bytes 2..4, an eager length past the slot), so that a peer's
//! garbage is counted and skipped, never acted on. Bytes 8..12 it does not look at:
//! older senders fill them, and nothing depends on them.

/// Bytes of the header.
pub const HEADER: usize = 64;

/// What a slot holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Kind {
    /// A whole message in the slot.
    Eager = 1,
    /// Ready to send: the receiver reads the message with `token`, then says FIN.
    Rts = 2,
    /// The receiver of an RTS is done with the sender's buffer.
    Fin = 3,
}

/// Header flag: a tagged message (`FI_TAGGED`); untagged ones match untagged receives.
pub const TAGGED: u8 = 1;
/// Header flag: `data` carries the sender's immediate data.
pub const DATA: u8 = 2;

/// A slot's header.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Header {
    pub kind: Kind,
    pub flags: u8,
    pub service: u32,
    pub seq: u32,
    pub tag: u64,
    pub data: u64,
    pub len: u64,
    pub token: u64,
    pub cookie: u64,
    pub credit: u64,
}

/// Why a slot's header was refused.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BadHeader {
    /// Fewer than [`HEADER`] bytes.
    Short,
    /// A kind no sender writes.
    Kind(u8),
    /// Flags beyond TAGGED and DATA, or bytes 2..4 not zero.
    Reserved,
    /// An eager payload longer than the slot holds.
    Length(u64),
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

impl Header {
    /// Writes the header into the first [`HEADER`] bytes of `out`.
    pub fn encode(&self, out: &mut [u8]) {
        let o = &mut out[..HEADER];
        o[0] = self.kind as u8;
        o[1] = self.flags;
        o[2..4].fill(0);
        o[4..8].copy_from_slice(&self.service.to_le_bytes());
        o[8..12].fill(0);
        o[12..16].copy_from_slice(&self.seq.to_le_bytes());
        o[16..24].copy_from_slice(&self.tag.to_le_bytes());
        o[24..32].copy_from_slice(&self.data.to_le_bytes());
        o[32..40].copy_from_slice(&self.len.to_le_bytes());
        o[40..48].copy_from_slice(&self.token.to_le_bytes());
        o[48..56].copy_from_slice(&self.cookie.to_le_bytes());
        o[56..64].copy_from_slice(&self.credit.to_le_bytes());
    }

    /// The header at the start of a slot, for a receiver that takes eager messages of
    /// up to `eager_max` bytes.
    pub fn decode(b: &[u8], eager_max: u64) -> Result<Header, BadHeader> {
        let b = b.get(..HEADER).ok_or(BadHeader::Short)?;
        let kind = match b[0] {
            1 => Kind::Eager,
            2 => Kind::Rts,
            3 => Kind::Fin,
            k => return Err(BadHeader::Kind(k)),
        };
        let flags = b[1];
        if flags & !(TAGGED | DATA) != 0 || b[2..4] != [0; 2] {
            return Err(BadHeader::Reserved);
        }
        let h = Header {
            kind,
            flags,
            service: u32_at(b, 4),
            seq: u32_at(b, 12),
            tag: u64_at(b, 16),
            data: u64_at(b, 24),
            len: u64_at(b, 32),
            token: u64_at(b, 40),
            cookie: u64_at(b, 48),
            credit: u64_at(b, 56),
        };
        if kind == Kind::Eager && h.len > eager_max {
            return Err(BadHeader::Length(h.len));
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            kind: Kind::Rts,
            flags: TAGGED | DATA,
            service: 18700,
            seq: 7,
            tag: 0xdead_beef_0000_0001,
            data: 42,
            len: 1 << 20,
            token: 0x1234_5678_9abc_def0,
            cookie: 99,
            credit: 1 << 40,
        }
    }

    #[test]
    fn round_trip() {
        let mut b = [0xffu8; 80];
        sample().encode(&mut b);
        assert_eq!(Header::decode(&b, 960), Ok(sample()));
        assert_eq!(&b[64..], &[0xff; 16], "nothing past the header");
    }

    #[test]
    fn bytes_8_to_12_are_written_zero_and_ignored() {
        let mut b = [0xffu8; 64];
        sample().encode(&mut b);
        assert_eq!(&b[8..12], &[0; 4], "reserved: written zero");
        // A sender from before IPv6 puts its IPv4 address there: still a good header,
        // the same one.
        b[8..12].copy_from_slice(&[10, 0, 0, 2]);
        assert_eq!(Header::decode(&b, 960), Ok(sample()));
        b[8..12].fill(0xff);
        assert_eq!(Header::decode(&b, 960), Ok(sample()));
    }

    #[test]
    fn garbage_is_refused() {
        let mut b = [0u8; 64];
        sample().encode(&mut b);
        assert_eq!(Header::decode(&b[..63], 960), Err(BadHeader::Short));
        let mut k = b;
        k[0] = 9;
        assert_eq!(Header::decode(&k, 960), Err(BadHeader::Kind(9)));
        let mut f = b;
        f[1] |= 0x80;
        assert_eq!(Header::decode(&f, 960), Err(BadHeader::Reserved));
        let mut z = b;
        z[3] = 1;
        assert_eq!(Header::decode(&z, 960), Err(BadHeader::Reserved));
        let mut e = sample();
        e.kind = Kind::Eager;
        e.len = 1024 - 64 + 1;
        e.encode(&mut b);
        assert_eq!(Header::decode(&b, 960), Err(BadHeader::Length(961)));
        e.len = 960;
        e.encode(&mut b);
        assert!(Header::decode(&b, 960).is_ok());
    }
}
