//! The on-path attacker of a secure connection (`tests/secure_injector.rs`): a server
//! and a client on a bridge that floods every frame to every port (a hub), and an
//! attacker that sees the client's frames and sends each again changed, replayed and
//! forged with the right connection number and key, while the client writes and runs
//! fetch-and-adds that the server checks.

use std::time::{Duration, Instant};

use deposit::*;
use deposit_tests::{wait_completions, wait_until};
use deposit_transport::wire::cm::CmMessage;
use deposit_transport::wire::{
    self, hflags, op, ControlRepr, FrameView, FrameWriter, TransportRepr, CELL_LEN, HEADER_LEN,
    UNDERLAY_LEN,
};

use super::{await_exit, await_go, await_line, fail, netns_device, stdin_lines, T};

/// Service of the secure test.
const SERVICE: u32 = 33;
/// What this test's client sends and its server checks.
const LOAD: Workload = Workload {
    writes: 512,
    adds: 256,
    len: 4 << 20,
};
/// What starts every write: the attacker looks for it on the wire.
pub(super) const MARKER: &[u8; 32] = b"secret deposit plaintext marker!";

/// A client's writes of [`Workload::WRITE`] bytes (each the marker, then a pattern of
/// its number; each its own place) and fetch-and-adds of 1 on the server's last word,
/// every completion checked; its server checks every byte and the word.
pub(super) struct Workload {
    pub writes: u64,
    pub adds: u64,
    /// Bytes of each side's endpoint.
    pub len: usize,
}

impl Workload {
    pub const WRITE: usize = 4096;

    /// Write `i`'s bytes.
    fn data(i: u64) -> Vec<u8> {
        let mut d: Vec<u8> = (0..Self::WRITE as u64)
            .map(|k| (k.wrapping_mul(131) ^ i.wrapping_mul(7)) as u8)
            .collect();
        d[..MARKER.len()].copy_from_slice(MARKER);
        d
    }

    /// Where write `i` lands.
    fn offset(i: u64) -> usize {
        i as usize * Self::WRITE
    }

    /// The word the adds go to.
    fn counter(&self) -> u32 {
        (self.len - 8) as u32
    }

    /// The client's side on `conn` (its endpoint `ep`, completions on `cq`).
    pub fn send(&self, conn: &Connection, ep: &Endpoint, cq: &CompletionQueue) {
        let check = |n| {
            for wc in wait_completions(cq, n, T) {
                if wc.status != WcStatus::Success {
                    fail(format!("completed {wc:?}"));
                }
            }
        };
        // The adds spread over the writes.
        let every = (self.writes / self.adds.max(1)).max(1);
        let mut added = 0;
        for i in 0..self.writes {
            let off = Self::offset(i);
            ep.write(off as u64, &Self::data(i))
                .unwrap_or_else(|e| fail(e));
            let wr = WorkRequest::write(i, ep, off as u64, Self::WRITE as u32, off as u32);
            conn.post(&wr.signaled()).unwrap_or_else(|e| fail(e));
            if (i + 1) % 16 == 0 {
                check(16);
            }
            if i % every == 0 && added < self.adds {
                let result = (self.len - 16) as u64;
                let wr = WorkRequest::fetch_add(1 << 32 | i, ep, result, self.counter(), 1);
                conn.post(&wr.signaled()).unwrap_or_else(|e| fail(e));
                check(1);
                added += 1;
            }
        }
        check((self.writes % 16) as usize);
    }

    /// The server's side: every request arrived on `conn`, every write's bytes and the
    /// word in `ep` as sent; says "verified".
    pub fn verify(&self, dev: &Device, conn: &Connection, ep: &Endpoint) {
        let all = self.writes + self.adds;
        if !wait_until(dev, T, || conn.arrivals() >= all) {
            fail(format!(
                "only {} of {all} requests arrived",
                conn.arrivals()
            ));
        }
        let mut got = vec![0u8; Self::WRITE];
        for i in 0..self.writes {
            ep.read(Self::offset(i) as u64, &mut got)
                .unwrap_or_else(|e| fail(e));
            if got != Self::data(i) {
                fail(format!("write {i} holds other bytes"));
            }
        }
        let mut word = [0u8; 8];
        ep.read(u64::from(self.counter()), &mut word)
            .unwrap_or_else(|e| fail(e));
        let counter = u64::from_ne_bytes(word);
        if counter != self.adds {
            fail(format!(
                "the counter is {counter}, not {}: an add ran twice or never",
                self.adds
            ));
        }
        println!("verified");
    }
}

fn secure_opts() -> ConnOptions {
    ConnOptions {
        secure: true,
        // The tap only injects after the handshake: the first use is the real server.
        trust_on_first_use: true,
        ..ConnOptions::default()
    }
}

/// Node 10.0.0.1: a secure listener; checks every write and the counter, then says its
/// refusals.
pub fn secure_server(port: &str) {
    let lines = stdin_lines();
    let dev = netns_device(port, [10, 0, 0, 1], 1514);
    let ep = dev
        .alloc_endpoint(
            LOAD.len as u64,
            Rights::REMOTE_WRITE | Rights::REMOTE_ATOMIC,
        )
        .unwrap_or_else(|e| fail(e));
    let cq = dev.create_cq(64);
    let l = dev
        .listen_with(SERVICE, &ep, &cq, &secure_opts())
        .unwrap_or_else(|e| fail(e));
    await_go(&dev, &lines);
    let conn = l.accept(T).unwrap_or_else(|e| fail(e));
    if !conn.is_secure() {
        fail("the accepted connection is not sealed");
    }
    LOAD.verify(&dev, &conn, &ep);
    let s = dev.stats();
    println!("connections {}", dev.connections());
    super::print_drops(
        &dev,
        &[
            DropReason::AuthFailed,
            DropReason::Replayed,
            DropReason::NotSealed,
            DropReason::CmForged,
        ],
    );
    println!("opened_rx {}", s.opened_rx);
    println!("stats");
    await_exit(&lines);
    drop(conn);
}

/// Node 10.0.0.2: connects securely and sends [`LOAD`] (writes and fetch-and-adds,
/// every completion checked).
pub fn secure_client(port: &str) {
    let lines = stdin_lines();
    let dev = netns_device(port, [10, 0, 0, 2], 1514);
    let ep = dev
        .alloc_endpoint(LOAD.len as u64, Rights::REMOTE_WRITE)
        .unwrap_or_else(|e| fail(e));
    let cq = dev.create_cq(256);
    await_go(&dev, &lines);
    let conn = dev
        .connect_with([10, 0, 0, 1], SERVICE, &ep, &cq, &secure_opts())
        .unwrap_or_else(|e| fail(e));
    println!("connected");
    LOAD.send(&conn, &ep, &cq);
    println!("completed");
    await_exit(&lines);
    drop(conn);
}

/// A raw packet socket on `port`, every frame of the segment (promiscuous).
pub(super) fn raw_socket(port: &str) -> libc::c_int {
    let name = std::ffi::CString::new(port).unwrap_or_else(|e| fail(e));
    // SAFETY: plain libc calls on a socket this function owns; the structures are
    // zero-initialised C structs of the sizes passed.
    unsafe {
        let proto = (libc::ETH_P_ALL as u16).to_be();
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto));
        if fd < 0 {
            fail(format!(
                "packet socket: {}",
                std::io::Error::last_os_error()
            ));
        }
        let ifindex = libc::if_nametoindex(name.as_ptr());
        if ifindex == 0 {
            fail(format!("no interface {port}"));
        }
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        let addr = (&sll as *const libc::sockaddr_ll).cast();
        if libc::bind(fd, addr, std::mem::size_of::<libc::sockaddr_ll>() as u32) != 0 {
            fail(format!("bind {port}: {}", std::io::Error::last_os_error()));
        }
        let mut mr: libc::packet_mreq = std::mem::zeroed();
        mr.mr_ifindex = ifindex as i32;
        mr.mr_type = libc::PACKET_MR_PROMISC as u16;
        let mrp = (&mr as *const libc::packet_mreq).cast();
        let len = std::mem::size_of::<libc::packet_mreq>() as u32;
        libc::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, mrp, len);
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        let tvp = (&tv as *const libc::timeval).cast();
        let len = std::mem::size_of::<libc::timeval>() as u32;
        libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, tvp, len);
        fd
    }
}

/// Receives one frame that another host sent (not one of ours), or `None` on time out.
pub(super) fn recv(fd: libc::c_int, buf: &mut [u8]) -> Option<usize> {
    recv_frame(fd, buf, 0).and_then(|(n, ours)| (!ours).then_some(n))
}

/// Receives one frame with `recvfrom`'s `flags`: its length and whether this host sent
/// it (a packet socket sees its own frames too); `None` when none came.
pub(super) fn recv_frame(fd: libc::c_int, buf: &mut [u8], flags: i32) -> Option<(usize, bool)> {
    // SAFETY: `buf` and `sll` are valid for the lengths passed.
    unsafe {
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        let n = libc::recvfrom(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            flags,
            (&mut sll as *mut libc::sockaddr_ll).cast(),
            &mut len,
        );
        (n > 0).then_some((n as usize, sll.sll_pkttype == libc::PACKET_OUTGOING))
    }
}

pub(super) fn send(fd: libc::c_int, f: &[u8]) {
    // SAFETY: `f` is valid for its length.
    unsafe {
        libc::send(fd, f.as_ptr().cast(), f.len(), 0);
    }
}

/// Rewrites the trailer of frame `f`, its CRC32C or zero (an attacker can).
fn fix_crc(f: &mut [u8]) {
    wire::write_trailer(f, f.len());
}

/// Node 10.0.0.3, the attacker: for each of the first `n` sealed frames of the client
/// it sees, sends three copies with one byte changed (a cell, the tag, the header's
/// sequence; CRC made right), a sealed frame and a plain write made up with the same
/// connection and key, a disconnect request naming them, and the frame itself again
/// (a replay, sent before the original has reached the server or after). Says what it
/// sent and how many frames it saw the client's plaintext in ("plaintext 0").
pub fn secure_tap(port: &str, n: u64) {
    let lines = stdin_lines();
    let fd = raw_socket(port);
    println!("ready");
    await_line(&lines, "go");
    let (mut seen, mut replays, mut modified, mut forged, mut plain, mut dreqs, mut clear) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut rng = deposit_transport::rng::Rng::new(3);
    let mut buf = vec![0u8; 16384];
    let deadline = Instant::now() + Duration::from_secs(40);
    while seen < n && Instant::now() < deadline {
        let Some(len) = recv(fd, &mut buf) else {
            continue;
        };
        let f = &buf[..len];
        if f.windows(MARKER.len()).any(|w| w == MARKER) {
            clear += 1;
        }
        let Ok(v) = FrameView::parse(f) else {
            continue;
        };
        let ours = v.underlay.src_ip == std::net::IpAddr::from([10, 0, 0, 2])
            && v.underlay.dst_ip == std::net::IpAddr::from([10, 0, 0, 1]);
        if !ours || v.header.dst_conn == 0 || v.seal().is_none() {
            continue;
        }
        seen += 1;
        // Without the Ethernet padding, if any: to the IPv4 total length.
        let f = f[..14 + usize::from(u16::from_be_bytes([f[16], f[17]]))].to_vec();
        let (conn, key, cells) = (v.header.dst_conn, v.header.key, v.header.cells as usize);
        let first = UNDERLAY_LEN + HEADER_LEN;
        let tag = first + cells * CELL_LEN + 32;
        let mut at = vec![
            tag + (rng.next_u64() % 16) as usize,
            UNDERLAY_LEN + 16 + (rng.next_u64() % 4) as usize,
        ];
        if cells > 0 {
            at.push(first + (rng.next_u64() as usize % (cells * CELL_LEN)));
        }
        for i in at {
            let mut m = f.clone();
            m[i] ^= 1 << (rng.next_u64() % 8);
            fix_crc(&mut m);
            send(fd, &m);
            modified += 1;
        }
        for seal in [true, false] {
            let mut out = vec![0u8; 1514];
            let hdr = TransportRepr {
                flags: if seal {
                    hflags::SEALED | hflags::ACK
                } else {
                    hflags::ACK
                },
                dst_conn: conn,
                key,
                seq: v.header.seq,
                ack: v.header.ack,
                src_conn: v.header.src_conn,
                ..TransportRepr::default()
            };
            let mut w = FrameWriter::new(&mut out, &v.underlay, &hdr).unwrap_or_else(|e| fail(e));
            let c = ControlRepr {
                opcode: op::WRITE,
                operand: 0,
                length: 32,
                ..ControlRepr::default()
            };
            w.push(&c, &[0xee; 32]).unwrap_or_else(|e| fail(e));
            let r = rng.next_u64();
            w.seal(|_, _, cell| {
                cell.fill(0);
                cell[..8].copy_from_slice(&(r >> 40).to_be_bytes());
                cell[32..40].copy_from_slice(&r.to_be_bytes());
            });
            let len = w.finish();
            send(fd, &out[..len]);
            if seal {
                forged += 1;
            } else {
                plain += 1;
            }
        }
        // A disconnect naming the connection (and, in vain, its key as the MAC).
        let mut mac = [0u8; 16];
        mac[..8].copy_from_slice(&key.to_be_bytes());
        let dreq = CmMessage::DisconnectReq {
            target: conn,
            sender: v.header.src_conn,
            ack: v.header.ack,
            mac,
        };
        let mut out = vec![0u8; 1514];
        let len = dreq
            .write_frame(&[], &v.underlay, &mut out)
            .unwrap_or_else(|e| fail(e));
        send(fd, &out[..len]);
        dreqs += 1;
        send(fd, &f);
        replays += 1;
    }
    println!(
        "sent seen {seen} replays {replays} modified {modified} forged {forged} plain {plain} \
         dreqs {dreqs}"
    );
    println!("plaintext {clear}");
    println!("tapped");
    await_exit(&lines);
}
