//! Send priorities (MINI, docs/design.md §3 "Send side") and admission fairness on a real
//! ring pair: a small high-priority write overtakes a bulk low-priority transfer at
//! the next frame boundary, and two bulk connections share the worker instead of one
//! starving the other.

use std::time::{Duration, Instant};

use deposit::*;
use deposit_tests::*;

const T: Duration = Duration::from_secs(30);
const MIB: usize = 1 << 20;
/// The bulk transfer: `BULK_WRS` writes of 1 MiB.
const BULK_WRS: usize = 64;
const SERVICE: u32 = 31;

/// Server endpoint (bulk lands at 0.., the urgent word at the end), client endpoint,
/// client connections with the given priorities, all into the one server endpoint.
struct Setup {
    pair: RingPair,
    sep: Endpoint,
    cep: Endpoint,
    ccq: CompletionQueue,
    clients: Vec<Connection>,
    servers: Vec<Connection>,
    _listener: Listener,
}

fn setup(name: &str, priorities: &[Priority]) -> Setup {
    let pair = RingPair::new(name);
    let len = BULK_WRS * MIB + 4096;
    let sep = pair
        .server
        .alloc_endpoint(len as u64, Rights::REMOTE_WRITE)
        .unwrap();
    let scq = pair.server.create_cq(64);
    let listener = pair.server.listen(SERVICE, &sep, &scq).unwrap();
    let cep = pair
        .client
        .alloc_endpoint(len as u64, Rights::REMOTE_WRITE)
        .unwrap();
    fill_pattern(&cep, 0, len, 7, 0);
    let ccq = pair.client.create_cq(4096);
    let mut clients = Vec::new();
    let mut servers = Vec::new();
    for &priority in priorities {
        let opts = ConnOptions {
            priority,
            ..ConnOptions::default()
        };
        clients.push(
            pair.client
                .connect_with([10, 0, 0, 1], SERVICE, &cep, &ccq, &opts)
                .unwrap(),
        );
        servers.push(listener.accept(T).unwrap());
    }
    Setup {
        pair,
        sep,
        cep,
        ccq,
        clients,
        servers,
        _listener: listener,
    }
}

/// Posts the bulk transfer on `conn`: `BULK_WRS` writes of 1 MiB, all signaled.
fn post_bulk(s: &Setup, conn: &Connection, wr_base: u64) {
    for i in 0..BULK_WRS {
        let off = i * MIB;
        let req = WorkRequest::write(
            wr_base + i as u64,
            &s.cep,
            off as u64,
            MIB as u32,
            off as u32,
        )
        .signaled();
        conn.post(&req).unwrap();
    }
}

/// Posts one signaled 8-byte write on `conn` and drives the client until it completes;
/// returns the time it took.
fn urgent_write(
    s: &Setup,
    conn: &Connection,
    wr_id: u64,
    mut on_other: impl FnMut(Completion),
) -> Duration {
    let at = (BULK_WRS * MIB) as u32;
    let req = WorkRequest::write_inline(wr_id, &wr_id.to_le_bytes(), at)
        .unwrap()
        .signaled();
    let t0 = Instant::now();
    conn.post(&req).unwrap();
    loop {
        s.pair.client.progress();
        if let Some(c) = s.ccq.poll_one() {
            assert!(c.status.is_ok(), "{c:?}");
            if c.wr_id == wr_id {
                return t0.elapsed();
            }
            on_other(c);
        }
        assert!(t0.elapsed() < T, "urgent write {wr_id} never completed");
    }
}

#[test]
fn a_high_priority_write_overtakes_a_bulk_transfer_between_frames() {
    let s = setup("prio_overtake", &[Priority::Low, Priority::High]);
    let (bulk, urgent) = (&s.clients[0], &s.clients[1]);

    // Idle latency of the urgent connection (post to completion: one round trip).
    let mut idle: Vec<Duration> = (0..200)
        .map(|i| urgent_write(&s, urgent, 1_000_000 + i, |c| panic!("unexpected {c:?}")))
        .collect();
    idle.sort();

    post_bulk(&s, bulk, 0);
    // Let the transfer get going: the first MiB has landed.
    assert!(wait_until(&s.pair.client, T, || s.servers[0].arrivals() >= 1));
    let mut bulk_done = 0usize;
    let mut loaded = Vec::new();
    let mut behind = Vec::new();
    for i in 0..20 {
        let before = s.servers[0].arrivals();
        let d = urgent_write(&s, urgent, 2_000_000 + i, |c| {
            assert!(c.wr_id < BULK_WRS as u64, "{c:?}");
            bulk_done += 1;
        });
        let after = s.servers[0].arrivals();
        if after >= BULK_WRS as u64 {
            break; // the bulk transfer is over: no longer a loaded sample
        }
        loaded.push(d);
        behind.push(after - before);
    }
    assert!(
        !loaded.is_empty(),
        "the bulk transfer ended before any urgent write was measured under load"
    );
    // Overtaking: while an urgent write was in flight, at most a few more MiB of the
    // bulk transfer landed (the frames already in the port's queue) — with one FIFO
    // send queue it waited behind the bulk connection's whole window (29 MiB seen).
    assert!(
        behind.iter().all(|&b| b <= 4),
        "bulk writes landed while an urgent write waited: {behind:?}"
    );
    loaded.sort();
    eprintln!(
        "urgent 8 B write, post to completion: idle median {:?}, under a {} MiB \
         low-priority transfer median {:?} max {:?} ({} samples); bulk MiB landed \
         meanwhile {:?}",
        idle[idle.len() / 2],
        BULK_WRS,
        loaded[loaded.len() / 2],
        loaded[loaded.len() - 1],
        loaded.len(),
        behind
    );

    // The bulk transfer itself completes, every byte in place.
    let rest = wait_completions(&s.ccq, BULK_WRS - bulk_done, T);
    assert!(rest.iter().all(|c| c.status.is_ok()), "{rest:?}");
    check_pattern(&s.sep, 0, BULK_WRS * MIB, 7, 0).unwrap();
}

#[test]
fn two_bulk_connections_share_the_worker_round_robin() {
    let s = setup("prio_fair", &[Priority::Low, Priority::Low]);
    // Both post their whole transfer before the worker runs once: with one connection
    // served until its window is exhausted, the second would get nothing until the
    // first had 36 MiB in flight.
    post_bulk(&s, &s.clients[0], 0);
    post_bulk(&s, &s.clients[1], 1000);
    let start = Instant::now();
    let mut samples = Vec::new();
    while s.servers[0].arrivals() + s.servers[1].arrivals() < 2 * BULK_WRS as u64 {
        s.pair.client.progress();
        let (a, b) = (s.servers[0].arrivals(), s.servers[1].arrivals());
        if a + b > 0 && samples.last() != Some(&(a, b)) {
            samples.push((a, b));
        }
        assert!(
            start.elapsed() < T,
            "bulk transfers stalled at {a} + {b} MiB"
        );
    }
    // Whenever one connection had moved 8 MiB on, the other had moved too: progress
    // interleaves within a few MiB.
    for &(a, b) in &samples {
        assert!(
            a.abs_diff(b) <= 8,
            "one connection ran ahead: {a} vs {b} MiB landed ({samples:?})"
        );
    }
    let done = wait_completions(&s.ccq, 2 * BULK_WRS, T);
    assert!(done.iter().all(|c| c.status.is_ok()));
}
