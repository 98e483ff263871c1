//! What one message costs a worker, with no I/O: two sans-IO nodes (one shard each)
//! handing frames to each other directly, one connection, 32 B writes posted in
//! windows. `cargo bench -p deposit-transport --bench node [-- MESSAGES]`.
//!
//! Prints, per message, the nanoseconds the sender's node spent (posting taken in,
//! frames built, acknowledgements handled) and the receiver's (frames validated,
//! writes deposited, acknowledgements built): the protocol's share of a worker turn,
//! which a shard pays per message on top of the port's bursts. Frames here are byte
//! vectors (an allocation each, which the DPDK driver does not pay), so these are
//! upper bounds. Best of 5 runs (the machine is shared and noisy).

use std::sync::Arc;
use std::time::{Duration, Instant};

use deposit_transport::cm::ConnectOptions;
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

/// Best of 5 runs of `messages` 32 B writes with at most `window` outstanding, every
/// `signal_every`-th signaled: (sender ns, receiver ns per message, messages per frame);
/// `ns` converts ticks.
fn run(messages: u64, window: u64, signal_every: u64, ns: f64) -> (f64, f64, f64) {
    let cfg = NodeConfig::default();
    let (mut best_tx, mut best_rx, mut best_msgs_per_frame) = (f64::MAX, f64::MAX, 0.0);
    for _ in 0..5 {
        let mut net = Network::new(2, &cfg, LinkConfig::default(), 1);
        let cep = net.hosts[0].endpoint(1 << 16, Rights::NONE, 16);
        let sep = net.hosts[1].endpoint(1 << 16, Rights::REMOTE_WRITE, 16);
        let ccq: Arc<CqShared> = CqShared::new(8192);
        let scq: Arc<CqShared> = CqShared::new(64);
        let (c, _s) = net
            .connect(0, cep, &ccq, 1, sep, &scq, 1, &ConnectOptions::default())
            .expect("connected");
        let mut now = net.now;
        let (mut tx_ns, mut rx_ns, mut frames) = (0u64, 0u64, 0usize);
        let (mut posted, mut done) = (0u64, 0u64);
        while done < messages {
            while posted < messages && posted - done < window {
                let mut wr = Wqe::write(posted, Source::Endpoint { id: cep, offset: 0 }, 32, 0);
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

fn main() {
    let messages: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let ns = tick_ns();
    let (tx, rx, per_frame) = run(messages, 1024, 64, ns);
    println!("per 32 B write, one connection, {messages} messages, best of 5:");
    println!("  sender node    {tx:>6.1} ns/message");
    println!("  receiver node  {rx:>6.1} ns/message");
    println!("  messages per data frame {per_frame:.1} (cell trains)");
    // One write at a time, each signaled: every frame carries one message and the
    // acknowledgement comes back alone (no reply to ride on), so this is the protocol's
    // fixed cost per frame, the part of a latency test's hop that is the node's.
    let pings = messages / 10;
    let (tx, rx, _) = run(pings, 1, 1, ns);
    println!("one write at a time, each signaled, {pings} messages, best of 5:");
    println!("  sender node    {tx:>6.1} ns/message");
    println!("  receiver node  {rx:>6.1} ns/message");
}
