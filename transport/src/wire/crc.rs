//! CRC32C (Castagnoli, as RFC 3720), the frame trailer's and the control part's check.
//! No DPDK. A run of [`FAST_FROM`] bytes or more (a whole frame, or a continuation such
//! as a payload taken from endpoint memory) goes to the `crc-fast` crate,
//! which folds with carry-less multiplication (VPCLMULQDQ on AVX-512 machines,
//! detected at run time): 49 GB/s on a 9600-byte frame here against 22.5 GB/s for the
//! `crc32c` crate's three-way `crc32` loop, the receiver's largest cost after the
//! port's copy in 64 KiB write_bw over memif. Shorter runs in builds without SSE4.2 use
//! the `crc32c` crate (the `crc32` instruction where the CPU has it). With SSE4.2 compiled in — the workspace builds for x86-64-v2, as Debian's
//! DPDK needs — short buffers (control parts, small frames) inline to the instruction:
//! the crates' per-call set-up doubled the fast path's check cost. That is the one
//! `unsafe` of the sans-IO layers: calling the intrinsic, which the cfg proves present.

/// Below this many bytes the inline loop wins (`cargo bench --bench fastpath`: with
/// the crate on every length, parsing and decoding a frame of 180 32-byte writes took
/// 2.9 us instead of 1.55 us; its three-way interleaved loop pays off past a few
/// hundred bytes).
#[cfg(all(target_arch = "x86_64", target_feature = "sse4.2"))]
const INLINE_BELOW: usize = 512;

/// From this many bytes [`crc32c`] uses `crc-fast` (measured per length: 2.7x the
/// `crc32c` crate at 512 bytes, even with the inline loop at 256).
pub const FAST_FROM: usize = 512;

/// CRC32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    if data.len() >= FAST_FROM {
        return crc32c_long(data);
    }
    crc32c_append(0, data)
}

/// [`crc32c`] of a long buffer, out of line: `crc-fast` inlines its dispatch, which at
/// every call site pushed the receive path's other code out of line (the node bench's
/// receiver took 52-54 ns a message with it inlined, 43.5 out of line, 46 before).
#[inline(never)]
fn crc32c_long(data: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(data)
}

/// [`crc32c_append`] of a long buffer by `crc-fast`, out of line as [`crc32c_long`]: a
/// frame whose payload is taken from endpoint memory by reference is checked in three
/// runs (head, payload, tail), the payload's a long one. The crate's state is the CRC
/// register before the final inversion, hence `!init`.
#[inline(never)]
fn crc32c_append_long(init: u32, data: &[u8]) -> u32 {
    let mut d =
        crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(!init));
    d.update(data);
    d.finalize() as u32
}

/// CRC32C of `data`, continuing from `init` (0 to start).
#[inline]
pub fn crc32c_append(init: u32, data: &[u8]) -> u32 {
    if data.len() >= FAST_FROM {
        return crc32c_append_long(init, data);
    }
    #[cfg(all(target_arch = "x86_64", target_feature = "sse4.2"))]
    if data.len() < INLINE_BELOW {
        use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
        let mut c = !init as u64;
        let mut chunks = data.chunks_exact(8);
        for w in &mut chunks {
            let v = u64::from_le_bytes(w.try_into().expect("8-byte chunk"));
            // SAFETY: SSE4.2 is compiled in (the cfg above), so the instruction exists;
            // the intrinsic computes on its register arguments only.
            c = unsafe { _mm_crc32_u64(c, v) };
        }
        let mut c = c as u32;
        for &b in chunks.remainder() {
            // SAFETY: as above.
            c = unsafe { _mm_crc32_u8(c, b) };
        }
        return !c;
    }
    crc32c::crc32c_append(init, data)
}

/// CRC32C continuing from `init` over the little-endian bytes of `words` (the same as
/// [`crc32c_append`] over those bytes), from registers: no store-to-load trip through
/// memory when the caller just built the words.
#[inline]
pub fn crc32c_words(init: u32, words: &[u64; 2]) -> u32 {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse4.2"))]
    {
        let mut c = !init as u64;
        for &w in words {
            // SAFETY: SSE4.2 is compiled in (the cfg above); register-only intrinsic.
            c = unsafe { std::arch::x86_64::_mm_crc32_u64(c, w) };
        }
        !(c as u32)
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse4.2")))]
    {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&words[0].to_le_bytes());
        b[8..].copy_from_slice(&words[1].to_le_bytes());
        crc32c::crc32c_append(init, &b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_catalogue_check_value_and_the_crate_at_every_length() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        let data: Vec<u8> = (0..2000u32).map(|i| (i * 7 + 3) as u8).collect();
        for n in [1, 3, 4, 7, 8, 15, 16, 17, 80, 511, 512, 513, 999, 2000] {
            let whole = crc32c(&data[..n]);
            assert_eq!(whole, crc32c::crc32c(&data[..n]), "n = {n}");
            let split = crc32c_append(crc32c(&data[..n / 2]), &data[n / 2..n]);
            assert_eq!(whole, split, "n = {n}");
            // Three runs, the middle one long enough for the folding path.
            if n >= 1000 {
                let (a, b) = (n / 10, n - n / 10);
                let three =
                    crc32c_append(crc32c_append(crc32c(&data[..a]), &data[a..b]), &data[b..n]);
                assert_eq!(whole, three, "n = {n}");
            }
            if n == 16 {
                let w = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().unwrap());
                assert_eq!(crc32c_words(0, &[w(0), w(8)]), whole, "n = {n}");
            }
        }
    }

    #[test]
    fn the_folding_path_matches_the_crate_at_every_frame_length_and_alignment() {
        // Every length a frame can have (jumbo included), at every start within a
        // 64-byte line: the two implementations meet at FAST_FROM.
        let data: Vec<u8> = (0..10_100u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for start in 0..64 {
            for n in (FAST_FROM - 8..10_000).step_by(if start == 0 { 1 } else { 97 }) {
                let d = &data[start..start + n];
                assert_eq!(crc32c(d), crc32c::crc32c(d), "start {start}, n = {n}");
            }
        }
    }
}
