//! The receiver's hold (`wire::op::HOLD`, issue 38): a receiver whose turns are busy
//! holds its acknowledgements (here each of its turns works 0–60 µs, uniformly, before
//! its frames leave — three times the fabric's 17 µs round trip), says so on them, and
//! the senders take the hold off their round-trip samples: congestion control does
//! not read a busy receiver as a queue in the network. The same runs with the hold
//! not taken off (`CcConfig::subtract_hold` off) show what it prevents: an 8:1
//! incast through an ECN switch loses a quarter of its goodput to decreases for a
//! queue that is not there, and a stream that trusts delay alone
//! (`CcConfig::delay_decrease`, for paths that only drop) collapses.

mod common;

use common::*;
use deposit_transport::cm::ConnectOptions;
use deposit_transport::node::cc::CcConfig;
use deposit_transport::node::{NodeConfig, PeerSummary};
use deposit_transport::sim::{FabricConfig, LinkConfig, LinkSpec, Network, Port, QueueSpec, HZ};
use deposit_transport::tables::Rights;

const GBPS: f64 = 25.0;
const CABLE_NS: u64 = 4_000;
const BUFFER: u64 = 256 << 10;
const ECN_AT: u64 = 32 << 10;
/// The target delay (the default) and what the line carries in it.
const TARGET_NS: u64 = 10_000;
const TARGET_BYTES: u64 = (GBPS as u64) * TARGET_NS / 8;
/// How long the receiver's turns work before their frames leave, ns.
const HOLD: (u64, u64) = (0, 60_000);
/// Each sender's stream.
const LEN: usize = 8 << 20;

/// What one run came to.
#[derive(Debug)]
struct Run {
    /// Goodput, Gb/s, and the share of the line's bytes that was payload.
    gbps: f64,
    carried: f64,
    /// Sender 1's view of the receiver.
    peer: PeerSummary,
    /// Fabric drops, and the receiver's port's queue (99th percentile, bytes).
    drops: u64,
    queue_p99: u64,
    /// The senders' retransmissions and timeouts.
    retransmits: u64,
    timeouts: u64,
    /// Acknowledgements the receiver sent, and of those, with a hold.
    acks: u64,
    acks_held: u64,
}

/// `senders` hosts stream [`LEN`] bytes each to host 0 (64 KiB writes, every byte
/// verified), whose turns each work between `hold.0` and `hold.1` ns before their
/// frames leave; the senders take the receiver's hold off or not (`subtract`), and
/// decrease on delay alone or not (`delay`).
fn run(senders: usize, hold: (u64, u64), subtract: bool, delay: bool) -> Run {
    let fab = FabricConfig::switch(
        LinkSpec::gbps(GBPS, CABLE_NS),
        QueueSpec::new(BUFFER, ECN_AT),
    );
    let n = senders + 1;
    let cfg = NodeConfig {
        max_connections: n + 16,
        cc: CcConfig {
            subtract_hold: subtract,
            delay_decrease: delay,
            ..CcConfig::default()
        },
        ..NodeConfig::default()
    };
    let mut net = Network::with_fabric(n, &cfg, LinkConfig::default(), &fab, 3);
    let eps: Vec<_> = (0..n)
        .map(|h| {
            let l = if h == 0 { senders * LEN } else { LEN };
            let ep = net.hosts[h].endpoint(l, Rights::ALL, 1024);
            (ep, deposit_transport::connection::CqShared::new(4096))
        })
        .collect();
    let ends: Vec<(End, End)> = (1..=senders)
        .map(|s| connect(&mut net, &eps, s, 0, &ConnectOptions::default()))
        .collect();
    net.run_for(1_000_000);
    net.hosts[0].turn_ns = hold;
    let want: Vec<Vec<u8>> = ends
        .iter()
        .map(|(a, _)| pattern(&net, a, 0, LEN, a.host as u8))
        .collect();
    let t0 = net.now;
    let writes: Vec<usize> = ends
        .iter()
        .map(|(a, _)| stream(a, LEN, 64 << 10, (a.host - 1) * LEN))
        .collect();
    let mut got = vec![0; senders];
    let done = net.run_until(10 * HZ, |_| count_writes(&ends, &mut got, &writes));
    assert!(done, "completions {got:?} of {writes:?}");
    let elapsed = net.now - t0;
    for (i, w) in want.iter().enumerate() {
        let mut v = vec![0; LEN];
        net.hosts[0].mem(eps[0].0).read(i * LEN, &mut v).unwrap();
        same(&v, w, &format!("sender {}", i + 1));
    }
    let st = net.fabric_stats();
    let (retransmits, timeouts, carried) = sender_totals(&net, senders);
    let rx = net.hosts[0].node.stats();
    let r = Run {
        gbps: (senders * LEN) as f64 * 8.0 / elapsed as f64,
        carried,
        peer: net.hosts[1].node.peer_summaries().remove(0),
        drops: st.drops(),
        queue_p99: st.port(Port::ToHost(0)).depth_percentile(99.0),
        retransmits,
        timeouts,
        acks: rx.acks_tx,
        acks_held: rx.acks_held,
    };
    eprintln!(
        "{senders} sender(s), receiver's turns {:?} us, hold {}, delay decrease {delay}: \
         {:.2} Gb/s; sender 1 sees base {:.1} us, smoothed {:.1} us, hold {:.1} us, window {} B, \
         {} decreases, {} quick adapts, {} marks; queue p99 {} B; drops {}, retransmits {}, \
         timeouts {}; {} of {} acknowledgements held",
        (hold.0 / 1000, hold.1 / 1000),
        if subtract { "taken off" } else { "kept" },
        r.gbps,
        r.peer.base_rtt_ns as f64 / 1e3,
        r.peer.srtt_ns as f64 / 1e3,
        r.peer.hold_ns as f64 / 1e3,
        r.peer.window,
        r.peer.counters.decreases,
        r.peer.counters.quick_adapts,
        r.peer.counters.marks,
        r.queue_p99,
        r.drops,
        r.retransmits,
        r.timeouts,
        r.acks_held,
        r.acks,
    );
    r
}

/// The fabric's round trip for a full frame and its acknowledgement, idle: four
/// cables and the serialisations (17.1 µs; `base_rtt_ns` without a hold).
const BASE_NS: u64 = 17_185;

#[test]
fn an_incast_into_a_receiver_that_holds_its_acknowledgements_still_fills_the_port() {
    const SENDERS: usize = 8;
    let idle = run(SENDERS, (0, 0), true, false);
    assert_eq!(idle.peer.base_rtt_ns, BASE_NS, "{idle:?}");
    // Turns that do not work hold nothing: only acknowledgements that acknowledge
    // nothing new (a new credit to a connection idle since its last frame) carry a
    // hold, which their sender, with no sample, ignores.
    assert!(
        idle.acks_held * 1000 < idle.acks,
        "{} of {} held",
        idle.acks_held,
        idle.acks
    );
    let held = run(SENDERS, HOLD, true, false);
    let kept = run(SENDERS, HOLD, false, false);
    // The receiver said how long it held (most of its acknowledgements: a turn's
    // frames leave up to 60 µs later, and in order), and the sender took it off: the
    // base it sees is the fabric's, not the fabric's and a hold.
    assert!(
        held.acks_held * 2 > held.acks,
        "{} of {} held",
        held.acks_held,
        held.acks
    );
    assert!(held.peer.hold_ns > 20_000, "{:?}", held.peer);
    assert!(
        held.peer.base_rtt_ns <= BASE_NS + 1_000,
        "base {} ns with the hold taken off",
        held.peer.base_rtt_ns
    );
    assert!(
        kept.peer.base_rtt_ns > BASE_NS + 10_000,
        "base {} ns with the hold kept",
        kept.peer.base_rtt_ns
    );
    // The port stays full (within 5 % of what the line carries of payload), its queue
    // near the target, and nothing is lost or sent twice.
    let line = GBPS * held.carried;
    assert!(
        held.gbps >= 0.95 * line,
        "{:.2} of {line:.2} Gb/s",
        held.gbps
    );
    assert!(
        held.queue_p99 <= 2 * TARGET_BYTES,
        "queue p99 {} B, target {TARGET_BYTES} B",
        held.queue_p99
    );
    assert_eq!((held.drops, held.timeouts, held.retransmits), (0, 0, 0));
    // Kept, the hold reads as a queue above the target: every mark decreases, and
    // the port is left idle (seed 3: 17.2 Gb/s against 22.8).
    assert!(
        kept.gbps < 0.85 * held.gbps,
        "kept {:.2} Gb/s, taken off {:.2} Gb/s",
        kept.gbps,
        held.gbps
    );
}

#[test]
fn a_stream_that_decreases_on_delay_alone_is_not_slowed_by_a_receiver_that_holds() {
    let held = run(1, HOLD, true, true);
    let kept = run(1, HOLD, false, true);
    let line = GBPS * held.carried;
    assert!(
        held.gbps >= 0.9 * line,
        "{:.2} of {line:.2} Gb/s",
        held.gbps
    );
    assert_eq!(held.peer.counters.decreases, 0, "{:?}", held.peer);
    assert_eq!((held.drops, held.timeouts, held.retransmits), (0, 0, 0));
    // Kept, 60 µs of hold is four targets and more of "queue": the window collapses
    // (seed 3: 0.57 Gb/s, 637 decreases).
    assert!(
        kept.gbps < 0.25 * held.gbps,
        "kept {:.2} Gb/s, taken off {:.2} Gb/s",
        kept.gbps,
        held.gbps
    );
}
