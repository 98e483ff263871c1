//! The API over in-process segments (`sim:NAME` ports, feature `sim`): no DPDK in the
//! binary (scripts/test.sh's sans-IO step checks its symbols), the same `Device`,
//! endpoints, connections, work requests, completion and event queues as on a DPDK
//! port — the driver is the only difference. Each test names its own segment.

use std::time::{Duration, Instant};

use deposit::*;

const T: Duration = Duration::from_secs(10);

/// A server (10.0.0.1) and a client (10.0.0.2) on segment `name`, inline progress.
fn pair(name: &str, workers: usize) -> (Device, Device) {
    let open = |ip| {
        Device::open(DeviceConfig::new(&format!("sim:{name}"), ip).workers(workers))
            .expect("a sim device")
    };
    (open([10, 0, 0, 1]), open([10, 0, 0, 2]))
}

/// A connection from the client's endpoint to one of the server's, both of `len`
/// bytes with `rights`, and what must live as long as it.
struct Conn {
    server: Device,
    client: Device,
    sep: Endpoint,
    cep: Endpoint,
    ccq: CompletionQueue,
    conn: Connection,
    accepted: Connection,
    _listener: Listener,
}

fn connect(name: &str, len: u64, rights: Rights, workers: usize) -> Conn {
    connect_with(pair(name, workers), len, rights, |_| ConnOptions::default())
}

fn connect_with(
    (server, client): (Device, Device),
    len: u64,
    rights: Rights,
    opts: impl FnOnce(&Device) -> ConnOptions,
) -> Conn {
    let sep = server.alloc_endpoint(len, rights).unwrap();
    let scq = server.create_cq(64);
    let opts = opts(&server);
    let listener = server.listen_with(7, &sep, &scq, &opts).unwrap();
    let cep = client.alloc_endpoint(len, Rights::ALL).unwrap();
    let ccq = client.create_cq(256);
    let conn = client.connect([10, 0, 0, 1], 7, &cep, &ccq).unwrap();
    let accepted = listener.accept(T).unwrap();
    Conn {
        server,
        client,
        sep,
        cep,
        ccq,
        conn,
        accepted,
        _listener: listener,
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn a_write_of_several_messages_lands_whole_and_is_counted_at_the_receiver() {
    let c = connect("write", 64 << 10, Rights::REMOTE_WRITE, 1);
    assert!(c.client.port().starts_with("sim:"));
    let data = pattern(20_000, 0x5a); // 14 messages of a 1514-byte frame
    c.cep.write(0, &data).unwrap();
    c.conn
        .post(&WorkRequest::write(1, &c.cep, 0, data.len() as u32, 100).signaled())
        .unwrap();
    let wc = c.ccq.wait_one(T).expect("a completion");
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
    let mut got = vec![0; data.len()];
    c.sep.read(100, &mut got).unwrap();
    assert_eq!(got, data);
    assert!(c.accepted.arrivals() >= 1);
    assert!(c.server.stats().bytes_deposited >= data.len() as u64);
}

/// Posts `reqs` signaled and waits for all their completions.
fn run(c: &Conn, reqs: &[WorkRequest]) -> Vec<Completion> {
    for r in reqs {
        c.conn.post(&r.signaled()).unwrap();
    }
    let end = Instant::now() + T;
    let mut wcs = Vec::new();
    while wcs.len() < reqs.len() && Instant::now() < end {
        if let Some(wc) = c.ccq.wait_one(Duration::from_millis(100)) {
            wcs.push(wc);
        }
    }
    assert_eq!(wcs.len(), reqs.len(), "completions within {T:?}: {wcs:?}");
    wcs
}

#[test]
fn reads_and_atomics_return_what_the_receiver_holds() {
    let c = connect("atomics", 16 << 10, Rights::ALL, 1);
    let data = pattern(5000, 3);
    c.sep.write(1000, &data).unwrap();
    c.sep.write(64, &40u64.to_le_bytes()).unwrap();
    let wcs = run(
        &c,
        &[
            WorkRequest::read(1, &c.cep, 8192, data.len() as u32, 1000),
            WorkRequest::fetch_add(2, &c.cep, 0, 64, 2),
            WorkRequest::cmp_swap(3, &c.cep, 8, 64, 42, 7),
            WorkRequest::cmp_swap(4, &c.cep, 16, 64, 42, 9),
        ],
    );
    for wc in &wcs {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    let mut got = vec![0; data.len()];
    c.cep.read(8192, &mut got).unwrap();
    assert_eq!(got, data);
    // 40 + 2 = 42, swapped for 7; the second compare sees 7 and leaves it.
    assert_eq!(c.cep.load_u64(0).unwrap(), 40);
    assert_eq!(c.cep.load_u64(8).unwrap(), 42);
    assert_eq!(c.cep.load_u64(16).unwrap(), 7);
    assert_eq!(c.sep.load_u64(64).unwrap(), 7);
}

#[test]
fn a_write_out_of_bounds_or_without_rights_is_refused_and_writes_nothing() {
    let c = connect("refusals", 4096, Rights::REMOTE_WRITE, 1);
    c.cep.fill(0, 4096, 0xee).unwrap();
    let wcs = run(
        &c,
        &[
            // Past the end of the 4 KiB endpoint.
            WorkRequest::write(1, &c.cep, 0, 64, 4090),
            // A read of an endpoint with no remote-read right.
            WorkRequest::read(2, &c.cep, 0, 16, 0),
            // An atomic without the atomic right.
            WorkRequest::fetch_add(3, &c.cep, 0, 0, 1),
        ],
    );
    for wc in &wcs {
        assert_eq!(wc.status, WcStatus::RemoteAccessError, "{wc:?}");
    }
    let mut mem = vec![0xff; 4096];
    c.sep.read(0, &mut mem).unwrap();
    assert!(mem.iter().all(|&b| b == 0), "nothing written");
    assert_eq!(c.server.stats().dropped_total(), 3);
    // The connection goes on after refusals.
    let wc = &run(&c, &[WorkRequest::write_inline(4, b"still up", 0).unwrap()])[0];
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(c.sep.load_u8(0).unwrap(), b's');
}

#[test]
fn a_signaled_request_beyond_the_completion_queue_is_refused_at_post() {
    let (server, client) = pair("cqfull", 1);
    let sep = server.alloc_endpoint(4096, Rights::REMOTE_WRITE).unwrap();
    let scq = server.create_cq(8);
    let listener = server.listen(7, &sep, &scq).unwrap();
    let cep = client.alloc_endpoint(4096, Rights::NONE).unwrap();
    let ccq = client.create_cq(2);
    let conn = client.connect([10, 0, 0, 1], 7, &cep, &ccq).unwrap();
    let _accepted = listener.accept(T).unwrap();
    let w = |id: u64| WorkRequest::write_inline(id, &[id as u8; 8], 8 * id as u32).unwrap();
    conn.post(&w(0).signaled()).unwrap();
    conn.post(&w(1).signaled()).unwrap();
    match conn.post(&w(2).signaled()) {
        Err(Error::CompletionQueueFull { depth: 2 }) => {}
        other => panic!("expected CompletionQueueFull, got {other:?}"),
    }
    let got: Vec<_> = (0..2)
        .map(|_| ccq.wait_one(T).expect("a completion"))
        .collect();
    assert!(got.iter().all(|wc| wc.status == WcStatus::Success));
    conn.post(&w(2).signaled()).unwrap();
    assert_eq!(ccq.wait_one(T).expect("a completion").wr_id, 2);
}

#[test]
fn a_conditional_interrupt_posts_an_event_only_when_its_condition_holds() {
    let mut regs = None;
    let c = connect_with(pair("events", 1), 4096, Rights::REMOTE_WRITE, |server| {
        let w = server.alloc_registers(4).unwrap();
        regs = Some(w);
        ConnOptions {
            registers: Registers::Window(w),
            ..ConnOptions::default()
        }
    });
    let regs = regs.unwrap();
    // r0: the queue pointer (indirect use only), r1: its stride, r2: the level.
    c.server.write_register(regs, 0, 256).unwrap();
    c.server
        .set_register_protection(regs, 0, RegProt::INDIRECT)
        .unwrap();
    c.server.write_register(regs, 1, 16).unwrap();
    c.server.write_register(regs, 2, 5).unwrap();
    c.server
        .set_register_protection(regs, 2, RegProt::READ)
        .unwrap();
    // Interrupt when the level (r2) is below the operand.
    let req = |id: u64, level: u32| {
        WorkRequest::send_inline(id, &[id as u8; 16], 0)
            .unwrap()
            .operand(level)
            .cond(Cond::Lt, Src::Operand, 2)
    };
    let wcs = run(&c, &[req(1, 3), req(2, 9), req(3, 5), req(4, 6)]);
    assert!(
        wcs.iter().all(|wc| wc.status == WcStatus::Success),
        "{wcs:?}"
    );
    let q = c.sep.events();
    let evs: Vec<Event> = std::iter::from_fn(|| q.poll()).collect();
    let operands: Vec<u32> = evs.iter().map(|e| e.operand).collect();
    assert_eq!(operands, [9, 6], "{evs:?}");
    assert!(evs.iter().all(|e| e.kind == EventKind::Interrupt));
    assert_eq!(evs[0].ea, 256 + 16);
    assert_eq!(c.server.read_register(regs, 0).unwrap(), 256 + 4 * 16);
    for (i, id) in (1u8..=4).enumerate() {
        assert_eq!(c.sep.load_u8(256 + 16 * i as u64).unwrap(), id);
    }
}

#[test]
fn closing_a_connection_flushes_what_never_left_and_refuses_posts() {
    let c = connect("close", 4096, Rights::REMOTE_WRITE, 1);
    c.accepted.close();
    let end = Instant::now() + T;
    while c.conn.state() == ConnState::Normal && Instant::now() < end {
        c.client.progress();
        c.server.progress();
    }
    assert_ne!(
        c.conn.state(),
        ConnState::Normal,
        "the peer's close reached the client"
    );
    assert!(c
        .conn
        .post(&WorkRequest::write_inline(1, b"late", 0).unwrap())
        .is_err());
}

#[test]
fn two_shards_a_side_take_their_own_connections() {
    let (server, client) = pair("shards", 2);
    assert_eq!(server.workers(), 2);
    let mut conns = Vec::new();
    for shard in 0..2 {
        let sep = server
            .alloc_endpoint_on(shard, 4096, Rights::REMOTE_WRITE)
            .unwrap();
        let scq = server.create_cq(8);
        let listener = server.listen(10 + shard as u32, &sep, &scq).unwrap();
        let cep = client
            .alloc_endpoint_on(1 - shard, 4096, Rights::NONE)
            .unwrap();
        let ccq = client.create_cq(8);
        let conn = client
            .connect([10, 0, 0, 1], 10 + shard as u32, &cep, &ccq)
            .unwrap();
        let accepted = listener.accept(T).unwrap();
        conns.push((sep, cep, ccq, conn, accepted, listener));
    }
    for (i, (sep, cep, ccq, conn, _, _)) in conns.iter().enumerate() {
        let data = pattern(3000, i as u8);
        cep.write(0, &data).unwrap();
        conn.post(&WorkRequest::write(1, cep, 0, 3000, 0).signaled())
            .unwrap();
        let wc = ccq.wait_one(T).expect("a completion");
        assert_eq!(wc.status, WcStatus::Success);
        let mut got = vec![0; 3000];
        sep.read(0, &mut got).unwrap();
        assert_eq!(got, data);
    }
    let per_shard: Vec<u64> = server.shard_stats().iter().map(|s| s.msgs_rx).collect();
    assert!(per_shard.iter().all(|&n| n > 0), "{per_shard:?}");
}

#[test]
fn dedicated_workers_on_lossy_segments_still_deliver_every_byte() {
    let open = |ip| {
        Device::open(
            DeviceConfig::new("sim:lossy", ip)
                .progress(Progress::Dedicated)
                .workers(1),
        )
        .unwrap()
    };
    let (server, client) = (open([10, 0, 0, 1]), open([10, 0, 0, 2]));
    let faults: FaultConfig = "loss=0.05,reorder=0.05,dup=0.02,seed=3".parse().unwrap();
    server.set_faults(Some(faults));
    client.set_faults(Some(faults));
    let c = connect_with((server, client), 256 << 10, Rights::REMOTE_WRITE, |_| {
        ConnOptions::default()
    });
    let data = pattern(200_000, 9);
    c.cep.write(0, &data).unwrap();
    let reqs: Vec<_> = (0..10u32)
        .map(|k| {
            WorkRequest::write(
                u64::from(k),
                &c.cep,
                u64::from(k) * 20_000,
                20_000,
                k * 20_000,
            )
        })
        .collect();
    let wcs = run(&c, &reqs);
    assert!(
        wcs.iter().all(|wc| wc.status == WcStatus::Success),
        "{wcs:?}"
    );
    let mut got = vec![0; data.len()];
    c.sep.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    let f = c.server.fault_stats();
    assert!(f.dropped > 0 && c.client.stats().retransmits > 0, "{f:?}");
}

#[test]
fn a_segment_needs_a_name_and_takes_one_device_per_address() {
    match Device::open(DeviceConfig::new("sim:", [10, 0, 0, 1])) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("empty"), "{why}"),
        other => panic!("an empty segment name: {other:?}"),
    }
    let _a = Device::open(DeviceConfig::new("sim:dup", [10, 0, 0, 1])).unwrap();
    match Device::open(DeviceConfig::new("sim:dup", [10, 0, 0, 1])) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("already attached"), "{why}"),
        other => panic!("a second device of one address: {other:?}"),
    }
}
