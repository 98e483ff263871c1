//! Neighbour resolution between nodes over a simulated segment (`crate::neigh`, issue
//! 37): a connect that knows only the peer's IP finds its MAC by ARP; a peer nobody
//! answers for fails with `Unresolved`; a forged ARP reply or announcement from a third
//! node redirects no established connection; ARP and echo requests are answered.

mod common;

use common::*;
use deposit_transport::cm::ConnectOptions;
use deposit_transport::connection::ConnState;
use deposit_transport::neigh::NeighConfig;
use deposit_transport::node::NodeConfig;
use deposit_transport::oplogic::DropReason;
use deposit_transport::sim::{LinkConfig, HZ};
use deposit_transport::tables::NodeAddr;
use deposit_transport::wire::arp::{ArpOp, ArpRepr, BROADCAST_MAC};
use deposit_transport::wire::underlay::v4_octets;
use deposit_transport::wire::UDP_PORT;

/// Nodes that resolve their peers on a /24 (the sim's hosts are 10.0.0.1..).
fn resolving() -> NodeConfig {
    NodeConfig {
        neigh: NeighConfig {
            resolve: true,
            prefix_len: 24,
            ..NeighConfig::default()
        },
        ..NodeConfig::default()
    }
}

/// Host `h`'s address as a connect knows it: the IP only (the MAC a wrong guess).
fn ip_only(ip: impl Into<std::net::IpAddr>) -> NodeAddr {
    NodeAddr::at(ip.into(), UDP_PORT)
}

/// Host 0 connects to host 1 (listening on service 7) knowing only its IP; both ends
/// once the connection is up (within 5 simulated seconds).
fn connect_knowing_only_the_ip(
    net: &mut deposit_transport::sim::Network,
    eps: &[(
        deposit_transport::tables::EndpointId,
        std::sync::Arc<deposit_transport::connection::CqShared>,
    )],
    server: std::net::IpAddr,
) -> (End, End) {
    let (ep, cq) = eps[0].clone();
    let (sep, scq) = eps[1].clone();
    let accepted = net.hosts[1]
        .node
        .listen(7, sep, scq.clone(), &ConnectOptions::default(), 8)
        .unwrap();
    let now = net.now;
    net.hosts[0].node.set_now(now);
    let conn = net.hosts[0]
        .node
        .connect(
            ip_only(server),
            7,
            ep,
            cq.clone(),
            &ConnectOptions::default(),
        )
        .unwrap();
    let mut taken = None;
    assert!(net.run_until(5 * HZ, |_| {
        taken = taken.take().or_else(|| accepted.pop().map(|a| a.shared));
        taken.is_some() && conn.state() == ConnState::Normal
    }));
    let client = End {
        host: 0,
        ep,
        cq,
        conn,
    };
    let server = End {
        host: 1,
        ep: sep,
        cq: scq,
        conn: taken.unwrap(),
    };
    (client, server)
}

#[test]
fn a_connect_that_knows_only_the_ip_resolves_the_mac_and_moves_data() {
    let (mut net, eps) = network(2, &resolving(), LinkConfig::default(), 1);
    let server_mac = net.hosts[1].addr().mac;
    assert_ne!(
        server_mac,
        ip_only([10, 0, 0, 2]).mac,
        "the derived MAC would be wrong"
    );
    let (client, server_end) = connect_knowing_only_the_ip(&mut net, &eps, [10, 0, 0, 2].into());
    let c = net.hosts[0].node.stats();
    assert!(
        c.arp_requests_tx >= 2,
        "an announcement and a request: {}",
        c.arp_requests_tx
    );
    assert_eq!(c.neigh_resolved, 1);
    assert_eq!(net.hosts[1].node.stats().arp_replies_tx, 1);
    let data = pattern(&net, &client, 0, 4096, 3);
    post_all(&client, [write(1, &client, 0, 4096, 8192)]);
    all_ok(&complete(&mut net, &client, 1, 5));
    same(
        &bytes(&net, &server_end, 8192, 4096),
        &data,
        "written through the resolved MAC",
    );
}

#[test]
fn a_peer_nobody_answers_for_fails_unresolved_and_one_off_the_link_has_no_route() {
    let (mut net, eps) = network(2, &resolving(), LinkConfig::default(), 2);
    let (ep, cq) = eps[0].clone();
    let conn = net.hosts[0]
        .node
        .connect(
            ip_only([10, 0, 0, 77]),
            7,
            ep,
            cq.clone(),
            &ConnectOptions::default(),
        )
        .unwrap();
    assert!(net.run_until(6 * HZ, |_| conn.state() != ConnState::Connecting));
    assert_eq!(conn.state(), ConnState::Failed);
    assert_eq!(
        conn.fail_reason.load(std::sync::atomic::Ordering::Relaxed),
        deposit_transport::cm::RejectReason::Unresolved as u8
    );
    assert!(
        net.now < 5 * HZ,
        "8 tries in 4.7 s, not the CM timeout: {} ns",
        net.now
    );
    let off = net.hosts[0].node.connect(
        ip_only([10, 9, 0, 1]),
        7,
        ep,
        cq,
        &ConnectOptions::default(),
    );
    assert!(
        matches!(off, Err(deposit_transport::cm::CmError::NoRoute(_))),
        "no gateway: {:?}",
        off.err()
    );
}

#[test]
fn forged_arp_redirects_no_established_connection_and_grows_nothing() {
    let (mut net, eps) = network(3, &resolving(), LinkConfig::default(), 3);
    let (client, server) = connect(&mut net, &eps, 0, 1, &ConnectOptions::default());
    let attacker = net.hosts[2].addr();
    let victim = net.hosts[1].addr();
    // The attacker claims the server's IP, by announcement and by unasked replies
    // to the client, and floods replies for addresses nobody asked for.
    for i in 0..50u8 {
        let claim = ArpRepr::gratuitous(attacker.mac, v4_octets(victim.ip));
        let mut f = [0u8; 60];
        claim.emit(BROADCAST_MAC, attacker.mac, &mut f).unwrap();
        net.hosts[2].node.send_raw(&f);
        let fake = ArpRepr {
            op: ArpOp::Reply,
            sender_mac: attacker.mac,
            sender_ip: [10, 0, 0, 100 + i],
            target_mac: net.hosts[0].addr().mac,
            target_ip: v4_octets(net.hosts[0].addr().ip),
        };
        fake.emit(net.hosts[0].addr().mac, attacker.mac, &mut f)
            .unwrap();
        net.hosts[2].node.send_raw(&f);
    }
    net.run_for(HZ / 100);
    // Frames the attacker receives from now on that are the connection's data.
    let seen = std::rc::Rc::new(std::cell::Cell::new(0u32));
    let s2 = seen.clone();
    net.set_filter(Some(Box::new(move |_, to, f: &[u8]| {
        if to == 2 && f.get(12..14) == Some(&[8, 0]) {
            s2.set(s2.get() + 1);
        }
        false
    })));
    let data = pattern(&net, &client, 0, 64 << 10, 9);
    post_all(&client, [write(1, &client, 0, 64 << 10, 0)]);
    all_ok(&complete(&mut net, &client, 1, 5));
    same(
        &bytes(&net, &server, 0, 64 << 10),
        &data,
        "still to the server",
    );
    assert_eq!(seen.get(), 0, "no data frame went to the attacker");
    let stats = net.hosts[0].node.stats();
    assert!(
        stats.dropped(DropReason::Unsolicited) >= 50,
        "the unasked replies, counted"
    );
    assert_eq!(stats.peer_mac_changes, 0);
}

#[test]
fn arp_and_echo_requests_for_a_node_are_answered() {
    let (mut net, _eps) = network(2, &NodeConfig::default(), LinkConfig::default(), 4);
    let asker = net.hosts[0].addr();
    let target = net.hosts[1].addr();
    let mut f = [0u8; 60];
    ArpRepr::request(asker.mac, v4_octets(asker.ip), v4_octets(target.ip))
        .emit(BROADCAST_MAC, asker.mac, &mut f)
        .unwrap();
    net.hosts[0].node.send_raw(&f);
    // An echo request as `ping` sends it: 10.0.0.1 -> 10.0.0.2, id 7, seq 1, 16 bytes.
    let mut echo = vec![0u8; 14 + 20 + 8 + 16];
    echo[..6].copy_from_slice(&target.mac);
    echo[6..12].copy_from_slice(&asker.mac);
    echo[12..14].copy_from_slice(&[8, 0]);
    let ip = &mut echo[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(20u16 + 8 + 16).to_be_bytes());
    ip[8] = 64;
    ip[9] = 1;
    ip[12..16].copy_from_slice(&v4_octets(asker.ip));
    ip[16..20].copy_from_slice(&v4_octets(target.ip));
    let sum = checksum(&echo[14..34]);
    echo[24..26].copy_from_slice(&sum.to_be_bytes());
    echo[34] = 8;
    echo[38..40].copy_from_slice(&7u16.to_be_bytes());
    echo[40..42].copy_from_slice(&1u16.to_be_bytes());
    for (i, b) in echo[42..].iter_mut().enumerate() {
        *b = i as u8;
    }
    let sum = checksum(&echo[34..]);
    echo[36..38].copy_from_slice(&sum.to_be_bytes());
    net.hosts[0].node.send_raw(&echo);
    net.run_for(HZ / 100);
    let s = net.hosts[1].node.stats();
    assert_eq!((s.arp_replies_tx, s.echo_replies_tx), (1, 1));
    assert_eq!(s.dropped(DropReason::BadNeighbour), 0);
}

/// The internet checksum of `b`.
fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Nodes on VLAN `vid` that resolve their peers.
fn on_vlan(vid: u16) -> NodeConfig {
    NodeConfig {
        vlan: Some(vid),
        ..resolving()
    }
}

#[test]
fn nodes_on_a_vlan_tag_every_frame_and_one_on_another_vlan_sees_none_of_it() {
    use deposit_transport::node::{LinkCaps, Node};
    use deposit_transport::wire::vlan;
    let (mut net, eps) = network(3, &on_vlan(100), LinkConfig::default(), 5);
    // Host 2 is on VLAN 200.
    let addr = net.hosts[2].addr();
    let caps = LinkCaps {
        mac: addr.mac,
        max_frame: deposit_transport::sim::MAX_FRAME,
        queues: 1,
        rx_desc: 1024,
        external_min: usize::MAX,
    };
    let mut c200 = on_vlan(200);
    c200.local = addr;
    net.hosts[2].node = Node::new(c200, caps, HZ, 0);
    let ep2 = net.hosts[2].endpoint(EP_LEN, deposit_transport::tables::Rights::ALL, 64);
    let tags = std::rc::Rc::new(std::cell::RefCell::new((0u32, 0u32, 0u32)));
    let t = tags.clone();
    net.set_filter(Some(Box::new(move |from, _, f: &[u8]| {
        let mut t = t.borrow_mut();
        match vlan::tag_of(f).map(vlan::vid) {
            Some(100) if from < 2 => t.0 += 1,
            Some(200) if from == 2 => t.1 += 1,
            _ => t.2 += 1,
        }
        false
    })));
    let (client, server) = connect(&mut net, &eps, 0, 1, &ConnectOptions::default());
    let data = pattern(&net, &client, 0, 32 << 10, 11);
    post_all(&client, [write(1, &client, 0, 32 << 10, 4096)]);
    all_ok(&complete(&mut net, &client, 1, 5));
    same(
        &bytes(&net, &server, 4096, 32 << 10),
        &data,
        "across the VLAN",
    );
    // Host 2 asks for host 1 on its own VLAN: nobody there answers.
    let cq2 = deposit_transport::connection::CqShared::new(64);
    let target = ip_only(net.hosts[1].addr().ip);
    let lost = net.hosts[2]
        .node
        .connect(target, 7, ep2, cq2, &ConnectOptions::default())
        .unwrap();
    assert!(net.run_until(6 * HZ, |_| lost.state() != ConnState::Connecting));
    assert_eq!(lost.state(), ConnState::Failed);
    let (on100, on200, other) = *tags.borrow();
    assert!(on100 > 20, "VLAN 100's frames tagged: {on100}");
    assert!(on200 >= 3, "VLAN 200's ARP requests tagged: {on200}");
    assert_eq!(other, 0, "no frame left untagged or on a wrong VLAN");
    let s2 = net.hosts[2].node.stats();
    assert_eq!(s2.frames_rx, 0, "host 2 took none of VLAN 100's frames");
    assert!(
        s2.dropped(DropReason::NotOurs) > 0,
        "what reached it was refused and counted"
    );
    let s1 = net.hosts[1].node.stats();
    assert_eq!(
        s1.arp_replies_tx, 1,
        "host 1 answered VLAN 100's request only"
    );
}

/// Nodes on IPv6 (the sim's hosts are then fd00::1..) that resolve their peers on a
/// /64 by neighbour discovery.
fn resolving_v6() -> NodeConfig {
    let mut cfg = resolving();
    cfg.local.ip = "fd00::1".parse().unwrap();
    cfg.neigh.prefix_len = 64;
    cfg
}

#[test]
fn ipv6_nodes_resolve_by_neighbour_discovery_and_move_data_over_ipv6() {
    let (mut net, eps) = network(2, &resolving_v6(), LinkConfig::default(), 11);
    let server: std::net::IpAddr = "fd00::2".parse().unwrap();
    assert_eq!(net.hosts[1].addr().ip, server);
    let (client, server_end) = connect_knowing_only_the_ip(&mut net, &eps, server);
    let c = net.hosts[0].node.stats();
    assert!(
        c.arp_requests_tx >= 2,
        "an announcement and a solicitation: {}",
        c.arp_requests_tx
    );
    assert_eq!(c.neigh_resolved, 1);
    assert_eq!(net.hosts[1].node.stats().arp_replies_tx, 1);
    // A full frame's worth and more: the 20 bytes IPv6 adds fit in every frame.
    let data = pattern(&net, &client, 0, 64 << 10, 5);
    post_all(&client, [write(1, &client, 0, 64 << 10, 0)]);
    all_ok(&complete(&mut net, &client, 1, 5));
    same(
        &bytes(&net, &server_end, 0, 64 << 10),
        &data,
        "written over IPv6",
    );
    assert_eq!(net.hosts[1].node.stats().drops.iter().sum::<u64>(), 0);
    // An IPv4 peer is not reachable from an IPv6 node.
    let (ep2, cq2) = (client.ep, client.cq.clone());
    let v4 = net.hosts[0].node.connect(
        ip_only([10, 0, 0, 2]),
        7,
        ep2,
        cq2,
        &ConnectOptions::default(),
    );
    assert!(
        matches!(v4, Err(deposit_transport::cm::CmError::NoRoute(_))),
        "another family: {:?}",
        v4.err()
    );
}

#[test]
fn a_connections_traffic_class_is_on_its_frames_over_ipv4_and_ipv6() {
    for cfg in [resolving(), resolving_v6()] {
        let (mut net, eps) = network(2, &cfg, LinkConfig::default(), 12);
        let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let s = seen.clone();
        net.set_filter(Some(Box::new(move |from, _, f: &[u8]| {
            if from == 0 && f.len() > 62 {
                // IPv4: byte 15; IPv6: the traffic class across bytes 14 and 15.
                let tc = match f[12..14] {
                    [0x86, 0xdd] => (f[14] << 4) | (f[15] >> 4),
                    _ => f[15],
                };
                s.borrow_mut().push(tc);
            }
            false
        })));
        let opts = ConnectOptions {
            traffic_class: (46 << 2) | 3, // EF; the ECN bits are the transport's
            ..ConnectOptions::default()
        };
        let (client, server) = connect(&mut net, &eps, 0, 1, &opts);
        let data = pattern(&net, &client, 0, 8192, 9);
        post_all(&client, [write(1, &client, 0, 8192, 0)]);
        all_ok(&complete(&mut net, &client, 1, 5));
        same(&bytes(&net, &server, 0, 8192), &data, "written");
        let seen = seen.borrow();
        // EF in the DSCP bits of every connection frame; data frames ECN-capable too
        // (ECT(0), `NodeConfig::ecn`), acknowledgements not.
        let classed = seen.iter().filter(|&&tc| tc == 46 << 2 | 0b10).count();
        assert!(
            classed >= 3,
            "data frames with EF: {classed} of {}",
            seen.len()
        );
        assert!(
            seen.iter()
                .all(|&tc| tc == 0 || tc == 46 << 2 || tc == 46 << 2 | 0b10),
            "{seen:?}"
        );
    }
}
