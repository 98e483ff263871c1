//! Two or three nodes over a simulated link, connected, with an endpoint each: the
//! set-up every sans-IO test starts from.
#![allow(dead_code)]

use std::sync::Arc;

use deposit_transport::cm::{ConnectOptions, Registers};
use deposit_transport::connection::{
    Completion, ConnShared, ConnState, CqShared, Source, WcStatus, Wqe, WrOpcode, WR_SIGNALED,
};
use deposit_transport::host::Host;
use deposit_transport::node::NodeConfig;
use deposit_transport::sim::{self, LinkConfig, Network, HZ};
use deposit_transport::tables::{EndpointId, RegProt, RegWindow, Rights};
use deposit_transport::wire::cell::AddrMode;

/// Endpoint size of every host.
pub const EP_LEN: usize = 1 << 20;

/// One end of a connection.
pub struct End {
    pub host: usize,
    pub ep: EndpointId,
    pub cq: Arc<CqShared>,
    pub conn: Arc<ConnShared>,
}

/// A network of `n` hosts, each with one endpoint (every right) and a completion
/// queue of 4096.
pub fn network(
    n: usize,
    cfg: &NodeConfig,
    link: LinkConfig,
    seed: u64,
) -> (Network, Vec<(EndpointId, Arc<CqShared>)>) {
    let mut net = Network::new(n, cfg, link, seed);
    let eps = (0..n)
        .map(|i| {
            let ep = net.hosts[i].endpoint(EP_LEN, Rights::ALL, 1024);
            (ep, CqShared::new(4096))
        })
        .collect();
    (net, eps)
}

/// Connects host `a` to host `b` (service `100 + b`); panics when it does not
/// come up within 30 simulated seconds.
pub fn connect(
    net: &mut Network,
    eps: &[(EndpointId, Arc<CqShared>)],
    a: usize,
    b: usize,
    opts: &ConnectOptions,
) -> (End, End) {
    let (ea, ca) = eps[a].clone();
    let (eb, cb) = eps[b].clone();
    let (c, s) = net
        .connect(a, ea, &ca, b, eb, &cb, 100 + b as u32, opts)
        .expect("connection comes up");
    (
        End {
            host: a,
            ep: ea,
            cq: ca,
            conn: c,
        },
        End {
            host: b,
            ep: eb,
            cq: cb,
            conn: s,
        },
    )
}

/// Two hosts, connected, with `opts` on both sides.
pub fn pair(
    cfg: &NodeConfig,
    link: LinkConfig,
    seed: u64,
    opts: &ConnectOptions,
) -> (Network, End, End) {
    let (mut net, eps) = network(2, cfg, link, seed);
    let (a, b) = connect(&mut net, &eps, 0, 1, opts);
    (net, a, b)
}

/// Connection options with a window of 16 registers at absolute 0, r0 usable as an
/// address (post-increment, indirect).
pub fn with_registers() -> ConnectOptions {
    ConnectOptions {
        registers: Registers::Window(RegWindow { base: 0, len: 16 }),
        ..ConnectOptions::default()
    }
}

/// Makes registers `0..n` of host `h` usable by senders in every way.
pub fn open_registers(net: &mut Network, h: usize, n: u32) {
    for r in 0..n {
        net.hosts[h]
            .node
            .set_register_prot(r, RegProt::ALL)
            .unwrap();
    }
}

/// A signaled write of `len` bytes from the local endpoint at `src` to remote `dst`.
pub fn write(id: u64, from: &End, src: u64, len: u32, dst: u32) -> Wqe {
    let mut wr = Wqe::write(
        id,
        Source::Endpoint {
            id: from.ep,
            offset: src,
        },
        len,
        dst,
    );
    wr.flags |= WR_SIGNALED;
    wr
}

/// The same write with an address mode on register `ra`.
pub fn with_mode(mut wr: Wqe, mode: AddrMode, ra: u8) -> Wqe {
    wr.remote.mode_flags = mode.to_flags();
    wr.remote.regs[0] = ra;
    wr
}

/// A signaled fetch-and-add on remote `dst`, the old value to local `result`.
pub fn fetch_add(id: u64, from: &End, result: u64, dst: u32, add: u64) -> Wqe {
    Wqe {
        opcode: WrOpcode::FetchAdd { add },
        source: Source::None,
        len: 8,
        result: Some((from.ep, result)),
        flags: WR_SIGNALED,
        ..Wqe::write(id, Source::None, 8, dst)
    }
}

/// A signaled compare-and-swap.
pub fn cmp_swap(id: u64, from: &End, result: u64, dst: u32, compare: u64, swap: u64) -> Wqe {
    Wqe {
        opcode: WrOpcode::CmpSwap { compare, swap },
        ..fetch_add(id, from, result, dst, 0)
    }
}

/// A signaled read of `len` remote bytes at `src` into local `dst`.
pub fn read(id: u64, from: &End, dst: u64, len: u32, src: u32) -> Wqe {
    Wqe {
        opcode: WrOpcode::Read,
        result: Some((from.ep, dst)),
        len,
        ..fetch_add(id, from, 0, src, 0)
    }
}

/// Posts every request (panics when a queue is full).
pub fn post_all(end: &End, wrs: impl IntoIterator<Item = Wqe>) -> usize {
    let mut n = 0;
    for wr in wrs {
        assert!(sim::post(&end.conn, wr), "queue full at request {n}");
        n += 1;
    }
    n
}

/// Writes `len` bytes from `from`'s endpoint at 0 to the peer's at `dst`, in writes
/// of `chunk`; returns how many were posted.
pub fn stream(from: &End, len: usize, chunk: usize, dst: usize) -> usize {
    post_all(
        from,
        (0..len.div_ceil(chunk)).map(|i| {
            let off = i * chunk;
            let n = chunk.min(len - off);
            write(i as u64, from, off as u64, n as u32, (dst + off) as u32)
        }),
    )
}

/// Runs until `n` completions arrived on `end` (within `limit_s` simulated seconds);
/// returns them.
pub fn complete(net: &mut Network, end: &End, n: usize, limit_s: u64) -> Vec<Completion> {
    let mut got = Vec::new();
    net.run_until(limit_s * HZ, |_| {
        got.extend(sim::drain(&end.cq));
        got.len() >= n
    });
    assert_eq!(got.len(), n, "completions within {limit_s} s: {got:?}");
    got
}

/// Takes the completions that came on the first end of each of `ends` (every one a
/// success), counting them in `got`; whether each has all of its `writes`. (For the
/// `done` of a `Network::run_until` over many streams.)
pub fn count_writes(ends: &[(End, End)], got: &mut [usize], writes: &[usize]) -> bool {
    for (i, (a, _)) in ends.iter().enumerate() {
        for c in sim::drain(&a.cq) {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            got[i] += 1;
        }
    }
    got.iter().zip(writes).all(|(g, w)| g == w)
}

/// What hosts 1..=`senders` sent: retransmissions, timeouts, and the share of the
/// bytes on their lines that was payload (frames with their Ethernet overhead).
pub fn sender_totals(net: &Network, senders: usize) -> (u64, u64, f64) {
    let (mut retx, mut timeouts, mut sent, mut frames, mut payload) = (0, 0, 0, 0, 0);
    for h in 1..=senders {
        let s = net.hosts[h].node.stats();
        retx += s.retransmits;
        timeouts += s.timeouts;
        sent += s.bytes_tx;
        frames += s.frames_tx;
        payload += s.bytes_payload_tx;
    }
    let overhead = deposit_transport::sim::fabric::ETH_OVERHEAD;
    let carried = payload as f64 / (sent + frames * overhead) as f64;
    (retx, timeouts, carried)
}

/// Asserts every completion succeeded.
pub fn all_ok(c: &[Completion]) {
    for x in c {
        assert_eq!(x.status, WcStatus::Success, "{x:?}");
    }
}

/// Fills `len` bytes of host `h`'s endpoint at `off` with a pattern of `seed`.
pub fn pattern(net: &Network, end: &End, off: usize, len: usize, seed: u8) -> Vec<u8> {
    let data: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    net.hosts[end.host].mem(end.ep).write(off, &data).unwrap();
    data
}

/// `len` bytes of host `h`'s endpoint at `off`.
pub fn bytes(net: &Network, end: &End, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    net.hosts[end.host].mem(end.ep).read(off, &mut v).unwrap();
    v
}

/// Asserts `got == want`, naming the first differing byte (not printing megabytes).
pub fn same(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: byte {i} is {} not {} ({} bytes differ)",
            got[i],
            want[i],
            got.iter().zip(want).filter(|(a, b)| a != b).count()
        );
    }
}

/// Whether a connection is still live.
pub fn live(end: &End) -> bool {
    end.conn.state() == ConnState::Normal
}
