//! An N:1 incast over a simulated switch: N senders each write one message to one
//! receiver through one switch port, all at once. Prints what the fabric saw —
//! goodput against the bottleneck, Jain's fairness over the flows, the queue's depth,
//! drops, marks — and what the senders did (retransmissions, timeouts), with the
//! nodes' congestion control (`node::cc`: the receiver's credit and the senders' law)
//! or without it (`--no-cc`, the transport before issue 38).
//!
//! ```text
//! cargo run --release -p deposit-transport --example incast -- [--senders 64] \
//!     [--rate-gbps 25] [--buffer-kib 256] [--ecn-kib 32] [--msg-kib 1024] \
//!     [--write-kib 64] [--latency-ns 4000] [--no-ecn] [--no-cc] [--target-us 10] \
//!     [--budget-kib 0] [--seed 1] [--json FILE] [--trace-us US] [--peers]
//! ```
//!
//! The defaults are issue 38's incast: 25 Gb/s links with 4 µs of cable (a base round
//! trip near 18 µs, a bandwidth-delay product near 56 KB), a port buffer of about four
//! of those and an ECN threshold near the target delay's bytes. The nodes' data frames
//! are ECN-capable (`NodeConfig::ecn`), so that the switch marks them above
//! `--ecn-kib`; `--no-ecn` sends them ECN 00, and they are only dropped. `--json`
//! writes the run's parameters, its summary, each sender's bytes delivered per bin
//! (bins of `--bin-us`, default 100, at simulated times from 0: the writes are posted
//! at `summary.start_ns`, after the connections came up) and the bottleneck queue's
//! largest depth per bin, with or without `--no-cc`; `ddperf --plot-incast FILE
//! --plot out.png` draws it (perf/src/incast.rs reads it). `--trace-us` prints the
//! first senders' windows every so often; `--peers` each sender's congestion state at
//! the end.

use std::sync::Arc;
use std::time::Instant;

use deposit_transport::cm::ConnectOptions;
use deposit_transport::connection::{ConnShared, CqShared, Source, WcStatus, Wqe, WR_SIGNALED};
use deposit_transport::node::cc::CcConfig;
use deposit_transport::node::NodeConfig;
use deposit_transport::sim::fabric::{FabricStats, FlowKey, ETH_OVERHEAD};
use deposit_transport::sim::{
    self, FabricConfig, LinkConfig, LinkSpec, Network, Port, QueueSpec, HZ,
};
use deposit_transport::tables::{EndpointId, Rights};

/// The command line.
struct Args {
    senders: usize,
    rate_gbps: f64,
    buffer_kib: u64,
    ecn_kib: u64,
    msg_kib: u64,
    write_kib: u64,
    latency_ns: u64,
    ecn: bool,
    cc: bool,
    budget_kib: u64,
    target_us: u64,
    trace_us: Option<u64>,
    peers: bool,
    seed: u64,
    bin_us: u64,
    json: Option<String>,
}

fn usage(why: &str) -> ! {
    eprintln!("incast: {why}");
    eprintln!(
        "usage: incast [--senders N] [--rate-gbps G] [--buffer-kib B] [--ecn-kib K] \
         [--msg-kib M] [--write-kib W] [--latency-ns L] [--no-ecn] [--no-cc] [--target-us T] \
         [--budget-kib B] [--seed S] [--bin-us U] [--json FILE] [--trace-us U] [--peers]"
    );
    std::process::exit(2);
}

fn parse() -> Args {
    let mut a = Args {
        senders: 64,
        rate_gbps: 25.0,
        buffer_kib: 256,
        ecn_kib: 32,
        msg_kib: 1024,
        write_kib: 64,
        latency_ns: 4000,
        ecn: true,
        cc: true,
        budget_kib: 0,
        target_us: 10,
        trace_us: None,
        peers: false,
        seed: 1,
        bin_us: 100,
        json: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--no-ecn" {
            a.ecn = false;
            continue;
        }
        if flag == "--no-cc" {
            a.cc = false;
            continue;
        }
        if flag == "--peers" {
            a.peers = true;
            continue;
        }
        let v = it
            .next()
            .unwrap_or_else(|| usage(&format!("{flag} wants a value")));
        let num = |v: &str| -> u64 {
            v.parse()
                .unwrap_or_else(|_| usage(&format!("{flag} {v}: not a number")))
        };
        match flag.as_str() {
            "--senders" => a.senders = num(&v) as usize,
            "--rate-gbps" => {
                a.rate_gbps = v
                    .parse()
                    .unwrap_or_else(|_| usage(&format!("--rate-gbps {v}")))
            }
            "--buffer-kib" => a.buffer_kib = num(&v),
            "--ecn-kib" => a.ecn_kib = num(&v),
            "--msg-kib" => a.msg_kib = num(&v),
            "--write-kib" => a.write_kib = num(&v),
            "--latency-ns" => a.latency_ns = num(&v),
            "--seed" => a.seed = num(&v),
            "--budget-kib" => a.budget_kib = num(&v),
            "--target-us" => a.target_us = num(&v),
            "--trace-us" => a.trace_us = Some(num(&v)),
            "--bin-us" => a.bin_us = num(&v),
            "--json" => a.json = Some(v),
            _ => usage(&format!("unknown option {flag}")),
        }
    }
    if a.senders == 0 || a.msg_kib == 0 || a.write_kib == 0 || a.bin_us == 0 {
        usage("senders, sizes and bins must be positive");
    }
    a
}

/// Jain's fairness index of `x`: 1 when all are equal, 1/n when one has everything.
fn jain(x: &[f64]) -> f64 {
    let (s, q) = x.iter().fold((0.0, 0.0), |(s, q), v| (s + v, q + v * v));
    if q == 0.0 {
        1.0
    } else {
        s * s / (x.len() as f64 * q)
    }
}

/// The data flows: each sender's flow into the receiver with the most bytes (its
/// connection's source port; the connection manager's own frames are another flow).
fn data_flows(st: &FabricStats, senders: usize) -> Vec<FlowKey> {
    (1..=senders)
        .filter_map(|s| {
            st.flows_to(0)
                .filter(|(k, _)| k.from == s)
                .max_by_key(|(_, f)| f.bytes)
                .map(|(k, _)| *k)
        })
        .collect()
}

/// Jain's index over the flows still sending, per window of `window` ns from `from`
/// to `end`: (window start, index, flows counted).
fn fairness(
    st: &FabricStats,
    flows: &[FlowKey],
    from: u64,
    end: u64,
    window: u64,
) -> Vec<(u64, f64, usize)> {
    let mut out = Vec::new();
    let mut t = from;
    while t < end {
        let x: Vec<f64> = flows
            .iter()
            .map(|k| &st.flows[k])
            .filter(|f| f.first_ns < t + window && f.last_ns >= t)
            .map(|f| f.delivered.sum_between(t, t + window) as f64)
            .collect();
        if !x.is_empty() {
            out.push((t, jain(&x), x.len()));
        }
        t += window;
    }
    out
}

fn write_json(path: &str, a: &Args, st: &FabricStats, flows: &[FlowKey], summary: &str) {
    let series = |bins: &[(u64, u64)]| {
        let v: Vec<String> = bins.iter().map(|(t, x)| format!("[{t},{x}]")).collect();
        format!("[{}]", v.join(","))
    };
    let fl: Vec<String> = flows
        .iter()
        .map(|k| {
            let f = &st.flows[k];
            format!(
                "{{\"from\":{},\"to\":{},\"src_port\":{},\"bytes\":{},\"bytes_per_bin\":{}}}",
                k.from,
                k.to,
                k.src_port,
                f.bytes,
                series(&f.delivered.bins)
            )
        })
        .collect();
    let q = st.port(Port::ToHost(0));
    let json = format!(
        "{{\"senders\":{},\"rate_gbps\":{},\"buffer_kib\":{},\"ecn_kib\":{},\"msg_kib\":{},\
         \"write_kib\":{},\"latency_ns\":{},\"ecn\":{},\"cc\":{},\"target_us\":{},\"seed\":{},\
         \"bin_ns\":{},\"summary\":{summary},\"flows\":[{}],\
         \"queue\":{{\"port\":\"ToHost(0)\",\"max_depth_per_bin\":{}}}}}\n",
        a.senders,
        a.rate_gbps,
        a.buffer_kib,
        a.ecn_kib,
        a.msg_kib,
        a.write_kib,
        a.latency_ns,
        a.ecn,
        a.cc,
        a.target_us,
        a.seed,
        st.bin_ns,
        fl.join(","),
        series(&q.depth.bins)
    );
    std::fs::write(path, json).unwrap_or_else(|e| {
        eprintln!("incast: writing {path}: {e}");
        std::process::exit(1);
    });
}

fn main() {
    let a = parse();
    let wall = Instant::now();
    let n = a.senders + 1;
    let msg = (a.msg_kib << 10) as usize;
    let wr = (a.write_kib << 10).min(msg as u64) as usize;
    let link = LinkSpec::gbps(a.rate_gbps, a.latency_ns);
    let mut fab = FabricConfig::switch(link, QueueSpec::new(a.buffer_kib << 10, a.ecn_kib << 10));
    fab.bin_ns = a.bin_us * 1000;
    let cfg = NodeConfig {
        max_connections: n + 16,
        ecn: a.ecn,
        cc: CcConfig {
            enabled: a.cc,
            line_rate_mbps: (a.rate_gbps * 1000.0) as u64,
            receive_budget: a.budget_kib << 10,
            target_delay_ns: a.target_us * 1000,
            ..CcConfig::default()
        },
        ..NodeConfig::default()
    };
    let mut net = Network::with_fabric(n, &cfg, LinkConfig::default(), &fab, a.seed);
    // Host 0 receives every sender's message at its own offset.
    let rx_ep = net.hosts[0].endpoint(msg * a.senders, Rights::ALL, 1024);
    let rx_cq = CqShared::new(4096);
    let mut conns: Vec<(usize, EndpointId, Arc<CqShared>, Arc<ConnShared>)> = Vec::new();
    for s in 1..=a.senders {
        let ep = net.hosts[s].endpoint(msg, Rights::ALL, 1024);
        let data: Vec<u8> = (0..msg).map(|i| (i * 7 + s) as u8).collect();
        net.hosts[s].mem(ep).write(0, &data).expect("sender memory");
        let cq = CqShared::new(4096);
        let (c, _) = net
            .connect(s, ep, &cq, 0, rx_ep, &rx_cq, 7, &ConnectOptions::default())
            .unwrap_or_else(|| {
                eprintln!("incast: sender {s} did not connect");
                std::process::exit(1);
            });
        conns.push((s, ep, cq, c));
    }
    net.run_for(1_000_000);
    let before: Vec<_> = (0..n).map(|h| net.hosts[h].node.stats()).collect();
    let t0 = net.now;
    let writes = msg.div_ceil(wr);
    for (s, ep, _, c) in &conns {
        for w in 0..writes {
            let off = w * wr;
            let len = wr.min(msg - off);
            let mut req = Wqe::write(
                w as u64,
                Source::Endpoint {
                    id: *ep,
                    offset: off as u64,
                },
                len as u32,
                ((s - 1) * msg + off) as u32,
            );
            req.flags |= WR_SIGNALED;
            assert!(sim::post(c, req), "sender {s}: send queue full");
        }
    }
    let mut done = vec![0usize; conns.len()];
    let mut finish = vec![0u64; conns.len()];
    let mut failed = 0;
    let trace = a.trace_us;
    let mut next_trace = t0;
    let all = net.run_until(60 * HZ, |net| {
        if let Some(every) = trace.filter(|_| net.now >= next_trace) {
            next_trace = net.now + every * 1000;
            let w: Vec<String> = (1..=4.min(n - 1))
                .filter_map(|h| net.hosts[h].node.peer_summaries().first().cloned())
                .map(|p| format!("{}/{}/{}", p.window, p.inflight, p.srtt_ns))
                .collect();
            let total: u64 = (1..n)
                .filter_map(|h| net.hosts[h].node.peer_summaries().first().map(|p| p.window))
                .sum();
            let q = net.fabric_stats().port(Port::ToHost(0));
            eprintln!(
                "t={:>8} us  windows(sum {:>8}) {}  queue max so far {} drops {} marks {}",
                (net.now - t0) / 1000,
                total,
                w.join(" "),
                q.max_depth,
                q.drops,
                q.marks
            );
        }
        for (i, (_, _, cq, _)) in conns.iter().enumerate() {
            for c in sim::drain(cq) {
                if c.status != WcStatus::Success {
                    failed += 1;
                }
                done[i] += 1;
                if done[i] == writes {
                    finish[i] = net.now - t0;
                }
            }
        }
        done.iter().all(|&d| d == writes)
    });
    let elapsed = net.now - t0;
    if !all || failed > 0 {
        eprintln!(
            "incast: {} of {} writes completed, {failed} failed, in {} ms",
            done.iter().sum::<usize>(),
            writes * conns.len(),
            elapsed / 1_000_000
        );
    }
    // Every byte where it belongs.
    let mut got = vec![0u8; msg];
    let mut wrong = 0;
    for s in 1..=a.senders {
        net.hosts[0]
            .mem(rx_ep)
            .read((s - 1) * msg, &mut got)
            .expect("receiver memory");
        wrong += got.iter().enumerate().any(|(i, &b)| b != (i * 7 + s) as u8) as usize;
    }

    let st = net.fabric_stats();
    let total = (msg * a.senders) as f64;
    let goodput = total * 8.0 / elapsed as f64; // Gb/s
    let flows = data_flows(st, a.senders);
    let win10 = fairness(st, &flows, t0 + 1_000_000, net.now, 10_000_000);
    let win1 = fairness(st, &flows, t0 + 1_000_000, net.now, 1_000_000);
    let mean = |v: &[(u64, f64, usize)]| v.iter().map(|x| x.1).sum::<f64>() / v.len() as f64;
    let worst = |v: &[(u64, f64, usize)]| v.iter().map(|x| x.1).fold(1.0, f64::min);
    let fair = |v: &[(u64, f64, usize)], w: &str| {
        if v.is_empty() {
            format!("{w} windows: none (the run ended first)")
        } else {
            format!(
                "{w} windows: mean {:.3}, worst {:.3} ({} windows)",
                mean(v),
                worst(v),
                v.len()
            )
        }
    };
    let q = st.port(Port::ToHost(0));
    let (mut retx, mut timeouts) = (0, 0);
    let (mut frames, mut sent, mut payload) = (0, 0, 0);
    for (h, b) in before.iter().enumerate().skip(1) {
        let s = net.hosts[h].node.stats();
        retx += s.retransmits - b.retransmits;
        timeouts += s.timeouts - b.timeouts;
        frames += s.frames_tx - b.frames_tx;
        sent += s.bytes_tx - b.bytes_tx;
        payload += s.bytes_payload_tx - b.bytes_payload_tx;
    }
    // The most payload the line carries: what the senders' frames held of it, once
    // every frame's headers and 24 bytes of preamble, FCS and gap are paid.
    let carried = 100.0 * payload as f64 / (sent + frames * ETH_OVERHEAD) as f64;
    let mut fin = finish.clone();
    fin.sort_unstable();
    let pct = |q: f64| fin[((q * fin.len() as f64).ceil() as usize).clamp(1, fin.len()) - 1];
    let wall_s = wall.elapsed().as_secs_f64();
    let ideal_ns = total * 8.0 / a.rate_gbps;

    println!(
        "incast {}:1, {} KiB each in {} KiB writes, {} Gb/s links ({} ns), buffer {} KiB, ECN above {} KiB{}, congestion control {}, seed {}",
        a.senders,
        a.msg_kib,
        wr >> 10,
        a.rate_gbps,
        a.latency_ns,
        a.buffer_kib,
        a.ecn_kib,
        if a.ecn { " (data frames ECT(0))" } else { " (frames not ECT: --no-ecn)" },
        if a.cc { "on" } else { "off (--no-cc)" },
        a.seed
    );
    println!(
        "completed        {} of {} writes ({failed} failed), data {}",
        done.iter().sum::<usize>(),
        writes * conns.len(),
        if wrong == 0 { "verified" } else { "WRONG" }
    );
    println!(
        "time             {:.3} ms (bottleneck alone: {:.3} ms); senders done p50 {:.3} ms, p99 {:.3} ms, last {:.3} ms",
        elapsed as f64 / 1e6,
        ideal_ns / 1e6,
        pct(0.5) as f64 / 1e6,
        pct(0.99) as f64 / 1e6,
        fin.last().copied().unwrap_or(0) as f64 / 1e6
    );
    println!(
        "goodput          {goodput:.2} Gb/s of {} ({:.1} %; the line carries at most {carried:.1} % as payload)",
        a.rate_gbps,
        100.0 * goodput / a.rate_gbps
    );
    println!(
        "fairness (Jain)  after the first 1 ms, {}; {}",
        fair(&win10, "10 ms"),
        fair(&win1, "1 ms")
    );
    println!(
        "queue ToHost(0)  p50 {} KiB, p99 {} KiB, max {} KiB (of {} KiB)",
        q.depth_percentile(50.0) >> 10,
        q.depth_percentile(99.0) >> 10,
        q.max_depth >> 10,
        a.buffer_kib
    );
    let nic = (1..=a.senders)
        .map(|h| st.port(Port::Nic(h)).max_depth)
        .max()
        .unwrap_or(0);
    println!(
        "sender NICs      at most {} KiB queued behind a host link",
        nic >> 10
    );
    println!(
        "drops            {} (bottleneck {}), marks {} (bottleneck {})",
        st.drops(),
        q.drops,
        st.marks(),
        q.marks
    );
    println!("senders          {retx} retransmissions, {timeouts} timeouts");
    if a.peers {
        for h in 1..=a.senders {
            for p in net.hosts[h].node.peer_summaries() {
                println!("  sender {h} -> {}: {p:?}", p.peer_ip);
            }
        }
    }
    println!("wall clock       {wall_s:.2} s");
    if let Some(path) = &a.json {
        // A run shorter than a window has no index: null (JSON has no NaN).
        let json_mean = |v: &[(u64, f64, usize)]| {
            if v.is_empty() {
                "null".to_string()
            } else {
                format!("{:.4}", mean(v))
            }
        };
        let summary = format!(
            "{{\"start_ns\":{t0},\"elapsed_ns\":{elapsed},\"goodput_gbps\":{goodput:.3},\"jain_10ms_mean\":{},\
             \"jain_1ms_mean\":{},\"queue_p99_bytes\":{},\"queue_max_bytes\":{},\"drops\":{},\
             \"marks\":{},\"retransmits\":{retx},\"timeouts\":{timeouts}}}",
            json_mean(&win10),
            json_mean(&win1),
            q.depth_percentile(99.0),
            q.max_depth,
            st.drops(),
            st.marks()
        );
        write_json(path, &a, st, &flows, &summary);
        println!("json             {path}");
    }
    if !all || failed > 0 || wrong > 0 {
        std::process::exit(1);
    }
}
