//! incast_bw: several senders' devices in one process, driven by one thread, each
//! streaming writes to one receiver over a connection of its own (issue 38's shaped
//! bridge: N senders on their own veths, one receiver behind a `tbf`-shaped port).
//!
//! Why not the [`harness`](crate::harness): its client is one device with a control
//! connection, and its `-q` connections are posted round-robin in one window, which
//! makes every connection go at the slowest one's pace (a fairness of 1 by
//! construction). Here each flow is its own device (its own address, so its own peer
//! at the receiver: congestion control is per peer node) and keeps its own `-t` writes
//! outstanding, whatever the others do; the one thread turns every device's worker in
//! turn (`Progress::Inline`), so N senders need no N spinning cores.
//!
//! * **Server** (`--server -q N`): a passive sink. It accepts N connections on
//!   `--service` into one endpoint (every write lands at offset 0, as write_bw's do),
//!   drives its device until the client has closed them all, and says what each
//!   received on stderr. Its congestion settings (`--line-mbps`: the drain rate it
//!   shares out as credit) are what matter on a shaped path.
//! * **Client** (`--sender SPEC@ADDR`, once per sender): opens every device (one EAL
//!   for all of them), connects each to the server, streams `-s` byte writes (every one
//!   signaled: a completion is the receiver's acknowledgement of the whole write) for
//!   `--warmup-ms` untimed, then for `-D` seconds timed, then waits for what is still
//!   outstanding and closes.
//!
//! What it reports (one table, or one JSON object with `--json`): each flow's goodput
//! (bytes of writes completed in the timed span, Mb/s of payload), their sum, Jain's
//! index over the flows' totals and over every `--window-ms` window of the span (its
//! median and its least), and what the devices counted in the span: messages sent,
//! retransmitted, and their payload bytes (the retransmitted share is of bytes),
//! retransmission timeouts.
//!
//! Nothing here allocates or makes a syscall in the timed loop beyond what the
//! devices' turns do.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use deposit::{
    CompletionQueue, ConnOptions, Connection, Device, DeviceStats, Endpoint, Rights, WorkRequest,
};

use crate::error::{PerfError, Result, Wait};
use crate::setup::{self, EMPTY_WC};
use crate::{Params, Role, Span};

/// One sender: a device with one connection to the server.
struct Flow {
    dev: Device,
    _ep: Endpoint,
    /// Its write: `-s` bytes from its endpoint to the server's offset 0, signaled.
    req: WorkRequest,
    cq: CompletionQueue,
    conn: Connection,
    /// Writes posted and not yet completed.
    outstanding: u64,
    /// Writes completed in the timed span, and per window of it.
    done: u64,
    windows: Vec<u64>,
}

/// What the client measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub size: u64,
    pub secs: f64,
    /// Writes completed in the span, per flow.
    pub flow_writes: Vec<u64>,
    pub window_ms: u64,
    /// Writes completed per full window, per flow (`[window][flow]`).
    pub windows: Vec<Vec<u64>>,
    /// The devices' counters over the span, summed.
    pub msgs_tx: u64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub bytes_tx: u64,
    /// Payload bytes sent (first transmissions and again) and sent again.
    pub payload_tx: u64,
    pub bytes_retransmitted: u64,
    /// The driving thread's share of the span on a CPU and waiting for one (runnable,
    /// not running: on a shared machine a spinning side's lost time), in %.
    pub cpu_pct: f64,
    pub runq_pct: f64,
}

/// The calling thread's time on a CPU and waiting on a run queue so far, ns (Linux's
/// `/proc/thread-self/schedstat`; zeros where it is not).
pub fn sched_times() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut f = s.split_whitespace().map(|v| v.parse().unwrap_or(0));
    (f.next().unwrap_or(0), f.next().unwrap_or(0))
}

/// The shares of `span` that `(on_cpu, waiting)` nanoseconds make, in %.
fn shares(d: (u64, u64), span: Duration) -> (f64, f64) {
    let ns = span.as_nanos().max(1) as f64;
    (100.0 * d.0 as f64 / ns, 100.0 * d.1 as f64 / ns)
}

/// Jain's fairness index of `x`: (Σx)² / (n Σx²), 1 when all are equal, 1/n when one
/// has everything; 1 for no flows or all zero (nothing to share unfairly).
pub fn jain(x: &[f64]) -> f64 {
    let (s, s2) = x.iter().fold((0.0, 0.0), |(s, s2), v| (s + v, s2 + v * v));
    if s2 == 0.0 {
        1.0
    } else {
        s * s / (x.len() as f64 * s2)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl Report {
    /// Mb/s of payload of `writes` writes over the span.
    fn mbps(&self, writes: u64) -> f64 {
        (writes * self.size) as f64 * 8.0 / self.secs / 1e6
    }
    pub fn flow_mbps(&self) -> Vec<f64> {
        self.flow_writes.iter().map(|&w| self.mbps(w)).collect()
    }
    pub fn goodput_mbps(&self) -> f64 {
        self.mbps(self.flow_writes.iter().sum())
    }
    pub fn jain(&self) -> f64 {
        jain(&self.flow_mbps())
    }
    /// Jain's index of each window.
    pub fn window_jains(&self) -> Vec<f64> {
        self.windows
            .iter()
            .map(|w| jain(&w.iter().map(|&x| x as f64).collect::<Vec<_>>()))
            .collect()
    }
    /// Retransmitted payload bytes in % of the payload bytes sent.
    pub fn retransmit_pct(&self) -> f64 {
        if self.payload_tx == 0 {
            0.0
        } else {
            100.0 * self.bytes_retransmitted as f64 / self.payload_tx as f64
        }
    }

    pub fn json(&self, line_mbps: u64, cc: bool) -> String {
        let wj = self.window_jains();
        let list = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.3}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        format!(
            concat!(
                "{{\"test\":\"incast_bw\",\"flows\":{},\"size\":{},\"secs\":{:.3},",
                "\"goodput_mbps\":{:.1},\"flow_mbps\":[{}],\"jain\":{:.4},",
                "\"window_ms\":{},\"windows\":{},\"jain_windows_median\":{:.4},",
                "\"jain_windows_min\":{:.4},\"msgs_tx\":{},\"retransmits\":{},",
                "\"bytes_retransmitted\":{},\"payload_tx\":{},",
                "\"retransmit_pct\":{:.4},\"timeouts\":{},\"bytes_tx\":{},",
                "\"cpu_pct\":{:.1},\"runq_pct\":{:.1},\"cc\":{},\"line_mbps\":{}}}"
            ),
            self.flow_writes.len(),
            self.size,
            self.secs,
            self.goodput_mbps(),
            list(&self.flow_mbps()),
            self.jain(),
            self.window_ms,
            wj.len(),
            median(wj.clone()),
            wj.iter().copied().fold(f64::NAN, f64::min),
            self.msgs_tx,
            self.retransmits,
            self.bytes_retransmitted,
            self.payload_tx,
            self.retransmit_pct(),
            self.timeouts,
            self.bytes_tx,
            self.cpu_pct,
            self.runq_pct,
            cc,
            line_mbps,
        )
    }

    pub fn print(&self, flows: &[(String, IpAddr)]) {
        println!(
            "incast_bw: {} flows, {} B writes, {:.2} s timed",
            flows.len(),
            self.size,
            self.secs
        );
        for ((spec, ip), m) in flows.iter().zip(self.flow_mbps()) {
            println!("  flow {ip} ({spec}): {m:.1} Mb/s");
        }
        let wj = self.window_jains();
        println!("  goodput {:.1} Mb/s in all", self.goodput_mbps());
        println!(
            "  Jain {:.4} over the flows; over {} windows of {} ms: median {:.4}, least {:.4}",
            self.jain(),
            wj.len(),
            self.window_ms,
            median(wj.clone()),
            wj.iter().copied().fold(f64::NAN, f64::min)
        );
        println!(
            "  messages sent {}, retransmitted {} ({} B: {:.3} % of the payload bytes sent), retransmission timeouts {}",
            self.msgs_tx,
            self.retransmits,
            self.bytes_retransmitted,
            self.retransmit_pct(),
            self.timeouts
        );
        println!(
            "  the driving thread: on a CPU {:.1} % of the span, waiting for one {:.1} %",
            self.cpu_pct, self.runq_pct
        );
    }
}

/// Runs this process's side.
pub fn run(p: &Params) -> Result<()> {
    match p.role {
        Role::Server => serve(p),
        Role::Client { peer } => dial(p, peer),
        Role::Loopback => Err(PerfError::Usage(
            "incast_bw runs as a server and a client of several --sender devices, not --loopback"
                .into(),
        )),
    }
}

fn serve(p: &Params) -> Result<()> {
    let dev = setup::open_device(p, &p.dev, p.ip)?;
    setup::banner(&p.dev, dev.max_frame());
    let ep = dev.alloc_endpoint(p.max_size().max(64), Rights::REMOTE_WRITE)?;
    let cq = dev.create_cq(256);
    let opts = ConnOptions {
        traffic_class: p.traffic_class,
        ..ConnOptions::default()
    };
    let l = dev.listen_with(p.service, &ep, &cq, &opts)?;
    let flows = p.qps as usize;
    let mut conns = Vec::with_capacity(flows);
    while conns.len() < flows {
        conns.push(l.accept(p.timeout)?);
    }
    eprintln!("ddperf: incast_bw server: {flows} connection(s) accepted");
    let (t0, s0) = (Instant::now(), sched_times());
    // Until every connection is closed (the client is done), failing after --timeout
    // without a write arriving.
    let mut wait = Wait::new(p.timeout, "the senders' writes or their close");
    let mut seen = 0;
    while conns.iter().any(|c| c.state().is_up()) {
        dev.progress();
        if wait.tick()? {
            let a: u64 = conns.iter().map(|c| c.arrivals()).sum();
            if a != seen {
                seen = a;
                wait.progressed();
            }
        }
    }
    let got: Vec<String> = conns.iter().map(|c| c.arrivals().to_string()).collect();
    let s1 = sched_times();
    let (cpu, runq) = shares((s1.0 - s0.0, s1.1 - s0.1), t0.elapsed());
    eprintln!(
        "ddperf: incast_bw server done: writes received per connection {}; on a CPU {cpu:.1} % of the time since, waiting for one {runq:.1} %",
        got.join(" ")
    );
    Ok(())
}

fn dial(p: &Params, peer: IpAddr) -> Result<()> {
    let size = p.max_size();
    let depth = u64::from(p.tx_depth);
    let mut flows = Vec::with_capacity(p.senders.len());
    for (k, (spec, ip)) in p.senders.iter().enumerate() {
        let dev = setup::open_device(p, spec, *ip)?;
        if k == 0 {
            let ports: Vec<&str> = p.senders.iter().map(|s| s.0.as_str()).collect();
            setup::banner(&ports.join(", "), dev.max_frame());
        }
        setup::wait_link(|| dev.link_up(), p)?;
        let ep = dev.alloc_endpoint(size, Rights::REMOTE_WRITE)?;
        let cq = dev.create_cq(depth as usize + 64);
        let opts = ConnOptions {
            traffic_class: p.traffic_class,
            ..ConnOptions::default()
        };
        let conn = dev
            .connect_with(peer, p.service, &ep, &cq, &opts)
            .map_err(|e| match e {
                deposit::Error::Rejected(deposit::RejectReason::Timeout) => PerfError::Timeout {
                    what: "the server to accept (is `ddperf incast_bw --server` running?)",
                    secs: p.timeout.as_secs_f64(),
                },
                e => e.into(),
            })?;
        let req = WorkRequest::write(k as u64, &ep, 0, size as u32, 0).signaled();
        flows.push(Flow {
            dev,
            _ep: ep,
            req,
            cq,
            conn,
            outstanding: 0,
            done: 0,
            windows: Vec::new(),
        });
    }
    let span = match p.span {
        Span::Duration(d) => d,
        Span::Iters(_) => unreachable!("incast_bw runs for -D seconds (resolve)"),
    };
    let window = Duration::from_millis(p.window_ms.max(1));
    let mut wcs = [EMPTY_WC; 64];
    let mut idle = Wait::new(p.timeout, "completions");
    let start = Instant::now();
    let mut t0 = start + p.warmup;
    let end = t0 + span;
    let mut before: Option<Vec<DeviceStats>> = None;
    let mut sched0 = (0, 0);
    let mut sched1 = None;
    // Untimed, timed, then draining what is outstanding (nothing more posted).
    loop {
        let now = Instant::now();
        let posting = now < end;
        if !posting && sched1.is_none() {
            sched1 = Some(sched_times());
        }
        if before.is_none() && now >= t0 {
            // The timed span starts at the first turn past the warm-up.
            t0 = now;
            before = Some(flows.iter().map(|f| f.dev.stats()).collect());
            sched0 = sched_times();
        }
        let timed = before.is_some() && posting;
        let at = timed.then(|| (now - t0).as_nanos() / window.as_nanos());
        let mut any = false;
        for f in &mut flows {
            while posting && f.outstanding < depth {
                match f.conn.post(&f.req) {
                    Ok(()) => f.outstanding += 1,
                    Err(deposit::Error::SendQueueFull { .. }) => break,
                    Err(e) => return Err(e.into()),
                }
            }
            f.dev.progress();
            let n = f.cq.poll_queued(&mut wcs);
            for wc in &wcs[..n] {
                if !wc.status.is_ok() {
                    return Err(PerfError::Failed(format!(
                        "a write of flow {} completed with {:?}",
                        f.dev.local_addr().ip,
                        wc.status
                    )));
                }
            }
            f.outstanding -= n as u64;
            if let (Some(w), true) = (at, n > 0) {
                f.done += n as u64;
                let w = w as usize;
                if f.windows.len() <= w {
                    f.windows.resize(w + 1, 0);
                }
                f.windows[w] += n as u64;
            }
            any |= n > 0;
        }
        if any {
            idle.progressed();
        }
        if idle.tick()? {
            for f in &flows {
                if !f.conn.state().is_up() {
                    return Err(PerfError::Failed(format!(
                        "the connection of flow {} is {:?}",
                        f.dev.local_addr().ip,
                        f.conn.state()
                    )));
                }
            }
        }
        if !posting && flows.iter().all(|f| f.outstanding == 0) {
            break;
        }
    }
    // From the first turn past the warm-up (a turn late under a loaded machine).
    let timed = end.saturating_duration_since(t0);
    let secs = timed.as_secs_f64();
    let before = before.expect("the span started");
    let s1 = sched1.unwrap_or_else(sched_times);
    let (cpu_pct, runq_pct) = shares((s1.0 - sched0.0, s1.1 - sched0.1), timed);
    let (mut msgs_tx, mut retransmits, mut timeouts, mut bytes_tx) = (0, 0, 0, 0);
    let (mut payload_tx, mut bytes_retransmitted) = (0, 0);
    for (f, b) in flows.iter().zip(&before) {
        let a = f.dev.stats();
        payload_tx += a.bytes_payload_tx - b.bytes_payload_tx;
        bytes_retransmitted += a.bytes_retransmitted - b.bytes_retransmitted;
        msgs_tx += a.msgs_tx - b.msgs_tx;
        retransmits += a.retransmits - b.retransmits;
        timeouts += a.timeouts - b.timeouts;
        bytes_tx += a.bytes_tx - b.bytes_tx;
    }
    // Only full windows (the last one's end may fall past the span's).
    let full = (timed.as_nanos() / window.as_nanos()) as usize;
    let windows = (0..full)
        .map(|w| {
            flows
                .iter()
                .map(|f| f.windows.get(w).copied().unwrap_or(0))
                .collect()
        })
        .collect();
    let rep = Report {
        size,
        secs,
        flow_writes: flows.iter().map(|f| f.done).collect(),
        window_ms: p.window_ms.max(1),
        windows,
        msgs_tx,
        retransmits,
        timeouts,
        bytes_tx,
        payload_tx,
        bytes_retransmitted,
        cpu_pct,
        runq_pct,
    };
    for f in &flows {
        f.conn.close();
    }
    let t = Instant::now();
    while flows.iter().any(|f| f.dev.connections() > 0) && t.elapsed() < Duration::from_secs(1) {
        for f in &flows {
            f.dev.progress();
        }
    }
    if p.json {
        println!(
            "{}",
            rep.json(p.congestion.line_rate_mbps, p.congestion.enabled)
        );
    } else {
        rep.print(&p.senders);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_is_one_for_equal_shares_and_one_over_n_for_one_taking_all() {
        assert_eq!(jain(&[3.0, 3.0, 3.0, 3.0]), 1.0);
        assert_eq!(jain(&[5.0, 0.0, 0.0, 0.0]), 0.25);
        assert_eq!(jain(&[0.0, 0.0]), 1.0);
        // Two of four at twice the others: 36 / (4 * 10) = 0.9.
        assert!((jain(&[2.0, 2.0, 1.0, 1.0]) - 0.9).abs() < 1e-12);
    }

    #[test]
    fn a_report_counts_payload_over_the_span_and_fairness_per_window() {
        let r = Report {
            size: 65536,
            secs: 2.0,
            flow_writes: vec![1000, 1000, 500, 500],
            window_ms: 1000,
            windows: vec![vec![500, 500, 250, 250], vec![500, 500, 500, 0]],
            msgs_tx: 200_000,
            retransmits: 1000,
            timeouts: 2,
            bytes_tx: 0,
            payload_tx: 200_000 * 8192,
            bytes_retransmitted: 1000 * 8192,
            cpu_pct: 50.0,
            runq_pct: 50.0,
        };
        // 3000 writes of 64 KiB in 2 s: 786.432 Mb/s.
        assert!((r.goodput_mbps() - 786.432).abs() < 1e-9);
        assert!((r.jain() - 0.9).abs() < 1e-12);
        let w = r.window_jains();
        assert!((w[0] - 0.9).abs() < 1e-12);
        assert!((w[1] - 0.75).abs() < 1e-12);
        assert_eq!(r.retransmit_pct(), 0.5);
        let j = r.json(1000, true);
        assert!(j.contains("\"jain_windows_min\":0.7500"), "{j}");
        assert!(j.contains("\"flows\":4"), "{j}");
    }
}
