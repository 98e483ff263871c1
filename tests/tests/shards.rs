//! Shards (issue 11, item 1; docs/design.md §6): a device of several workers, each with its
//! own node, serving the endpoints assigned to it. Frames reach the owning shard by its
//! own queue pair (ring ports get one per shard) or by software dispatch through shard
//! 0 (a port with fewer queues than shards); control calls go to the owning shard.

use std::time::Duration;

use deposit::*;

const T: Duration = Duration::from_secs(10);
const SERVICE: u32 = 7;
const HALF: usize = 1 << 18;

/// A server of `server_workers` shards (dedicated) and a client of `client_workers`
/// (inline) on ring pair `name`, the client's side opened first when `client_first`
/// (the pair's queue count is the first side's: one per shard of that side).
fn pair(
    name: &str,
    server_workers: usize,
    client_workers: usize,
    client_first: bool,
) -> (Device, Device) {
    let s = DeviceConfig::new(&format!("ring:{name}:b"), [10, 0, 0, 1])
        .progress(Progress::Dedicated)
        .workers(server_workers);
    let c = DeviceConfig::new(&format!("ring:{name}:a"), [10, 0, 0, 2]).workers(client_workers);
    if client_first {
        let c = Device::open(c).expect("client");
        (Device::open(s).expect("server"), c)
    } else {
        let s = Device::open(s).expect("server");
        (s, Device::open(c).expect("client"))
    }
}

/// Serves one memory through a nested endpoint on every shard of `dev`, each listening
/// on [`SERVICE`]; returns the memory, the nested endpoints and their listeners.
fn serve_on_every_shard(
    dev: &Device,
    cq: &CompletionQueue,
) -> (Endpoint, Vec<Endpoint>, Vec<Listener>) {
    let n = dev.workers();
    let mem = dev
        .alloc_endpoint_on(0, (HALF * n) as u64, Rights::REMOTE_WRITE)
        .unwrap();
    let eps: Vec<Endpoint> = (0..n)
        .map(|k| {
            dev.sub_endpoint_on(
                k,
                &mem,
                (k * HALF) as u64,
                HALF as u64,
                Rights::REMOTE_WRITE,
            )
            .unwrap()
        })
        .collect();
    let ls = eps
        .iter()
        .map(|ep| dev.listen(SERVICE, ep, cq).unwrap())
        .collect();
    (mem, eps, ls)
}

/// Connects `conns` times to the server (client endpoints round-robin over the
/// client's shards), writes a pattern of its own through each, and checks every byte
/// on the server; returns the client connections and the server's accepted ones.
fn write_through_each(
    server: &Device,
    client: &Device,
    listeners: &[Listener],
    mem: &Endpoint,
    conns: usize,
) -> (Vec<Connection>, Vec<Connection>) {
    let ccq = client.create_cq(1024);
    let mut cs = Vec::new();
    let mut accepted = Vec::new();
    for i in 0..conns {
        let ep = client.alloc_endpoint(4096, Rights::NONE).unwrap();
        assert_eq!(ep.shard(), i % client.workers(), "endpoints round-robin");
        ep.fill(0, 4096, 0x40 + i as u8).unwrap();
        let c = client.connect([10, 0, 0, 1], SERVICE, &ep, &ccq).unwrap();
        assert_eq!(
            c.local_number() & 0xff,
            ep.shard() as u32,
            "a connection is its endpoint's shard's"
        );
        // The request went to one of the listeners: whichever took it accepts.
        let s = loop {
            if let Some(s) = listeners
                .iter()
                .find_map(|l| l.accept(Duration::from_millis(1)).ok())
            {
                break s;
            }
        };
        assert_eq!(s.remote_number(), c.local_number());
        cs.push(c);
        accepted.push(s);
    }
    for (i, (c, s)) in cs.iter().zip(&accepted).enumerate() {
        let off = i * 4096;
        let wr = WorkRequest::write(i as u64, c.endpoint(), 0, 4096, off as u32).signaled();
        c.post(&wr).unwrap();
        let wc = ccq.wait_one(T).expect("completion");
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        // The server side of connection i is on the shard its endpoint is.
        let at = s.endpoint().shard() * HALF + off;
        let mut got = vec![0u8; 4096];
        mem.read(at as u64, &mut got).unwrap();
        assert!(got.iter().all(|&b| b == 0x40 + i as u8), "connection {i}");
    }
    let _ = server;
    (cs, accepted)
}

#[test]
fn endpoints_on_both_shards_are_served_each_by_its_own_worker() {
    let (server, client) = pair("sh_both", 2, 2, false);
    assert_eq!(server.workers(), 2);
    let scq = server.create_cq(64);
    let (mem, eps, ls) = serve_on_every_shard(&server, &scq);
    assert_eq!(eps[1].shard(), 1);
    let (cs, ss) = write_through_each(&server, &client, &ls, &mem, 32);
    // Each shard ran its connections' messages on its own node and worker thread.
    let per = server.shard_stats();
    assert_eq!(per.len(), 2);
    for (k, st) in per.iter().enumerate() {
        assert!(st.msgs_rx >= 1, "shard {k}: {st:?}");
    }
    let total = server.stats();
    assert_eq!(total.msgs_rx, per[0].msgs_rx + per[1].msgs_rx);
    let names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect();
    for k in 0..2 {
        assert!(
            names.iter().any(|n| *n == format!("deposit-worker{k}")),
            "{names:?}"
        );
    }
    drop((cs, ss));
}

#[test]
fn shards_sharing_one_queue_pair_dispatch_in_software() {
    // The client opens the pair first with one shard (two queue pairs): the server's
    // three shards then share them — shard 0 receives and sends for the others.
    let (server, client) = pair("sh_soft", 3, 1, true);
    let scq = server.create_cq(64);
    let (mem, _eps, ls) = serve_on_every_shard(&server, &scq);
    let (cs, ss) = write_through_each(&server, &client, &ls, &mem, 40);
    let on: Vec<usize> = ss.iter().map(|s| s.endpoint().shard()).collect();
    for k in 0..3 {
        assert!(on.contains(&k), "no connection on shard {k}: {on:?}");
    }
    let per = server.shard_stats();
    for (k, st) in per.iter().enumerate() {
        assert!(st.msgs_rx >= 1, "shard {k}: {st:?}");
    }
    drop((cs, ss));
    // High-priority frames arrive on the pair's second queue, which shard 0 polls as
    // its high-priority one: they too reach the shard of their connection.
    let ccq = client.create_cq(64);
    let cep = client.alloc_endpoint(4096, Rights::NONE).unwrap();
    cep.fill(0, 4096, 0x7e).unwrap();
    let high = ConnOptions {
        priority: Priority::High,
        ..ConnOptions::default()
    };
    let mut on = Vec::new();
    for i in 0..12u32 {
        let c = client
            .connect_with([10, 0, 0, 1], SERVICE, &cep, &ccq, &high)
            .unwrap();
        let s = loop {
            if let Some(s) = ls
                .iter()
                .find_map(|l| l.accept(Duration::from_millis(1)).ok())
            {
                break s;
            }
        };
        let off = 200 * 1024 + 64 * i as usize;
        c.post(&WorkRequest::write(9, &cep, 0, 64, off as u32).signaled())
            .unwrap();
        let wc = ccq.wait_one(T).expect("completion");
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        let at = s.endpoint().shard() * HALF + off;
        assert_eq!(
            mem.load_u8((at + 63) as u64).unwrap(),
            0x7e,
            "high-priority write {i}"
        );
        on.push(s.endpoint().shard());
    }
    assert!(on.iter().any(|&k| k != 0), "{on:?}");
    assert!(server.stats().frames_rx_high > 0);
}

#[test]
fn control_calls_reach_the_owning_shard() {
    let (server, client) = pair("sh_ctl", 2, 1, false);
    let scq = server.create_cq(64);
    let ep1 = server
        .alloc_endpoint_on(1, 2 * 4096, Rights::REMOTE_WRITE)
        .unwrap();
    // Windows are per shard: one of shard 0 is refused for an endpoint of shard 1.
    let w0 = server.alloc_registers(4).unwrap();
    let w1 = ep1.alloc_registers(4).unwrap();
    assert_ne!(w0.base, w1.base);
    let opts = ConnOptions {
        registers: Registers::Window(w0),
        ..ConnOptions::default()
    };
    let e = server.listen_with(SERVICE, &ep1, &scq, &opts).err();
    assert!(
        matches!(&e, Some(Error::Cm(_))),
        "a window of another shard: {e:?}"
    );
    assert!(ep1.set_global_registers(w0).is_err());
    ep1.set_global_registers(w1).unwrap();
    // Register calls go to the window's shard.
    server.write_register(w1, 2, 77).unwrap();
    server.write_register(w0, 2, 55).unwrap();
    assert_eq!(server.read_register(w1, 2).unwrap(), 77);
    assert_eq!(server.read_register(w0, 2).unwrap(), 55);
    // Page rights go to the endpoint's shard: page 0 revoked, page 1 still writable.
    ep1.set_page_rights(0, Rights::NONE).unwrap();
    let opts = ConnOptions {
        registers: Registers::Window(w1),
        ..ConnOptions::default()
    };
    let l = server.listen_with(SERVICE, &ep1, &scq, &opts).unwrap();
    let cep = client.alloc_endpoint(4096, Rights::NONE).unwrap();
    cep.fill(0, 4096, 9).unwrap();
    let ccq = client.create_cq(64);
    let c = client.connect([10, 0, 0, 1], SERVICE, &cep, &ccq).unwrap();
    let s = l.accept(T).unwrap();
    assert_eq!(s.local_number() & 0xff, 1);
    c.post(&WorkRequest::write(1, &cep, 0, 64, 0).signaled())
        .unwrap();
    let wc = ccq.wait_one(T).expect("completion");
    assert_eq!(wc.status, WcStatus::RemoteAccessError, "{wc:?}");
    // The refusal moved the connection to error; a new one writes page 1.
    drop((c, s));
    let c = client.connect([10, 0, 0, 1], SERVICE, &cep, &ccq).unwrap();
    let _s = l.accept(T).unwrap();
    c.post(&WorkRequest::write(2, &cep, 0, 64, 4096).signaled())
        .unwrap();
    let wc = ccq.wait_one(T).expect("completion");
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!(ep1.load_u8(4096 + 63).unwrap(), 9);
    let st = server.shard_stats();
    assert_eq!(st[0].msgs_rx, 0, "shard 0 ran nothing: {:?}", st[0]);
    assert!(st[1].msgs_rx >= 1);
}

#[test]
fn a_request_naming_another_shards_endpoint_is_refused_at_post() {
    // Endpoint numbers are per shard: a read into (or a write from) an endpoint of
    // another shard than the connection's would use whatever that number names in the
    // connection's shard — another endpoint, read or filled silently. Refused at post.
    let (server, client) = pair("xshard", 1, 2, false);
    let scq = server.create_cq(64);
    let sep = server
        .alloc_endpoint(4096, Rights::REMOTE_WRITE | Rights::REMOTE_READ)
        .unwrap();
    let _l = server.listen(SERVICE, &sep, &scq).unwrap();
    let cq = client.create_cq(64);
    let ep = client.alloc_endpoint_on(0, 4096, Rights::NONE).unwrap();
    let other = client.alloc_endpoint_on(1, 4096, Rights::NONE).unwrap();
    let same = client.alloc_endpoint_on(0, 4096, Rights::NONE).unwrap();
    let conn = client.connect([10, 0, 0, 1], SERVICE, &ep, &cq).unwrap();
    for wr in [
        WorkRequest::read(1, &other, 0, 64, 0),
        WorkRequest::write(2, &other, 0, 64, 0),
        WorkRequest::fetch_add(3, &other, 0, 0, 1),
    ] {
        match conn.post(&wr.signaled()) {
            Err(Error::InvalidArgument(why)) => assert!(why.contains("shard 1"), "{why}"),
            r => panic!("a request naming shard 1's endpoint on a shard-0 connection: {r:?}"),
        }
    }
    // The same requests on the connection's own shard run, byte-exact.
    same.write(0, &[0x5a; 64]).unwrap();
    conn.post(&WorkRequest::write(4, &same, 0, 64, 0).signaled())
        .unwrap();
    let back = client.alloc_endpoint_on(0, 4096, Rights::NONE).unwrap();
    conn.post(&WorkRequest::read(5, &back, 0, 64, 0).signaled())
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [Completion::EMPTY; 8];
    let end = std::time::Instant::now() + T;
    while got.len() < 2 && std::time::Instant::now() < end {
        client.progress();
        let n = cq.poll(&mut buf);
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got.len(), 2, "{got:?}");
    for wc in &got {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    let mut b = [0u8; 64];
    back.read(0, &mut b).unwrap();
    assert_eq!(b, [0x5a; 64]);
}
