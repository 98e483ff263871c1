//! Packet spraying (`CcConfig::paths`, issue 38) over the simulated leaf–spine: one
//! connection between two leaves, four 25 Gb/s spines, one of them degraded to a tenth.
//! Sprayed over a set of source ports, its frames take every spine; the slow one is
//! left out once its frames show its queue, and the three healthy ones carry the flow
//! — while one path (the transport before spraying) carries it through the one spine
//! its port hashes to: a healthy one's rate, or the slow one's.
//! Frames that arrive late from the slower path are reordering, not loss: nothing is
//! retransmitted for it (the receiver sees no duplicate).

mod common;

use common::*;
use deposit_transport::cm::ConnectOptions;
use deposit_transport::connection::WcStatus;
use deposit_transport::node::cc::CcConfig;
use deposit_transport::node::NodeConfig;
use deposit_transport::sim::fabric::ETH_OVERHEAD;
use deposit_transport::sim::{FabricConfig, LinkConfig, LinkSpec, Network, Port, QueueSpec, HZ};
use deposit_transport::tables::Rights;

/// Hosts' links (100 Gb/s) and the spines' (25 Gb/s, four of them), 1 µs of cable each.
const HOST_GBPS: f64 = 100.0;
const SPINE_GBPS: f64 = 25.0;
const SPINES: usize = 4;
const CABLE_NS: u64 = 1_000;
/// The degraded spine's rate: a tenth of the others'.
const SLOW_BPS: u64 = 2_500_000_000;
/// Paths (source ports) a peer's frames are sprayed over.
const PATHS: u8 = 16;
/// What the connection writes.
const LEN: usize = 24 << 20;

/// What one run came to.
struct Run {
    /// Goodput, Gb/s of payload, from the posts to the last completion.
    gbps: f64,
    net: Network,
    /// Frames each spine carried up from the sender's leaf.
    per_spine: Vec<u64>,
}

fn run(paths: u8, slow: Option<usize>) -> Run {
    let fab = FabricConfig::leaf_spine(
        2,
        SPINES,
        LinkSpec::gbps(HOST_GBPS, CABLE_NS),
        LinkSpec::gbps(SPINE_GBPS, CABLE_NS),
        QueueSpec::new(256 << 10, 32 << 10),
    );
    let cfg = NodeConfig {
        cc: CcConfig {
            paths,
            ..CcConfig::default()
        },
        ..NodeConfig::default()
    };
    let mut net = Network::with_fabric(2, &cfg, LinkConfig::default(), &fab, 1);
    if let Some(s) = slow {
        net.fabric_mut()
            .expect("a fabric")
            .set_spine_rate(s, SLOW_BPS);
    }
    let eps: Vec<_> = (0..2)
        .map(|h| {
            let ep = net.hosts[h].endpoint(LEN, Rights::ALL, 1024);
            (ep, deposit_transport::connection::CqShared::new(4096))
        })
        .collect();
    let (a, _) = connect(&mut net, &eps, 0, 1, &ConnectOptions::default());
    net.run_for(1_000_000);
    let want = pattern(&net, &a, 0, LEN, 7);
    let t0 = net.now;
    let n = stream(&a, LEN, 64 << 10, 0);
    let mut got = 0;
    let done = net.run_until(10 * HZ, |_| {
        for c in deposit_transport::sim::drain(&a.cq) {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            got += 1;
        }
        got == n
    });
    assert!(done, "{got} of {n} completions");
    let elapsed = net.now - t0;
    let mut v = vec![0; LEN];
    net.hosts[1].mem(eps[1].0).read(0, &mut v).unwrap();
    same(&v, &want, "the sprayed stream");
    let st = net.fabric_stats();
    let per_spine = (0..SPINES)
        .map(|spine| st.port(Port::Up { leaf: 0, spine }).frames)
        .collect();
    Run {
        gbps: LEN as f64 * 8.0 / elapsed as f64,
        net,
        per_spine,
    }
}

/// Which spine one path's connection hashes to (the spine that carried its frames).
fn single_spine(r: &Run) -> usize {
    let busiest = (0..SPINES).max_by_key(|&s| r.per_spine[s]).unwrap();
    assert!(
        r.per_spine
            .iter()
            .enumerate()
            .all(|(s, &f)| s == busiest || f < r.per_spine[busiest] / 100),
        "one path keeps to one spine: {:?}",
        r.per_spine
    );
    busiest
}

#[test]
fn a_sprayed_flow_leaves_a_slow_spine_out_and_fills_the_three_healthy_ones() {
    // The control: on one path, the connection gets the one spine it hashes to.
    let one = run(1, None);
    let spine = single_spine(&one);
    assert!(
        one.gbps < SPINE_GBPS,
        "one path cannot beat one spine: {:.2} Gb/s",
        one.gbps
    );
    // Degrade a spine that is not the single path's, so that the comparison below is
    // with a healthy single path (the best case for it).
    let slow = (spine + 1) % SPINES;
    let sprayed = run(PATHS, Some(slow));
    // And one path whose spine is the slow one: a tenth.
    let unlucky = run(1, Some(spine));
    assert!(
        unlucky.gbps < SLOW_BPS as f64 / 1e9,
        "{:.2} Gb/s",
        unlucky.gbps
    );
    let s0 = sprayed.net.hosts[0].node.stats();
    let s1 = sprayed.net.hosts[1].node.stats();
    let st = sprayed.net.fabric_stats();
    let peer = sprayed.net.hosts[0].node.peer_summaries().remove(0);
    eprintln!(
        "one path: {:.2} Gb/s over spine {spine} ({:?} frames per spine); sprayed over {PATHS} \
         paths, spine {slow} at 2.5 Gb/s: {:.2} Gb/s ({:?} frames per spine); retransmitted \
         {} messages, {} duplicates at the receiver, {} reordered, {} lost by time, {} \
         timeouts; fabric drops {}, marks {}; paths (frames, exclusions, srtt ns) {:?}",
        one.gbps,
        one.per_spine,
        sprayed.gbps,
        sprayed.per_spine,
        s0.retransmits,
        s1.duplicates,
        s1.reordered,
        s0.lost_by_time,
        s0.timeouts,
        st.drops(),
        st.marks(),
        peer.paths
            .iter()
            .map(|p| (p.counters.frames, p.counters.exclusions, p.srtt_ns))
            .collect::<Vec<_>>(),
    );
    // What the three healthy spines carry of payload (the rest of a frame's wire bytes
    // are its headers and Ethernet's overhead, as the sender sent them).
    let carried = s0.bytes_payload_tx as f64 / (s0.bytes_tx + s0.frames_tx * ETH_OVERHEAD) as f64;
    let healthy = SPINE_GBPS * (SPINES - 1) as f64 * carried;
    eprintln!(
        "sprayed goodput {:.3} of the {healthy:.2} Gb/s of payload the three healthy spines \
         carry; one path {:.3} of one spine's; one path on the slow spine {:.2} Gb/s",
        sprayed.gbps / healthy,
        one.gbps / (healthy / 3.0),
        unlucky.gbps
    );
    assert!(
        sprayed.gbps >= 0.9 * healthy,
        "sprayed: {:.2} Gb/s, under 0.9 of the {healthy:.2} the three healthy spines carry",
        sprayed.gbps
    );
    assert!(
        sprayed.gbps > 2.0 * one.gbps,
        "sprayed {:.2} against one path's {:.2}",
        sprayed.gbps,
        one.gbps
    );
    // Every spine was tried; the slow one carried little.
    assert!(
        sprayed.per_spine.iter().all(|&f| f > 0),
        "{:?}",
        sprayed.per_spine
    );
    let total: u64 = sprayed.per_spine.iter().sum();
    assert!(
        sprayed.per_spine[slow] * 100 < total * 3,
        "the slow spine carried {} of {total} frames",
        sprayed.per_spine[slow]
    );
    // Reordering is not loss: no message arrived twice (no spurious retransmission),
    // and no timer fired.
    assert!(
        s1.reordered > 0,
        "the paths reordered nothing: the test shows nothing"
    );
    assert_eq!(s1.duplicates, 0, "spurious retransmissions");
    assert_eq!(s0.timeouts, 0);
}
