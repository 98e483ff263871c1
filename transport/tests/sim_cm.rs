//! Connection management between nodes over a simulated link (no DPDK): connect and
//! close under loss and duplication, refusals, timeouts, and three nodes writing into
//! each other.

mod common;

use common::*;
use deposit_transport::cm::{ConnectOptions, RejectReason};
use deposit_transport::connection::{ConnState, CqShared, WcStatus};
use deposit_transport::host::Host;
use deposit_transport::node::NodeConfig;
use deposit_transport::sim::{LinkConfig, Network, HZ};
use std::sync::atomic::Ordering;

#[test]
fn connections_come_up_once_under_loss_and_duplication() {
    let (mut lost, mut duplicated) = (0, 0);
    for seed in 1..=10 {
        let (mut net, a, b) = pair(
            &NodeConfig::default(),
            LinkConfig::lossy(0.2),
            seed,
            &ConnectOptions::default(),
        );
        assert_eq!(net.hosts[0].node.connections(), 1, "seed {seed}");
        assert_eq!(
            net.hosts[1].node.connections(),
            1,
            "seed {seed}: one connection per request"
        );
        assert_eq!(
            a.conn.peer_conn.load(Ordering::Relaxed),
            u64::from(b.conn.number)
        );
        assert_eq!(
            b.conn.peer_conn.load(Ordering::Relaxed),
            u64::from(a.conn.number)
        );
        let src = pattern(&net, &a, 0, 3000, seed as u8);
        post_all(&a, [write(1, &a, 0, 3000, 0)]);
        all_ok(&complete(&mut net, &a, 1, 30));
        same(&bytes(&net, &b, 0, 3000), &src, "write");
        lost += net.stats.lost;
        duplicated += net.stats.duplicated;
    }
    assert!(
        lost > 10 && duplicated > 10,
        "{lost} lost, {duplicated} duplicated"
    );
}

#[test]
fn close_under_loss_ends_both_sides_and_flushes_nothing_that_ran() {
    for seed in 1..=6 {
        let (mut net, a, b) = pair(
            &NodeConfig::default(),
            LinkConfig::lossy(0.05),
            seed,
            &ConnectOptions::default(),
        );
        post_all(&a, (0..20).map(|i| write(i, &a, 0, 1000, i as u32 * 1000)));
        all_ok(&complete(&mut net, &a, 20, 30));
        // The close itself crosses a worse link.
        net.link = LinkConfig::lossy(0.25);
        let now = net.now;
        net.hosts[0].node.set_now(now);
        net.hosts[0].node.close(a.conn.number).unwrap();
        assert_eq!(a.conn.state(), ConnState::Closed);
        assert!(net.run_until(10 * HZ, |n| n
            .hosts
            .iter()
            .all(|h| h.node.connections() == 0)));
        assert_eq!(b.conn.state(), ConnState::Closed, "seed {seed}");
        assert!(
            b.cq.pop().is_none(),
            "the server posted nothing: nothing to flush"
        );
    }
}

#[test]
fn a_request_for_a_missing_service_is_refused_and_a_silent_host_times_out() {
    let cfg = NodeConfig {
        cm_timeout_us: 2_000_000,
        ..NodeConfig::default()
    };
    let (mut net, eps) = network(3, &cfg, LinkConfig::lossy(0.1), 11);
    let (ep, cq) = eps[0].clone();
    let opts = ConnectOptions::default();
    let to = net.hosts[1].addr();
    let missing = net.hosts[0]
        .node
        .connect(to, 999, ep, cq.clone(), &opts)
        .unwrap();
    assert!(net.run_until(5 * HZ, |_| missing.state() == ConnState::Failed));
    assert_eq!(
        RejectReason::from_u8(missing.fail_reason.load(Ordering::Relaxed)),
        RejectReason::NoListener
    );
    net.hosts[2].down = true;
    let to = net.hosts[2].addr();
    let t0 = net.now;
    net.hosts[0].node.set_now(t0);
    let silent = net.hosts[0].node.connect(to, 102, ep, cq, &opts).unwrap();
    assert!(net.run_until(5 * HZ, |_| silent.state() == ConnState::Failed));
    let took = (net.now - t0) as f64 / HZ as f64;
    assert!((1.9..2.5).contains(&took), "the CM timeout: {took:.2} s");
    assert_eq!(
        RejectReason::from_u8(silent.fail_reason.load(Ordering::Relaxed)),
        RejectReason::Timeout
    );
    assert!(
        net.hosts[0].node.connections() == 0,
        "failed attempts leave nothing behind"
    );
}

#[test]
fn three_nodes_write_into_each_other_over_a_lossy_link() {
    let (mut net, eps) = network(3, &NodeConfig::default(), LinkConfig::lossy(0.02), 12);
    // Every ordered pair: i writes its pattern into j's endpoint at 64 KiB * i.
    let mut ends = Vec::new();
    for i in 0..3 {
        for j in 0..3 {
            if i < j {
                let (x, y) = connect(&mut net, &eps, i, j, &ConnectOptions::default());
                ends.push(x);
                ends.push(y);
            }
        }
    }
    let peer_of = |net: &Network, e: &End| {
        let addr = net.hosts[e.host]
            .node
            .conn_table()
            .iter()
            .find(|c| c.number == e.conn.number)
            .unwrap()
            .peer;
        let ip = net.hosts[e.host].node.peer(addr).unwrap().ip;
        usize::from(deposit_transport::wire::underlay::v4_octets(ip)[3]) - 1
    };
    let mut expect = Vec::new();
    for (k, e) in ends.iter().enumerate() {
        let to = peer_of(&net, e);
        let base = (512 << 10) + k * 40_000;
        let src = pattern(&net, e, base, 40_000, k as u8);
        let dst = (64 << 10) * e.host as u32;
        post_all(
            e,
            (0..10u64).map(|i| write(i, e, base as u64 + i * 4000, 4000, dst + i as u32 * 4000)),
        );
        expect.push((to, dst as usize, src));
    }
    // Completions of both connections of a host share its queue.
    for h in 0..3 {
        let end = ends.iter().find(|e| e.host == h).unwrap();
        all_ok(&complete(&mut net, end, 20, 60));
    }
    for (to, dst, src) in expect {
        let e = ends.iter().find(|e| e.host == to).unwrap();
        same(
            &bytes(&net, e, dst, src.len()),
            &src,
            &format!("into host {to} at {dst}"),
        );
    }
    let _: &CqShared = &eps[0].1;
}

/// A post that passed its state check just before the close reaches the submission ring
/// after the connection is gone: it completes `Flushed` (into the completion slot it
/// reserved, which polling gives back) instead of vanishing with its slot; once
/// the application lets go of the connection, the node forgets it.
#[test]
fn a_post_racing_the_close_completes_flushed_and_gives_back_its_slot() {
    let (mut net, a, _b) = pair(
        &NodeConfig::default(),
        LinkConfig::default(),
        3,
        &ConnectOptions::default(),
    );
    let now = net.now;
    net.hosts[0].node.set_now(now);
    net.hosts[0].node.close(a.conn.number).unwrap();
    assert!(net.run_until(HZ, |n| n.hosts.iter().all(|h| h.node.connections() == 0)));
    // What `ConnContext::post` does after its state check: straight onto the ring.
    assert_eq!(a.cq.reserved(), 0);
    a.conn
        .post(&write(7, &a, 0, 8, 0))
        .expect("the ring takes it");
    let mut unsignaled = write(8, &a, 0, 8, 0);
    unsignaled.flags = 0;
    a.conn.post(&unsignaled).expect("the ring takes it");
    assert_eq!(a.cq.reserved(), 1, "the signaled one reserved its slot");
    net.run_for(HZ / 100);
    let got: Vec<_> = std::iter::from_fn(|| a.cq.pop())
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        got,
        [(7, WcStatus::Flushed), (8, WcStatus::Flushed)],
        "both complete, flushed"
    );
    assert_eq!(a.cq.reserved(), 0, "polled: the slot is back");
    assert_eq!(a.conn.queued(), 0, "their send-queue places are back");
    assert_eq!(net.hosts[0].node.stats().posts_orphaned, 2);
    // The node keeps the departed connection while the application holds it.
    assert_eq!(net.hosts[0].node.departed_connections(), 1);
    let End { conn, .. } = a;
    drop(conn);
    net.run_for(HZ / 100);
    assert_eq!(net.hosts[0].node.departed_connections(), 0);
}

/// A spoofed connect request from `ip`/`mac` for `service` at `to` (random connection,
/// key and cookie, as an attacker that never sees the replies would send).
fn spoofed_request(
    rng: &mut deposit_transport::sim::Rng,
    to: deposit_transport::tables::NodeAddr,
    service: u32,
) -> Vec<u8> {
    use deposit_transport::wire::cm::CmMessage;
    use deposit_transport::wire::{UnderlayRepr, UDP_PORT};
    let r = rng.next_u64();
    let ip = [10, (r >> 8) as u8, (r >> 16) as u8, (r >> 24) as u8];
    let mac = [2, (r >> 32) as u8, (r >> 40) as u8, 0, 0, r as u8];
    let msg = CmMessage::ConnectReq {
        request: rng.next_u64() as u32,
        service,
        conn: rng.next_u64() as u32 | 1,
        key: rng.next_u64(),
        isn: rng.next_u64() as u32,
        max_frame: 1514,
        mac,
        // Half of them with a guessed cookie.
        cookie: if r & 1 == 0 { 0 } else { rng.next_u64() },
        // Half asking for a secure connection, a quarter with a handshake.
        secure: r & 2 == 0,
        ephemeral: [r as u8; 32],
        handshake: (r & 4 == 0).then_some([(r >> 8) as u8; 64]),
    };
    let underlay = UnderlayRepr {
        src_mac: mac,
        dst_mac: to.mac,
        src_ip: ip.into(),
        dst_ip: to.ip,
        src_port: UDP_PORT,
        dst_port: UDP_PORT,
        traffic_class: 0,
    };
    let mut buf = vec![0u8; 512];
    let n = msg.write_frame(&[], &underlay, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// ReDMArk's A4 (connection exhaustion) by spoofed requests: thousands of connect
/// requests from random addresses reach the server while a real client connects and
/// writes. None makes a connection or reaches the accept queue (the server answers
/// each with a challenge and keeps nothing); the client connects, its data lands, and
/// the server's counters show the challenges and the guessed cookies refused.
#[test]
fn a_flood_of_spoofed_connect_requests_occupies_nothing_and_the_real_client_gets_in() {
    let (mut net, eps) = network(2, &NodeConfig::default(), LinkConfig::default(), 31);
    let server = net.hosts[1].addr();
    let (sep, scq) = eps[1].clone();
    let accepted = net.hosts[1]
        .node
        .listen(101, sep, scq, &ConnectOptions::default(), 4)
        .unwrap();
    let mut rng = deposit_transport::sim::Rng::new(99);
    let mut flood = |net: &mut Network, n: usize| {
        let now = net.now;
        for _ in 0..n {
            let f = spoofed_request(&mut rng, server, 101);
            net.hosts[1].node.handle_frame(&f, now);
        }
    };
    // The flood starts first; the client connects in the middle of it.
    flood(&mut net, 3000);
    let (cep, ccq) = eps[0].clone();
    let now = net.now;
    net.hosts[0].node.set_now(now);
    let c = net.hosts[0]
        .node
        .connect(server, 101, cep, ccq.clone(), &ConnectOptions::default())
        .unwrap();
    let mut s = None;
    let mut steps = 0;
    let up = net.run_until(10 * HZ, |net| {
        if steps < 50 {
            flood(net, 100);
            steps += 1;
        }
        assert!(
            net.hosts[1].node.connections() <= 1,
            "a spoofed request made a connection"
        );
        if s.is_none() {
            s = accepted.pop();
        }
        s.is_some() && c.state() != ConnState::Connecting
    });
    assert!(up && c.state() == ConnState::Normal, "the client connects");
    assert!(
        accepted.pop().is_none(),
        "the accept queue holds the client's alone"
    );
    assert_eq!(net.hosts[1].node.connections(), 1);
    flood(&mut net, 2000);
    let a = End {
        host: 0,
        ep: cep,
        cq: ccq,
        conn: c,
    };
    let b = End {
        host: 1,
        ep: eps[1].0,
        cq: eps[1].1.clone(),
        conn: s.unwrap().shared,
    };
    let want = pattern(&net, &a, 0, 4000, 3);
    post_all(&a, [write(1, &a, 0, 4000, 64)]);
    all_ok(&complete(&mut net, &a, 1, 10));
    same(&bytes(&net, &b, 64, 4000), &want, "the client's write");
    let st = net.hosts[1].node.stats();
    use deposit_transport::oplogic::DropReason;
    let flooded = 3000 + 50 * 100 + 2000;
    assert!(st.dropped(DropReason::BadCookie) > 1000, "{st:?}");
    assert_eq!(
        st.cm_challenges + st.dropped(DropReason::CmRateLimited),
        flooded + 1,
        "every spoofed request challenged or refused, and the client's first: {st:?}"
    );
    assert_eq!(net.hosts[1].node.connections(), 1);
}
