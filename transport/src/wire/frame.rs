//! Whole frames: validation of a received frame ([`FrameView`]), iteration over its
//! sections and messages ([`Messages`]), and building a frame in place ([`FrameWriter`]).
//!
//! ```text
//! | underlay 42 | header 32 | cell 0 | ... | cell N-1 | [header 32 | cells ...]* | CRC32C 4 |
//!                \_____________________ CRC32C covers ___________________________/
//! ```
//!
//! The trailer is the CRC32C, except in a frame whose every section is sealed
//! (version 12): there it is zero and nothing sums the frame, since each section's tag
//! authenticates its header and cells (a corrupted one is refused as
//! [`DropReason::AuthFailed`](crate::status::DropReason)) and the CRC would only cost
//! a pass over every byte on each side. One plain section puts the CRC back.
//!
//! A frame holds one or more **sections**, each a transport header followed by its own
//! cells (version 7): a header with [`hflags::MORE`] is followed, after its cells, by
//! the next section's header. One frame can so carry messages, acknowledgements and
//! credits of several connections to the same peer (a cell train across connections,
//! docs/design.md §4): many small messages on many connections share a frame instead of each
//! costing one. The whole frame is validated (every section's header and cell count)
//! before any of it is acted on.
//!
//! A section flagged [`hflags::SEALED`] (version 11, a secure connection's) has one more
//! cell after its cells, the seal cell (`crate::secure`), which its cell count does not
//! include: [`FrameView::seal`] hands it out, [`FrameWriter::seal`] writes it.
//!
//! Both directions are on the per-frame fast path: no allocation, no copies beyond the
//! payload's own `copy_from_slice`, and the only per-byte work is the (hardware)
//! CRC32C (of a frame with a plain section) and the check byte of each control part.
//! Nothing here panics on input from the wire: a bad frame is a [`WireError`].
//!
//! [`hflags::MORE`]: super::hflags::MORE

use super::underlay::{IP_HEADER_LEN, UDP_HEADER_LEN};
use super::{
    cells_for, hflags, ControlPacket, ControlRepr, TransportPacket, TransportRepr, UnderlayPacket,
    UnderlayRepr, WireError, CELL_LEN, CONTROL_LEN, CRC_LEN, FRAME_OVERHEAD, HEADER_LEN, MAX_CELLS,
    UNDERLAY_LEN,
};

/// Bytes of a frame of `cells` cells: [`FRAME_OVERHEAD`] + 48 per cell.
#[inline]
pub const fn frame_len(cells: usize) -> usize {
    FRAME_OVERHEAD + CELL_LEN * cells
}

/// Most cells a frame of at most `frame_size` bytes can carry (0 when even an empty
/// frame does not fit); never more than [`MAX_CELLS`], the IPv4 total-length limit.
#[inline]
pub const fn max_cells(frame_size: usize) -> usize {
    if frame_size < FRAME_OVERHEAD {
        return 0;
    }
    let n = (frame_size - FRAME_OVERHEAD) / CELL_LEN;
    if n < MAX_CELLS {
        n
    } else {
        MAX_CELLS
    }
}

/// One section of a received frame that passed every check (a header and its cells,
/// borrowed from the buffer); [`FrameView::parse`] gives the first,
/// [`FrameView::next_section`] the ones after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameView<'a> {
    /// Addresses of the underlay (the frame's, the same for every section).
    pub underlay: UnderlayRepr,
    /// The section's transport header.
    pub header: TransportRepr,
    /// The header's bytes as received (what a seal authenticates).
    head: &'a [u8; HEADER_LEN],
    /// `header.cells` cells, exactly.
    cells: &'a [u8],
    /// The seal cell of a sealed section (empty when the section is plain).
    seal: &'a [u8],
    /// The sections after this one (empty when this is the last).
    rest: &'a [u8],
    /// Cells of every section of the frame.
    frame_cells: u32,
}

impl<'a> FrameView<'a> {
    /// Validates everything: lengths (buffer vs IPv4 total length vs UDP length vs cell
    /// count), ethertype, IP version/IHL/fragmentation/protocol, IP header checksum, UDP
    /// destination port (and a non-zero UDP checksum), the CRC32C, then the transport
    /// version. Extra trailing bytes after the IP total length (Ethernet padding) are
    /// allowed. The control parts' check bytes are checked by [`FrameView::messages`].
    ///
    /// Always inlined: out of line it returned the view through memory, which the
    /// receive path read back in wider pieces than written — a store-to-load forwarding
    /// stall worth a tenth of a one-message frame's receive (node bench, one write at a
    /// time: receiver 160 vs 182 ns).
    #[inline(always)]
    pub fn parse(buf: &'a [u8]) -> Result<FrameView<'a>, WireError> {
        let (underlay, udp) = UnderlayRepr::parse_datagram(buf)?;
        if udp.len() < HEADER_LEN + CRC_LEN {
            // The IP length field that says so: IPv4's total length, IPv6's payload
            // length (UDP header and payload).
            let ip = if underlay.is_ipv6() {
                UDP_HEADER_LEN
            } else {
                IP_HEADER_LEN + UDP_HEADER_LEN
            };
            return Err(WireError::BadIpLength {
                total: (ip + udp.len()) as u16,
                min: (ip + HEADER_LEN + CRC_LEN) as u16,
            });
        }
        // UnderlayRepr::parse_datagram checked that the buffer holds the whole
        // datagram, which leaves room for a header and the CRC.
        let datagram = &buf[udp];
        let (covered, trailer) = datagram.split_at(datagram.len() - CRC_LEN);
        // Every section's header and cell count before anything acts on the frame.
        let first = split_section(covered)?;
        let (frame_cells, sealed) = walk_sections(first)?;
        // The trailer: the CRC32C, or zero when every section is sealed (each is
        // authenticated by its tag instead, which a corrupted one fails).
        let got = u32::from_be_bytes(super::array(trailer, 0..CRC_LEN));
        let expected = if sealed {
            0
        } else {
            crate::wire::crc32c(covered)
        };
        if expected != got {
            return Err(WireError::BadCrc { expected, got });
        }
        let (head, header, cells, seal, rest) = first;
        Ok(FrameView {
            underlay,
            header,
            head,
            cells,
            seal,
            rest,
            frame_cells,
        })
    }

    /// The frame's next section, if this one has [`hflags::MORE`] (already validated by
    /// [`FrameView::parse`]).
    #[inline]
    pub fn next_section(&self) -> Option<FrameView<'a>> {
        if self.rest.is_empty() {
            return None;
        }
        let (head, header, cells, seal, rest) = split_section(self.rest).ok()?;
        Some(FrameView {
            header,
            head,
            cells,
            seal,
            rest,
            ..*self
        })
    }

    /// Cells in every section of the frame.
    #[inline]
    pub fn frame_cells(&self) -> u32 {
        self.frame_cells
    }

    /// The frame's messages, in order.
    #[inline]
    pub fn messages(&self) -> Messages<'a> {
        Messages {
            cells: self.cells,
            offset: 0,
            done: false,
        }
    }

    /// The cells, `48 * header.cells` bytes.
    #[inline]
    pub fn cells(&self) -> &'a [u8] {
        self.cells
    }

    /// The section's header as its bytes (what a seal authenticates).
    #[inline]
    pub fn head(&self) -> &'a [u8; HEADER_LEN] {
        self.head
    }

    /// The seal cell of a section flagged [`hflags::SEALED`] (48 bytes), `None` for a
    /// plain one.
    #[inline]
    pub fn seal(&self) -> Option<&'a [u8]> {
        (!self.seal.is_empty()).then_some(self.seal)
    }

    /// This section with its cells replaced by `cells` (a sealed section's, opened
    /// elsewhere): its messages are then read from them.
    #[inline]
    pub fn with_cells<'b>(&self, cells: &'b [u8]) -> FrameView<'b>
    where
        'a: 'b,
    {
        FrameView {
            underlay: self.underlay,
            header: self.header,
            head: self.head,
            cells,
            seal: self.seal,
            rest: self.rest,
            frame_cells: self.frame_cells,
        }
    }
}

/// Follows the sections from `first` (split already) to the frame's end: every header
/// and cell count valid, `MORE` exactly where another section follows. Returns the
/// cells of every section (seal cells included) and whether each is sealed.
#[inline(always)]
fn walk_sections(first: Section<'_>) -> Result<(u32, bool), WireError> {
    let mut frame_cells = 0u32;
    let mut sealed = true;
    let (_, mut header, mut cells, mut seal, mut rest) = first;
    loop {
        frame_cells += u32::from(header.cells) + (seal.len() / CELL_LEN) as u32;
        sealed &= !seal.is_empty();
        if header.flags & hflags::MORE == 0 {
            if !rest.is_empty() {
                return Err(WireError::BadCellCount {
                    cells: header.cells,
                    bytes: cells.len() + seal.len() + rest.len(),
                });
            }
            return Ok((frame_cells, sealed));
        }
        if rest.is_empty() {
            // MORE with nothing after it.
            return Err(WireError::Truncated {
                needed: HEADER_LEN,
                got: 0,
            });
        }
        (_, header, cells, seal, rest) = split_section(rest)?;
    }
}

/// The trailer of a frame whose transport bytes (every section's header and cells) are
/// `covered`: zero when its sections are sound and each is sealed, else their CRC32C.
pub fn trailer(covered: &[u8]) -> u32 {
    match split_section(covered).and_then(walk_sections) {
        Ok((_, true)) => 0,
        _ => crate::wire::crc32c(covered),
    }
}

/// Writes the [`trailer`] of the frame `frame[..len]`, as its sender would: for tests
/// and hostile senders that change a frame and keep the rest of it sound.
pub fn write_trailer(frame: &mut [u8], len: usize) {
    let start = super::underlay::header_len_of(frame);
    let t = trailer(&frame[start..len - CRC_LEN]);
    frame[len - CRC_LEN..len].copy_from_slice(&t.to_be_bytes());
}

/// A section: its header's bytes, its header, its cells, its seal cell (empty when
/// plain), and the bytes after it.
type Section<'a> = (
    &'a [u8; HEADER_LEN],
    TransportRepr,
    &'a [u8],
    &'a [u8],
    &'a [u8],
);

/// Splits the section at the start of `buf` (its header, its cells, its seal cell when
/// sealed, and the bytes after them); the header's cell count (and seal) must fit in
/// `buf`.
#[inline]
fn split_section(buf: &[u8]) -> Result<Section<'_>, WireError> {
    let header = TransportRepr::parse(&TransportPacket::new_checked(buf)?)?;
    let body = &buf[HEADER_LEN..];
    let len = header.cells as usize * CELL_LEN;
    let seal = seal_len(header.flags);
    if body.len() < len + seal {
        return Err(WireError::BadCellCount {
            cells: header.cells,
            bytes: body.len(),
        });
    }
    let (cells, rest) = body.split_at(len);
    let (seal, rest) = rest.split_at(seal);
    let (head, _) = buf
        .split_first_chunk::<HEADER_LEN>()
        .ok_or(WireError::Truncated {
            needed: HEADER_LEN,
            got: buf.len(),
        })?;
    Ok((head, header, cells, seal, rest))
}

/// One message of a frame: a checked control part and its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// The control part (its check byte verified).
    pub control: ControlRepr,
    /// Exactly `control.length` bytes.
    pub payload: &'a [u8],
    /// Index in the frame of the message's control cell.
    pub first_cell: u16,
}

/// Iterator over the messages of a [`FrameView`].
///
/// Yields `Ok(Message)` per message; on a bad check byte or a message whose cells run
/// past the frame it yields one `Err` ([`WireError::BadCheck`] /
/// [`WireError::Truncated`]) and then stops: without a trustworthy length there is no
/// way to find the next control cell.
#[derive(Debug, Clone)]
pub struct Messages<'a> {
    cells: &'a [u8],
    /// Byte offset of the next control cell.
    offset: usize,
    done: bool,
}

impl<'a> Messages<'a> {
    #[inline(always)]
    fn decode(&self) -> Result<Message<'a>, WireError> {
        let rest = self.cells.get(self.offset..).unwrap_or(&[]);
        let control = ControlRepr::parse(&ControlPacket::new_checked(rest)?)?;
        let needed = control.cells();
        let room = rest.len() / CELL_LEN;
        if needed > room {
            return Err(WireError::Truncated {
                needed: needed.saturating_mul(CELL_LEN),
                got: rest.len(),
            });
        }
        // needed <= room, so CONTROL_LEN + length <= needed * CELL_LEN <= rest.len().
        let payload = rest
            .get(CONTROL_LEN..CONTROL_LEN + control.length as usize)
            .ok_or(WireError::Truncated {
                needed: CONTROL_LEN + control.length as usize,
                got: rest.len(),
            })?;
        Ok(Message {
            control,
            payload,
            first_cell: (self.offset / CELL_LEN) as u16,
        })
    }
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Message<'a>, WireError>;

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.offset >= self.cells.len() {
            return None;
        }
        let item = self.decode();
        match &item {
            Ok(m) => self.offset += m.control.cells() * CELL_LEN,
            Err(_) => self.done = true,
        }
        Some(item)
    }
}

impl core::iter::FusedIterator for Messages<'_> {}

/// Builds a frame in place: underlay and first header first, then messages (and more
/// sections, [`FrameWriter::begin_section`]), then [`FrameWriter::finish`] patches the
/// lengths, cell counts and checksums and appends the CRC32C.
#[derive(Debug)]
pub struct FrameWriter<'a> {
    buf: &'a mut [u8],
    /// Where the UDP payload starts: the underlay's length (IPv4 or IPv6).
    start: usize,
    /// Byte offset of the current section's header.
    section: usize,
    /// Cells of the current section.
    section_cells: usize,
    /// Cells of every section.
    cells: usize,
    /// Byte offset where the next cell goes.
    pos: usize,
    /// Byte offset where the CRC32C goes at the latest.
    end: usize,
    /// Offset and length of the one payload left unwritten ([`FrameWriter::push_hole`]).
    hole: Option<(usize, usize)>,
    /// Bytes kept free for the current section's seal cell (a sealed section not
    /// sealed yet).
    reserve: usize,
    /// The current section is sealed: nothing more goes into it.
    closed: bool,
    /// Some section is plain: the frame ends with its CRC32C (else with zero).
    plain: bool,
}

impl<'a> FrameWriter<'a> {
    /// Starts a frame in `buf` (its length is the maximum frame size); writes the
    /// underlay and header (`header.cells` is ignored: the cell count is patched by
    /// `finish`). Fails with [`WireError::BufferTooSmall`] when not even an empty frame
    /// fits.
    pub fn new(
        buf: &'a mut [u8],
        underlay: &UnderlayRepr,
        header: &TransportRepr,
    ) -> Result<Self, WireError> {
        let start = underlay.header_len();
        if buf.len() < FRAME_OVERHEAD - UNDERLAY_LEN + start {
            return Err(WireError::BufferTooSmall {
                needed: FRAME_OVERHEAD - UNDERLAY_LEN + start,
                got: buf.len(),
            });
        }
        underlay.emit(&mut UnderlayPacket::new_unchecked(&mut buf[..start]), 0);
        let end = buf.len().min(frame_len(MAX_CELLS) - UNDERLAY_LEN + start) - CRC_LEN;
        let mut w = FrameWriter {
            buf,
            start,
            section: start,
            section_cells: 0,
            cells: 0,
            pos: start,
            end,
            hole: None,
            reserve: 0,
            closed: false,
            plain: false,
        };
        w.put_header(header);
        Ok(w)
    }

    /// Writes `header` (with no cells yet, and no `MORE`) at the write position.
    #[inline]
    fn put_header(&mut self, header: &TransportRepr) {
        let header = TransportRepr {
            cells: 0,
            flags: header.flags & !hflags::MORE,
            ..*header
        };
        self.section = self.pos;
        self.section_cells = 0;
        self.reserve = seal_len(header.flags);
        self.plain |= self.reserve == 0;
        self.closed = false;
        header.emit(&mut TransportPacket::new_unchecked(
            &mut self.buf[self.pos..self.pos + HEADER_LEN],
        ));
        self.pos += HEADER_LEN;
    }

    /// Patches the current section's cell count (and `MORE` when another follows).
    #[inline]
    fn close_section(&mut self, more: bool) {
        if self.reserve != 0 {
            // Flagged sealed but never sealed (a forged frame): a zero seal cell keeps
            // the layout; the receiver refuses it as a bad tag.
            self.seal(|_, _, cell| cell.fill(0));
        }
        self.close_section_count();
        if more {
            let mut h = TransportPacket::new_unchecked(
                &mut self.buf[self.section..self.section + HEADER_LEN],
            );
            let f = h.flags();
            h.set_flags(f | hflags::MORE);
        }
    }

    /// Whether a new plain section whose messages need `cells` cells would fit.
    #[inline]
    pub fn section_fits(&self, cells: usize) -> bool {
        self.pos + self.reserve + HEADER_LEN + cells * CELL_LEN <= self.end
    }

    /// Ends the current section and starts another with `header` (its `cells` is
    /// ignored, as in [`FrameWriter::new`]); later messages go into it. Returns false,
    /// changing nothing, when the header and `cells` cells of it (and its seal cell,
    /// when `header` is [`hflags::SEALED`]) do not fit.
    #[inline]
    pub fn begin_section(&mut self, header: &TransportRepr, cells: usize) -> bool {
        if !self.section_fits(cells + seal_len(header.flags) / CELL_LEN) {
            return false;
        }
        self.close_section(true);
        self.put_header(header);
        true
    }

    /// Cells written so far in the current section.
    #[inline]
    pub fn cells(&self) -> u16 {
        self.section_cells as u16
    }

    /// Cells written so far in every section.
    #[inline]
    pub fn frame_cells(&self) -> usize {
        self.cells
    }

    /// Cells that still fit in the current section before the CRC (and its seal).
    #[inline]
    pub fn room_cells(&self) -> usize {
        if self.closed {
            return 0;
        }
        self.end.saturating_sub(self.pos + self.reserve) / CELL_LEN
    }

    /// Seals the current section ([`hflags::SEALED`] in its header): `seal` is given
    /// the header as it goes on the wire (cell count set, no `MORE`), the cells to
    /// encrypt in place and the seal cell to write (`crate::secure::Session::seal`).
    /// Nothing more goes into the section afterwards. Does nothing for a plain section
    /// or one already sealed.
    pub fn seal(&mut self, seal: impl FnOnce(&[u8; HEADER_LEN], &mut [u8], &mut [u8; CELL_LEN])) {
        if self.reserve == 0 {
            return;
        }
        self.close_section_count();
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&self.buf[self.section..self.section + HEADER_LEN]);
        let (cells, tail) = self.buf[self.section + HEADER_LEN..]
            .split_at_mut(self.pos - self.section - HEADER_LEN);
        let cell: &mut [u8; CELL_LEN] = (&mut tail[..CELL_LEN]).try_into().expect("reserved");
        seal(&header, cells, cell);
        self.pos += CELL_LEN;
        self.cells += 1;
        self.reserve = 0;
        self.closed = true;
    }

    /// Patches the current section's cell count.
    #[inline]
    fn close_section_count(&mut self) {
        TransportPacket::new_unchecked(&mut self.buf[self.section..self.section + HEADER_LEN])
            .set_cell_count(self.section_cells as u16);
    }

    /// Whether a message with `length` payload bytes would fit.
    #[inline]
    pub fn fits(&self, length: u32) -> bool {
        cells_for(length) <= self.room_cells()
    }

    /// Appends a message. `payload.len()` must equal `control.length`, else
    /// [`WireError::BadLength`]; [`WireError::NoRoom`] when its cells do not fit.
    #[inline]
    pub fn push(&mut self, control: &ControlRepr, payload: &[u8]) -> Result<(), WireError> {
        if payload.len() != control.length as usize {
            return Err(WireError::BadLength {
                length: control.length,
                payload: payload.len(),
            });
        }
        self.push_with(control, |dst| dst.copy_from_slice(payload))
    }

    /// Like [`FrameWriter::push`], but `fill` writes the `control.length` payload bytes
    /// in place (so data can be copied straight from endpoint memory into the frame).
    /// `fill` must write every byte of the slice it is given: for speed the slice is not
    /// cleared first, so bytes it skips keep whatever the buffer held. Padding after the
    /// payload is zeroed here.
    #[inline]
    pub fn push_with(
        &mut self,
        control: &ControlRepr,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), WireError> {
        let needed = control.cells();
        let room = self.room_cells();
        if needed > room {
            return Err(WireError::NoRoom { needed, room });
        }
        let start = self.pos;
        let span = &mut self.buf[start..start + needed * CELL_LEN];
        let (head, body) = span.split_at_mut(CONTROL_LEN);
        control.emit(&mut ControlPacket::new_unchecked(head));
        let (payload, padding) = body.split_at_mut(control.length as usize);
        fill(payload);
        zero_small(padding);
        self.pos += needed * CELL_LEN;
        self.section_cells += needed;
        self.cells += needed;
        Ok(())
    }

    /// Appends a one-cell message whose 48 bytes the caller writes, control part
    /// (with its check byte) and data block (zeros past the payload) both: `None`,
    /// changing nothing, when the frame has no room for a cell.
    #[inline]
    pub fn push_cell(&mut self) -> Option<&mut [u8; CELL_LEN]> {
        if self.room_cells() == 0 {
            return None;
        }
        let start = self.pos;
        self.pos += CELL_LEN;
        self.section_cells += 1;
        self.cells += 1;
        Some(
            (&mut self.buf[start..start + CELL_LEN])
                .try_into()
                .expect("one cell"),
        )
    }

    /// Like [`FrameWriter::push_with`], but the payload is left unwritten: its bytes
    /// live elsewhere (endpoint memory that a port takes by reference instead of
    /// copying) and [`FrameWriter::finish_with_hole`] is given their CRC32C. Returns the
    /// payload's byte offset in the buffer; `None`, changing nothing, when the cells do
    /// not fit or the frame already has its one hole.
    #[inline]
    pub fn push_hole(&mut self, control: &ControlRepr) -> Option<usize> {
        if self.hole.is_some() {
            return None;
        }
        let at = self.pos + CONTROL_LEN;
        self.push_with(control, |_| {}).ok()?;
        self.hole = Some((at, control.length as usize));
        Some(at)
    }

    /// The payload left unwritten, as (offset, length), if any.
    #[inline]
    pub fn hole(&self) -> Option<(usize, usize)> {
        self.hole
    }

    /// Patches cell counts, IPv4 total length and checksum and UDP length, appends the
    /// CRC32C; returns the frame length in bytes. A frame with a hole must end with
    /// [`FrameWriter::finish_with_hole`] (here the hole's bytes, whatever the buffer
    /// holds there, would be summed).
    pub fn finish(self) -> usize {
        debug_assert!(
            self.hole.is_none(),
            "a frame with a hole needs its bytes' CRC"
        );
        self.finish_with_hole(|crc| crc)
    }

    /// [`FrameWriter::finish`] for a frame with a hole: `hole_crc` continues a CRC32C
    /// over the hole's bytes (given the CRC of the frame up to it, it returns the CRC
    /// up to its end). Without a hole it is not called.
    pub fn finish_with_hole(mut self, hole_crc: impl FnOnce(u32) -> u32) -> usize {
        self.close_section(false);
        let len = self.pos + CRC_LEN;
        let (buf, start) = (self.buf, self.start);
        super::underlay::set_lengths(buf, len - start);
        let crc = match self.hole {
            None if !self.plain => 0,
            None => crate::wire::crc32c(&buf[start..len - CRC_LEN]),
            Some((at, n)) => {
                let head = crate::wire::crc32c(&buf[start..at]);
                crate::wire::crc32c_append(hole_crc(head), &buf[at + n..len - CRC_LEN])
            }
        };
        buf[len - CRC_LEN..len].copy_from_slice(&crc.to_be_bytes());
        len
    }
}

/// Bytes of the seal cell a section with header `flags` ends with.
#[inline]
const fn seal_len(flags: u8) -> usize {
    if flags & hflags::SEALED != 0 {
        CELL_LEN
    } else {
        0
    }
}

/// Zeroes a cell's padding (under 48 bytes) with whole-word stores: `fill(0)` on a
/// slice of unknown length is a call into libc's memset, per message.
#[inline]
fn zero_small(b: &mut [u8]) {
    let mut words = b.chunks_exact_mut(8);
    for w in &mut words {
        w.copy_from_slice(&[0; 8]);
    }
    for x in words.into_remainder() {
        *x = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::super::{flags, hflags, op, UDP_PORT, VERSION};
    use super::*;

    fn underlay() -> UnderlayRepr {
        UnderlayRepr {
            src_mac: [0x02, 0, 0, 0, 0, 0x01],
            dst_mac: [0x02, 0, 0, 0, 0, 0x02],
            src_ip: [192, 168, 7, 1].into(),
            dst_ip: [192, 168, 7, 2].into(),
            src_port: 0xc123,
            dst_port: UDP_PORT,
            traffic_class: 0,
        }
    }

    fn header() -> TransportRepr {
        TransportRepr {
            flags: hflags::ACK,
            cells: 0,
            dst_conn: 17,
            key: 0xfeed_face_cafe_beef,
            seq: 1000,
            ack: 77,
            credits: 12,
            acked: 0x1234,
            src_conn: 5,
        }
    }

    fn write(length: u32, operand: u32) -> ControlRepr {
        ControlRepr {
            opcode: op::WRITE,
            mask: 0,
            flags: 0,
            operand,
            index: 0,
            length,
        }
    }

    fn payload(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| seed.wrapping_add(i as u8).wrapping_mul(31))
            .collect()
    }

    /// Five messages: 1 B, 32 B, 33 B, 100 B and a masked write; 1+1+2+3+1 = 8 cells.
    fn messages() -> Vec<(ControlRepr, Vec<u8>)> {
        let masked = ControlRepr {
            opcode: op::WRITE_MASKED,
            mask: 0b1010_0101,
            flags: flags::LAST,
            operand: 0x40,
            index: 0x0102_0304,
            length: 32,
        };
        vec![
            (write(1, 0), payload(1, 1)),
            (write(32, 64), payload(32, 2)),
            (write(33, 128), payload(33, 3)),
            (write(100, 256), payload(100, 4)),
            (masked, payload(32, 5)),
        ]
    }

    /// A frame of the five messages, in a buffer with garbage after it.
    fn build() -> (Vec<u8>, usize) {
        let mut buf = vec![0xa5u8; 1500];
        let mut w = FrameWriter::new(&mut buf, &underlay(), &header()).unwrap();
        for (c, p) in messages() {
            w.push(&c, &p).unwrap();
        }
        assert_eq!(w.cells(), 8);
        let len = w.finish();
        (buf, len)
    }

    /// Tiny xorshift64 PRNG, so the fuzz-ish tests are deterministic without a crate.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Recomputes IPv4 checksum and CRC32C of a frame of `len` bytes, as a hostile
    /// sender would, so that mutations reach the message decoder.
    fn reseal(frame: &mut [u8], len: usize) {
        let mut p = UnderlayPacket::new_unchecked(&mut frame[..]);
        p.set_ip_checksum(0);
        let c = p.compute_ip_checksum();
        p.set_ip_checksum(c);
        write_trailer(frame, len);
    }

    /// Parses and walks every message of every section; must never panic.
    fn walk(buf: &[u8]) -> Result<usize, WireError> {
        let mut view = Some(FrameView::parse(buf)?);
        let mut n = 0;
        while let Some(v) = view {
            for m in v.messages() {
                let m = m?;
                assert_eq!(m.payload.len(), m.control.length as usize);
                n += 1;
            }
            view = v.next_section();
        }
        Ok(n)
    }

    fn header_of(conn: u32) -> TransportRepr {
        TransportRepr {
            dst_conn: conn,
            seq: conn * 100,
            ..header()
        }
    }

    /// A frame of three sections: connection 17 with the first two messages, 18 with
    /// none (an acknowledgement), 19 with the other three; 2 + 0 + 6 = 8 cells.
    fn build_sections() -> (Vec<u8>, usize) {
        let mut buf = vec![0xa5u8; 1500];
        let msgs = messages();
        let mut w = FrameWriter::new(&mut buf, &underlay(), &header_of(17)).unwrap();
        for (c, p) in &msgs[..2] {
            w.push(c, p).unwrap();
        }
        assert!(w.begin_section(&header_of(18), 0));
        assert!(w.begin_section(&header_of(19), 6));
        for (c, p) in &msgs[2..] {
            w.push(c, p).unwrap();
        }
        assert_eq!((w.cells(), w.frame_cells()), (6, 8));
        let len = w.finish();
        (buf, len)
    }

    #[test]
    fn written_frame_parses_back_byte_exact() {
        let (buf, len) = build();
        assert_eq!(len, frame_len(8));
        let frame = &buf[..len];
        let view = FrameView::parse(frame).unwrap();
        assert_eq!(view.underlay, underlay());
        assert_eq!(
            view.header,
            TransportRepr {
                cells: 8,
                ..header()
            }
        );
        assert_eq!(view.cells().len(), 8 * CELL_LEN);

        let got: Vec<Message> = view.messages().map(Result::unwrap).collect();
        let want = messages();
        assert_eq!(got.len(), want.len());
        let first_cells = [0, 1, 2, 4, 7];
        for ((m, (c, p)), first) in got.iter().zip(&want).zip(first_cells) {
            assert_eq!(m.control, *c);
            assert_eq!(m.payload, &p[..]);
            assert_eq!(m.first_cell, first);
        }

        // Rebuild the bytes independently from the parsed parts: same frame.
        let mut again = vec![0u8; len];
        UnderlayRepr::emit(
            &view.underlay,
            &mut UnderlayPacket::new_unchecked(&mut again[..]),
            len - 42,
        );
        view.header
            .emit(&mut TransportPacket::new_unchecked(&mut again[42..74]));
        let mut at = 74;
        for m in &got {
            m.control
                .emit(&mut ControlPacket::new_unchecked(&mut again[at..at + 16]));
            again[at + 16..at + 16 + m.payload.len()].copy_from_slice(m.payload);
            at += m.control.cells() * CELL_LEN;
        }
        let crc = crate::wire::crc32c(&again[42..len - 4]);
        again[len - 4..].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(again, frame);
    }

    #[test]
    fn written_frame_has_the_fixed_underlay_fields_and_zero_padding() {
        let (buf, len) = build();
        let p = UnderlayPacket::new_checked(&buf[..len]).unwrap();
        assert_eq!(p.ethertype(), 0x0800);
        assert_eq!(
            (p.ip_version(), p.ip_ihl(), p.ip_ttl(), p.ip_protocol()),
            (4, 5, 64, 17)
        );
        assert_eq!(p.ip_flags_frag(), 0x4000);
        assert_eq!(p.ip_total_len() as usize, len - 14);
        assert_eq!(p.udp_len() as usize, len - 34);
        assert_eq!(p.udp_checksum(), 0);
        assert!(p.ip_checksum_ok());
        // The 1-byte message's data block: payload byte then 31 zero bytes.
        assert!(buf[74 + 17..74 + 48].iter().all(|&b| b == 0));
        // The 100-byte message (cells 4..7): 16 + 100 = 116 of 144 bytes used.
        assert!(buf[74 + 4 * 48 + 116..74 + 7 * 48].iter().all(|&b| b == 0));
        // The acknowledged echo lands in header bytes 26..28.
        assert_eq!(
            TransportPacket::new_checked(&buf[42..]).unwrap().acked(),
            0x1234
        );
    }

    #[test]
    fn ethernet_padding_after_the_frame_is_ignored() {
        let (buf, len) = build();
        assert_eq!(walk(&buf[..len + 60]), Ok(5));
        assert_eq!(walk(&buf), Ok(5));
    }

    #[test]
    fn ack_only_frame_has_no_cells() {
        let mut buf = [0u8; 200];
        let len = FrameWriter::new(&mut buf, &underlay(), &header())
            .unwrap()
            .finish();
        assert_eq!(len, FRAME_OVERHEAD);
        let view = FrameView::parse(&buf[..len]).unwrap();
        assert!(view.header.is_ack_only());
        assert_eq!(view.messages().count(), 0);
    }

    #[test]
    fn every_single_bit_flip_is_rejected_or_only_changes_unchecked_addresses() {
        let (buf, len) = build();
        let original = FrameView::parse(&buf[..len]).unwrap();
        // No checksum covers the MAC addresses (Ethernet's FCS does, in the NIC) or the
        // UDP source port (the UDP checksum is off): a flip there shows in the addresses.
        let unchecked = |byte: usize| byte < 12 || (34..36).contains(&byte);
        for bit in 0..len * 8 {
            let mut frame = buf[..len].to_vec();
            frame[bit / 8] ^= 1 << (bit % 8);
            match FrameView::parse(&frame) {
                Ok(view) => {
                    assert!(unchecked(bit / 8), "flip of bit {bit} went unnoticed");
                    assert_ne!(view.underlay, original.underlay);
                    assert_eq!(view.header, original.header);
                }
                Err(e) => {
                    assert!(!unchecked(bit / 8), "bit {bit}: {e}");
                    // The walk over the sections' headers comes before the CRC: a flip
                    // there may be refused by it (version, cell count) instead.
                    if bit / 8 >= UNDERLAY_LEN + HEADER_LEN {
                        assert!(matches!(e, WireError::BadCrc { .. }), "bit {bit}: {e}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_truncation_is_rejected() {
        let (buf, len) = build();
        for cut in 0..len {
            assert!(FrameView::parse(&buf[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(
            FrameView::parse(&buf[..len - 1]),
            Err(WireError::Truncated {
                needed: len,
                got: len - 1
            })
        );
    }

    #[test]
    fn cell_count_disagreeing_with_the_length_is_rejected() {
        let (mut buf, len) = build();
        TransportPacket::new_unchecked(&mut buf[42..]).set_cell_count(7);
        reseal(&mut buf, len);
        assert_eq!(
            FrameView::parse(&buf[..len]),
            Err(WireError::BadCellCount {
                cells: 7,
                bytes: 8 * 48
            })
        );
    }

    #[test]
    fn bad_check_byte_stops_the_message_walk() {
        let (mut buf, len) = build();
        buf[74 + 2 * 48 + 8] ^= 0x01; // index field of the third message (cell 2)
        reseal(&mut buf, len);
        let view = FrameView::parse(&buf[..len]).unwrap();
        let items: Vec<_> = view.messages().collect();
        assert_eq!(items.len(), 3);
        assert!(items[0].is_ok() && items[1].is_ok());
        assert!(matches!(items[2], Err(WireError::BadCheck { .. })));
    }

    #[test]
    fn message_running_past_the_frame_is_truncated() {
        let (mut buf, len) = build();
        // Make the last message (cell 7, one cell) claim 33 bytes: two cells.
        let at = 74 + 7 * 48;
        let c = ControlRepr {
            length: 33,
            ..messages()[4].0
        };
        c.emit(&mut ControlPacket::new_unchecked(&mut buf[at..at + 16]));
        reseal(&mut buf, len);
        let view = FrameView::parse(&buf[..len]).unwrap();
        let items: Vec<_> = view.messages().collect();
        assert_eq!(items.len(), 5);
        assert_eq!(
            items[4],
            Err(WireError::Truncated {
                needed: 96,
                got: 48
            })
        );
        // A hostile u32::MAX length does not overflow either.
        let c = ControlRepr {
            length: u32::MAX,
            ..c
        };
        c.emit(&mut ControlPacket::new_unchecked(&mut buf[at..at + 16]));
        reseal(&mut buf, len);
        let view = FrameView::parse(&buf[..len]).unwrap();
        assert!(matches!(
            view.messages().last(),
            Some(Err(WireError::Truncated { .. }))
        ));
    }

    #[test]
    fn full_frame_reports_no_room() {
        let mut buf = vec![0u8; frame_len(3) + 47];
        let mut w = FrameWriter::new(&mut buf, &underlay(), &header()).unwrap();
        assert_eq!(w.room_cells(), 3);
        assert!(w.fits(80) && !w.fits(81 + 48));
        w.push(&write(80, 0), &payload(80, 9)).unwrap();
        assert_eq!(w.room_cells(), 1);
        assert!(!w.fits(33));
        assert_eq!(
            w.push(&write(33, 0), &payload(33, 9)),
            Err(WireError::NoRoom { needed: 2, room: 1 })
        );
        w.push(&write(0, 0), &[]).unwrap();
        assert_eq!(w.room_cells(), 0);
        assert_eq!(
            w.push(&write(0, 0), &[]),
            Err(WireError::NoRoom { needed: 1, room: 0 })
        );
        let len = w.finish();
        assert_eq!(len, frame_len(3));
        assert_eq!(walk(&buf[..len]), Ok(2));
    }

    #[test]
    fn push_rejects_a_payload_of_the_wrong_length() {
        let mut buf = [0u8; 500];
        let mut w = FrameWriter::new(&mut buf, &underlay(), &header()).unwrap();
        assert_eq!(
            w.push(&write(10, 0), &[0; 9]),
            Err(WireError::BadLength {
                length: 10,
                payload: 9
            })
        );
        assert_eq!(w.cells(), 0);
    }

    #[test]
    fn push_with_fills_the_payload_in_place() {
        let mut buf = [0x77u8; 500];
        let mut w = FrameWriter::new(&mut buf, &underlay(), &header()).unwrap();
        w.push_with(&write(50, 8), |dst| {
            assert_eq!(dst.len(), 50);
            dst.copy_from_slice(&[3; 50]);
        })
        .unwrap();
        let len = w.finish();
        let view = FrameView::parse(&buf[..len]).unwrap();
        let m = view.messages().next().unwrap().unwrap();
        assert_eq!(m.payload, &[3; 50]);
        assert!(view.cells()[16 + 50..].iter().all(|&b| b == 0));
    }

    #[test]
    fn a_frame_with_a_hole_matches_the_frame_written_whole() {
        // A small message, then a payload left as a hole (summed from elsewhere), then
        // another message after it: the bytes put in the hole afterwards make the frame
        // written in one piece, CRC included.
        let payload: Vec<u8> = (0..3000u32).map(|i| (i * 13 + 5) as u8).collect();
        let build = |hole: bool| {
            let mut buf = vec![0x55u8; 9000];
            let mut w = FrameWriter::new(&mut buf, &underlay(), &header()).unwrap();
            w.push(&write(20, 1), &[9; 20]).unwrap();
            let at = if hole {
                let at = w.push_hole(&write(3000, 2)).unwrap();
                assert!(w.push_hole(&write(100, 3)).is_none(), "one hole per frame");
                assert_eq!(w.hole(), Some((at, 3000)));
                Some(at)
            } else {
                w.push(&write(3000, 2), &payload).unwrap();
                None
            };
            w.push(&write(40, 3), &[4; 40]).unwrap();
            let len = match at {
                Some(_) => w.finish_with_hole(|crc| crate::wire::crc32c_append(crc, &payload)),
                None => w.finish(),
            };
            if let Some(at) = at {
                buf[at..at + 3000].copy_from_slice(&payload);
            }
            buf.truncate(len);
            buf
        };
        let (whole, holed) = (build(false), build(true));
        assert_eq!(whole, holed);
        let view = FrameView::parse(&holed).unwrap();
        let lens: Vec<usize> = view.messages().map(|m| m.unwrap().payload.len()).collect();
        assert_eq!(lens, [20, 3000, 40]);
    }

    #[test]
    fn writer_needs_room_for_an_empty_frame() {
        let mut buf = [0u8; FRAME_OVERHEAD - 1];
        assert!(matches!(
            FrameWriter::new(&mut buf, &underlay(), &header()),
            Err(WireError::BufferTooSmall {
                needed: 78,
                got: 77
            })
        ));
        let mut buf = [0u8; FRAME_OVERHEAD];
        let w = FrameWriter::new(&mut buf, &underlay(), &header()).unwrap();
        assert_eq!(w.room_cells(), 0);
        assert!(!w.fits(0));
    }

    #[test]
    fn max_cells_and_frame_len_agree() {
        assert_eq!(frame_len(0), 78);
        assert_eq!(frame_len(1), 126);
        assert_eq!(max_cells(0), 0);
        assert_eq!(max_cells(77), 0);
        assert_eq!(max_cells(78), 0);
        assert_eq!(max_cells(125), 0);
        assert_eq!(max_cells(126), 1);
        // Standard Ethernet (1500 MTU = 1514-byte frames) and jumbo (9000 MTU).
        assert_eq!(max_cells(1514), 29);
        assert_eq!(max_cells(9014), 186);
        assert_eq!(max_cells(usize::MAX), MAX_CELLS);
        for size in 0..70_000 {
            let n = max_cells(size);
            assert!(n <= MAX_CELLS);
            if size >= FRAME_OVERHEAD {
                assert!(frame_len(n) <= size);
                assert!(n == MAX_CELLS || frame_len(n + 1) > size);
            }
        }
    }

    #[test]
    fn largest_frame_round_trips() {
        let mut buf = vec![0u8; frame_len(MAX_CELLS) + 1000];
        let mut w = FrameWriter::new(&mut buf, &underlay(), &header()).unwrap();
        assert_eq!(w.room_cells(), MAX_CELLS);
        let length = (MAX_CELLS * CELL_LEN - CONTROL_LEN) as u32;
        let data = payload(length as usize, 7);
        w.push(&write(length, 0), &data).unwrap();
        assert_eq!(w.room_cells(), 0);
        let len = w.finish();
        assert_eq!(len, frame_len(MAX_CELLS));
        let view = FrameView::parse(&buf[..len]).unwrap();
        let m = view.messages().next().unwrap().unwrap();
        assert_eq!(m.payload, &data[..]);
    }

    #[test]
    fn random_garbage_never_panics() {
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        let mut buf = vec![0u8; 2000];
        for i in 0..100_000 {
            let len = rng.below(2000);
            for chunk in buf[..len].chunks_mut(8) {
                let r = rng.next().to_ne_bytes();
                chunk.copy_from_slice(&r[..chunk.len()]);
            }
            // Every other buffer gets a plausible underlay so the later checks run too.
            if i % 2 == 0 && len >= UNDERLAY_LEN {
                underlay().emit(
                    &mut UnderlayPacket::new_unchecked(&mut buf[..]),
                    len - UNDERLAY_LEN,
                );
                if len > UNDERLAY_LEN + CRC_LEN && i % 4 == 0 {
                    reseal(&mut buf, len);
                }
            }
            let _ = walk(&buf[..len]);
        }
    }

    #[test]
    fn mutations_of_a_valid_frame_never_panic() {
        let (good, len) = build();
        let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
        let mut accepted = 0;
        for i in 0..50_000 {
            let mut frame = good[..len].to_vec();
            for _ in 0..1 + rng.below(8) {
                let at = rng.below(len);
                frame[at] = rng.next() as u8;
            }
            // Half the time re-seal the checksums so mutated cells reach the decoder,
            // and occasionally re-sign the control parts so their lengths are believed.
            if i % 2 == 0 {
                if i % 4 == 0 {
                    for cell in 0..8 {
                        let at = 74 + cell * 48;
                        ControlPacket::new_unchecked(&mut frame[at..at + 16]).fill_check();
                    }
                }
                reseal(&mut frame, len);
            }
            let cut = if i % 8 == 1 { rng.below(len + 1) } else { len };
            if walk(&frame[..cut]).is_ok() {
                accepted += 1;
            }
        }
        assert!(accepted > 0);
    }

    #[test]
    fn sections_parse_back_in_order_with_their_own_headers_and_messages() {
        let (buf, len) = build_sections();
        assert_eq!(len, UNDERLAY_LEN + 3 * HEADER_LEN + 8 * CELL_LEN + CRC_LEN);
        let msgs = messages();
        let first = FrameView::parse(&buf[..len]).unwrap();
        assert_eq!(first.frame_cells(), 8);
        let second = first.next_section().unwrap();
        let third = second.next_section().unwrap();
        assert_eq!(third.next_section(), None);
        let more = |conn, cells| TransportRepr {
            flags: hflags::ACK | hflags::MORE,
            cells,
            ..header_of(conn)
        };
        assert_eq!(first.header, more(17, 2));
        assert_eq!(second.header, more(18, 0));
        assert_eq!(
            third.header,
            TransportRepr {
                cells: 6,
                ..header_of(19)
            }
        );
        assert_eq!(third.underlay, first.underlay);
        let got = |v: FrameView<'_>| -> Vec<(ControlRepr, Vec<u8>)> {
            v.messages()
                .map(|m| m.unwrap())
                .map(|m| (m.control, m.payload.to_vec()))
                .collect()
        };
        assert_eq!(got(first), msgs[..2].to_vec());
        assert!(got(second).is_empty());
        assert_eq!(got(third), msgs[2..].to_vec());
    }

    #[test]
    fn a_sealed_section_keeps_room_for_its_seal_and_parses_back_with_it() {
        let msgs = [(write(1, 1), vec![1u8]), (write(2, 2), vec![2u8, 3])];
        let sealed = |conn| TransportRepr {
            flags: hflags::ACK | hflags::SEALED,
            ..header_of(conn)
        };
        // Room for a first section of two cells and its seal, then a header and a cell.
        let size = FRAME_OVERHEAD + 3 * CELL_LEN + HEADER_LEN + CELL_LEN;
        let mut buf = vec![0u8; size];
        let mut w = FrameWriter::new(&mut buf, &underlay(), &sealed(17)).unwrap();
        w.push(&msgs[0].0, &msgs[0].1).unwrap();
        w.push(&msgs[1].0, &msgs[1].1).unwrap();
        assert_eq!(w.room_cells(), 2 - 1, "the seal cell is kept free");
        let mut seen = None;
        w.seal(|h, cells, seal| {
            seen = Some((h[1], u16::from_be_bytes([h[2], h[3]]), cells.len()));
            cells.iter_mut().for_each(|b| *b ^= 0xff);
            seal.fill(0x5e);
        });
        assert_eq!(seen, Some((hflags::ACK | hflags::SEALED, 2, 2 * CELL_LEN)));
        assert_eq!(w.room_cells(), 0, "a sealed section takes nothing more");
        assert!(w.push(&write(1, 0), &[1]).is_err());
        // A second sealed section of one cell does not fit with its seal; a plain one
        // does.
        assert!(!w.begin_section(&sealed(18), 1));
        assert!(w.begin_section(&header_of(18), 1));
        w.push(&write(1, 0), &[7]).unwrap();
        let len = w.finish();
        assert_eq!(len, size);
        let v = FrameView::parse(&buf[..len]).unwrap();
        assert_eq!(v.frame_cells(), 4, "cells of every section and the seal");
        assert_eq!(v.header.cells, 2);
        assert_eq!(v.header.flags, hflags::ACK | hflags::SEALED | hflags::MORE);
        assert_eq!(v.seal(), Some(&[0x5e; CELL_LEN][..]));
        assert!(v.cells().iter().zip(v.messages().count()..).count() > 0);
        let next = v.next_section().unwrap();
        assert_eq!((next.header.dst_conn, next.seal()), (18, None));
        let m: Vec<_> = next.messages().map(Result::unwrap).collect();
        assert_eq!(m[0].payload, &[7]);
        // The opened cells read as messages through `with_cells`.
        let opened: Vec<u8> = v.cells().iter().map(|b| b ^ 0xff).collect();
        let o = v.with_cells(&opened);
        let got: Vec<_> = o.messages().map(|m| m.unwrap().payload.to_vec()).collect();
        assert_eq!(got, vec![msgs[0].1.clone(), msgs[1].1.clone()]);
        // A section flagged sealed but never sealed (a forged frame) ends with a zero
        // seal cell: the layout holds.
        let mut forged = vec![0u8; 256];
        let mut w = FrameWriter::new(&mut forged, &underlay(), &sealed(20)).unwrap();
        w.push(&write(1, 0), &[5]).unwrap();
        let n = w.finish();
        let f = FrameView::parse(&forged[..n]).unwrap();
        assert_eq!((f.header.cells, f.seal()), (1, Some(&[0u8; CELL_LEN][..])));
        // A sealed section whose seal cell is missing is refused as a whole.
        let mut cut = buf[..len].to_vec();
        cut[UNDERLAY_LEN + 1] &= !hflags::MORE;
        let n = UNDERLAY_LEN + HEADER_LEN + 2 * CELL_LEN;
        let mut short = cut[..n].to_vec();
        short.extend_from_slice(&[0; CRC_LEN]);
        UnderlayPacket::new_unchecked(&mut short[..UNDERLAY_LEN])
            .set_lengths(n + CRC_LEN - UNDERLAY_LEN);
        write_trailer(&mut short, n + CRC_LEN);
        assert!(matches!(
            FrameView::parse(&short),
            Err(WireError::BadCellCount { .. })
        ));
    }

    #[test]
    fn a_frame_of_sealed_sections_only_ends_with_zero_and_one_plain_section_brings_the_crc() {
        let sealed = |conn| TransportRepr {
            flags: hflags::ACK | hflags::SEALED,
            ..header_of(conn)
        };
        let build = |second: TransportRepr| {
            let mut buf = vec![0u8; 1024];
            let mut w = FrameWriter::new(&mut buf, &underlay(), &sealed(17)).unwrap();
            w.push(&write(2, 0), &[1, 2]).unwrap();
            w.seal(|_, cells, seal| {
                cells.iter_mut().for_each(|b| *b ^= 0x3c);
                seal.fill(0x77);
            });
            assert!(w.begin_section(&second, 1));
            w.push(&write(1, 0), &[9]).unwrap();
            w.seal(|_, _, seal| seal.fill(0x66));
            let len = w.finish();
            buf.truncate(len);
            buf
        };
        let trailer_of = |f: &[u8]| u32::from_be_bytes(f[f.len() - CRC_LEN..].try_into().unwrap());
        // Both sections sealed: the trailer is zero, and it is what parses.
        let f = build(sealed(18));
        assert_eq!(trailer_of(&f), 0);
        assert_eq!(trailer(&f[UNDERLAY_LEN..f.len() - CRC_LEN]), 0);
        let v = FrameView::parse(&f).unwrap();
        assert!(v.seal().is_some() && v.next_section().unwrap().seal().is_some());
        // A changed cell still parses: the section's tag is what refuses it.
        let mut g = f.clone();
        g[UNDERLAY_LEN + HEADER_LEN + 20] ^= 1;
        assert!(FrameView::parse(&g).is_ok());
        // A trailer that is not zero is refused; so is one that is the CRC32C.
        for t in [
            1u32,
            crate::wire::crc32c(&f[UNDERLAY_LEN..f.len() - CRC_LEN]),
        ] {
            let mut g = f.clone();
            let n = g.len();
            g[n - CRC_LEN..].copy_from_slice(&t.to_be_bytes());
            assert!(matches!(
                FrameView::parse(&g),
                Err(WireError::BadCrc { expected: 0, .. })
            ));
        }
        // A plain second section: the CRC32C covers the frame again, and a changed cell
        // of the sealed one is refused by it.
        let f = build(header_of(18));
        let covered = &f[UNDERLAY_LEN..f.len() - CRC_LEN];
        assert_eq!(trailer_of(&f), crate::wire::crc32c(covered));
        assert_eq!(trailer(covered), trailer_of(&f));
        let v = FrameView::parse(&f).unwrap();
        assert_eq!(v.next_section().unwrap().seal(), None);
        let mut g = f.clone();
        g[UNDERLAY_LEN + HEADER_LEN + 20] ^= 1;
        assert!(matches!(
            FrameView::parse(&g),
            Err(WireError::BadCrc { .. })
        ));
        // Clearing SEALED in the first header does not turn the check off: the frame is
        // refused (its seal cell read as the next header, or the zero trailer as a CRC).
        let mut g = build(sealed(18));
        g[UNDERLAY_LEN + 1] &= !hflags::SEALED;
        assert!(FrameView::parse(&g).is_err());
    }

    #[test]
    fn a_section_that_does_not_fit_is_refused_and_changes_nothing() {
        // Room for the header, one cell, the CRC and one more 32-byte header only.
        let size = FRAME_OVERHEAD + CELL_LEN + HEADER_LEN;
        let mut buf = vec![0u8; size];
        let mut w = FrameWriter::new(&mut buf, &underlay(), &header_of(17)).unwrap();
        w.push(&write(1, 0), &[9]).unwrap();
        assert!(!w.begin_section(&header_of(18), 1));
        assert!(w.begin_section(&header_of(18), 0));
        assert_eq!(w.room_cells(), 0);
        let len = w.finish();
        assert_eq!(len, size);
        let v = FrameView::parse(&buf[..len]).unwrap();
        assert_eq!(v.header.cells, 1);
        assert_eq!(v.next_section().unwrap().header.dst_conn, 18);
    }

    #[test]
    fn a_bad_section_anywhere_rejects_the_whole_frame() {
        let (good, len) = build_sections();
        let second = UNDERLAY_LEN + HEADER_LEN + 2 * CELL_LEN;
        let third = second + HEADER_LEN;
        // The last section claims another follows.
        let mut f = good.clone();
        f[third + 1] |= hflags::MORE;
        reseal(&mut f, len);
        assert!(matches!(
            FrameView::parse(&f[..len]),
            Err(WireError::Truncated { .. })
        ));
        // The first section says it is the last, with more bytes after it.
        let mut f = good.clone();
        f[UNDERLAY_LEN + 1] &= !hflags::MORE;
        reseal(&mut f, len);
        assert!(matches!(
            FrameView::parse(&f[..len]),
            Err(WireError::BadCellCount { .. })
        ));
        // A middle section's cell count runs past the frame.
        let mut f = good.clone();
        TransportPacket::new_unchecked(&mut f[second..]).set_cell_count(100);
        reseal(&mut f, len);
        assert!(matches!(
            FrameView::parse(&f[..len]),
            Err(WireError::BadCellCount { cells: 100, .. })
        ));
        // A later section of another version.
        let mut f = good;
        f[third] = VERSION - 1;
        reseal(&mut f, len);
        assert_eq!(
            FrameView::parse(&f[..len]),
            Err(WireError::BadVersion(VERSION - 1))
        );
    }

    #[test]
    fn mutations_of_a_frame_of_sections_never_panic() {
        let (good, len) = build_sections();
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        let mut accepted = 0;
        for i in 0..50_000 {
            let mut frame = good[..len].to_vec();
            for _ in 0..1 + rng.below(4) {
                let at = UNDERLAY_LEN + rng.below(len - UNDERLAY_LEN);
                frame[at] = rng.next() as u8;
            }
            if i % 2 == 0 {
                reseal(&mut frame, len);
            }
            if walk(&frame).is_ok() {
                accepted += 1;
            }
        }
        assert!(accepted > 0);
    }
}
