//! Instruction-pointer messages against the same operation sent directly, in one run,
//! on a real in-process ring pair: `cargo bench -p deposit --bench ipmsg [-- ROUNDS]`.
//!
//! Two nodes, each driven inline by its own thread pinned to its own CPU (as
//! `ddperf --loopback`). The client has two connections to the server: `direct`, on
//! which it names the server's memory (plain writes), and `ip`, isolated, on which it
//! names only instruction pointers the server programmed: the same WRITEs, with the
//! offset supplied by the instruction. Every message is 32 bytes. Each round (default
//! 10) measures, in an order that alternates from round to round:
//!
//! * **bw**: [`BW_MSGS`] messages streamed as `ddperf write_bw` / `ip_bw` do
//!   (`--tx-depth` 128, every 100th signaled), direct writes at offset 0 against
//!   invokes of the server's entry point that writes at offset 0: message rates;
//! * **lat**: [`PINGS`] ping-pongs as `write_lat` / `ip_lat` do: the client deposits a
//!   ping at [`PING_AT`] (a write, or an invoke of the server's entry point writing
//!   there), the server answers on the same connection when the ping's last byte
//!   changes (a write into the client's [`PONG_AT`], or an invoke of the client's entry
//!   point writing there), the client spins on the pong's last byte: RTT/2, medians.
//!
//! The machine is shared and its speed drifts between modes, so each round's ratio
//! compares samples taken back to back; the medians of the rounds' ratios are the
//! result (issue 5's goal: ip within 1.2x of direct, both ways).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use deposit::{
    Completion, ConnOptions, Connection, Device, DeviceConfig, Endpoint, InstrPtr, Instruction,
    Rights, WorkRequest,
};

const T: Duration = Duration::from_secs(60);
const SIZE: u32 = 32;
/// Where the pings land on the server, the pongs on the client (bandwidth messages land
/// at 0 on the server, as ddperf's).
const PING_AT: u32 = 4096;
const PONG_AT: u32 = 8192;
/// Where each side's messages come from.
const SRC: u64 = 12288;
const REGION: usize = 16384;
const BW_MSGS: u64 = 300_000;
const TX_DEPTH: u64 = 128;
const CQ_MOD: u64 = 100;
const PINGS: usize = 20_000;
const SERVICE_DIRECT: u32 = 1;
const SERVICE_IP: u32 = 2;
/// Ping bytes with this bit travel on the ip connection (the server answers there).
const IP_PING: u8 = 0x80;

/// A WRITE of the message's data at `offset`, every operand the instruction's.
fn write_at(offset: u32) -> Instruction {
    Instruction::write(offset)
}

/// Programs the entry points `offsets` (one WRITE each) in a fresh window and returns
/// the isolated connection options that give it to the peer, and the pointers.
fn program(dev: &Device, offsets: &[u32]) -> (ConnOptions, Vec<InstrPtr>) {
    let code = dev.alloc_instructions(offsets.len() as u32).unwrap();
    let ips = offsets
        .iter()
        .enumerate()
        .map(|(i, &o)| dev.program(code, i as u32, &[write_at(o).entry()]).unwrap())
        .collect();
    let opts = ConnOptions {
        instructions: Some(code),
        isolated: true,
        ..ConnOptions::default()
    };
    (opts, ips)
}

/// Drains a completion queue, checking every completion.
fn drain(cq: &deposit::CompletionQueue) {
    while let Some(c) = cq.poll_one() {
        assert!(c.status.is_ok(), "{c:?}");
    }
}

/// The server: lets the streams land; answers every ping on the connection it came by.
fn server(
    stop: Arc<AtomicBool>,
    ready: mpsc::Sender<(InstrPtr, InstrPtr)>,
    client_ip: mpsc::Receiver<InstrPtr>,
) {
    let dev = Device::open(DeviceConfig::new("ring:ipbench:b", [10, 0, 0, 1])).unwrap();
    // After the EAL is up: its initialisation sets the calling thread's affinity.
    let _ = deposit_transport::port::pin_current_thread_to_nth_cpu(1);
    let ep = dev
        .alloc_endpoint(REGION as u64, Rights::REMOTE_WRITE)
        .unwrap();
    let cq = dev.create_cq(1 << 12);
    let (opts, ips) = program(&dev, &[0, PING_AT]);
    let ld = dev.listen(SERVICE_DIRECT, &ep, &cq).unwrap();
    let li = dev.listen_with(SERVICE_IP, &ep, &cq, &opts).unwrap();
    ready.send((ips[0], ips[1])).unwrap();
    let direct = ld.accept(T).unwrap();
    let ip = li.accept(T).unwrap();
    let pong_ip = client_ip.recv_timeout(T).unwrap();
    let last = (PING_AT + SIZE - 1) as usize;
    let mut seen = 0u8;
    let mut pongs = 0u64;
    while !stop.load(Ordering::Relaxed) {
        dev.progress();
        let b = ep.load_u8(last as u64).unwrap();
        if b == seen {
            continue;
        }
        seen = b;
        ep.write(SRC + u64::from(SIZE) - 1, &[b]).unwrap();
        pongs += 1;
        let (conn, wr) = if b & IP_PING != 0 {
            let wr = WorkRequest::invoke_from(pongs, pong_ip, 0, &ep, SRC, SIZE);
            (&ip, wr)
        } else {
            (&direct, WorkRequest::write(pongs, &ep, SRC, SIZE, PONG_AT))
        };
        conn.post(&if pongs % 256 == 0 { wr.signaled() } else { wr })
            .unwrap();
        drain(&cq);
    }
}

/// One client connection and what it sends.
struct Path<'a> {
    conn: &'a Connection,
    /// A bandwidth message (32 B from SRC, landing at the server's 0).
    bw: WorkRequest,
    /// A ping (32 B from SRC, landing at the server's PING_AT).
    ping: WorkRequest,
    /// Marks this path's ping bytes.
    mark: u8,
}

/// Streams `n` messages as ddperf's bandwidth tests do; returns Mpps.
fn stream(path: &Path<'_>, n: u64) -> f64 {
    let cq = path.conn.cq();
    let mut wcs = [Completion::EMPTY; 64];
    let mut req = path.bw;
    let (mut posted, mut retired) = (0u64, 0u64);
    let t0 = Instant::now();
    while retired < n {
        while posted < n && posted - retired < TX_DEPTH {
            let id = posted + 1;
            req.set_wr_id(id);
            req.set_signaled(id == n || id % CQ_MOD == 0);
            match path.conn.post(&req) {
                Ok(()) => posted = id,
                Err(deposit::Error::SendQueueFull { .. }) => break,
                Err(e) => panic!("{e}"),
            }
        }
        let k = cq.poll(&mut wcs);
        for wc in &wcs[..k] {
            assert!(wc.status.is_ok(), "{wc:?}");
            retired = wc.wr_id;
        }
        assert!(t0.elapsed() < T, "stream stalled at {retired} of {n}");
    }
    n as f64 / t0.elapsed().as_secs_f64() / 1e6
}

/// `PINGS` ping-pongs; returns the median RTT/2 in microseconds.
fn pings(dev: &Device, ep: &Endpoint, path: &Path<'_>, counter: &mut u8) -> f64 {
    let last = (PONG_AT + SIZE - 1) as usize;
    let mut req = path.ping;
    let mut samples = Vec::with_capacity(PINGS);
    for i in 0..PINGS as u64 {
        *counter = (*counter % 127) + 1;
        let b = *counter | path.mark;
        ep.write(SRC + u64::from(SIZE) - 1, &[b]).unwrap();
        req.set_wr_id(i);
        req.set_signaled(i % 256 == 255);
        let t0 = Instant::now();
        path.conn.post(&req).unwrap();
        // The pong is checked after every worker turn, as ddperf's loops do.
        while ep.load_u8(last as u64).unwrap() != b {
            dev.progress();
            assert!(t0.elapsed() < T, "no pong");
        }
        samples.push(t0.elapsed());
        drain(path.conn.cq());
    }
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e6 / 2.0
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn list(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.2}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10);
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let (ip_tx, ip_rx) = mpsc::channel();
    let st = stop.clone();
    let srv = std::thread::spawn(move || server(st, ready_tx, ip_rx));
    let (bw_ip, ping_ip) = ready_rx.recv_timeout(T).unwrap();
    let _ = deposit_transport::port::pin_current_thread_to_nth_cpu(0);
    let dev = Device::open(DeviceConfig::new("ring:ipbench:a", [10, 0, 0, 2])).unwrap();
    let ep = dev
        .alloc_endpoint(REGION as u64, Rights::REMOTE_WRITE)
        .unwrap();
    let (dcq, icq) = (dev.create_cq(1 << 12), dev.create_cq(1 << 12));
    let (opts, ips) = program(&dev, &[PONG_AT]);
    let direct = dev
        .connect([10, 0, 0, 1], SERVICE_DIRECT, &ep, &dcq)
        .unwrap();
    let ip = dev
        .connect_with([10, 0, 0, 1], SERVICE_IP, &ep, &icq, &opts)
        .unwrap();
    ip_tx.send(ips[0]).unwrap();
    let paths = [
        Path {
            conn: &direct,
            bw: WorkRequest::write(0, &ep, SRC, SIZE, 0),
            ping: WorkRequest::write(0, &ep, SRC, SIZE, PING_AT),
            mark: 0,
        },
        Path {
            conn: &ip,
            bw: WorkRequest::invoke_from(0, bw_ip, 0, &ep, SRC, SIZE),
            ping: WorkRequest::invoke_from(0, ping_ip, 0, &ep, SRC, SIZE),
            mark: IP_PING,
        },
    ];
    let mut counter = 0u8;
    // Warm-up: a round of each, not counted.
    for p in &paths {
        stream(p, BW_MSGS / 4);
        pings(&dev, &ep, p, &mut counter);
    }
    // [direct, ip] per round.
    let mut bw = [Vec::new(), Vec::new()];
    let mut lat = [Vec::new(), Vec::new()];
    for r in 0..rounds {
        let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        for &i in &order {
            bw[i].push(stream(&paths[i], BW_MSGS));
        }
        for &i in &order {
            lat[i].push(pings(&dev, &ep, &paths[i], &mut counter));
        }
    }
    stop.store(true, Ordering::Relaxed);
    srv.join().unwrap();
    let st = dev.stats();
    let bw_ratio: Vec<f64> = bw[0].iter().zip(&bw[1]).map(|(d, i)| d / i).collect();
    let lat_ratio: Vec<f64> = lat[1].iter().zip(&lat[0]).map(|(i, d)| i / d).collect();
    println!(
        "32 B message rate [Mpps], {rounds} rounds of {BW_MSGS}: direct write median {:.2} ({}), \
         invoke median {:.2} ({})",
        median(&bw[0]),
        list(&bw[0]),
        median(&bw[1]),
        list(&bw[1])
    );
    println!(
        "  direct/ip per round: {}; median {:.2} (goal <= 1.2)",
        list(&bw_ratio),
        median(&bw_ratio)
    );
    println!(
        "32 B latency RTT/2 [us], {rounds} rounds of {PINGS} pings (median): direct write {:.2} \
         ({}), invoke {:.2} ({})",
        median(&lat[0]),
        list(&lat[0]),
        median(&lat[1]),
        list(&lat[1])
    );
    println!(
        "  ip/direct per round: {}; median {:.2} (goal <= 1.2)",
        list(&lat_ratio),
        median(&lat_ratio)
    );
    eprintln!(
        "client: {} messages sent, {} retransmissions ({} timer expiries)",
        st.msgs_tx, st.retransmits, st.timeouts
    );
}
