//! The second process of the two-process memif tests.
//!
//! ```text
//! testnode sweep-server <socket> <seed>   accept one connection, wait for the size
//!                                          sweep, verify every byte, exit 0 / 1
//! testnode inject <socket> <server-ip>    connect as a memif client, mix hostile raw
//!                                          frames with legitimate writes, check the
//!                                          completions, exit 0 / 1
//! testnode seed-receiver <socket> <example>
//!                                          the receiver of a seed example (stride,
//!                                          priority, atomic, bitvec) as a memif server: set up
//!                                          and protect the registers, accept one
//!                                          connection, wait for the sender's messages,
//!                                          verify memory, registers and events, exit 0 / 1
//! testnode barrier-node <port> <index> <rounds> [max-frame]
//!                                          one of three barrier nodes (10.0.0.<index+1>)
//!                                          on `port` (e.g. af_packet:veth; max frame
//!                                          1514 unless given): reads "go" then runs
//!                                          `rounds` barrier rounds, exit 0 / 1
//! testnode sweep-node <port> <server|client> <seed> <max-frame>
//!                                          node 10.0.0.1 (server) or .2 (client) on
//!                                          `port` (e.g. af_packet:veth): after "go" the
//!                                          client writes the size sweep to the server,
//!                                          says "by-reference N" (frames whose payload
//!                                          went by reference) and "completed", the server
//!                                          verifies every byte and says "verified";
//!                                          both serve until "exit"
//! testnode sink-server <port>             node 10.0.0.1 on `port` (e.g. af_packet:veth):
//!                                          accept one connection on service 23 and
//!                                          serve it until killed (the peer-death test)
//! testnode stream-client <port> <retry-ms> <retries>
//!                                          node 10.0.0.2: after "go", stream 4 KiB
//!                                          writes to the sink, 64 outstanding, until
//!                                          the connection fails; print the
//!                                          completions by status and mbufs in use
//! testnode soak-server <socket> <seed> <ops> <faults|none>
//!                                          the receiver of the soak workload
//!                                          (`deposit_tests::soak`) as a memif server with
//!                                          fault injection: accept one connection, then
//!                                          for each "verify N" line check round N and say
//!                                          "ok N"; "done": print its fault counters
//!                                          ("faults ..."), exit at stdin's end
//! testnode ip-receiver <socket> <case>    the receiver of the instruction-pointer and
//!                                          token tests (priority, refusals, tokens) as
//!                                          a memif server: program, announce the ips or
//!                                          tokens, accept one connection, follow the
//!                                          sender's lines, verify on "verify", exit 0 / 1
//! testnode token-node <port> <a|b|c>      one of three nodes (10.0.0.1 to .3) passing a
//!                                          payload token a -> b -> c in ordinary writes;
//!                                          c deposits into a's buffer with it, twice
//! testnode spoof-server <port>            node 10.0.0.1: listens on service 31 (backlog
//!                                          4), accepts the one real client, checks its
//!                                          SPOOF_WRITES writes, says "verified", then on
//!                                          "report" (once the flood drained) its
//!                                          connections and refusals ("connections N",
//!                                          "challenges N", "bad_cookie N", "rate_limited
//!                                          N", "stats"); until "exit"
//! testnode spoof-client <port>            node 10.0.0.2: after "go", connects to the
//!                                          server and writes SPOOF_WRITES patterns,
//!                                          "completed"; until "exit"
//! testnode spoof-flood <port> <n>         node 10.0.0.3, the attacker: after "go",
//!                                          sends n connect requests for service 31 from
//!                                          random IP and MAC addresses (half with a
//!                                          guessed cookie), "flooded"; until "exit"
//! testnode secure-server <port>           node 10.0.0.1: a secure listener (service
//!                                          33); checks the client's writes and its
//!                                          fetch-and-add counter, "verified", then its
//!                                          refusals by reason, "stats"; until "exit"
//! testnode secure-client <port>           node 10.0.0.2: connects securely, writes and
//!                                          adds, every completion checked, "completed"
//! testnode secure-tap <port> <n>          node 10.0.0.3, the on-path attacker on a hub:
//!                                          for n of the client's sealed frames sends
//!                                          changed copies, replays, forged frames and
//!                                          disconnects with the right connection and key
//!                                          (a raw packet socket), "sent ...",
//!                                          "plaintext N", "tapped"; until "exit"
//! testnode trust-server <port> <plain|secure|psk> <identity-file|-> <0|1>
//!                                          node 10.0.0.1: listens (service 34) as the
//!                                          identity in the file (created if missing; -:
//!                                          a fresh one), "key <base64>" first; accepts
//!                                          0 or 1 connection, "client_key ..", checks
//!                                          its writes and adds, "verified"; on "report"
//!                                          its state and refusals, "stats"; until "exit"
//! testnode trust-client <port> <plain|secure|psk> <pinned:KEY|file:PATH|tofu:PATH>
//!          <cm-timeout-ms>                 node 10.0.0.2: connects knowing the server's
//!                                          key so, "server_key ..", "connected" (or
//!                                          "error ..", "failed"), writes and adds,
//!                                          "completed"; on "report" as the server
//! testnode bystander <port>               node 10.0.0.3 on a hub: answers every connect
//!                                          request and data frame between .1 and .2 with
//!                                          forged challenges, REJECTs, replies and
//!                                          disconnects (a raw packet socket); on "stop"
//!                                          "sent ..", "seen ..", "plaintext N", "counts";
//!                                          until "exit"
//! testnode flood-server <port> <cm-timeout-ms>
//!                                          node 10.0.0.1: listens (service 35, backlog
//!                                          64) as a generic application, accepting and
//!                                          keeping every connection; "key ..", its memory
//!                                          when idle ("rss_kib N"), "ready"; on "report"
//!                                          memory, connections and counters, "stats";
//!                                          "verify", "trim"; until "exit"
//! testnode flood-client <port> <server-key>
//!                                          node 10.0.0.2: connects pinned ("connect_us
//!                                          N", "connected"), writes and reads back,
//!                                          "completed"; until "exit"
//! testnode flood-half <port> <n> [server-key]
//!                                          node 10.0.0.3 without a device: n connects
//!                                          by the transport's CM machine over a raw
//!                                          packet socket, never finishing any it gets,
//!                                          "midway", counts, "flooded"; until "exit"
//! testnode flood-full <port> <n> <server-key>
//!                                          node 10.0.0.3: n pinned connects kept, "ok
//!                                          N", "refused_<reason> N", "flooded"; "close"
//!                                          closes them all, "closed"; until "exit"
//! testnode churn-server <socket>          a memif server streaming writes to every
//!                                          client it accepts (`churn`)
//! testnode churn-client <socket>          a memif client that connects, then exits,
//!                                          closes or is killed as told (`churn`)
//! ```
//! Every wait is bounded; failures print one line on stderr and exit 1.

mod bystander;
mod churn;
mod flood;
mod ip_receiver;
mod secure;
mod token_relay;
mod trust;

use std::process::exit;
use std::time::Duration;

use deposit::*;
use deposit_tests::seed_priority::{
    landed, pointers_after, FINAL_LEVEL, HIGH, HIGH_BASE, INTERRUPTS, JOBS, LEVEL, LOW, LOW_BASE,
    SLOT,
};
use deposit_tests::*;

const T: Duration = Duration::from_secs(20);

/// Prints `dev`'s count of each of `reasons` ("auth_failed N", ...).
fn print_drops(dev: &Device, reasons: &[DropReason]) {
    let s = dev.stats();
    for r in reasons {
        println!("{} {}", r.name(), s.dropped(*r));
    }
}

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("testnode: {msg}");
    exit(1)
}

/// `readable`: the client may also read the endpoint back (remote-read rights).
fn sweep_server(sock: &str, seed: u64, readable: bool) {
    let dev = Device::open(DeviceConfig::new(
        &format!("memif:{sock}:server"),
        [10, 0, 0, 1],
    ))
    .unwrap_or_else(|e| fail(e));
    let (layout, len) = sweep_layout();
    let rights = if readable {
        Rights::REMOTE_WRITE | Rights::REMOTE_READ
    } else {
        Rights::REMOTE_WRITE
    };
    let ep = dev
        .alloc_endpoint(len as u64, rights)
        .unwrap_or_else(|e| fail(e));
    let cq = dev.create_cq(64);
    let l = dev.listen(7, &ep, &cq).unwrap_or_else(|e| fail(e));
    println!("ready");
    let conn = l.accept(T).unwrap_or_else(|e| fail(e));
    await_sweep(&dev, &conn, &ep, seed);
    // Keep serving a moment so the client's last acknowledgements get out.
    let end = std::time::Instant::now() + Duration::from_millis(300);
    while std::time::Instant::now() < end {
        dev.progress();
    }
    println!("verified {} writes", layout.len());
    if readable {
        serve_until_stop(&dev);
        return;
    }
    wait_for_release();
}

/// Keeps the device serving (the client reads back) until the parent writes a line
/// ("stop": it is done and about to leave) or closes stdin, then waits for the release
/// as [`wait_for_release`] does: nothing polls while the other process leaves.
fn serve_until_stop(dev: &Device) {
    use std::io::{BufRead, Write};
    let _ = std::io::stdout().flush();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = std::io::stdin().lock().lines();
        let _ = lines.next();
        let _ = tx.send(false);
        for _ in lines.by_ref() {}
        let _ = tx.send(true);
    });
    let end = std::time::Instant::now() + Duration::from_secs(30);
    let released = loop {
        dev.progress();
        if let Ok(r) = rx.try_recv() {
            break r;
        }
        if std::time::Instant::now() > end {
            fail("the client never said stop");
        }
    };
    if !released {
        let _ = rx.recv_timeout(Duration::from_secs(30));
    }
}

/// Waits (bounded) until every write of the size sweep arrived on `conn`, then checks
/// each against its pattern and the bytes between them for zeros; fails otherwise.
fn await_sweep(dev: &Device, conn: &Connection, ep: &Endpoint, seed: u64) {
    let (layout, len) = sweep_layout();
    if !wait_until(dev, T, || conn.arrivals() >= layout.len() as u64) {
        fail(format!(
            "only {} of {} writes arrived",
            conn.arrivals(),
            layout.len()
        ));
    }
    let mut prev_end = 0;
    for &(off, size) in &layout {
        check_zero(ep, prev_end, off - prev_end).unwrap_or_else(|e| fail(e));
        check_pattern(ep, off, size, seed, off as u64).unwrap_or_else(|e| fail(e));
        prev_end = off + size;
    }
    check_zero(ep, prev_end, len - prev_end).unwrap_or_else(|e| fail(e));
}

/// Stops using the port and waits (bounded) until the parent test closes our stdin,
/// then returns so the device is dropped and the process exits. A memif peer that
/// exits while the other side is inside an rx/tx burst can make DPDK 22.11's memif
/// touch unmapped regions (the peer's disconnect unmaps them from the interrupt
/// thread), so the two processes never leave while the other is polling — a node with
/// a dedicated worker stops it first (`Device::shutdown_for_test`).
fn wait_for_release() {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(Duration::from_secs(30));
}

fn one_write(dst_conn: u32, key: u64, seq: u32, off: u32, data: &[u8]) -> Vec<u8> {
    raw_frame(dst_conn, key, seq, &[write_msg(off, data)])
}

fn inject(sock: &str, server: [u8; 4]) {
    let dev = Device::open(DeviceConfig::new(
        &format!("memif:{sock}:client"),
        [10, 0, 0, 2],
    ))
    .unwrap_or_else(|e| fail(e));
    let ep = dev
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap_or_else(|e| fail(e));
    let cq = dev.create_cq(256);
    let conn = dev.connect(server, 9, &ep, &cq).unwrap_or_else(|e| fail(e));
    let remote = conn.remote_number();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..50u32 {
        // Hostile: wrong key, unknown connection, bad CRC, truncated, garbage.
        dev.send_raw_frame(&one_write(remote, next(), 0, 0, b"wrong key"));
        dev.send_raw_frame(&one_write(remote ^ 0xffff, next(), 0, 0, b"no such conn"));
        let mut f = one_write(remote, next(), 0, 0, b"bad crc");
        let n = f.len();
        f[n - 6] ^= 1;
        dev.send_raw_frame(&f);
        let f = one_write(remote, next(), 0, 0, &[0xAB; 300]);
        dev.send_raw_frame(&f[..(next() as usize % f.len())]);
        let g: Vec<u8> = (0..(next() % 2000)).map(|_| next() as u8).collect();
        dev.send_raw_frame(&g);
        // Legitimate: a write inside the endpoint and one past its end.
        let off = 64 * (round % 32);
        let data = [round as u8 | 0x80; 16];
        conn.post(
            &WorkRequest::write_inline(round as u64, &data, off)
                .unwrap()
                .signaled(),
        )
        .unwrap_or_else(|e| fail(e));
        conn.post(&WorkRequest::write_inline(1000 + round as u64, &data, 4090).unwrap())
            .unwrap_or_else(|e| fail(e));
        for _ in 0..2 {
            let wc = cq
                .wait_one(T)
                .unwrap_or_else(|| fail("completion timed out"));
            let want = if wc.wr_id >= 1000 {
                WcStatus::RemoteAccessError
            } else {
                WcStatus::Success
            };
            if wc.status != want {
                fail(format!(
                    "wr {} completed {:?}, expected {want:?}",
                    wc.wr_id, wc.status
                ));
            }
        }
    }
    println!("injected; stats {:?}", dev.stats().frames_tx);
    wait_for_release();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("sweep-server") if args.len() == 4 || args.len() == 5 => sweep_server(
            &args[2],
            args[3].parse().unwrap_or_else(|e| fail(e)),
            args.get(4).is_some_and(|a| a == "readable"),
        ),
        Some("inject") if args.len() == 4 => {
            let ip: std::net::Ipv4Addr = args[3].parse().unwrap_or_else(|e| fail(e));
            inject(&args[2], ip.octets())
        }
        Some("seed-receiver") if args.len() == 4 => seed_receiver(&args[2], &args[3]),
        Some("soak-server") if args.len() == 6 => soak_server(
            &args[2],
            args[3].parse().unwrap_or_else(|e| fail(e)),
            args[4].parse().unwrap_or_else(|e| fail(e)),
            &args[5],
        ),
        Some("barrier-node") if args.len() == 5 || args.len() == 6 => barrier_node(
            &args[2],
            args[3].parse().unwrap_or_else(|e| fail(e)),
            args[4].parse().unwrap_or_else(|e| fail(e)),
            args.get(5)
                .map_or(1514, |m| m.parse().unwrap_or_else(|e| fail(e))),
        ),
        Some("ip-receiver") if args.len() == 4 => ip_receiver::ip_receiver(&args[2], &args[3]),
        Some("token-node") if args.len() == 4 => token_relay::token_node(&args[2], &args[3]),
        Some("sweep-node") if args.len() == 6 => sweep_node(
            &args[2],
            &args[3],
            args[4].parse().unwrap_or_else(|e| fail(e)),
            args[5].parse().unwrap_or_else(|e| fail(e)),
        ),
        Some("sink-server") if args.len() == 3 => sink_server(&args[2]),
        Some("spoof-server") if args.len() == 3 => spoof_server(&args[2]),
        Some("spoof-client") if args.len() == 3 => spoof_client(&args[2]),
        Some("spoof-flood") if args.len() == 4 => {
            spoof_flood(&args[2], args[3].parse().unwrap_or_else(|e| fail(e)))
        }
        Some("secure-server") if args.len() == 3 => secure::secure_server(&args[2]),
        Some("secure-client") if args.len() == 3 => secure::secure_client(&args[2]),
        Some("secure-tap") if args.len() == 4 => {
            secure::secure_tap(&args[2], args[3].parse().unwrap_or_else(|e| fail(e)))
        }
        Some("trust-server") if args.len() == 6 => trust::trust_server(
            &args[2],
            &args[3],
            &args[4],
            args[5].parse().unwrap_or_else(|e| fail(e)),
        ),
        Some("trust-client") if args.len() == 6 => trust::trust_client(
            &args[2],
            &args[3],
            &args[4],
            args[5].parse().unwrap_or_else(|e| fail(e)),
        ),
        Some("bystander") if args.len() == 3 => bystander::bystander(&args[2]),
        Some("flood-server") if args.len() == 4 => {
            flood::flood_server(&args[2], args[3].parse().unwrap_or_else(|e| fail(e)))
        }
        Some("flood-client") if args.len() == 4 => flood::flood_client(&args[2], &args[3]),
        Some("flood-half") if args.len() == 4 || args.len() == 5 => flood::flood_half(
            &args[2],
            args[3].parse().unwrap_or_else(|e| fail(e)),
            args.get(4).map_or("-", String::as_str),
        ),
        Some("flood-full") if args.len() == 5 => flood::flood_full(
            &args[2],
            args[3].parse().unwrap_or_else(|e| fail(e)),
            &args[4],
        ),
        Some("churn-server") if args.len() == 3 => churn::churn_server(&args[2]),
        Some("churn-client") if args.len() == 3 => churn::churn_client(&args[2]),
        Some("stream-client") if args.len() == 5 => stream_client(
            &args[2],
            args[3].parse().unwrap_or_else(|e| fail(e)),
            args[4].parse().unwrap_or_else(|e| fail(e)),
        ),
        _ => fail(
            "usage: testnode sweep-server <socket> <seed> | inject <socket> <server-ip> \
             | seed-receiver <socket> <stride|priority|atomic|bitvec> \
             | barrier-node <port> <index> <rounds> [max-frame] | sink-server <port> \
             | sweep-node <port> <server|client> <seed> <max-frame> \
             | stream-client <port> <retry-ms> <retries> \
             | soak-server <socket> <seed> <ops> <faults|none> \
             | ip-receiver <socket> <priority|refusals|tokens> | token-node <port> <a|b|c> \
             | churn-server <socket> | churn-client <socket> \
             | spoof-server <port> | spoof-client <port> | spoof-flood <port> <n> \
             | secure-server <port> | secure-client <port> | secure-tap <port> <n> \
             | trust-server <port> <plain|secure|psk> <identity-file|-> <0|1> \
             | trust-client <port> <plain|secure|psk> <pinned:KEY|file:PATH|tofu:PATH> \
               <cm-timeout-ms> | bystander <port> | flood-server <port> <cm-timeout-ms> \
             | flood-client <port> <server-key> | flood-half <port> <n> [server-key] \
             | flood-full <port> <n> <server-key>",
        ),
    }
}

// ---------------------------------------------------------------------------------
// seed-receiver: the receiving node of the seed examples across processes.
// ---------------------------------------------------------------------------------

/// Registers and endpoint of the receiver; the expectations are the in-process ones
/// of `tests/seed_examples.rs` (the sender is `tests/seed_examples_memif.rs`).
const SEED_LEN: usize = 64 * 1024;
const SEED_SERVICE: u32 = 17;
/// Bytes of each write of the `segments` example (several messages).
const SEGMENTS_WRITE: usize = 20_000;

fn seed_check(cond: bool, what: impl std::fmt::Display) {
    if !cond {
        fail(what)
    }
}

fn seed_reg(dev: &Device, w: RegWindow, i: u32) -> u64 {
    dev.read_register(w, i).unwrap_or_else(|e| fail(e))
}

fn seed_image_check(ep: &Endpoint, img: &[u8]) {
    let got = memory_snapshot(ep, img.len());
    if let Some(i) = (0..img.len()).find(|&i| got[i] != img[i]) {
        fail(format!(
            "memory differs at offset {i}: got {:#04x}, want {:#04x}",
            got[i], img[i]
        ))
    }
}

fn seed_put(img: &mut [u8], off: u64, data: &[u8]) {
    img[off as usize..off as usize + data.len()].copy_from_slice(data);
}

/// Node 10.0.0.1 as a memif server on `sock`, with a dedicated worker.
fn memif_receiver(sock: &str) -> Device {
    Device::open(
        DeviceConfig::new(&format!("memif:{sock}:server"), [10, 0, 0, 1])
            .progress(Progress::Dedicated),
    )
    .unwrap_or_else(|e| fail(e))
}

/// The `segments` example's endpoint (room for four 20 KB writes).
const SEGMENTS_LEN: usize = 256 * 1024;

fn seed_receiver(sock: &str, example: &str) {
    let dev = memif_receiver(sock);
    let len = if example == "segments" {
        SEGMENTS_LEN
    } else {
        SEED_LEN
    };
    let ep = dev
        .alloc_endpoint(len as u64, Rights::ALL)
        .unwrap_or_else(|e| fail(e));
    let w = dev.alloc_registers(16).unwrap_or_else(|e| fail(e));
    let set = |i: u32, v: u64, p: RegProt| {
        dev.write_register(w, i, v).unwrap_or_else(|e| fail(e));
        dev.set_register_protection(w, i, p)
            .unwrap_or_else(|e| fail(e));
    };
    match example {
        "stride" => {
            set(0, 1000, RegProt::INDIRECT);
            set(1, 16, RegProt::NONE);
            set(2, 20_000, RegProt::INDIRECT | RegProt::WRITE);
        }
        "priority" => {
            set(HIGH.into(), HIGH_BASE, RegProt::INDIRECT);
            set((HIGH + 1).into(), SLOT, RegProt::NONE);
            set(LEVEL.into(), 0, RegProt::WRITE);
            set(LOW.into(), LOW_BASE, RegProt::INDIRECT);
            set((LOW + 1).into(), SLOT, RegProt::NONE);
        }
        "atomic" => {
            ep.write(512, &100u64.to_ne_bytes())
                .unwrap_or_else(|e| fail(e));
            ep.write(520, &5u64.to_ne_bytes())
                .unwrap_or_else(|e| fail(e));
            set(0, 7, RegProt::READ | RegProt::WRITE);
            set(1, 42, RegProt::READ | RegProt::WRITE);
            set(2, 99, RegProt::INDIRECT); // may not be read or changed
        }
        "bitvec" => {
            // Queue q: pointer r(2q) at 4096 (q + 1), stride r(2q+1) = 16; r10 the
            // bit vector of non-empty queues, interrupts blocked by its top bit.
            for q in 0..5u32 {
                set(2 * q, 4096 * (u64::from(q) + 1), RegProt::INDIRECT);
                set(2 * q + 1, 16, RegProt::NONE);
            }
            set(10, 1 << 63, RegProt::WRITE);
        }
        "segments" => {
            // Writes of several messages each, over a lossy link: r0 a queue pointer
            // with stride r1, r2 an indirect target, r3 an indexed base.
            set(0, 1000, RegProt::INDIRECT);
            set(1, 24_000, RegProt::NONE);
            set(2, 60_000, RegProt::INDIRECT);
            set(3, 90_000, RegProt::INDIRECT);
            let faults = "loss=0.05,reorder=0.05,dup=0.05,seed=11".parse().ok();
            dev.set_faults(faults);
        }
        other => fail(format!("unknown example {other}")),
    }
    let cq = dev.create_cq(64);
    let opts = ConnOptions {
        registers: Registers::Window(w),
        ..ConnOptions::default()
    };
    let l = dev
        .listen_with(SEED_SERVICE, &ep, &cq, &opts)
        .unwrap_or_else(|e| fail(e));
    println!("ready");
    let conn = l.accept(T).unwrap_or_else(|e| fail(e));
    let arrived = |n: u64| {
        if !wait_until(&dev, T, || conn.arrivals() >= n) {
            fail(format!("only {} of {n} messages arrived", conn.arrivals()))
        }
    };
    let events = ep.events();
    let mut img = vec![0u8; len];
    match example {
        "stride" => {
            // Three deposits with stride 16, then the receiver changes the stride.
            arrived(3);
            dev.write_register(w, 1, 40).unwrap_or_else(|e| fail(e));
            println!("stride 40");
            arrived(5);
            // Then four with the stride in each message's operand.
            arrived(9);
            let mut at = 1000;
            for (k, stride) in [(1u8, 16u64), (2, 16), (3, 16), (4, 40), (5, 40)] {
                seed_put(&mut img, at, &[k; 8]);
                at += stride;
            }
            seed_check(seed_reg(&dev, w, 0) == at, "post-incremented pointer");
            let mut at = 20_000;
            for (k, stride) in [24u64, 8, 56, 4].into_iter().enumerate() {
                seed_put(&mut img, at, &[0xA0 + k as u8; 4]);
                at += stride;
            }
            seed_check(seed_reg(&dev, w, 2) == at, "operand-strided pointer");
            seed_check(seed_reg(&dev, w, 1) == 40, "stride register unchanged");
            seed_check(events.poll().is_none(), "no event expected");
        }
        "priority" => {
            arrived(JOBS.len() as u64);
            for (at, data) in landed() {
                seed_put(&mut img, at, data);
            }
            let evs: Vec<Event> = std::iter::from_fn(|| events.poll()).collect();
            let got: Vec<(u32, u64, [u64; 4])> =
                evs.iter().map(|e| (e.operand, e.ea, e.regs)).collect();
            seed_check(got == INTERRUPTS, format!("events {evs:?}"));
            seed_check(
                evs.iter()
                    .all(|e| e.kind == EventKind::Interrupt && e.conn == conn.local_number()),
                "event kind",
            );
            seed_check(
                seed_reg(&dev, w, LEVEL.into()) == FINAL_LEVEL,
                "priority level",
            );
            seed_check(
                (
                    seed_reg(&dev, w, HIGH.into()),
                    seed_reg(&dev, w, LOW.into()),
                ) == pointers_after(0),
                "queue pointers",
            );
        }
        "atomic" => {
            // 5 memory fetch-adds, 3 register fetch-adds, 4 compare-and-swaps and 2
            // refused attempts on the protected register.
            arrived(14);
            seed_put(&mut img, 512, &105u64.to_ne_bytes());
            seed_put(&mut img, 520, &9u64.to_ne_bytes());
            seed_check(seed_reg(&dev, w, 0) == 10, "fetch-and-increment register");
            seed_check(seed_reg(&dev, w, 1) == 43, "compare-and-swap register");
            seed_check(seed_reg(&dev, w, 2) == 99, "protected register changed");
            seed_check(conn.dropped() == 2, "refused attempts");
            seed_check(
                dev.stats().dropped(DropReason::RegisterProtection) == 2,
                "refusals counted",
            );
            seed_check(events.poll().is_none(), "no event expected");
        }
        "bitvec" => {
            let mut fill = [0u64; 5];
            let mut expect = |img: &mut Vec<u8>, id: u8, q: usize| {
                seed_put(img, 4096 * (q as u64 + 1) + 16 * fill[q], &[0x10 + id; 16]);
                fill[q] += 1;
            };
            // Five appends while blocked: no interrupt, the vector collects the queues.
            arrived(5);
            for (id, q) in [(0u8, 2usize), (1, 0), (2, 3), (3, 2), (4, 0)] {
                expect(&mut img, id, q);
            }
            seed_check(
                events.poll().is_none(),
                "interrupts are blocked by the top bit",
            );
            seed_check(
                seed_reg(&dev, w, 10) == (1 << 63) | 0b1101,
                "bit vector of non-empty queues",
            );
            // Unblock (clear the top bit, keep the vector).
            dev.write_register(w, 10, 0b1101)
                .unwrap_or_else(|e| fail(e));
            println!("unblocked");
            arrived(8);
            for (id, q) in [(5u8, 1usize), (6, 4), (7, 3)] {
                expect(&mut img, id, q);
            }
            let evs: Vec<Event> = std::iter::from_fn(|| events.poll()).collect();
            seed_check(
                evs.len() == 1 && evs[0].operand == 1 << 4 && evs[0].ea == 4096 * 5,
                format!("one interrupt, for the append above every non-empty queue: {evs:?}"),
            );
            seed_check(seed_reg(&dev, w, 10) == 0b11111, "bit vector after");
            for q in 0..5u32 {
                seed_check(
                    seed_reg(&dev, w, 2 * q) == 4096 * (u64::from(q) + 1) + 16 * fill[q as usize],
                    format!("queue {q} pointer"),
                );
            }
        }
        "segments" => {
            arrived(4);
            let data: Vec<u8> = (0..SEGMENTS_WRITE as u64).map(|k| pattern(5, k)).collect();
            for at in [1000, 25_000, 60_000, 90_500] {
                seed_put(&mut img, at, &data);
            }
            seed_check(
                seed_reg(&dev, w, 0) == 49_000,
                "post-incremented once per work request",
            );
            seed_check(
                (1..4)
                    .map(|i| seed_reg(&dev, w, i))
                    .eq([24_000, 60_000, 90_000]),
                "registers untouched",
            );
            seed_check(dev.fault_stats().dropped > 0, "the link lost frames");
        }
        _ => unreachable!(),
    }
    seed_image_check(&ep, &img);
    // Keep serving a moment so the sender's last acknowledgements get out, then stop
    // the dedicated worker: nothing of this process may poll the memif while the
    // sender leaves (see wait_for_release).
    std::thread::sleep(Duration::from_millis(300));
    dev.shutdown_for_test();
    println!("verified {example}");
    wait_for_release();
}

// ---------------------------------------------------------------------------------
// barrier-node: one of three nodes of a barrier (seed §3.4).
// ---------------------------------------------------------------------------------

const BARRIER_NODES: usize = 3;
const BARRIER_SERVICE: u32 = 40;

fn barrier_ip(i: usize) -> [u8; 4] {
    [10, 0, 0, i as u8 + 1]
}

/// Reads stdin lines on a thread, so that waits on the parent stay bounded.
pub(crate) fn stdin_lines() -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.send(line.trim().to_string()).is_err() {
                break;
            }
        }
    });
    rx
}

/// A node of the namespace tests on `port` (its veth end) at `ip`, with a dedicated
/// worker.
fn netns_device(port: &str, ip: [u8; 4], max_frame: usize) -> Device {
    let mut cfg = DeviceConfig::new(port, ip).progress(Progress::Dedicated);
    cfg.max_frame = Some(max_frame);
    cfg.cm_timeout = Duration::from_secs(5);
    // The raw senders of these tests (spoofers, bystanders) address the MAC derived
    // from the IP; the nodes still resolve each other by ARP (answered with it).
    cfg.mac = Some(NodeAddr::from_ip(ip, UDP_PORT).mac);
    Device::open(cfg).unwrap_or_else(|e| fail(e))
}

/// Waits (bounded) for the parent's "exit" (the device is served meanwhile by its
/// dedicated worker).
fn await_exit(lines: &std::sync::mpsc::Receiver<String>) {
    await_line(lines, "exit");
}

/// Waits (bounded) for the parent's line `want`, passing over any other.
fn await_line(lines: &std::sync::mpsc::Receiver<String>, want: &str) {
    loop {
        match lines.recv_timeout(T) {
            Ok(l) if l == want => return,
            Ok(_) => {}
            Err(e) => fail(format!("no {want} from the parent: {e}")),
        }
    }
}

/// Announces the node's MAC to the bridge, says "ready" and waits for the parent's
/// "go" (announcing again on any other line).
fn await_go(dev: &Device, lines: &std::sync::mpsc::Receiver<String>) {
    announce(dev);
    println!("ready");
    loop {
        match lines.recv_timeout(T) {
            Ok(l) if l == "go" => return,
            Ok(_) => announce(dev),
            Err(e) => fail(format!("no go from the parent: {e}")),
        }
    }
}

/// One node: listens with a window of five registers shared by every incoming
/// connection — r0 and r1 the barrier registers of even and odd rounds, r2..=r4 the
/// bit of each node (read-only to senders) — connects to all three nodes (itself
/// included, through the bridge's hairpin), then in each round toggles its bit (op1
/// XOR from its bit register) in the round's barrier register of every node, with a
/// conditional interrupt when the register equals the operand: all bits set, or all
/// clear on the way back. Each node waits for its own interrupt to leave the round.
/// Alternating between two registers keeps a fast node's next-round toggle from
/// landing before a slow node's toggle of the round before.
fn barrier_node(port: &str, me: usize, rounds: u32, max_frame: usize) {
    if me >= BARRIER_NODES {
        fail("node index must be 0, 1 or 2");
    }
    let lines = stdin_lines();
    let dev = netns_device(port, barrier_ip(me), max_frame);
    let ep = dev
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap_or_else(|e| fail(e));
    let w = dev.alloc_registers(5).unwrap_or_else(|e| fail(e));
    for b in 0..2 {
        dev.set_register_protection(w, b, RegProt::WRITE)
            .unwrap_or_else(|e| fail(e));
    }
    for n in 0..BARRIER_NODES as u32 {
        dev.write_register(w, 2 + n, 1 << n)
            .unwrap_or_else(|e| fail(e));
        dev.set_register_protection(w, 2 + n, RegProt::READ)
            .unwrap_or_else(|e| fail(e));
    }
    let cq = dev.create_cq(1024);
    let opts = ConnOptions {
        registers: Registers::Window(w),
        allow_forced_interrupts: false,
        ..ConnOptions::default()
    };
    let l = dev
        .listen_with(BARRIER_SERVICE, &ep, &cq, &opts)
        .unwrap_or_else(|e| fail(e));
    await_go(&dev, &lines);
    let mut out = Vec::new();
    for n in 0..BARRIER_NODES {
        let c = dev
            .connect_with(barrier_ip(n), BARRIER_SERVICE, &ep, &cq, &opts)
            .unwrap_or_else(|e| fail(format!("node {me} connecting to node {n}: {e}")));
        out.push(c);
    }
    let mut inc = Vec::new();
    for _ in 0..BARRIER_NODES {
        inc.push(
            l.accept(T)
                .unwrap_or_else(|e| fail(format!("node {me} accepting: {e}"))),
        );
    }
    let all = (1u32 << BARRIER_NODES) - 1;
    let events = ep.events();
    let mut posted = 0usize;
    for r in 0..rounds {
        let reg = (r % 2) as u8;
        let target = if (r / 2) % 2 == 0 { all } else { 0 };
        for c in &out {
            let wr = WorkRequest::reg_op(u64::from(r))
                .op1(RegOp::Xor, reg, Src::Reg(2 + me as u8))
                .operand(target)
                .cond(Cond::Eq, Src::Operand, reg)
                .order(Order::CondLast)
                .signaled();
            c.post(&wr).unwrap_or_else(|e| fail(e));
            posted += 1;
        }
        let ev = events
            .wait(T)
            .unwrap_or_else(|| fail(format!("node {me}: no barrier event in round {r}")));
        if ev.kind != EventKind::Interrupt || ev.regs[3] != u64::from(target) {
            fail(format!("node {me} round {r}: unexpected event {ev:?}"));
        }
        if let Some(extra) = events.poll() {
            fail(format!("node {me} round {r}: a second event {extra:?}"));
        }
        println!("round {r}");
    }
    for _ in 0..posted {
        let wc = cq
            .wait_one(T)
            .unwrap_or_else(|| fail(format!("node {me}: a toggle never completed")));
        if wc.status != WcStatus::Success {
            fail(format!("node {me}: toggle completed {wc:?}"));
        }
    }
    let last_target = if ((rounds - 1) / 2) % 2 == 0 { all } else { 0 };
    let last = dev
        .read_register(w, (rounds - 1) % 2)
        .unwrap_or_else(|e| fail(e));
    if last != u64::from(last_target) {
        fail(format!("node {me}: barrier register {last:#x} at the end"));
    }
    if events.poll().is_some() {
        fail(format!("node {me}: an event after the last round"));
    }
    println!("done");
    // Stay up (serving acknowledgements) until every node is done.
    await_exit(&lines);
    drop(inc);
    drop(out);
}

/// One side of the size sweep between two namespaces (see the usage above).
fn sweep_node(port: &str, role: &str, seed: u64, max_frame: usize) {
    let lines = stdin_lines();
    let server = match role {
        "server" => true,
        "client" => false,
        _ => fail("role must be server or client"),
    };
    let dev = netns_device(port, [10, 0, 0, if server { 1 } else { 2 }], max_frame);
    let (layout, len) = sweep_layout();
    let ep = dev
        .alloc_endpoint(len as u64, Rights::REMOTE_WRITE)
        .unwrap_or_else(|e| fail(e));
    let cq = dev.create_cq(256);
    let listener = server.then(|| dev.listen(7, &ep, &cq).unwrap_or_else(|e| fail(e)));
    await_go(&dev, &lines);
    let conn = match &listener {
        Some(l) => {
            let conn = l.accept(T).unwrap_or_else(|e| fail(e));
            await_sweep(&dev, &conn, &ep, seed);
            println!("verified");
            conn
        }
        None => {
            let conn = dev
                .connect([10, 0, 0, 1], 7, &ep, &cq)
                .unwrap_or_else(|e| fail(e));
            for (i, &(off, size)) in layout.iter().enumerate() {
                fill_pattern(&ep, off, size, seed, off as u64);
                let wr = WorkRequest::write(i as u64, &ep, off as u64, size as u32, off as u32);
                conn.post(&wr.signaled()).unwrap_or_else(|e| fail(e));
            }
            for wc in wait_completions(&cq, layout.len(), T) {
                if wc.status != WcStatus::Success {
                    fail(format!("write completed {wc:?}"));
                }
            }
            println!("by-reference {}", dev.stats().payloads_by_reference);
            println!("completed");
            conn
        }
    };
    await_exit(&lines);
    drop(conn);
}

// ---------------------------------------------------------------------------------
// sink-server / stream-client: a peer killed mid-run (tests/peer_death.rs).
// ---------------------------------------------------------------------------------

const SINK_SERVICE: u32 = 23;
const SINK_LEN: usize = 1 << 20;
const STREAM_WRITE: usize = 4096;
const STREAM_DEPTH: u64 = 64;

/// Sends a frame nobody takes, so that the bridge learns this node's MAC and forwards
/// (not floods) frames to it.
fn announce(dev: &Device) {
    let mut hello = vec![0u8; 60];
    hello[..6].fill(0xff);
    hello[6..12].copy_from_slice(&dev.local_addr().mac);
    hello[12..14].copy_from_slice(&[0x88, 0xb5]);
    dev.send_raw_frame(&hello);
}

fn sink_server(port: &str) {
    let mut cfg = DeviceConfig::new(port, [10, 0, 0, 1]).progress(Progress::Dedicated);
    cfg.max_frame = Some(1514);
    let dev = Device::open(cfg).unwrap_or_else(|e| fail(e));
    let ep = dev
        .alloc_endpoint(SINK_LEN as u64, Rights::REMOTE_WRITE)
        .unwrap_or_else(|e| fail(e));
    let cq = dev.create_cq(64);
    let l = dev
        .listen(SINK_SERVICE, &ep, &cq)
        .unwrap_or_else(|e| fail(e));
    announce(&dev);
    println!("ready");
    let conn = l.accept(T).unwrap_or_else(|e| fail(e));
    println!("accepted");
    // The dedicated worker serves; this thread only waits to be killed (bounded).
    let lines = stdin_lines();
    let _ = lines.recv_timeout(3 * T);
    drop(conn);
}

fn stream_client(port: &str, retry_ms: u64, retries: u32) {
    let lines = stdin_lines();
    let mut cfg = DeviceConfig::new(port, [10, 0, 0, 2]);
    cfg.max_frame = Some(1514);
    cfg.retry_timeout = Duration::from_millis(retry_ms);
    cfg.retry_count = retries;
    let dev = Device::open(cfg).unwrap_or_else(|e| fail(e));
    let ep = dev
        .alloc_endpoint(SINK_LEN as u64, Rights::REMOTE_WRITE)
        .unwrap_or_else(|e| fail(e));
    fill_pattern(&ep, 0, SINK_LEN, 5, 0);
    let cq = dev.create_cq(1024);
    announce(&dev);
    println!("ready");
    match lines.recv_timeout(T) {
        Ok(l) if l == "go" => {}
        other => fail(format!("no go from the parent: {other:?}")),
    }
    let conn = dev
        .connect([10, 0, 0, 1], SINK_SERVICE, &ep, &cq)
        .unwrap_or_else(|e| fail(e));
    let mbufs_before = dev.stats().mbufs_used();
    let (mut posted, mut ok, mut retry_exceeded) = (0u64, 0, 0);
    let (mut unacknowledged, mut flushed, mut other) = (0, 0, 0);
    let mut last_ok = std::time::Instant::now();
    let mut failed_after: Option<Duration> = None;
    let mut said_streaming = false;
    let start = std::time::Instant::now();
    // Stream until the connection fails, then collect every outstanding completion.
    loop {
        while failed_after.is_none()
            && posted - (ok + retry_exceeded + unacknowledged + flushed + other) < STREAM_DEPTH
        {
            let off = (posted as usize * STREAM_WRITE) % SINK_LEN;
            let wr = WorkRequest::write(posted, &ep, off as u64, STREAM_WRITE as u32, off as u32)
                .signaled();
            match conn.post(&wr) {
                Ok(()) => posted += 1,
                Err(Error::NotConnected(ConnState::Error)) => break,
                Err(e) => fail(format!("post {posted}: {e}")),
            }
        }
        dev.progress();
        while let Some(wc) = cq.poll_one() {
            match wc.status {
                WcStatus::Success => {
                    ok += 1;
                    last_ok = std::time::Instant::now();
                }
                WcStatus::RetryExceeded => {
                    retry_exceeded += 1;
                    failed_after.get_or_insert(last_ok.elapsed());
                }
                // Sent, not acknowledged when the connection failed (it may have run).
                WcStatus::Unacknowledged => unacknowledged += 1,
                // Never sent.
                WcStatus::Flushed => flushed += 1,
                _ => {
                    other += 1;
                    eprintln!("testnode: unexpected completion {wc:?}");
                }
            }
        }
        if ok >= 200 && !said_streaming {
            println!("streaming");
            said_streaming = true;
        }
        if failed_after.is_some()
            && ok + retry_exceeded + unacknowledged + flushed + other == posted
        {
            break;
        }
        if start.elapsed() > 3 * T {
            fail(format!(
                "still {} of {posted} outstanding after {:?} (state {:?})",
                posted - (ok + retry_exceeded + unacknowledged + flushed + other),
                start.elapsed(),
                conn.state()
            ));
        }
    }
    let refused = matches!(
        conn.post(&WorkRequest::write(u64::MAX, &ep, 0, 8, 0)),
        Err(Error::NotConnected(ConnState::Error))
    );
    // Whatever the port still holds (rx ring refills, a partly built batch) settles
    // within a few turns.
    for _ in 0..1000 {
        dev.progress();
    }
    let mbufs_after = dev.stats().mbufs_used();
    println!(
        "result posted={posted} ok={ok} retry_exceeded={retry_exceeded} \
         unacknowledged={unacknowledged} flushed={flushed} other={other} detect_ms={} \
         refused={refused} mbufs_before={mbufs_before} mbufs_after={mbufs_after}",
        failed_after.map_or(u128::MAX, |d| d.as_millis())
    );
    println!("done");
    let _ = lines.recv_timeout(T);
}

// ---------------------------------------------------------------------------------
// soak-server: the receiving node of the soak workload (tests/soak_memif.rs).
// ---------------------------------------------------------------------------------

fn soak_server(sock: &str, seed: u64, ops: u64, faults: &str) {
    use deposit_tests::soak;
    let lines = stdin_lines();
    let mut cfg = DeviceConfig::new(&format!("memif:{sock}:server"), [10, 0, 0, 1])
        .progress(Progress::Dedicated);
    if faults != "none" {
        cfg.faults = Some(faults.parse().unwrap_or_else(|e| fail(e)));
    }
    cfg.retry_timeout = Duration::from_millis(2);
    cfg.retry_count = 12;
    let dev = Device::open(cfg).unwrap_or_else(|e| fail(e));
    let rx = soak::receiver(&dev).unwrap_or_else(|e| fail(e));
    let pool = soak::source_pool(seed);
    let mut plan = soak::Plan::new(seed, ops);
    println!("ready");
    let _conn = rx.listener.accept(T).unwrap_or_else(|e| fail(e));
    // The sender bounds the whole run; this only keeps a lost parent from leaving us.
    let patience = Duration::from_secs(300);
    loop {
        match lines.recv_timeout(patience) {
            Ok(l) if l.starts_with("verify ") => {
                let n: u64 = l[7..].parse().unwrap_or_else(|e| fail(e));
                let round = plan
                    .next_round()
                    .unwrap_or_else(|| fail(format!("no round {n} in the plan")));
                if round.index != n {
                    fail(format!(
                        "asked for round {n}, the plan is at {}",
                        round.index
                    ));
                }
                match soak::verify_round(&dev, &rx, &pool, &round) {
                    Ok(()) => println!("ok {n}"),
                    Err(e) => {
                        println!("bad {n}: {e}");
                        fail(e)
                    }
                }
            }
            Ok(l) if l == "done" => {
                // The sender leaves next: stop polling first (see wait_for_release).
                dev.shutdown_for_test();
                println!("faults {:?}", dev.fault_stats());
                break;
            }
            Ok(l) => fail(format!("unexpected line {l:?}")),
            Err(e) => fail(format!("no word from the sender: {e}")),
        }
    }
    wait_for_disconnect(&lines);
}

/// Leaves only when the parent has closed its port and then our stdin (see
/// wait_for_release), for nodes that read their stdin as lines.
fn wait_for_disconnect(lines: &std::sync::mpsc::Receiver<String>) {
    use std::sync::mpsc::RecvTimeoutError;
    let _ = std::io::Write::flush(&mut std::io::stdout());
    loop {
        match lines.recv_timeout(T) {
            Ok(_) => {}
            Err(RecvTimeoutError::Disconnected) => return,
            Err(e) => fail(format!("the sender did not let go: {e}")),
        }
    }
}

// ---------------------------------------------------------------------------------
// spoof-server / spoof-client / spoof-flood: spoofed connect requests against a
// listener while a real client connects (tests/spoofed_connects.rs).
// ---------------------------------------------------------------------------------

const SPOOF_SERVICE: u32 = 31;
const SPOOF_LEN: usize = 1 << 20;
const SPOOF_WRITE: usize = 4096;

fn spoof_server(port: &str) {
    let writes = deposit_tests::SPOOF_WRITES;
    let lines = stdin_lines();
    let dev = netns_device(port, [10, 0, 0, 1], 1514);
    let ep = dev
        .alloc_endpoint(SPOOF_LEN as u64, Rights::REMOTE_WRITE)
        .unwrap_or_else(|e| fail(e));
    let cq = dev.create_cq(64);
    let opts = ConnOptions {
        backlog: 4,
        ..ConnOptions::default()
    };
    let l = dev
        .listen_with(SPOOF_SERVICE, &ep, &cq, &opts)
        .unwrap_or_else(|e| fail(e));
    await_go(&dev, &lines);
    let conn = l.accept(T).unwrap_or_else(|e| fail(e));
    if !wait_until(&dev, T, || conn.arrivals() >= writes) {
        fail(format!(
            "only {} of {writes} writes arrived",
            conn.arrivals()
        ));
    }
    for i in 0..writes as usize {
        let off = i * SPOOF_WRITE % SPOOF_LEN;
        check_pattern(&ep, off, SPOOF_WRITE, 31, off as u64).unwrap_or_else(|e| fail(e));
    }
    println!("verified");
    // The counters once the flood is over (the parent says so), and has drained: no
    // new challenge for 200 ms.
    await_line(&lines, "report");
    let mut last = dev.stats().cm_challenges;
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = dev.stats().cm_challenges;
        if now == last {
            break;
        }
        last = now;
    }
    // Whatever else reached the listener: it must be nothing.
    if let Ok(c) = l.accept(Duration::from_millis(200)) {
        fail(format!(
            "accepted a second connection ({})",
            c.local_number()
        ));
    }
    let s = dev.stats();
    println!("connections {}", dev.connections());
    println!("challenges {}", s.cm_challenges);
    println!("bad_cookie {}", s.dropped(DropReason::BadCookie));
    println!("rate_limited {}", s.dropped(DropReason::CmRateLimited));
    println!("stats");
    await_exit(&lines);
    drop(conn);
}

fn spoof_client(port: &str) {
    let lines = stdin_lines();
    let dev = netns_device(port, [10, 0, 0, 2], 1514);
    let ep = dev
        .alloc_endpoint(SPOOF_LEN as u64, Rights::REMOTE_WRITE)
        .unwrap_or_else(|e| fail(e));
    let cq = dev.create_cq(256);
    await_go(&dev, &lines);
    let conn = dev
        .connect([10, 0, 0, 1], SPOOF_SERVICE, &ep, &cq)
        .unwrap_or_else(|e| fail(e));
    println!("connected");
    let n = deposit_tests::SPOOF_WRITES;
    for i in 0..n as usize {
        let off = i * SPOOF_WRITE % SPOOF_LEN;
        fill_pattern(&ep, off, SPOOF_WRITE, 31, off as u64);
        let wr = WorkRequest::write(i as u64, &ep, off as u64, SPOOF_WRITE as u32, off as u32);
        conn.post(&wr.signaled()).unwrap_or_else(|e| fail(e));
        if (i + 1) % 64 == 0 {
            for wc in wait_completions(&cq, 64, T) {
                if wc.status != WcStatus::Success {
                    fail(format!("write completed {wc:?}"));
                }
            }
        }
    }
    println!("completed");
    await_exit(&lines);
    drop(conn);
}

/// The attacker: connect requests to the server from random addresses, as a host
/// that never sees the replies sends them.
fn spoof_flood(port: &str, n: u64) {
    use deposit_transport::wire::cm::CmMessage;
    use deposit_transport::wire::{UnderlayRepr, UDP_PORT};
    let lines = stdin_lines();
    let dev = netns_device(port, [10, 0, 0, 3], 1514);
    await_go(&dev, &lines);
    let mut rng = deposit_transport::rng::Rng::new(0x2545_f491_4f6c_dd1d);
    let server = NodeAddr::from_ip([10, 0, 0, 1], UDP_PORT);
    for i in 0..n {
        let r = rng.next_u64();
        let ip = [10, (r >> 8) as u8, (r >> 16) as u8, (r >> 24) as u8 | 1];
        let mac = [
            2,
            (r >> 32) as u8,
            (r >> 40) as u8,
            (r >> 48) as u8,
            7,
            r as u8,
        ];
        let msg = CmMessage::ConnectReq {
            request: rng.next_u64() as u32,
            service: SPOOF_SERVICE,
            conn: rng.next_u64() as u32 | 1,
            key: rng.next_u64(),
            isn: rng.next_u64() as u32,
            max_frame: 1514,
            mac,
            cookie: if i % 2 == 0 { 0 } else { rng.next_u64() },
            // Some asking for a secure connection, some with a handshake (a key
            // agreement per request, were it read: it is not before the cookie).
            secure: i % 3 == 0,
            ephemeral: [r as u8; 32],
            handshake: (i % 4 == 1).then_some([(r >> 8) as u8; 64]),
        };
        let underlay = UnderlayRepr {
            src_mac: mac,
            dst_mac: server.mac,
            src_ip: ip.into(),
            dst_ip: server.ip,
            src_port: UDP_PORT,
            dst_port: UDP_PORT,
            traffic_class: 0,
        };
        let mut frame = [0u8; 512];
        let n = msg
            .write_frame(&[], &underlay, &mut frame)
            .unwrap_or_else(|e| fail(e));
        dev.send_raw_frame(&frame[..n]);
        // Paced (at most about 16 000 a second) so that the flood lasts while the real
        // client connects; af_packet and the bridge still drop part of it on two busy
        // cores (more under load: 1469 of 20 000 reached the server once at 64 000 a
        // second beside the whole suite), so the test holds the server to what reached
        // it.
        if i % 16 == 15 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    println!("flooded");
    await_exit(&lines);
}
