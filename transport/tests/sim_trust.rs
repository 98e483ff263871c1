//! Trust at connect time over a simulated link (no DPDK): a bystander that sees every
//! frame — a host on a hub — and answers for the listener, refuses connects and closes
//! connections with messages of its own (docs/design.md §10, issue 34). Against a
//! pinned listener key none of it takes: the connect reaches the real listener, the data
//! verifies, no connection closes, and each forgery is counted.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use deposit_transport::cm::{CmMessage, ConnectOptions, PeerTrust, RejectReason, Security};
use deposit_transport::connection::ConnState;
use deposit_transport::host::Host;
use deposit_transport::identity::Identity;
use deposit_transport::node::NodeConfig;
use deposit_transport::oplogic::DropReason;
use deposit_transport::sim::{LinkConfig, Rng, HZ};
use deposit_transport::tables::NodeAddr;
use deposit_transport::wire::{self, hflags, FrameView, UnderlayRepr};

fn drops(net: &deposit_transport::sim::Network, h: usize, r: DropReason) -> u64 {
    net.hosts[h].node.stats().drops[r as usize]
}

/// A CM message's frame from `from` to `to`.
fn frame(msg: &CmMessage, from: NodeAddr, to: NodeAddr) -> Vec<u8> {
    let underlay = UnderlayRepr {
        src_mac: from.mac,
        dst_mac: to.mac,
        src_ip: from.ip,
        dst_ip: to.ip,
        src_port: wire::UDP_PORT,
        dst_port: wire::UDP_PORT,
        traffic_class: 0,
    };
    let mut buf = vec![0u8; 1514];
    let n = msg.write_frame(&[], &underlay, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// What the bystander answers to a frame it saw from host `from` to host `to`: the
/// forgeries, each with the host it goes to.
fn forgeries(f: &[u8], rng: &mut Rng, own_key: [u8; 32]) -> Vec<(bool, CmMessage)> {
    let Ok(v) = FrameView::parse(f) else {
        return Vec::new();
    };
    let tag = |rng: &mut Rng| -> [u8; 16] { std::array::from_fn(|_| rng.next_u64() as u8) };
    if v.header.flags & hflags::CM == 0 {
        // A data frame of a connection: close it at its receiver, and answer its
        // sender's close (towards the sender: `false`).
        return vec![
            (
                true,
                CmMessage::DisconnectReq {
                    target: v.header.dst_conn,
                    sender: v.header.src_conn,
                    ack: v.header.ack,
                    mac: tag(rng),
                },
            ),
            (
                false,
                CmMessage::DisconnectRep {
                    sender: v.header.src_conn,
                    mac: tag(rng),
                },
            ),
        ];
    }
    let mut out = Vec::new();
    for m in v.messages().flatten() {
        let Ok(CmMessage::ConnectReq {
            request,
            conn,
            secure,
            handshake,
            ..
        }) = CmMessage::parse(&m.control, m.payload)
        else {
            continue;
        };
        // Back to the requester (`false`: towards the sender of what it saw).
        if handshake.is_none() {
            out.push((
                false,
                CmMessage::Challenge {
                    request,
                    client_conn: conn,
                    cookie: rng.next_u64() | 1,
                    listener: own_key,
                },
            ));
        } else {
            out.push((
                false,
                CmMessage::Reject {
                    request,
                    reason: RejectReason::NoListener,
                    client_conn: conn,
                    tag: tag(rng),
                },
            ));
            out.push((
                false,
                CmMessage::ConnectRep {
                    request,
                    conn: rng.next_u64() as u32 | 1,
                    key: rng.next_u64(),
                    isn: 0,
                    max_frame: 1514,
                    client_conn: conn,
                    secure,
                    ephemeral: own_key,
                    tag: tag(rng),
                },
            ));
        }
    }
    out
}

/// A frame the bystander saw: from host, to host, its bytes.
type Seen = (usize, usize, Vec<u8>);

fn bystander_run(secure: bool, seed: u64) {
    let (mut net, eps) = network(2, &NodeConfig::default(), LinkConfig::default(), seed);
    let bystander = Identity::generate().unwrap().public().0;
    let seen: Rc<RefCell<Vec<Seen>>> = Rc::default();
    let tap = seen.clone();
    net.set_filter(Some(Box::new(move |from, to, f| {
        tap.borrow_mut().push((from, to, f.to_vec()));
        false
    })));
    let opts = ConnectOptions {
        secure: if secure { Security::On } else { Security::Off },
        peer_key: PeerTrust::Pinned(net.hosts[1].node.identity()),
        ..ConnectOptions::default()
    };
    let (ea, ca) = eps[0].clone();
    let (eb, cb) = eps[1].clone();
    let queue = net.hosts[1]
        .node
        .listen(7, eb, cb.clone(), &opts, 8)
        .unwrap();
    let peer = net.hosts[1].addr();
    let client = net.hosts[0]
        .node
        .connect(peer, 7, ea, ca.clone(), &opts)
        .unwrap();
    let mut rng = Rng::new(seed);
    let mut forged = 0;
    let mut inject = |net: &mut deposit_transport::sim::Network, forged: &mut u64| {
        let frames: Vec<_> = seen.borrow_mut().drain(..).collect();
        let now = net.now;
        for (from, to, f) in frames {
            for (forward, m) in forgeries(&f, &mut rng, bystander) {
                let (src, dst) = if forward { (from, to) } else { (to, from) };
                let fr = frame(&m, net.hosts[src].addr(), net.hosts[dst].addr());
                net.hosts[dst].node.handle_frame(&fr, now);
                *forged += 1;
            }
        }
    };
    let mut server = None;
    let up = net.run_until(10 * HZ, |net| {
        inject(net, &mut forged);
        if server.is_none() {
            server = queue.pop();
        }
        server.is_some() && client.state() != ConnState::Connecting
    });
    assert!(up, "secure {secure}: {:?}", client.state());
    assert_eq!(client.state(), ConnState::Normal, "secure {secure}");
    let server = server.unwrap();
    let key = client.peer_identity.get().map(|b| **b);
    assert_eq!(key, Some((net.hosts[1].node.identity(), true)));
    assert_eq!(
        server.shared.peer_identity.get().map(|b| b.0),
        Some(net.hosts[0].node.identity())
    );
    // Data flows under the bystander's disconnects.
    let a = End {
        host: 0,
        ep: ea,
        cq: ca,
        conn: client.clone(),
    };
    let b = End {
        host: 1,
        ep: eb,
        cq: cb,
        conn: server.shared.clone(),
    };
    let src = pattern(&net, &a, 0, 40_000, seed as u8);
    post_all(
        &a,
        (0..20).map(|i| write(i, &a, i * 2000, 2000, i as u32 * 2000)),
    );
    let mut got = Vec::new();
    net.run_until(10 * HZ, |net| {
        inject(net, &mut forged);
        got.extend(deposit_transport::sim::drain(&a.cq));
        got.len() >= 20
    });
    net.run_for(HZ / 100);
    inject(&mut net, &mut forged);
    all_ok(&got);
    same(&bytes(&net, &b, 0, 40_000), &src, "write");
    assert_eq!(client.state(), ConnState::Normal);
    assert_eq!(server.shared.state(), ConnState::Normal);
    let (c_forged, c_key) = (
        drops(&net, 0, DropReason::CmForged),
        drops(&net, 0, DropReason::PeerKey),
    );
    let s_forged = drops(&net, 1, DropReason::CmForged);
    println!(
        "secure {secure}: {forged} forged messages; client cm_forged {c_forged} peer_key \
         {c_key}, server cm_forged {s_forged}"
    );
    assert!(c_key >= 1, "the bystander's challenge refused");
    assert!(
        c_forged >= 10,
        "its REJECT, reply and disconnect answers refused"
    );
    assert!(s_forged >= 10, "its disconnects refused at the server");
}

#[test]
fn a_bystander_cannot_answer_refuse_or_close_for_a_pinned_listener_plain_or_sealed() {
    for seed in 1..=3 {
        bystander_run(false, seed);
        bystander_run(true, seed);
    }
}

#[test]
fn trust_on_first_use_takes_the_listeners_key_and_a_pinned_wrong_key_fails_naming_it() {
    let (mut net, eps) = network(2, &NodeConfig::default(), LinkConfig::default(), 5);
    let (ea, ca) = eps[0].clone();
    let (eb, cb) = eps[1].clone();
    let sealed = |trust| ConnectOptions {
        secure: Security::On,
        peer_key: trust,
        ..ConnectOptions::default()
    };
    net.hosts[1]
        .node
        .listen(7, eb, cb, &sealed(PeerTrust::Unverified), 8)
        .unwrap();
    let peer = net.hosts[1].addr();
    // Unverified and sealed: refused before anything is sent.
    let e = net.hosts[0]
        .node
        .connect(peer, 7, ea, ca.clone(), &sealed(PeerTrust::Unverified));
    assert!(matches!(e, Err(deposit_transport::cm::CmError::NoPeerKey)));
    // First use: the listener's key, reported as taken.
    let c = net.hosts[0]
        .node
        .connect(peer, 7, ea, ca.clone(), &sealed(PeerTrust::FirstUse))
        .unwrap();
    net.run_until(5 * HZ, |_| c.state() != ConnState::Connecting);
    assert_eq!(c.state(), ConnState::Normal);
    let server_key = net.hosts[1].node.identity();
    // Taken on first use: known now, not before (not "verified").
    assert_eq!(
        c.peer_identity.get().map(|b| **b),
        Some((server_key, false))
    );
    // Pinned to another key: the listener's challenges are ignored, the connect fails
    // at its timeout naming the key.
    let other = Identity::generate().unwrap().public();
    let t0 = net.now;
    net.hosts[0].node.set_now(t0);
    let c = net.hosts[0]
        .node
        .connect(peer, 7, ea, ca, &sealed(PeerTrust::Pinned(other)))
        .unwrap();
    net.run_until(10 * HZ, |_| c.state() != ConnState::Connecting);
    assert_eq!(c.state(), ConnState::Failed);
    assert_eq!(
        RejectReason::from_u8(c.fail_reason.load(std::sync::atomic::Ordering::Relaxed)),
        RejectReason::PeerKey
    );
    assert!(drops(&net, 0, DropReason::PeerKey) >= 1);
    assert_eq!(
        net.hosts[1].node.connections(),
        1,
        "only the first connection"
    );
}

#[test]
fn a_listener_with_authorised_keys_refuses_other_clients_verifiably() {
    let (mut net, eps) = network(3, &NodeConfig::default(), LinkConfig::default(), 6);
    let (eb, cb) = eps[1].clone();
    let allowed = net.hosts[0].node.identity();
    let lopts = ConnectOptions {
        authorized_keys: Some(std::sync::Arc::from(vec![allowed])),
        ..ConnectOptions::default()
    };
    let queue = net.hosts[1].node.listen(7, eb, cb, &lopts, 8).unwrap();
    let peer = net.hosts[1].addr();
    let pinned = ConnectOptions {
        peer_key: PeerTrust::Pinned(net.hosts[1].node.identity()),
        ..ConnectOptions::default()
    };
    let (e2, c2) = eps[2].clone();
    let refused = net.hosts[2].node.connect(peer, 7, e2, c2, &pinned).unwrap();
    let (e0, c0) = eps[0].clone();
    let ok = net.hosts[0].node.connect(peer, 7, e0, c0, &pinned).unwrap();
    net.run_until(HZ, |_| {
        refused.state() != ConnState::Connecting && ok.state() != ConnState::Connecting
    });
    assert!(net.now < HZ, "a verified REJECT fails the connect at once");
    assert_eq!(refused.state(), ConnState::Failed);
    assert_eq!(
        RejectReason::from_u8(
            refused
                .fail_reason
                .load(std::sync::atomic::Ordering::Relaxed)
        ),
        RejectReason::Unauthorized
    );
    assert_eq!(drops(&net, 1, DropReason::Unauthorized), 1);
    assert_eq!(ok.state(), ConnState::Normal);
    net.run_for(HZ / 1000); // the client's first frame confirms it
    assert!(queue.pop().is_some());
    assert!(queue.pop().is_none());
}

/// One source finishes the connection manager's handshake thousands of times but
/// never sends a connection's first frame (its data frames are dropped on the way):
/// half-open connections. The listener holds at most its share of them, answers the
/// rest with nothing (counted), lets them go after the CM timeout, and a client from
/// another source connects and writes at once all along.
#[test]
fn a_flood_of_unfinished_handshakes_is_capped_expires_and_leaves_room_for_others() {
    let cfg = NodeConfig {
        max_connections: 8192,
        cm_timeout_us: 1_000_000,
        ..NodeConfig::default()
    };
    let (mut net, eps) = network(3, &cfg, LinkConfig::default(), 8);
    // Host 2 is the flood: only its CM frames get through.
    net.set_filter(Some(Box::new(|from, _, f| {
        from == 2 && FrameView::parse(f).is_ok_and(|v| v.header.flags & hflags::CM == 0)
    })));
    let (eb, cb) = eps[1].clone();
    let backlog = 64;
    let queue = net.hosts[1]
        .node
        .listen(7, eb, cb.clone(), &ConnectOptions::default(), backlog)
        .unwrap();
    let server = net.hosts[1].addr();
    let (ef, cf) = eps[2].clone();
    let flood: Vec<_> = (0..5000)
        .map(|_| {
            net.hosts[2]
                .node
                .connect(server, 7, ef, cf.clone(), &ConnectOptions::default())
                .unwrap()
        })
        .collect();
    net.run_for(HZ / 10);
    let most = backlog / 2;
    let held = net.hosts[1].node.connections();
    assert!((1..=most).contains(&held), "{held} half-open connections");
    // A client from elsewhere, pinned: up and confirmed at once.
    let pinned = ConnectOptions {
        peer_key: PeerTrust::Pinned(net.hosts[1].node.identity()),
        ..ConnectOptions::default()
    };
    let (ea, ca) = eps[0].clone();
    let t0 = net.now;
    net.hosts[0].node.set_now(t0);
    let c = net.hosts[0]
        .node
        .connect(server, 7, ea, ca.clone(), &pinned)
        .unwrap();
    let mut accepted = None;
    net.run_until(HZ, |net| {
        assert!(net.hosts[1].node.connections() <= most + 1, "over the cap");
        accepted = accepted.take().or_else(|| queue.pop());
        accepted.is_some()
    });
    let took = (net.now - t0) as f64 / HZ as f64;
    assert!(took < 0.01, "the client waited {took} s");
    let a = End {
        host: 0,
        ep: ea,
        cq: ca,
        conn: c,
    };
    let b = End {
        host: 1,
        ep: eb,
        cq: cb,
        conn: accepted.unwrap().shared,
    };
    let src = pattern(&net, &a, 0, 4000, 3);
    post_all(&a, [write(1, &a, 0, 4000, 0)]);
    all_ok(&complete(&mut net, &a, 1, 1));
    same(&bytes(&net, &b, 0, 4000), &src, "write");
    // The flood's connections go after the CM timeout; its later requests find room
    // again and are capped the same way, until the flood's own connects give up.
    net.run_for(3 * HZ);
    assert!(flood.iter().all(|f| f.state() != ConnState::Connecting));
    net.run_for(2 * HZ);
    let stats = net.hosts[1].node.stats();
    println!(
        "flood: {} connections expired, {} requests over the cap, server holds {}",
        stats.handshakes_expired,
        stats.drops[DropReason::SourceCap as usize],
        net.hosts[1].node.connections()
    );
    assert!(stats.handshakes_expired >= most as u64);
    assert!(stats.drops[DropReason::SourceCap as usize] > 1000);
    assert_eq!(
        net.hosts[1].node.connections(),
        1,
        "only the real client's is left"
    );
    assert!(
        queue.pop().is_none(),
        "no half-open connection reached accept"
    );
    assert_eq!(b.conn.state(), ConnState::Normal);
}
