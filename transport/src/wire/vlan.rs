//! 802.1Q VLAN tags: four bytes between the source MAC and the ethertype.
//!
//! ```text
//!  0..6   destination MAC
//!  6..12  source MAC
//! 12..14  TPID 0x8100
//! 14..16  TCI: priority (PCP, 3 bits) | drop eligible (1 bit) | VLAN id (12 bits)
//! 16..    the untagged frame's ethertype and what follows
//! ```
//!
//! A node on a VLAN writes each frame untagged [`VLAN_LEN`] bytes into its buffer and
//! [`insert`]s the tag in front (two short moves, no copy of the frame); a tagged frame
//! received is parsed from [`VLAN_LEN`] bytes in, its MACs read from the front.

/// Ethernet type of an 802.1Q tag (its TPID).
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// Length of the tag.
pub const VLAN_LEN: usize = 4;
/// Largest VLAN id (0 and 4095 are reserved).
pub const VID_MAX: u16 = 4094;

/// The tag control information of VLAN `vid` at priority `pcp` (0 to 7).
pub const fn tci(vid: u16, pcp: u8) -> u16 {
    ((pcp as u16 & 7) << 13) | (vid & 0x0fff)
}

/// The VLAN id of a tag control information.
pub const fn vid(tci: u16) -> u16 {
    tci & 0x0fff
}

/// The tag's control information of a frame, `None` when it is untagged (or too short).
pub fn tag_of(frame: &[u8]) -> Option<u16> {
    match frame.get(12..16)? {
        [0x81, 0x00, hi, lo] => Some(u16::from_be_bytes([*hi, *lo])),
        _ => None,
    }
}

/// Tags the frame written untagged at `buf[VLAN_LEN..]`: its MACs move to the front
/// and the tag with `tci` goes after them. `buf` must hold at least 16 bytes.
pub fn insert(buf: &mut [u8], tci: u16) {
    buf.copy_within(VLAN_LEN..VLAN_LEN + 12, 0);
    buf[12..14].copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
    buf[14..16].copy_from_slice(&tci.to_be_bytes());
}

/// The untagged frame of tagged `frame`, as a copy (for the slow paths that need the
/// frame whole: ARP and ICMP answers).
pub fn untagged(frame: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(frame.len().saturating_sub(VLAN_LEN));
    v.extend_from_slice(&frame[..12.min(frame.len())]);
    v.extend_from_slice(frame.get(16..).unwrap_or(&[]));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_goes_in_front_and_comes_off_again() {
        let plain: Vec<u8> = (0..64u8).collect();
        let mut buf = vec![0u8; VLAN_LEN];
        buf.extend_from_slice(&plain);
        insert(&mut buf, tci(100, 5));
        assert_eq!(&buf[..12], &plain[..12], "the MACs in front");
        assert_eq!(&buf[12..16], &[0x81, 0x00, 0xa0, 100]);
        assert_eq!(&buf[16..], &plain[12..], "the rest where it was written");
        assert_eq!(tag_of(&buf), Some(tci(100, 5)));
        assert_eq!(vid(tag_of(&buf).unwrap()), 100);
        assert_eq!(untagged(&buf), plain);
        assert_eq!(tag_of(&plain), None);
        assert_eq!(tag_of(&buf[..15]), None, "too short");
        assert_eq!(untagged(&buf[..10]).len(), 10, "short input never panics");
    }
}
