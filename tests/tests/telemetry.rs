//! DPDK telemetry shows deposit's counters of a running process: this process opens a
//! ring pair, moves data, and reads its own telemetry socket as `dpdk-telemetry.py`
//! would (found by the pid in its greeting), checking the answers against the API's.

use std::time::Duration;

use deposit::*;
use deposit_tests::telemetry::telemetry_of;
use deposit_tests::*;

const T: Duration = Duration::from_secs(10);

#[test]
fn the_telemetry_socket_answers_deposits_commands_with_the_devices_counters() {
    let pair = RingPair::new("telemetry");
    let c = pair.connect(4096, 1);
    // 20 signaled writes, and one refused (outside the server's 4 KiB endpoint), so
    // that a drop reason has a count.
    for i in 0..20u64 {
        c.client
            .post(&WorkRequest::write(i, &c.cep, 0, 64, 64 * i as u32).signaled())
            .unwrap();
    }
    c.client
        .post(
            &WorkRequest::write_inline(99, b"x", 8192)
                .unwrap()
                .signaled(),
        )
        .unwrap();
    let wcs = wait_completions(&c.ccq, 21, T);
    assert!(
        wcs[..20].iter().all(|wc| wc.status == WcStatus::Success),
        "{wcs:?}"
    );
    assert_eq!(
        wcs[20].remote_reason,
        Some(DropReason::OutOfBounds),
        "{wcs:?}"
    );

    let tel = telemetry_of(std::process::id(), T).expect("this process's telemetry socket");
    // The server opened first: device 0.
    let devs = tel.ask("/deposit/devices").unwrap();
    assert_eq!(devs["0"][0], "ring:telemetry:b", "{devs}");
    assert_eq!(devs["1"][0], "ring:telemetry:a", "{devs}");
    assert_eq!(devs["0"][1], "10.0.0.1", "{devs}");

    let want = pair.server.stats();
    let got = tel.ask("/deposit/stats,0").unwrap();
    // Every counter the API has, by name, with the same value (the traffic is over).
    let mut named = 0;
    want.each(|name, v| {
        assert_eq!(got[name].as_u64(), Some(v), "{name} in {got}");
        named += 1;
    });
    assert_eq!(got.as_object().unwrap().len(), named, "{got}");
    // Run in order: the 20 deposited and the refused one.
    assert_eq!(got["msgs_rx"].as_u64(), Some(21), "{got}");

    let drops = tel.ask("/deposit/drops,0").unwrap();
    assert_eq!(drops["out_of_bounds"].as_u64(), Some(1), "{drops}");
    assert_eq!(
        drops.as_object().unwrap().len(),
        DropReason::COUNT,
        "{drops}"
    );

    let conns = tel.ask("/deposit/conns,0").unwrap();
    assert_eq!(conns["total"].as_u64(), Some(1), "{conns}");
    let me = &conns[c.server.local_number().to_string()];
    assert_eq!(me[0], "10.0.0.2", "{conns}");
    assert_eq!(me[1], c.client.local_number().to_string(), "{conns}");
    assert_eq!(me[2], "Normal", "{conns}");
    // The connection's own counts, as the API reads them.
    assert_eq!(me[3], c.server.arrivals().to_string(), "{conns}");
    assert_eq!(me[4], "1", "{conns}");
    assert_eq!(c.server.dropped(), 1);

    // The client's congestion state of its one peer, as the API reads it.
    let peers = tel.ask("/deposit/peers,1").unwrap();
    let api = pair.client.peers();
    assert_eq!(api.len(), 1, "{api:?}");
    let p = &peers["0"];
    assert_eq!(p[0], "10.0.0.1", "{peers}");
    assert_eq!(p[1], "0", "shard 0: {peers}");
    assert_eq!(p[2], api[0].window.to_string(), "{peers}");
    assert_eq!(
        p[3], "0",
        "nothing in flight once the traffic is over: {peers}"
    );
    assert_eq!(peers["fields"][2], "window", "{peers}");

    // A device that does not exist is an answer, not a crash.
    let none = tel.ask("/deposit/stats,9").unwrap();
    assert!(
        none["error"].as_str().unwrap().contains("no device 9"),
        "{none}"
    );
}

/// `/deposit/conns` answers at most 128 connections and says where the next page
/// starts; the pages together list each connection once.
#[test]
fn the_connection_listing_pages_through_every_connection() {
    const N: usize = 130;
    let pair = RingPair::new("telemetry_pages");
    let sep = pair
        .server
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap();
    let scq = pair.server.create_cq(16);
    let listener = pair.server.listen(1, &sep, &scq).unwrap();
    let cep = pair
        .client
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap();
    let ccq = pair.client.create_cq(16);
    let mut conns = Vec::new();
    for _ in 0..N {
        conns.push(pair.client.connect([10, 0, 0, 1], 1, &cep, &ccq).unwrap());
        conns.push(listener.accept(T).unwrap());
    }
    let tel = telemetry_of(std::process::id(), T).expect("this process's telemetry socket");
    let mut seen = std::collections::BTreeSet::new();
    let mut from = 0u64;
    for page in 0.. {
        assert!(page < 3, "more pages than {N} connections need");
        let a = tel.ask(&format!("/deposit/conns,0,{from}")).unwrap();
        assert_eq!(a["total"].as_u64(), Some(N as u64), "{a}");
        for (k, _) in a.as_object().unwrap() {
            if let Ok(n) = k.parse::<u32>() {
                assert!(seen.insert(n), "connection {n} listed twice");
            }
        }
        match a.get("next").and_then(|n| n.as_u64()) {
            Some(n) => from = n,
            None => break,
        }
    }
    let want: std::collections::BTreeSet<u32> = conns
        .iter()
        .skip(1)
        .step_by(2)
        .map(|c| c.local_number())
        .collect();
    assert_eq!(seen, want);
}
