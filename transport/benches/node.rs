//! What one message costs a worker, with no I/O: two sans-IO nodes (one shard each)
//! handing frames to each other directly, one connection, writes posted in windows,
//! on a plain connection and on a secure one (`crate::secure`: every section sealed and
//! opened). `cargo bench -p deposit-transport --bench node [-- MESSAGES]`.
//!
//! Prints, per message, the nanoseconds the sender's node spent (posting taken in,
//! frames built, acknowledgements handled) and the receiver's (frames validated,
//! writes deposited, acknowledgements built): the protocol's share of a worker turn,
//! which a shard pays per message on top of the port's bursts. Frames here are byte
//! vectors (an allocation each, which the DPDK driver does not pay), so these are
//! upper bounds. Best of 5 runs (the machine is shared and noisy). With
//! `NODE_BENCH_NO_CC=1` the nodes run without congestion control (`NodeConfig::cc`),
//! for the cost of the per-peer window and pace.

use std::sync::Arc;
use std::time::{Duration, Instant};

use deposit_transport::cm::{ConnectOptions, PeerTrust, Security};
use deposit_transport::connection::{CqShared, Source, Wqe, WR_SIGNALED};
use deposit_transport::node::{Node, NodeConfig};
use deposit_transport::sim::{self, LinkConfig, Network};
use deposit_transport::tables::Rights;

/// Frames from `from`'s link queue into `to`, with the time spent in `to`.
fn carry(net: &mut Network, from: usize, to: usize, now: u64) -> (usize, u64) {
    let (a, b) = if from < to {
        let (x, y) = net.hosts.split_at_mut(to);
        (&mut x[from], &mut y[0])
    } else {
        let (x, y) = net.hosts.split_at_mut(from);
        (&mut y[0], &mut x[to])
    };
    let mut n = 0;
    let t = ticks();
    while let Some(f) = a.out.pop() {
        b.node.handle_frame(&f, now);
        n += 1;
    }
    (n, ticks() - t)
}

/// The time-stamp counter: a clock read costs ~25 ns on this VM (kvm-clock through the
/// vDSO), as much as the protocol's share of a small message, so the spans measured
/// here are read from the TSC and converted once (see [`tick_ns`]).
#[cfg(target_arch = "x86_64")]
fn ticks() -> u64 {
    // SAFETY: RDTSC has no preconditions on x86-64.
    unsafe { std::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn ticks() -> u64 {
    use std::sync::OnceLock;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Nanoseconds per [`ticks`] unit, measured against the OS clock over 100 ms.
fn tick_ns() -> f64 {
    let (t0, c0) = (Instant::now(), ticks());
    std::thread::sleep(Duration::from_millis(100));
    let (t1, c1) = (Instant::now(), ticks());
    (t1 - t0).as_nanos() as f64 / (c1 - c0).max(1) as f64
}

/// Time of one `poll_transmit` of host `h` (frames into its link queue).
fn transmit(net: &mut Network, h: usize, now: u64) -> u64 {
    let host = &mut net.hosts[h];
    let t = ticks();
    let node: &mut Node = &mut host.node;
    node.handle_timeout(now);
    node.poll_transmit(now, &mut host.out);
    ticks() - t
}

/// One measurement: `messages` writes of `size` bytes with at most `window`
/// outstanding, every `signal_every`-th signaled, on a plain or a secure connection.
#[derive(Clone, Copy)]
struct Case {
    messages: u64,
    size: u32,
    window: u64,
    signal_every: u64,
    secure: bool,
}

/// Best of 5 runs of `case`: (sender ns, receiver ns per message, messages per frame);
/// `ns` converts ticks.
fn run(case: Case, ns: f64) -> (f64, f64, f64) {
    let Case {
        messages,
        size,
        window,
        signal_every,
        secure,
    } = case;
    let cfg = NodeConfig {
        cc: deposit_transport::node::cc::CcConfig {
            enabled: std::env::var_os("NODE_BENCH_NO_CC").is_none(),
            ..Default::default()
        },
        ..NodeConfig::default()
    };
    let opts = ConnectOptions {
        secure: if secure { Security::On } else { Security::Off },
        peer_key: PeerTrust::FirstUse,
        ..ConnectOptions::default()
    };
    let (mut best_tx, mut best_rx, mut best_msgs_per_frame) = (f64::MAX, f64::MAX, 0.0);
    for _ in 0..5 {
        let mut net = Network::new(2, &cfg, LinkConfig::default(), 1);
        let cep = net.hosts[0].endpoint(1 << 16, Rights::NONE, 16);
        let sep = net.hosts[1].endpoint(1 << 16, Rights::REMOTE_WRITE, 16);
        let ccq: Arc<CqShared> = CqShared::new(8192);
        let scq: Arc<CqShared> = CqShared::new(64);
        let (c, _s) = net
            .connect(0, cep, &ccq, 1, sep, &scq, 1, &opts)
            .expect("connected");
        let mut now = net.now;
        let (mut tx_ns, mut rx_ns, mut frames) = (0u64, 0u64, 0usize);
        let (mut posted, mut done) = (0u64, 0u64);
        while done < messages {
            while posted < messages && posted - done < window {
                let mut wr = Wqe::write(posted, Source::Endpoint { id: cep, offset: 0 }, size, 0);
                if posted % signal_every == signal_every - 1 || posted + 1 == messages {
                    wr.flags |= WR_SIGNALED;
                }
                if !sim::post(&c, wr) {
                    break;
                }
                posted += 1;
            }
            now += 1_000; // a microsecond a round: timers stay far
            tx_ns += transmit(&mut net, 0, now);
            let (f, t) = carry(&mut net, 0, 1, now);
            frames += f;
            rx_ns += t;
            rx_ns += transmit(&mut net, 1, now);
            let (_, t) = carry(&mut net, 1, 0, now);
            tx_ns += t;
            for wc in sim::drain(&ccq) {
                assert!(wc.status.is_ok(), "{wc:?}");
                done = wc.wr_id + 1;
            }
        }
        best_tx = best_tx.min(tx_ns as f64 * ns / messages as f64);
        best_rx = best_rx.min(rx_ns as f64 * ns / messages as f64);
        best_msgs_per_frame = messages as f64 / frames.max(1) as f64;
    }
    (best_tx, best_rx, best_msgs_per_frame)
}

/// CPU time of one connect, both sides together (the handshake's key agreements, the
/// CM messages, the connection entries), with no I/O: best of 5 runs of `n` connects
/// between two nodes, in microseconds.
fn connect_cost(opts: &ConnectOptions, pin: bool, n: u32) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let mut net = Network::new(2, &NodeConfig::default(), LinkConfig::default(), 1);
        let cep = net.hosts[0].endpoint(4096, Rights::NONE, 16);
        let sep = net.hosts[1].endpoint(4096, Rights::REMOTE_WRITE, 16);
        let ccq: Arc<CqShared> = CqShared::new(64);
        let scq: Arc<CqShared> = CqShared::new(64);
        let mut opts = opts.clone();
        if pin {
            opts.peer_key = PeerTrust::Pinned(net.hosts[1].node.identity());
        }
        let t = Instant::now();
        let mut kept = Vec::new();
        for _ in 0..n {
            kept.push(
                net.connect(0, cep, &ccq, 1, sep, &scq, 1, &opts)
                    .expect("connected"),
            );
        }
        best = best.min(t.elapsed().as_secs_f64() * 1e6 / f64::from(n));
    }
    best
}

fn main() {
    let messages: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let ns = tick_ns();
    let pings = messages / 10;
    let cases = [
        (
            "32 B writes, windows of 1024, one in 64 signaled",
            messages,
            32,
            1024,
            64,
        ),
        // One write at a time, each signaled: every frame carries one message and the
        // acknowledgement comes back alone (no reply to ride on), so this is the
        // protocol's fixed cost per frame, the part of a latency test's hop that is the
        // node's.
        ("one 32 B write at a time, each signaled", pings, 32, 1, 1),
        (
            "4 KiB writes, windows of 64, one in 16 signaled",
            pings,
            4096,
            64,
            16,
        ),
    ];
    println!("ns per message, one connection, best of 5 (plain and secure alternating):");
    println!(
        "{:<50} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "", "plain tx", "plain rx", "secure tx", "secure rx", "msgs/fr"
    );
    for (label, messages, size, window, signal_every) in cases {
        let case = |secure| Case {
            messages,
            size,
            window,
            signal_every,
            secure,
        };
        let (ptx, prx, per_frame) = run(case(false), ns);
        let (stx, srx, _) = run(case(true), ns);
        println!("{label:<50} {ptx:>9.1} {prx:>9.1} {stx:>9.1} {srx:>9.1} {per_frame:>7.1}");
    }
    println!("us of CPU per connect, both sides, no I/O (Noise IK handshake), best of 5:");
    let plain = ConnectOptions::default();
    let sealed = ConnectOptions {
        secure: Security::On,
        ..ConnectOptions::default()
    };
    let psk = ConnectOptions {
        secure: Security::Psk([7; 32]),
        ..ConnectOptions::default()
    };
    for (label, opts, pin) in [
        ("plain, listener key unverified", &plain, false),
        ("plain, listener key pinned", &plain, true),
        ("secure, listener key pinned", &sealed, true),
        ("secure + pre-shared key, listener key pinned", &psk, true),
    ] {
        println!("{label:<50} {:>9.1}", connect_cost(opts, pin, 200));
    }
}
