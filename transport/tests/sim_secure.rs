//! Secure connections between nodes over a simulated link (no DPDK): sealed traffic
//! over a hostile link across many key generations, an on-path attacker whose every
//! frame is refused and counted, and the handshake's refusals (docs/design.md §10).

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use deposit_transport::cm::{ConnectOptions, PeerTrust, RejectReason, Security};
use deposit_transport::connection::ConnState;
use deposit_transport::host::Host;
use deposit_transport::node::NodeConfig;
use deposit_transport::oplogic::DropReason;
use deposit_transport::sim::{LinkConfig, HZ};
use deposit_transport::wire::{
    self, hflags, op, ControlRepr, FrameView, FrameWriter, TransportRepr, CELL_LEN, HEADER_LEN,
    UNDERLAY_LEN,
};

/// Sealed, the listener's key taken on first use (its challenge is the first it hears).
fn secure() -> ConnectOptions {
    ConnectOptions {
        secure: Security::On,
        peer_key: PeerTrust::FirstUse,
        ..ConnectOptions::default()
    }
}

fn drops(net: &deposit_transport::sim::Network, h: usize, r: DropReason) -> u64 {
    net.hosts[h].node.stats().drops[r as usize]
}

fn reason(c: &deposit_transport::connection::ConnShared) -> RejectReason {
    RejectReason::from_u8(c.fail_reason.load(std::sync::atomic::Ordering::Relaxed))
}

/// A distinctive 64-byte run written into the source, to look for on the wire.
const MARK: &[u8; 64] = b"deposit plaintext marker: never on the wire of a secure link!!!!";

#[test]
fn sealed_writes_and_reads_verify_over_a_hostile_link_across_many_key_generations() {
    // The least a direction seals under one key generation, so that a run of a few
    // thousand frames crosses several.
    let cfg = NodeConfig {
        rekey_after: deposit_transport::secure::REPLAY_WINDOW,
        ..NodeConfig::default()
    };
    for seed in 1..=4 {
        let (mut net, a, b) = pair(&cfg, LinkConfig::lossy(0.03), seed, &secure());
        let wire_bytes: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
        let seen = wire_bytes.clone();
        net.set_filter(Some(Box::new(move |_, _, f| {
            seen.borrow_mut().push(f.to_vec());
            false
        })));
        let src = pattern(&net, &a, 0, 200_000, seed as u8);
        net.hosts[a.host].mem(a.ep).write(4096, MARK).unwrap();
        let theirs = pattern(&net, &b, 300_000, 100_000, seed as u8 ^ 0x55);
        let mut want = src.clone();
        want[4096..4096 + MARK.len()].copy_from_slice(MARK);
        let len = |i: u32| 37 + (i * 977) % 3000;
        // Rounds of 100 writes (the send queue's depth bounds one round), each round
        // over the same 200 KB, then 20 reads of what b holds.
        for round in 0..12u64 {
            let n = post_all(
                &a,
                (0..100u32).map(|i| {
                    write(
                        round * 100 + u64::from(i),
                        &a,
                        u64::from(i) * 2000,
                        len(i),
                        i * 2000,
                    )
                }),
            );
            all_ok(&complete(&mut net, &a, n, 60));
        }
        let n = post_all(
            &a,
            (0..20u32).map(|i| {
                read(
                    5000 + u64::from(i),
                    &a,
                    600_000 + u64::from(i) * 5000,
                    4000,
                    300_000 + i * 5000,
                )
            }),
        );
        all_ok(&complete(&mut net, &a, n, 60));
        for i in 0..100u32 {
            let at = i as usize * 2000;
            let l = len(i) as usize;
            same(&bytes(&net, &b, at, l), &want[at..at + l], "write");
        }
        for i in 0..20usize {
            let got = bytes(&net, &a, 600_000 + i * 5000, 4000);
            same(&got, &theirs[i * 5000..i * 5000 + 4000], "read");
        }
        let (sa, sb) = (net.hosts[0].node.stats(), net.hosts[1].node.stats());
        assert!(sa.rekeys >= 2, "seed {seed}: {} generations", sa.rekeys);
        assert_eq!(
            sa.rekeys,
            sa.sealed_tx / deposit_transport::secure::REPLAY_WINDOW
        );
        assert!(sb.opened_rx > 2000 && sa.opened_rx > 100 && sb.sealed_tx > 100);
        assert!(
            sa.retransmits + sb.retransmits > 0,
            "seed {seed}: the link lost frames"
        );
        // A frame of sealed sections carries no CRC (wire version 12): one the link
        // corrupted fails its tag, unless the flipped bit was one that an earlier check
        // refuses (addresses, header); a corrupted frame the link also duplicated fails
        // twice. Nothing else fails authentication. What a duplicate repeats is refused
        // by its packet number.
        let auth = drops(&net, 0, DropReason::AuthFailed) + drops(&net, 1, DropReason::AuthFailed);
        let link = net.stats;
        assert!(
            auth > 0 && auth <= link.corrupted + link.duplicated,
            "seed {seed}: {auth} failed authentication, the link corrupted {} and duplicated {}",
            link.corrupted,
            link.duplicated
        );
        assert!(drops(&net, 0, DropReason::Replayed) + drops(&net, 1, DropReason::Replayed) > 0);
        let frames = wire_bytes.borrow();
        assert!(frames.len() > 100);
        for f in frames.iter() {
            assert!(
                !f.windows(16)
                    .any(|w| w == &MARK[..16] || w == &MARK[32..48]),
                "seed {seed}: plaintext on the wire"
            );
        }
        assert!(live(&a) && live(&b));
    }
}

/// Rewrites the trailer of frame `f`, its CRC32C or zero (an attacker on the path can).
fn fix_crc(f: &mut [u8]) {
    wire::write_trailer(f, f.len());
}

#[test]
fn an_on_path_attacker_gets_every_frame_refused_and_counted_and_the_data_verifies() {
    let (mut net, a, b) = pair(&NodeConfig::default(), LinkConfig::default(), 7, &secure());
    let taken: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
    let tap = taken.clone();
    net.set_filter(Some(Box::new(move |from, _, f| {
        if from == 0 {
            tap.borrow_mut().push(f.to_vec());
        }
        false
    })));
    let src = pattern(&net, &a, 0, 400_000, 9);
    let mut n = 0;
    for i in 0..200u32 {
        n += post_all(
            &a,
            [write(u64::from(i), &a, u64::from(i) * 2000, 2000, i * 2000)],
        );
    }
    // Targets the attacker may not touch: a counter of fetch-adds, applied once each.
    n += post_all(
        &a,
        (0..50).map(|i| fetch_add(5000 + i, &a, 500_000 + i * 8, 900_000, 1)),
    );
    let (mut replays, mut modified, mut forged, mut plain) = (0u64, 0u64, 0u64, 0u64);
    let mut got = Vec::new();
    let mut rng = deposit_transport::sim::Rng::new(7);
    let server = net.hosts[1].addr();
    net.run_until(60 * HZ, |net| {
        let frames: Vec<Vec<u8>> = taken.borrow_mut().drain(..).collect();
        let now = net.now;
        for f in frames {
            let v = FrameView::parse(&f).expect("the client's frames parse");
            let (dst_conn, key) = (v.header.dst_conn, v.header.key);
            let cells = v.header.cells as usize;
            let sealed = v.seal().is_some();
            let node = &mut net.hosts[1].node;
            if dst_conn == 0 || !sealed {
                continue; // connection management
            }
            // 2. One field changed, the CRC made right again: a byte of a cell, of the
            // tag, and the sequence, acknowledgement and credits of the header.
            let first_cell = UNDERLAY_LEN + HEADER_LEN;
            let tag = first_cell + cells * CELL_LEN + 32;
            let mut at = vec![
                tag + (rng.next_u64() % 16) as usize,
                UNDERLAY_LEN + 16 + (rng.next_u64() % 10) as usize,
            ];
            if cells > 0 {
                at.push(first_cell + (rng.next_u64() as usize % (cells * CELL_LEN)));
            }
            for i in at {
                let mut m = f.clone();
                m[i] ^= 1 << (rng.next_u64() % 8);
                fix_crc(&mut m);
                node.handle_frame(&m, now);
                modified += 1;
            }
            // 3. A frame made up with the right connection and key: a sealed one with
            // a guessed seal, and a plain write into the endpoint.
            let underlay = v.underlay;
            for seal_it in [true, false] {
                let mut buf = vec![0u8; 1514];
                let hdr = TransportRepr {
                    flags: if seal_it { hflags::SEALED } else { 0 },
                    dst_conn,
                    key,
                    seq: v.header.seq,
                    ..TransportRepr::default()
                };
                let mut w = FrameWriter::new(&mut buf, &underlay, &hdr).unwrap();
                let c = ControlRepr {
                    opcode: op::WRITE,
                    operand: 800_000,
                    length: 32,
                    ..ControlRepr::default()
                };
                w.push(&c, &[0xee; 32]).unwrap();
                let r = rng.next_u64();
                w.seal(|_, _, cell| {
                    cell.fill(0);
                    cell[..8].copy_from_slice(&(r % 1_000_000).to_be_bytes());
                    cell[32..40].copy_from_slice(&r.to_be_bytes());
                });
                let len = w.finish();
                node.handle_frame(&buf[..len], now);
                if seal_it {
                    forged += 1;
                } else {
                    plain += 1;
                }
            }
            // 4. The frame as it was, before the original arrives: the original is then
            // the replay (whichever copy comes second is refused).
            node.handle_frame(&f, now);
            replays += 1;
        }
        // 5. A disconnect request naming the server's connection (in every header):
        // a connection closes only with a MAC under its CM key.
        let target = net.hosts[1]
            .node
            .conn_table()
            .iter()
            .next()
            .map(|c| c.number);
        if let Some(target) = target {
            let dreq = deposit_transport::cm::CmMessage::DisconnectReq {
                target,
                sender: 1,
                ack: 0,
                mac: [0x5a; 16],
            };
            let underlay = wire::UnderlayRepr {
                src_mac: net.hosts[0].addr().mac,
                dst_mac: server.mac,
                src_ip: net.hosts[0].addr().ip,
                dst_ip: server.ip,
                src_port: wire::UDP_PORT,
                dst_port: wire::UDP_PORT,
                traffic_class: 0,
            };
            let mut buf = vec![0u8; 1514];
            let len = dreq.write_frame(&[], &underlay, &mut buf).unwrap();
            net.hosts[1].node.handle_frame(&buf[..len], now);
        }
        got.extend(deposit_transport::sim::drain(&a.cq));
        got.len() >= n
    });
    net.run_for(HZ / 100); // the originals of the last copies arrive
    assert_eq!(got.len(), n);
    all_ok(&got);
    for i in 0..200usize {
        same(
            &bytes(&net, &b, i * 2000, 2000),
            &src[i * 2000..(i + 1) * 2000],
            "write",
        );
    }
    assert_eq!(
        bytes(&net, &b, 800_000, 32),
        vec![0; 32],
        "the forged write never ran"
    );
    let counter = u64::from_le_bytes(bytes(&net, &b, 900_000, 8).try_into().unwrap());
    assert_eq!(counter, 50, "each fetch-add applied once");
    assert!(live(&a) && live(&b));
    assert_eq!(b.conn.state(), ConnState::Normal);
    let replayed = drops(&net, 1, DropReason::Replayed);
    let auth = drops(&net, 1, DropReason::AuthFailed);
    let not_sealed = drops(&net, 1, DropReason::NotSealed);
    println!(
        "injected: {replays} replays, {modified} modified, {forged} forged sealed, {plain} \
         forged plain; refused: replayed {replayed}, auth_failed {auth}, not_sealed {not_sealed}, \
         cm_forged {}",
        drops(&net, 1, DropReason::CmForged)
    );
    assert!(replays > 100 && modified > 300 && forged > 100);
    assert_eq!(replayed, replays, "every replay refused (one copy of each)");
    // A forged seal names a packet number the window may already hold: refused as a
    // replay rather than as a forgery, counted either way.
    assert_eq!(auth + (replayed - replays), modified + forged);
    assert_eq!(not_sealed, plain);
    assert!(
        drops(&net, 1, DropReason::CmForged) > 10,
        "forged disconnects refused"
    );
}

#[test]
fn a_different_pre_shared_key_fails_the_connect_and_the_same_one_connects() {
    let psk = |k| ConnectOptions {
        secure: Security::Psk([k; 32]),
        peer_key: PeerTrust::FirstUse,
        ..ConnectOptions::default()
    };
    let (mut net, eps) = network(2, &NodeConfig::default(), LinkConfig::default(), 3);
    let (ea, ca) = eps[0].clone();
    let (eb, cb) = eps[1].clone();
    let queue = net.hosts[1]
        .node
        .listen(7, eb, cb.clone(), &psk(1), 8)
        .unwrap();
    let peer = net.hosts[1].addr();
    let c = net.hosts[0]
        .node
        .connect(peer, 7, ea, ca.clone(), &psk(2))
        .unwrap();
    net.run_until(5 * HZ, |_| c.state() != ConnState::Connecting);
    assert_eq!(c.state(), ConnState::Failed);
    assert!(
        net.now < HZ,
        "refused at once, by a REJECT the client verified"
    );
    assert_eq!(reason(&c), RejectReason::Confirmation);
    assert_eq!(drops(&net, 1, DropReason::AuthFailed), 1);
    assert_eq!(net.hosts[0].node.connections(), 0);
    // The listener learns it from the request (IKpsk1): it makes nothing.
    assert!(queue.pop().is_none());
    assert_eq!(net.hosts[1].node.connections(), 0);
    // The same key: up, sealed.
    let now = net.now;
    net.hosts[0].node.set_now(now);
    let c = net.hosts[0].node.connect(peer, 7, ea, ca, &psk(1)).unwrap();
    net.run_until(5 * HZ, |_| c.state() != ConnState::Connecting);
    assert_eq!(c.state(), ConnState::Normal, "{:?}", reason(&c));
    net.run_for(HZ / 1000);
    let a = queue
        .pop()
        .expect("confirmed by the client's first sealed frame");
    assert!(a.shared.secure.load(std::sync::atomic::Ordering::Relaxed));
}

#[test]
fn a_secure_listener_refuses_a_plain_request_and_a_plain_one_takes_a_secure_request() {
    let (mut net, eps) = network(2, &NodeConfig::default(), LinkConfig::default(), 4);
    let (ea, ca) = eps[0].clone();
    let (eb, cb) = eps[1].clone();
    net.hosts[1]
        .node
        .listen(7, eb, cb.clone(), &secure(), 8)
        .unwrap();
    net.hosts[1]
        .node
        .listen(8, eb, cb, &ConnectOptions::default(), 8)
        .unwrap();
    let peer = net.hosts[1].addr();
    let plain = ConnectOptions {
        peer_key: PeerTrust::FirstUse,
        ..ConnectOptions::default()
    };
    let c = net.hosts[0]
        .node
        .connect(peer, 7, ea, ca.clone(), &plain)
        .unwrap();
    net.run_until(5 * HZ, |_| c.state() != ConnState::Connecting);
    assert_eq!(reason(&c), RejectReason::Insecure);
    assert_eq!(drops(&net, 1, DropReason::NotSealed), 1);
    let c = net.hosts[0]
        .node
        .connect(peer, 8, ea, ca, &secure())
        .unwrap();
    net.run_until(5 * HZ, |_| c.state() != ConnState::Connecting);
    assert_eq!(c.state(), ConnState::Normal);
    assert!(net.hosts[1]
        .node
        .conn_table()
        .iter()
        .all(|c| c.secure.is_some()));
}

#[test]
fn a_secure_connection_closes_on_both_sides() {
    let (mut net, a, b) = pair(&NodeConfig::default(), LinkConfig::default(), 5, &secure());
    post_all(&a, [write(1, &a, 0, 100, 0)]);
    all_ok(&complete(&mut net, &a, 1, 5));
    let number = a.conn.number;
    net.hosts[0].node.close(number).unwrap();
    net.run_until(5 * HZ, |_| b.conn.state() == ConnState::Closed);
    assert_eq!(
        b.conn.state(),
        ConnState::Closed,
        "the close's MAC verified"
    );
    net.run_until(5 * HZ, |n| n.hosts[0].node.connections() == 0);
    assert_eq!(net.hosts[0].node.connections(), 0);
}

#[test]
fn unconfirmed_connections_count_against_the_backlog_and_a_second_client_waits_its_turn() {
    let (mut net, eps) = network(3, &NodeConfig::default(), LinkConfig::default(), 6);
    let (es, cs) = eps[0].clone();
    let queue = net.hosts[0].node.listen(7, es, cs, &secure(), 1).unwrap();
    let peer = net.hosts[0].addr();
    // Both ask at once: the first takes the one place (unconfirmed, then waiting for
    // accept); the second is left unanswered, and retries.
    let now = net.now;
    let mut clients = Vec::new();
    for (h, (e, c)) in eps.iter().cloned().enumerate().skip(1) {
        net.hosts[h].node.set_now(now);
        let conn = net.hosts[h]
            .node
            .connect(peer, 7, e, c.clone(), &secure())
            .unwrap();
        clients.push(End {
            host: h,
            ep: e,
            cq: c,
            conn,
        });
    }
    net.run_for(HZ / 2);
    assert_eq!(clients[0].conn.state(), ConnState::Normal);
    assert_eq!(clients[1].conn.state(), ConnState::Connecting);
    assert!(drops(&net, 0, DropReason::BacklogFull) >= 1);
    assert_eq!(
        net.hosts[0].node.connections(),
        1,
        "no connection for the second yet"
    );
    let first = queue.pop().expect("the first client");
    assert!(queue.pop().is_none());
    // Room again: the second's next retry gets in.
    net.run_until(5 * HZ, |_| clients[1].conn.state() != ConnState::Connecting);
    assert_eq!(clients[1].conn.state(), ConnState::Normal);
    net.run_for(HZ / 1000);
    assert!(queue.pop().is_some(), "the second client reached accept");
    drop(first);
}
