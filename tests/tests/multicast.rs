//! Virtual multicast (MINI) on a real ring pair: one post writes the same source range
//! into M remote endpoints, one completion per member, all or nothing.

use std::time::Duration;

use deposit::*;
use deposit_tests::*;

const T: Duration = Duration::from_secs(10);
const M: usize = 4;
const LEN: usize = 256 * 1024;

struct Group {
    pair: RingPair,
    cep: Endpoint,
    ccq: CompletionQueue,
    clients: Vec<Connection>,
    server_eps: Vec<Endpoint>,
    _servers: Vec<Connection>,
    _listeners: Vec<Listener>,
}

/// M client connections, each to its own server endpoint; `sq_depth` per connection.
fn group(name: &str, sq_depth: usize) -> Group {
    let pair = RingPair::new(name);
    let cep = pair
        .client
        .alloc_endpoint(LEN as u64, Rights::REMOTE_WRITE)
        .unwrap();
    let ccq = pair.client.create_cq(4096);
    let (mut clients, mut servers, mut eps, mut ls) = (vec![], vec![], vec![], vec![]);
    for i in 0..M {
        let sep = pair
            .server
            .alloc_endpoint(LEN as u64, Rights::REMOTE_WRITE)
            .unwrap();
        let scq = pair.server.create_cq(16);
        let service = 40 + i as u32;
        let l = pair.server.listen(service, &sep, &scq).unwrap();
        let opts = ConnOptions {
            sq_depth,
            ..ConnOptions::default()
        };
        clients.push(
            pair.client
                .connect_with([10, 0, 0, 1], service, &cep, &ccq, &opts)
                .unwrap(),
        );
        servers.push(l.accept(T).unwrap());
        eps.push(sep);
        ls.push(l);
    }
    Group {
        pair,
        cep,
        ccq,
        clients,
        server_eps: eps,
        _servers: servers,
        _listeners: ls,
    }
}

#[test]
fn one_post_writes_the_same_data_to_every_member_with_a_completion_each() {
    let g = group("mcast", 64);
    let members: Vec<&Connection> = g.clients.iter().collect();
    let mc = g.pair.client.multicast_group(&members).unwrap();
    assert_eq!(mc.len(), M);
    fill_pattern(&g.cep, 0, LEN, 11, 0);
    // A 200 KiB write (many messages per member) and an inline one.
    mc.post(&WorkRequest::write(7, &g.cep, 0, 200 * 1024, 1024).signaled())
        .unwrap();
    mc.post(
        &WorkRequest::write_inline(8, b"multicast", 0)
            .unwrap()
            .signaled(),
    )
    .unwrap();
    let mut done = Vec::new();
    while done.len() < 2 * M {
        g.pair.client.progress();
        if let Some(c) = g.ccq.poll_one() {
            assert!(c.status.is_ok(), "{c:?}");
            done.push((c.conn, c.wr_id));
        }
    }
    for (i, c) in g.clients.iter().enumerate() {
        for wr in [7, 8] {
            assert!(
                done.contains(&(c.local_number(), wr)),
                "member {i}: no completion of {wr} in {done:?}"
            );
        }
        let ep = &g.server_eps[i];
        check_pattern(ep, 1024, 200 * 1024, 11, 0).unwrap();
        let mut head = [0u8; 9];
        ep.read(0, &mut head).unwrap();
        assert_eq!(&head, b"multicast", "member {i}");
    }
}

#[test]
fn a_group_post_keeps_each_members_order_with_its_own_posts() {
    let g = group("mcast_order", 64);
    let members: Vec<&Connection> = g.clients.iter().collect();
    let mc = g.pair.client.multicast_group(&members).unwrap();
    // Member 0: A (direct), B (group), C (direct), all to the same word; the last one
    // posted wins on member 0, B on the others.
    let word = |id: u64, v: &[u8]| WorkRequest::write_inline(id, v, 64).unwrap().signaled();
    g.clients[0].post(&word(1, b"AAAAAAAA")).unwrap();
    mc.post(&word(2, b"BBBBBBBB")).unwrap();
    g.clients[0].post(&word(3, b"CCCCCCCC")).unwrap();
    let done = {
        let mut v = Vec::new();
        while v.len() < M + 2 {
            g.pair.client.progress();
            if let Some(c) = g.ccq.poll_one() {
                assert!(c.status.is_ok(), "{c:?}");
                v.push(c);
            }
        }
        v
    };
    // Member 0 completed A, B, C in that order.
    let on0: Vec<u64> = done
        .iter()
        .filter(|c| c.conn == g.clients[0].local_number())
        .map(|c| c.wr_id)
        .collect();
    assert_eq!(on0, [1, 2, 3]);
    let mut got = [0u8; 8];
    g.server_eps[0].read(64, &mut got).unwrap();
    assert_eq!(&got, b"CCCCCCCC");
    for ep in &g.server_eps[1..] {
        ep.read(64, &mut got).unwrap();
        assert_eq!(&got, b"BBBBBBBB");
    }
}

#[test]
fn a_group_post_is_all_or_nothing() {
    let g = group("mcast_all", 2);
    let members: Vec<&Connection> = g.clients.iter().collect();
    let mc = g.pair.client.multicast_group(&members).unwrap();
    // Fill member 2's send queue without letting the worker run.
    let w = |id| WorkRequest::write_inline(id, b"x", 0).unwrap().signaled();
    g.clients[2].post(&w(100)).unwrap();
    g.clients[2].post(&w(101)).unwrap();
    assert!(matches!(
        mc.post(&w(200)),
        Err(Error::SendQueueFull { depth: 2 })
    ));
    // Nothing went to the other members: only member 2's two writes complete.
    let done = wait_completions(&g.ccq, 2, T);
    assert!(done.iter().all(|c| c.conn == g.clients[2].local_number()));
    assert!(!wait_until(
        &g.pair.client,
        Duration::from_millis(200),
        || { g.ccq.poll_one().is_some() }
    ));
    // A closed member refuses the whole post.
    g.clients[1].close();
    assert!(matches!(mc.post(&w(201)), Err(Error::NotConnected(_))));
    // Bad requests are refused before anything is queued.
    assert!(matches!(
        mc.post(&WorkRequest::write(202, &g.cep, u64::MAX - 1, 16, 0)),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn groups_refuse_duplicates_foreign_and_empty_member_lists() {
    let g = group("mcast_bad", 8);
    assert!(g.pair.client.multicast_group(&[]).is_err());
    assert!(g
        .pair
        .client
        .multicast_group(&[&g.clients[0], &g.clients[0]])
        .is_err());
    // A server-side connection belongs to the other device.
    assert!(g.pair.server.multicast_group(&[&g.clients[0]]).is_err());
}

/// Inline progress: group posts ring the doorbell as posts on one connection do — the
/// 64th waiting request of a member drives a turn, which puts every member's copies on
/// the wire with the client never polled.
#[test]
fn group_posts_ring_the_inline_doorbell() {
    let g = group("mcast_bell", 4096);
    let members: Vec<&Connection> = g.clients.iter().collect();
    let mc = g.pair.client.multicast_group(&members).unwrap();
    let sent = || g.pair.client.stats().msgs_tx;
    let before = sent();
    let w = |i: usize| WorkRequest::write_inline(i as u64, &[i as u8; 8], 8 * i as u32).unwrap();
    for i in 0..INLINE_DOORBELL - 1 {
        mc.post(&w(i)).unwrap();
    }
    assert_eq!(sent(), before, "below the doorbell, posts wait for a poll");
    mc.post(&w(INLINE_DOORBELL - 1)).unwrap();
    assert_eq!(sent(), before + (M * INLINE_DOORBELL) as u64);
    let deadline = std::time::Instant::now() + T;
    while g.pair.server.stats().msgs_rx < (M * INLINE_DOORBELL) as u64 {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            g.pair.server.stats()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    for ep in &g.server_eps {
        for i in 0..INLINE_DOORBELL {
            let mut b = [0u8; 8];
            ep.read((8 * i) as u64, &mut b).unwrap();
            assert_eq!(b, [i as u8; 8], "write {i}");
        }
    }
}
