//! Real nodes over the simulated switch fabric (`sim::fabric`, issue 38): a frame
//! takes its hops' propagation and serialisation and a flow gets its link's rate; an
//! incast fills a switch port, which drops, and retransmission recovers every byte;
//! ECN-capable frames are marked only above the threshold and the receiver takes the
//! marked frames; ECMP spreads connections over the spines, one path each, and a
//! slowed spine slows its flows; broadcasts reach every host; a seed names a run.

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use common::*;
use deposit_transport::cm::ConnectOptions;
use deposit_transport::connection::CqShared;
use deposit_transport::neigh::NeighConfig;
use deposit_transport::node::cc::CcConfig;
use deposit_transport::node::NodeConfig;
use deposit_transport::sim::fabric::{ecn, set_ecn, FlowKey, FlowStats, CE, ECT0};
use deposit_transport::sim::{
    FabricConfig, FabricStats, LinkConfig, LinkSpec, Network, Port, QueueSpec, HZ,
};
use deposit_transport::tables::{EndpointId, Rights};
use deposit_transport::wire::{UnderlayPacket, UDP_PORT};

/// `n` hosts on `fab`, each with an endpoint of `ep_len` bytes and a completion
/// queue.
fn fabric_network(
    n: usize,
    fab: &FabricConfig,
    seed: u64,
    ep_len: usize,
) -> (Network, Vec<(EndpointId, Arc<CqShared>)>) {
    fabric_network_ecn(n, fab, seed, ep_len, true)
}

/// [`fabric_network`] with the nodes' data frames ECN-capable or not
/// (`NodeConfig::ecn`). These are tests of the fabric: the nodes' congestion control
/// is off, so that queues fill, drop and mark (its own tests are in `sim_cc.rs`).
fn fabric_network_ecn(
    n: usize,
    fab: &FabricConfig,
    seed: u64,
    ep_len: usize,
    ecn: bool,
) -> (Network, Vec<(EndpointId, Arc<CqShared>)>) {
    let cfg = NodeConfig {
        max_connections: 64,
        ecn,
        cc: CcConfig {
            enabled: false,
            ..CcConfig::default()
        },
        ..NodeConfig::default()
    };
    let mut net = Network::with_fabric(n, &cfg, LinkConfig::default(), fab, seed);
    let eps = (0..n)
        .map(|i| {
            let ep = net.hosts[i].endpoint(ep_len, Rights::ALL, 1024);
            (ep, CqShared::new(4096))
        })
        .collect();
    (net, eps)
}

/// Runs until every sender got `writes` completions, all successful; returns when
/// each finished (ns after the call). Senders on one host share its completion
/// queue: a completion names its connection.
fn finish(net: &mut Network, senders: &[End], writes: usize, limit_s: u64) -> Vec<u64> {
    let t0 = net.now;
    let mut got = vec![0; senders.len()];
    let mut at = vec![0; senders.len()];
    let mut bad = Vec::new();
    let ok = net.run_until(limit_s * HZ, |net| {
        for (i, s) in senders.iter().enumerate() {
            if senders[..i].iter().any(|o| Arc::ptr_eq(&o.cq, &s.cq)) {
                continue;
            }
            for c in deposit_transport::sim::drain(&s.cq) {
                if c.status != deposit_transport::connection::WcStatus::Success {
                    bad.push(c);
                }
                let j = senders
                    .iter()
                    .position(|o| o.host == s.host && o.conn.number == c.conn)
                    .expect("a sender's connection");
                got[j] += 1;
                if got[j] == writes {
                    at[j] = net.now - t0;
                }
            }
        }
        got.iter().all(|&g| g == writes)
    });
    assert!(ok && bad.is_empty(), "completions {got:?}, failed {bad:?}");
    at
}

/// The data flows of a run: every flow from a connection's UDP source port (not the
/// connection manager's).
fn data_flows(st: &FabricStats) -> Vec<(&FlowKey, &FlowStats)> {
    st.flows
        .iter()
        .filter(|(k, _)| k.src_port != UDP_PORT)
        .collect()
}

/// Nanoseconds a frame of `len` bytes takes to send at `gbps` gigabits per second,
/// rounded up: its bytes plus 24 of preamble, FCS and gap, 8 bits each.
fn ser_ns(len: usize, gbps: u64) -> u64 {
    ((len as u64 + 24) * 8).div_ceil(gbps)
}

/// Every frame's (arrival time, from, to, bytes) as it reaches a host.
type Arrivals = Rc<RefCell<Vec<(u64, usize, usize, Vec<u8>)>>>;

/// Records every frame that reaches a host from now on.
fn tap(net: &mut Network) -> Arrivals {
    let seen: Arrivals = Rc::default();
    let s = seen.clone();
    net.fabric_mut()
        .unwrap()
        .set_tap(Some(Box::new(move |t, from, to, f: &[u8]| {
            s.borrow_mut().push((t, from, to, f.to_vec()))
        })));
    seen
}

/// 10 Gb/s hosts (1 µs of cable) under two leaves and one 100 Gb/s spine (500 ns).
fn two_leaves() -> FabricConfig {
    FabricConfig::leaf_spine(
        2,
        1,
        LinkSpec::gbps(10.0, 1_000),
        LinkSpec::gbps(100.0, 500),
        QueueSpec::tail_drop(4 << 20),
    )
}

#[test]
fn a_frame_takes_each_hops_serialisation_and_propagation() {
    let (mut net, eps) = fabric_network(2, &two_leaves(), 1, 1 << 20);
    let (a, _b) = connect(&mut net, &eps, 0, 1, &ConnectOptions::default());
    net.run_for(1_000_000);
    let seen = tap(&mut net);
    pattern(&net, &a, 0, 1000, 1);
    let t0 = net.now;
    post_all(&a, [write(1, &a, 0, 1000, 0)]);
    all_ok(&complete(&mut net, &a, 1, 1));
    let seen = seen.borrow();
    let (t, _, _, frame) = seen
        .iter()
        .find(|(_, from, _, f)| *from == 0 && f.len() > 1000)
        .expect("the write's frame");
    let len = frame.len();
    // host 0 -> leaf 0 -> spine -> leaf 1 -> host 1, stored and forwarded at each.
    let want = 2 * (ser_ns(len, 10) + 1_000) + 2 * (ser_ns(len, 100) + 500);
    assert_eq!(t - t0, want, "a {len}-byte frame on an idle path");
    let fabric = net.fabric().unwrap();
    assert_eq!(fabric.idle_delay_ns(0, 1, frame), want);
    let key = FlowKey {
        from: 0,
        to: 1,
        src_port: UnderlayPacket::new_unchecked(&frame[..]).src_port(),
    };
    assert_eq!(fabric.stats().flows[&key].max_delay_ns, want);
}

#[test]
fn one_flow_gets_its_host_links_rate_less_the_overheads() {
    const LEN: usize = 4 << 20;
    let (mut net, eps) = fabric_network(2, &two_leaves(), 2, LEN);
    let (a, b) = connect(&mut net, &eps, 0, 1, &ConnectOptions::default());
    net.run_for(1_000_000);
    let want = pattern(&net, &a, 0, LEN, 2);
    let before = net.hosts[0].node.stats();
    let n = stream(&a, LEN, 64 << 10, 0);
    let took = finish(&mut net, std::slice::from_ref(&a), n, 5)[0];
    same(&bytes(&net, &b, 0, LEN), &want, "streamed");
    let s = net.hosts[0].node.stats();
    let (frames, sent, payload) = (
        s.frames_tx - before.frames_tx,
        s.bytes_tx - before.bytes_tx,
        s.bytes_payload_tx - before.bytes_payload_tx,
    );
    assert_eq!(s.retransmits, before.retransmits, "nothing lost");
    // What 10 Gb/s carries of payload once every frame's headers and 24 bytes of
    // preamble, FCS and gap are paid.
    let line = 10e9 * payload as f64 / (sent + 24 * frames) as f64;
    let goodput = LEN as f64 * 8.0 / (took as f64 / 1e9);
    assert!(
        goodput <= line && goodput > 0.97 * line,
        "{:.3} Gb/s of the {:.3} the link carries",
        goodput / 1e9,
        line / 1e9
    );
    // The window waited in the sender's NIC, not in the switch: the spine and the
    // leaves' ports (faster or as fast) held a frame or two.
    let st = net.fabric_stats();
    assert!(st.port(Port::Nic(0)).max_depth > 256 << 10);
    assert!(st.port(Port::ToHost(1)).max_depth <= 2 * 1514);
    assert!(st.port(Port::Up { leaf: 0, spine: 0 }).max_depth <= 1514);
    assert_eq!(st.drops(), 0);
}

/// Host 0 receives, hosts 1..=`senders` each stream `len` bytes to it (at their own
/// offset) on a switch of `queue` at 10 Gb/s (frames made ECN-capable when `ect`);
/// returns the network and the senders' ends once every write completed, the data
/// verified.
fn incast(senders: usize, len: usize, queue: QueueSpec, ect: bool) -> (Network, Vec<End>) {
    incast_ecn(senders, len, queue, ect, true)
}

/// [`incast`] with the nodes' own ECN (`NodeConfig::ecn`) on or off.
fn incast_ecn(
    senders: usize,
    len: usize,
    queue: QueueSpec,
    ect: bool,
    ecn: bool,
) -> (Network, Vec<End>) {
    let mut fab = FabricConfig::switch(LinkSpec::gbps(10.0, 1_000), queue);
    fab.make_ect = ect;
    let (mut net, eps) = fabric_network_ecn(senders + 1, &fab, 3, senders * len, ecn);
    let ends: Vec<(End, End)> = (1..=senders)
        .map(|s| connect(&mut net, &eps, s, 0, &ConnectOptions::default()))
        .collect();
    net.run_for(1_000_000);
    let want: Vec<Vec<u8>> = ends
        .iter()
        .map(|(a, _)| pattern(&net, a, 0, len, a.host as u8))
        .collect();
    let n: Vec<usize> = ends
        .iter()
        .map(|(a, _)| stream(a, len, 32 << 10, (a.host - 1) * len))
        .collect();
    let senders: Vec<End> = ends.into_iter().map(|(a, _)| a).collect();
    finish(&mut net, &senders, n[0], 10);
    for (i, (s, w)) in senders.iter().zip(&want).enumerate() {
        let got = {
            let mut v = vec![0; len];
            net.hosts[0].mem(eps[0].0).read(i * len, &mut v).unwrap();
            v
        };
        same(&got, w, &format!("sender {}", s.host));
    }
    (net, senders)
}

#[test]
fn an_incast_fills_the_port_which_drops_and_retransmission_recovers_every_byte() {
    const SENDERS: usize = 8;
    let limit = 64 << 10;
    let (net, _) = incast(SENDERS, 256 << 10, QueueSpec::tail_drop(limit), false);
    let st = net.fabric_stats();
    let port = st.port(Port::ToHost(0));
    assert!(port.drops > 0, "8:1 into {limit} bytes: {port:?}");
    assert_eq!(st.drops(), port.drops, "only the receiver's port drops");
    assert!(port.max_depth <= limit && port.max_depth > limit - 1514);
    assert!(port.depth_percentile(99.0) > limit / 2);
    let (retx, timeouts): (u64, u64) = (1..=SENDERS)
        .map(|h| net.hosts[h].node.stats())
        .fold((0, 0), |(r, t), s| (r + s.retransmits, t + s.timeouts));
    // Every dropped frame was sent again (and the data verified above arrived whole).
    assert!(
        retx >= port.drops && timeouts > 0,
        "{} drops, {retx} retransmissions, {timeouts} timeouts",
        port.drops
    );
    assert_eq!(st.marks(), 0, "frames not ECN-capable are never marked");
}

#[test]
fn ecn_marks_only_above_the_threshold_and_the_receiver_takes_marked_frames() {
    const SENDERS: usize = 8;
    let k = 32 << 10;
    let (mut net, senders) = incast(SENDERS, 128 << 10, QueueSpec::new(4 << 20, k), true);
    let st = net.fabric_stats().clone();
    let port = st.port(Port::ToHost(0));
    assert!(st.made_ect > 0);
    assert_eq!(st.drops(), 0, "a queue deep enough for the incast");
    assert!(port.marks > 0 && port.max_depth > k, "{port:?}");
    for p in &st.ports {
        assert!(
            p.marks == 0 || p.min_marked_depth > k,
            "{:?} marked at {} of threshold {k}",
            p.port,
            p.min_marked_depth
        );
        if p.max_depth <= k {
            assert_eq!(p.marks, 0, "{:?} never above the threshold", p.port);
        }
    }
    // Every mark reached the receiver, which ran every frame: none refused.
    let ce: u64 = st.flows_to(0).map(|(_, f)| f.ce).sum();
    assert_eq!(ce, port.marks);
    assert_eq!(net.hosts[0].node.stats().dropped_total(), 0);
    // A marked frame is one the node takes; the same with its ECN changed and the
    // checksum left as it was is refused.
    let seen = tap(&mut net);
    let a = &senders[0];
    post_all(a, [write(9, a, 0, 64, 0)]);
    all_ok(&complete(&mut net, a, 1, 1));
    let mut frame = seen
        .borrow()
        .iter()
        .find(|(_, from, _, f)| *from == a.host && f.len() > 100)
        .map(|x| x.3.clone())
        .expect("a frame of the write");
    assert!(set_ecn(&mut frame, CE));
    assert!(UnderlayPacket::new_unchecked(&frame[..]).ip_checksum_ok());
    let drops = net.hosts[0].node.stats().dropped_total();
    let now = net.now;
    net.hosts[0].node.handle_frame(&frame, now);
    assert_eq!(
        net.hosts[0].node.stats().dropped_total(),
        drops,
        "marked (a duplicate now): taken"
    );
    frame[15] ^= 1; // CE -> ECT(0) behind the checksum's back
    assert_eq!(ecn(&frame), Some(ECT0));
    net.hosts[0].node.handle_frame(&frame, now);
    assert_eq!(net.hosts[0].node.stats().dropped_total(), drops + 1);
}

/// Hosts 0..4 on leaf 0 and 4..8 on leaf 1 under four spines, all links 10 Gb/s;
/// sender `i` opens `per` connections to host `4 + i`, and writes 16 KiB on each (each
/// connection into its own 16 KiB of the receiver's endpoint).
fn spread(seed: u64, per: usize) -> (Network, Vec<End>) {
    let fab = FabricConfig::leaf_spine(
        2,
        4,
        LinkSpec::gbps(10.0, 1_000),
        LinkSpec::gbps(10.0, 1_000),
        QueueSpec::tail_drop(256 << 10),
    );
    let (mut net, eps) = fabric_network(8, &fab, seed, 4 << 20);
    let mut senders = Vec::new();
    for i in 0..4 {
        for _ in 0..per {
            senders.push(connect(&mut net, &eps, i, 4 + i, &ConnectOptions::default()).0);
        }
    }
    for (j, s) in senders.iter().enumerate() {
        stream(s, 16 << 10, 16 << 10, (j % per) << 14);
    }
    finish(&mut net, &senders, 1, 5);
    (net, senders)
}

#[test]
fn ecmp_spreads_connections_over_the_spines_and_keeps_each_on_one() {
    let (mut net, senders) = spread(4, 4);
    let seen = tap(&mut net);
    for (j, s) in senders.iter().enumerate() {
        stream(s, 16 << 10, 16 << 10, (j % 4) << 14);
    }
    finish(&mut net, &senders, 1, 5);
    let fabric = net.fabric().unwrap();
    let st = fabric.stats();
    let flows: Vec<_> = data_flows(st)
        .into_iter()
        .filter(|(k, _)| k.from < 4)
        .collect();
    let ports: std::collections::BTreeSet<_> = flows.iter().map(|(k, _)| k.src_port).collect();
    assert!(flows.len() >= 12 && ports.len() >= 8, "{flows:?}");
    let mut used = 0;
    for (k, f) in &flows {
        assert_eq!(
            f.spines.count_ones(),
            1,
            "{k:?} took one path: {:b}",
            f.spines
        );
        used |= f.spines;
        // Its frames of the second round took it too: the path the hash names.
        let seen = seen.borrow();
        let (_, _, _, frame) = seen
            .iter()
            .find(|(_, from, to, f)| {
                (*from, *to) == (k.from, k.to)
                    && UnderlayPacket::new_unchecked(&f[..]).src_port() == k.src_port
            })
            .expect("a frame of the flow");
        let spine = f.spines.trailing_zeros() as usize;
        assert!(fabric
            .path(k.from, k.to, frame)
            .contains(&Port::Up { leaf: 0, spine }));
    }
    assert_eq!(used, 0b1111, "every spine carries some");
    for spine in 0..4 {
        assert!(st.port(Port::Up { leaf: 0, spine }).frames > 0);
    }
}

#[test]
fn a_slowed_spine_slows_the_flows_it_carries() {
    const LEN: usize = 256 << 10;
    let (mut net, senders) = spread(5, 2);
    // Slow the spine the first connection's flow takes to a tenth.
    let (_, first) = data_flows(net.fabric_stats())
        .into_iter()
        .find(|(k, _)| k.from == senders[0].host)
        .expect("the first connection's flow");
    let slow = first.spines.trailing_zeros() as usize;
    net.fabric_mut()
        .unwrap()
        .set_spine_rate(slow, 1_000_000_000);
    let before = net.fabric_stats().clone();
    let t0 = net.now;
    for (j, s) in senders.iter().enumerate() {
        stream(s, LEN, 64 << 10, (j % 2) * LEN);
    }
    let took = finish(&mut net, &senders, LEN.div_ceil(64 << 10), 10);
    let after = net.fabric_stats();
    let (mut slowed, mut others) = (Vec::new(), Vec::new());
    for (k, f) in data_flows(after).into_iter().filter(|(k, _)| k.from < 4) {
        let b = before.flows.get(k).map_or(0, |f| f.bytes);
        let gbps = (f.bytes - b) as f64 * 8.0 / (f.last_ns - t0) as f64;
        if f.spines & (1 << slow) != 0 {
            slowed.push(gbps);
        } else {
            others.push(gbps);
        }
    }
    let max_slowed = slowed.iter().cloned().fold(0.0, f64::max);
    let min_other = others.iter().cloned().fold(f64::MAX, f64::min);
    assert!(
        !slowed.is_empty()
            && !others.is_empty()
            && max_slowed <= 1.0
            && min_other > 2.0 * max_slowed,
        "through spine {slow} at 1 Gb/s: {slowed:?} Gb/s; the others: {others:?} ({took:?} ns)"
    );
    assert_eq!(
        after
            .port(Port::Up {
                leaf: 0,
                spine: slow
            })
            .rate_bps,
        1_000_000_000
    );
}

#[test]
fn broadcasts_reach_every_host_and_unknown_macs_are_dropped() {
    // Nodes that find each other's MACs by ARP, across the spines.
    let cfg = NodeConfig {
        neigh: NeighConfig {
            resolve: true,
            prefix_len: 24,
            ..NeighConfig::default()
        },
        ..NodeConfig::default()
    };
    let fab = FabricConfig::leaf_spine(
        2,
        2,
        LinkSpec::gbps(10.0, 1_000),
        LinkSpec::gbps(40.0, 1_000),
        QueueSpec::tail_drop(1 << 20),
    );
    let mut net = Network::with_fabric(4, &cfg, LinkConfig::default(), &fab, 6);
    let (ep, cq) = (
        net.hosts[0].endpoint(8192, Rights::ALL, 64),
        CqShared::new(64),
    );
    let (sep, scq) = (
        net.hosts[3].endpoint(8192, Rights::ALL, 64),
        CqShared::new(64),
    );
    let accepted = net.hosts[3]
        .node
        .listen(7, sep, scq.clone(), &ConnectOptions::default(), 8)
        .unwrap();
    let peer = deposit_transport::tables::NodeAddr::at([10, 0, 0, 4].into(), UDP_PORT);
    let conn = net.hosts[0]
        .node
        .connect(peer, 7, ep, cq.clone(), &ConnectOptions::default())
        .unwrap();
    let mut taken = None;
    assert!(net.run_until(2 * HZ, |_| {
        taken = taken.take().or_else(|| accepted.pop());
        taken.is_some() && conn.state() == deposit_transport::connection::ConnState::Normal
    }));
    // Every announcement and request (ARP broadcasts) reached the three others.
    let broadcasts: u64 = net
        .hosts
        .iter()
        .map(|h| h.node.stats().arp_requests_tx)
        .sum();
    assert!(
        broadcasts >= 5,
        "4 announcements and a request: {broadcasts}"
    );
    assert_eq!(net.fabric_stats().flooded, 3 * broadcasts);
    // The resolved MAC carries data through the queues.
    net.hosts[0].mem(ep).write(0, &[7; 512]).unwrap();
    let end = End {
        host: 0,
        ep,
        cq,
        conn,
    };
    post_all(&end, [write(1, &end, 0, 512, 1024)]);
    all_ok(&complete(&mut net, &end, 1, 1));
    let mut got = [0; 512];
    net.hosts[3].mem(sep).read(1024, &mut got).unwrap();
    assert_eq!(got, [7; 512]);
    // A frame to a MAC nobody has goes nowhere, counted.
    let mut stray = vec![0u8; 60];
    stray[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x99]);
    stray[6..12].copy_from_slice(&net.hosts[0].addr().mac);
    net.hosts[0].node.send_raw(&stray);
    net.run_for(100_000);
    assert_eq!(net.fabric_stats().unknown_mac, 1);
}

/// Everything a run recorded: the fabric's stats, the nodes' counters that timing
/// moves (frames sent, bytes received, retransmissions, timeouts), when it ended.
#[derive(Debug, PartialEq)]
struct Run {
    fabric: FabricStats,
    nodes: Vec<[u64; 4]>,
    end: u64,
}

/// Three hosts on one leaf stream to one on the other over two spines, through
/// shallow queues that mark and drop.
fn run(seed: u64) -> Run {
    let fab = FabricConfig::leaf_spine(
        2,
        2,
        LinkSpec::gbps(10.0, 1_000),
        LinkSpec::gbps(10.0, 1_000),
        QueueSpec::new(48 << 10, 16 << 10),
    );
    let fab = FabricConfig {
        make_ect: true,
        ..fab
    };
    let (mut net, eps) = fabric_network(6, &fab, seed, 1 << 20);
    // Hosts 0..3 on leaf 0 send to host 5 on leaf 1, two connections each.
    let senders: Vec<End> = (0..3)
        .flat_map(|h| [h, h])
        .map(|h| connect(&mut net, &eps, h, 5, &ConnectOptions::default()).0)
        .collect();
    for (i, s) in senders.iter().enumerate() {
        stream(s, 96 << 10, 32 << 10, i * (96 << 10));
    }
    finish(&mut net, &senders, 3, 10);
    let nodes = net
        .hosts
        .iter()
        .map(|h| {
            let s = h.node.stats();
            [s.frames_tx, s.bytes_rx, s.retransmits, s.timeouts]
        })
        .collect();
    Run {
        fabric: net.fabric_stats().clone(),
        nodes,
        end: net.now,
    }
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let a = run(7);
    let b = run(7);
    let st = &a.fabric;
    assert!(
        st.drops() > 0 && st.marks() > 0,
        "a run with something in it"
    );
    assert!(a == b, "the runs differ");
    let c = run(8);
    assert!(
        c.fabric != a.fabric,
        "another seed, other connection numbers and paths"
    );
}

#[test]
fn data_frames_are_ecn_capable_and_a_receiver_echoes_the_marks_it_gets() {
    const SENDERS: usize = 8;
    let queue = QueueSpec::new(4 << 20, 32 << 10);
    // The nodes' own ECT(0) (no hook): the switch marks, the receiver counts each CE
    // data frame and its acknowledgements carry ECE back to the senders.
    let (net, _) = incast_ecn(SENDERS, 128 << 10, queue, false, true);
    let st = net.fabric_stats();
    let marks = st.port(Port::ToHost(0)).marks;
    assert!(
        marks > 0,
        "ECN-capable frames past the threshold are marked"
    );
    assert_eq!(st.made_ect, 0, "no hook");
    let rx = net.hosts[0].node.stats();
    assert_eq!(
        rx.ce_rx, marks,
        "every mark reached the receiver as a CE data frame"
    );
    let echoes: u64 = (1..=SENDERS)
        .map(|h| net.hosts[h].node.stats().ecn_echoes_rx)
        .sum();
    assert!(echoes > 0, "{marks} marks, no echo");
    // Without ECN the same queue marks nothing: only a full buffer drops.
    let (net, _) = incast_ecn(SENDERS, 128 << 10, queue, false, false);
    let st = net.fabric_stats();
    assert_eq!(st.marks(), 0);
    assert_eq!(net.hosts[0].node.stats().ce_rx, 0);
}
