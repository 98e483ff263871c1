//! Handshake floods from one source on real PMDs (`tests/handshake_flood.rs`, issue 34's
//! acceptance point): thousands of completed or half-completed handshakes from one host
//! in about a second, while a real client from another host connects and verifies.
//!
//! - `flood-server`: a generic application's listener (service 35, the default backlog):
//!   it accepts every connection in a loop and keeps it, dropping one when its peer
//!   closed it; it says its resident memory (VmRSS) once set up and idle, and on
//!   "report" its memory, connections (held by the application, by the peer's key) and
//!   the counters of what it refused or let go.
//! - `flood-client`: the real client (10.0.0.2), pinned to the server's key: connects,
//!   writes and reads back, every byte checked.
//! - `flood-half`: the half-open flood (10.0.0.3), without a deposit device: the
//!   transport's sans-IO connection manager ([`Cm`]) driven over a raw packet socket,
//!   which opens connects as fast as it is told and, for the ones the server accepts,
//!   never sends the connection's first frame.
//! - `flood-full`: the completed flood (10.0.0.3), a deposit device that connects again
//!   and again, pinned, and keeps what it gets until told to close it all.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deposit::*;
use deposit_tests::{check_pattern, fill_pattern, wait_completions};
use deposit_transport::cm::{Action, Cm, CmMessage, CmTiming, PeerTrust};
use deposit_transport::wire::{hflags, FrameView, UnderlayRepr, UDP_PORT};

use super::secure::{raw_socket, recv_frame, send};
use super::{await_exit, await_go, await_line, fail, stdin_lines, T};

/// Service of the flood test.
const SERVICE: u32 = 35;
const SERVER: [u8; 4] = [10, 0, 0, 1];
const CLIENT: [u8; 4] = [10, 0, 0, 2];
const FLOODER: [u8; 4] = [10, 0, 0, 3];
/// The server's endpoint, and where the client reads its writes back to.
const LEN: usize = 1 << 20;
const READ_BACK: usize = LEN / 2;
/// The real client's writes: `WRITES` of `WRITE` bytes (256 KiB).
const WRITES: u64 = 64;
const WRITE: usize = 4096;
const SEED: u64 = 35;
/// The half-open flood's connects: opened evenly over `OPEN_OVER_US`, each retried as a
/// node's are, given up after `GIVE_UP_US` (clock: microseconds).
const OPEN_OVER_US: u64 = 1_000_000;
const FIRST_RETRY_US: u64 = 50_000;
const RETRY_US: u64 = 100_000;
const GIVE_UP_US: u64 = 1_500_000;
/// Bound of a flood role's work (the parent bounds the test sooner).
const RUN_MAX: Duration = Duration::from_secs(40);

/// A field of /proc/self/status in KiB (`VmRSS`, `VmHWM`, `RssAnon`, ...).
fn status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_else(|e| fail(e));
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| fail(format!("no {field} in /proc/self/status")))
}

/// Pins the calling thread (and the threads it starts after, DPDK's among them) to the
/// first CPU it may run on (`server`) or the last: the server's worker gets a core of
/// its own, as on a server host, and the client, the flood (two other hosts) and the
/// server's accepting thread share the other. Said as "cpu N"; nothing is done on a
/// single CPU. (Unpinned, on the 2-core machine, the three devices' busy-polling
/// workers and spinning waits take turns by scheduler slices: the completed flood's
/// connects took 6 ms each at the median, 20 s for 5 000; and the accepting thread,
/// which spins up to 50 ms in each `accept` before it blocks, beside the server's
/// worker on one core held each accepted connect to about 8 ms.)
fn pin(server: bool) {
    // SAFETY: a zeroed cpu_set_t is an empty set; the calls fill or read the set of the
    // size passed, for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(0, size, &mut set) != 0 {
            return;
        }
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect();
        if cpus.len() < 2 {
            return;
        }
        let cpu = if server {
            cpus[0]
        } else {
            cpus[cpus.len() - 1]
        };
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        if libc::sched_setaffinity(0, size, &one) == 0 {
            println!("cpu {cpu}");
        }
    }
}

/// The CPU time this process used so far (user and system), in milliseconds.
fn cpu_ms() -> u64 {
    // SAFETY: a zeroed rusage is a valid value of the C struct, which getrusage fills.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let ms = |t: libc::timeval| t.tv_sec as u64 * 1000 + t.tv_usec as u64 / 1000;
    ms(u.ru_utime) + ms(u.ru_stime)
}

/// Prints the process's memory: resident (`rss_kib`), its peak since the last reset
/// (`hwm_kib`), anonymous (`rss_anon_kib`), and hugetlb mappings (`hugetlb_kib`, not in
/// the resident set).
fn print_memory() {
    println!("rss_kib {}", status_kib("VmRSS"));
    println!("hwm_kib {}", status_kib("VmHWM"));
    println!("rss_anon_kib {}", status_kib("RssAnon"));
    println!("hugetlb_kib {}", status_kib("HugetlbPages"));
}

/// A device on `port` at `ip` with a dedicated worker, frames of at most 1514 bytes and a
/// CM timeout of `cm_timeout`.
fn device(port: &str, ip: [u8; 4], cm_timeout: Duration) -> Device {
    let mut cfg = DeviceConfig::new(port, ip).progress(Progress::Dedicated);
    cfg.max_frame = Some(1514);
    cfg.cm_timeout = cm_timeout;
    // The flooders' raw frames address the MAC derived from the IP; the nodes still
    // resolve each other by ARP (they answer with this MAC).
    cfg.mac = Some(NodeAddr::from_ip(ip, UDP_PORT).mac);
    Device::open(cfg).unwrap_or_else(|e| fail(e))
}

fn key(k: &str) -> IdentityKey {
    k.parse()
        .unwrap_or_else(|e| fail(format!("key {k:?}: {e}")))
}

/// What a connection the application holds is: live, or to be dropped (its peer closed
/// it, or it failed).
fn live(c: &Connection) -> bool {
    matches!(
        c.state(),
        ConnState::Normal | ConnState::Exceptioned | ConnState::Connecting
    )
}

/// The server's report: memory, connections (the device's, the application's by the
/// peer's key) and counters, then "stats".
fn server_report(dev: &Device, held: &Mutex<Vec<Connection>>, accepted: &AtomicU64) {
    print_memory();
    println!("connections {}", dev.connections());
    let mut by_key: BTreeMap<String, u64> = BTreeMap::new();
    let n = {
        let h = held.lock().unwrap_or_else(|e| e.into_inner());
        for c in h.iter().filter(|c| live(c)) {
            let k = c.peer_key().map_or("-".to_string(), |k| k.to_string());
            *by_key.entry(k).or_default() += 1;
        }
        by_key.values().sum::<u64>()
    };
    println!("held {n}");
    for (k, n) in &by_key {
        println!("held_by {k} {n}");
    }
    println!("accepted {}", accepted.load(Ordering::Relaxed));
    let s = dev.stats();
    super::print_drops(
        dev,
        &[
            DropReason::SourceCap,
            DropReason::BacklogFull,
            DropReason::BadCookie,
            DropReason::CmRateLimited,
            DropReason::CmResources,
            DropReason::CmForged,
        ],
    );
    println!("handshakes_expired {}", s.handshakes_expired);
    println!("challenges {}", s.cm_challenges);
    println!("frames_rx {}", s.frames_rx);
    println!("frames_tx {}", s.frames_tx);
    println!("cpu_ms {}", cpu_ms());
    println!("stats");
}

/// Node 10.0.0.1: listens on service 35 with the default backlog and a CM timeout of
/// `cm_timeout_ms`, as a generic application: a thread accepts every connection and
/// keeps it, and drops the ones whose peer closed them. Says its key ("key ..."),
/// whether DPDK runs on hugepages, then — set up and idle — its memory (the baseline;
/// the peak is reset there), "ready". Then, until "exit": "report" (memory,
/// connections, counters, "stats"); "verify" (the real client's bytes, "verified");
/// "trim" (memory after `malloc_trim`, a diagnosis, "trimmed").
pub fn flood_server(port: &str, cm_timeout_ms: u64) {
    pin(true);
    let lines = stdin_lines();
    let dev = device(port, SERVER, Duration::from_millis(cm_timeout_ms));
    println!("key {}", dev.identity());
    println!("hugepages {}", dev.eal().is_some_and(|e| e.hugepages));
    let ep = dev
        .alloc_endpoint(LEN as u64, Rights::REMOTE_WRITE | Rights::REMOTE_READ)
        .unwrap_or_else(|e| fail(e));
    println!("endpoint_backing {:?}", ep.backing());
    let cq = dev.create_cq(64);
    let l = dev.listen(SERVICE, &ep, &cq).unwrap_or_else(|e| fail(e));
    println!("backlog {DEFAULT_BACKLOG}");
    let held: Arc<Mutex<Vec<Connection>>> = Arc::new(Mutex::new(Vec::new()));
    let accepted = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let app = {
        let (held, accepted, stop) = (held.clone(), accepted.clone(), stop.clone());
        std::thread::spawn(move || {
            // Off the worker's core: the accept loop spins a while before it blocks.
            pin(false);
            while !stop.load(Ordering::Relaxed) {
                match l.accept(Duration::from_millis(250)) {
                    Ok(c) => {
                        accepted.fetch_add(1, Ordering::Relaxed);
                        held.lock().unwrap_or_else(|e| e.into_inner()).push(c);
                    }
                    Err(Error::Timeout(..)) => {}
                    Err(e) => fail(format!("accept: {e}")),
                }
                // Connections their peers closed (or that failed) go.
                let gone: Vec<Connection> = {
                    let mut h = held.lock().unwrap_or_else(|e| e.into_inner());
                    let (keep, gone) = std::mem::take(&mut *h).into_iter().partition(live);
                    *h = keep;
                    gone
                };
                drop(gone);
            }
            drop(l);
        })
    };
    // Set up and idle: the baseline, and the peak counted from here.
    std::thread::sleep(Duration::from_millis(500));
    if std::fs::write("/proc/self/clear_refs", "5").is_err() {
        eprintln!("testnode: cannot reset the peak resident set (VmHWM)");
    }
    print_memory();
    await_go(&dev, &lines);
    loop {
        match lines.recv_timeout(3 * T) {
            Ok(l) if l == "report" => server_report(&dev, &held, &accepted),
            Ok(l) if l == "verify" => {
                for i in 0..WRITES as usize {
                    let off = i * WRITE;
                    check_pattern(&ep, off, WRITE, SEED, off as u64).unwrap_or_else(|e| fail(e));
                }
                println!("verified");
            }
            Ok(l) if l == "trim" => {
                // SAFETY: glibc's malloc_trim takes no pointer; it returns free heap
                // memory to the system.
                unsafe { libc::malloc_trim(0) };
                print_memory();
                println!("trimmed");
            }
            Ok(l) if l == "exit" => break,
            Ok(l) => fail(format!("unexpected line {l:?}")),
            Err(e) => fail(format!("no word from the parent: {e}")),
        }
    }
    stop.store(true, Ordering::Relaxed);
    if app.join().is_err() {
        fail("the accepting thread panicked");
    }
    drop(held);
}

/// Node 10.0.0.2, the real client: after "go" connects to the server pinned to `server`
/// ("connect_us N", "connected"), writes `WRITES` patterns and reads them back, every
/// completion and byte checked ("completed"); on "report" its connection's state
/// ("stats"); until "exit".
pub fn flood_client(port: &str, server: &str) {
    pin(false);
    let lines = stdin_lines();
    let dev = device(port, CLIENT, Duration::from_secs(5));
    println!("own_key {}", dev.identity());
    let ep = dev
        .alloc_endpoint(LEN as u64, Rights::REMOTE_WRITE)
        .unwrap_or_else(|e| fail(e));
    let cq = dev.create_cq(256);
    let opts = ConnOptions {
        peer_key: Some(key(server)),
        ..ConnOptions::default()
    };
    await_go(&dev, &lines);
    let t0 = Instant::now();
    let conn = dev
        .connect_with(SERVER, SERVICE, &ep, &cq, &opts)
        .unwrap_or_else(|e| fail(format!("connect: {e}")));
    println!("connect_us {}", t0.elapsed().as_micros());
    println!("key_verified {}", conn.peer_key_verified());
    println!("connected");
    let t1 = Instant::now();
    let check = |n| {
        for wc in wait_completions(&cq, n, T) {
            if wc.status != WcStatus::Success {
                fail(format!("completed {wc:?}"));
            }
        }
    };
    for i in 0..WRITES {
        let off = i as usize * WRITE;
        fill_pattern(&ep, off, WRITE, SEED, off as u64);
        let wr = WorkRequest::write(i, &ep, off as u64, WRITE as u32, off as u32);
        conn.post(&wr.signaled()).unwrap_or_else(|e| fail(e));
        if (i + 1) % 16 == 0 {
            check(16);
        }
    }
    for i in 0..WRITES {
        let off = i as usize * WRITE;
        let wr = WorkRequest::read(
            1 << 32 | i,
            &ep,
            (READ_BACK + off) as u64,
            WRITE as u32,
            off as u32,
        );
        conn.post(&wr.signaled()).unwrap_or_else(|e| fail(e));
        if (i + 1) % 16 == 0 {
            check(16);
        }
    }
    for i in 0..WRITES as usize {
        let off = i * WRITE;
        check_pattern(&ep, READ_BACK + off, WRITE, SEED, off as u64)
            .unwrap_or_else(|e| fail(format!("read back: {e}")));
    }
    println!("write_read_us {}", t1.elapsed().as_micros());
    println!("cpu_ms {}", cpu_ms());
    println!("completed");
    // The floods around it last longer than one usual wait.
    loop {
        match lines.recv_timeout(3 * T) {
            Ok(l) if l == "report" => break,
            Ok(_) => {}
            Err(e) => fail(format!("no report from the parent: {e}")),
        }
    }
    println!("state {:?}", conn.state());
    println!("connections {}", dev.connections());
    println!("stats");
    await_exit(&lines);
    drop(conn);
}

/// Raises a raw socket's buffers (a flood's answers come in thousands).
fn big_buffers(fd: libc::c_int) {
    for (opt, bytes) in [
        (libc::SO_RCVBUFFORCE, 32 << 20),
        (libc::SO_SNDBUFFORCE, 8 << 20),
    ] {
        let v: libc::c_int = bytes;
        // SAFETY: a plain setsockopt with an int of the size passed.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            );
        }
    }
}

/// Receives one frame another host sent, without waiting (`None`: nothing there).
fn recv_now(fd: libc::c_int, buf: &mut [u8]) -> Option<usize> {
    loop {
        let (n, ours) = recv_frame(fd, buf, libc::MSG_DONTWAIT)?;
        if !ours {
            return Some(n);
        }
    }
}

/// Waits up to `ms` for a frame on `fd`.
fn wait_readable(fd: libc::c_int, ms: i32) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// What the half-open flood counted.
#[derive(Default)]
struct HalfCounts {
    frames_tx: u64,
    frames_rx: u64,
    /// CM messages received by kind, and data frames (the server's probes of its
    /// unconfirmed connections).
    challenges: u64,
    replies: u64,
    rejects: u64,
    other_cm: u64,
    data: u64,
    /// What the machine ignored, by reason.
    ignored: BTreeMap<String, u64>,
    established: u64,
    failed: BTreeMap<String, u64>,
    first_established_us: Option<u64>,
    last_established_us: u64,
}

/// One frame from the socket into the machine (the server's CM frames to us).
fn half_take(cm: &mut Cm, f: &[u8], now: u64, c: &mut HalfCounts) {
    let Ok(v) = FrameView::parse(f) else {
        return;
    };
    if v.underlay.src_ip != std::net::IpAddr::from(SERVER)
        || v.underlay.dst_ip != std::net::IpAddr::from(FLOODER)
    {
        return;
    }
    c.frames_rx += 1;
    if v.header.flags & hflags::CM == 0 {
        c.data += 1; // never answered: the handshakes stay unfinished
        return;
    }
    let from = NodeAddr {
        mac: v.underlay.src_mac,
        ip: v.underlay.src_ip,
        udp_port: UDP_PORT,
    };
    for m in v.messages().flatten() {
        let Ok(msg) = CmMessage::parse(&m.control, m.payload) else {
            c.other_cm += 1;
            continue;
        };
        match msg {
            CmMessage::Challenge { .. } => c.challenges += 1,
            CmMessage::ConnectRep { .. } => c.replies += 1,
            CmMessage::Reject { .. } => c.rejects += 1,
            _ => c.other_cm += 1,
        }
        let private = msg.private_data(m.payload);
        if let Err(why) = cm.handle(from, msg, private, now) {
            *c.ignored.entry(format!("{why:?}")).or_default() += 1;
        }
    }
}

/// Node 10.0.0.3, the half-open flood, without a deposit device: its own identity and
/// the transport's connection manager over a raw packet socket on `port` (an
/// interface name). After "go" it opens `n` connects to the server's service evenly
/// over a second ("midway" at a fifth), each retried every 100 ms and given up after
/// 1.5 s; a connect the server accepts is left there — the connection's first frame
/// never goes, nor anything else of it. `server`: the key to pin ("-", as when none is
/// given: an unverified plain connect). Once every connect is over: what it sent,
/// received and got ("established N", `"failed_<reason> N"`, ...), "flooded"; until
/// "exit".
pub fn flood_half(port: &str, n: u64, server: &str) {
    pin(false);
    let lines = stdin_lines();
    let fd = raw_socket(port);
    big_buffers(fd);
    let me = NodeAddr::from_ip(FLOODER, UDP_PORT);
    let to = NodeAddr::from_ip(SERVER, UDP_PORT);
    let identity = Arc::new(Identity::generate().unwrap_or_else(|e| fail(e)));
    println!("own_key {}", identity.public());
    let timing = CmTiming {
        first_retry: FIRST_RETRY_US,
        retry: RETRY_US,
        timeout: GIVE_UP_US,
    };
    let mut cm = Cm::with_limits(
        me.mac,
        1514,
        timing,
        &CmLimits::default(),
        1_000_000,
        identity,
    );
    let opts = deposit_transport::cm::ConnectOptions {
        peer_key: if server == "-" {
            PeerTrust::Unverified
        } else {
            PeerTrust::Pinned(key(server))
        },
        ..Default::default()
    };
    let mut seed = [0u8; 8];
    getrandom::getrandom(&mut seed).unwrap_or_else(|e| fail(e));
    let mut rng = deposit_transport::rng::Rng::new(u64::from_ne_bytes(seed));
    // Our connection numbers: `base + i`, never 0.
    let base = (rng.next_u64() as u32 >> 2) + 1;
    let mut c = HalfCounts::default();
    let mut buf = vec![0u8; 16384];
    let mut out = vec![0u8; 1514];
    println!("ready");
    await_line(&lines, "go");
    let t0 = Instant::now();
    let clock = || t0.elapsed().as_micros() as u64;
    let (mut opened, mut opened_us) = (0u64, None);
    loop {
        let now = clock();
        let due = ((now + 1) * n / OPEN_OVER_US).clamp(1, n);
        while opened < due {
            let conn = base + opened as u32;
            let (k, isn, request) = (rng.next_u64(), rng.next_u64() as u32, rng.next_u64() as u32);
            cm.connect(conn, k, isn, request, to, SERVICE, now, &opts)
                .unwrap_or_else(|e| fail(e));
            opened += 1;
            if opened == n / 5 {
                println!("midway");
            }
        }
        if opened == n && opened_us.is_none() {
            opened_us = Some(now);
        }
        let mut got = 0;
        while got < 256 {
            let Some(len) = recv_now(fd, &mut buf) else {
                break;
            };
            got += 1;
            half_take(&mut cm, &buf[..len], clock(), &mut c);
        }
        let now = clock();
        cm.handle_timeout(now);
        while let Some(a) = cm.poll_action() {
            match a {
                Action::Established { .. } => {
                    c.established += 1;
                    c.first_established_us.get_or_insert(now);
                    c.last_established_us = now;
                }
                Action::Failed { reason, .. } => {
                    *c.failed.entry(format!("{reason:?}")).or_default() += 1;
                }
                _ => {}
            }
        }
        while let Some((dst, msg, private)) = cm.poll_transmit() {
            let underlay = UnderlayRepr {
                src_mac: me.mac,
                dst_mac: dst.mac,
                src_ip: me.ip,
                dst_ip: dst.ip,
                src_port: UDP_PORT,
                dst_port: dst.udp_port,
                traffic_class: 0,
            };
            let len = msg
                .write_frame(private.as_deref().unwrap_or(&[]), &underlay, &mut out)
                .unwrap_or_else(|e| fail(e));
            send(fd, &out[..len]);
            c.frames_tx += 1;
        }
        if opened == n && cm.pending() == 0 {
            break;
        }
        if t0.elapsed() > RUN_MAX {
            fail(format!(
                "{} connects still pending after {RUN_MAX:?}",
                cm.pending()
            ));
        }
        if got == 0 {
            wait_readable(fd, 1);
        }
    }
    let failed: u64 = c.failed.values().sum();
    println!("opened {opened}");
    println!("opened_ms {}", opened_us.unwrap_or(0) / 1000);
    println!("established {}", c.established);
    println!("failed {failed}");
    for (r, k) in &c.failed {
        println!("failed_{r} {k}");
    }
    for (r, k) in &c.ignored {
        println!("ignored_{r} {k}");
    }
    println!(
        "first_established_ms {}",
        c.first_established_us.unwrap_or(0) / 1000
    );
    println!("last_established_ms {}", c.last_established_us / 1000);
    println!("frames_tx {}", c.frames_tx);
    println!("frames_rx {}", c.frames_rx);
    println!(
        "received challenges {} replies {} rejects {} other_cm {} data {}",
        c.challenges, c.replies, c.rejects, c.other_cm, c.data
    );
    println!("done_ms {}", t0.elapsed().as_millis());
    println!("cpu_ms {}", cpu_ms());
    println!("flooded");
    await_exit(&lines);
}

/// Node 10.0.0.3, the completed flood: a deposit device that, after "go", connects `n`
/// times to the server, pinned to `server` ("midway" at a fifth), and keeps every
/// connection it gets; then it says how long that took ("connect_ms N", and each
/// connect's time by outcome), how many it got ("ok N"), how many were refused and why
/// ("refused N", `"refused_<reason> N"`, "error_other N .."), "flooded". On "close" it
/// closes them all ("closed"); on "report" its connections ("stats"); until "exit".
///
/// One thread connects, one connect after the other (the API's connect blocks), and it
/// drives the device itself (inline progress; a guard thread takes a turn whenever it
/// has not for 1 ms: the kept connections' keepalives, the closes). On the 2-core
/// machine this is about six times faster than a dedicated worker with connecting
/// threads beside it (3.6 s against 20 s for 5 000 connects: each hop then waits for a
/// scheduler slice behind the spinning threads of three devices).
pub fn flood_full(port: &str, n: u64, server: &str) {
    pin(false);
    let lines = stdin_lines();
    let mut cfg = DeviceConfig::new(port, FLOODER).progress_guard(Duration::from_millis(1));
    cfg.max_frame = Some(1514);
    let dev = Device::open(cfg).unwrap_or_else(|e| fail(e));
    println!("own_key {}", dev.identity());
    let ep = dev
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap_or_else(|e| fail(e));
    let cq = dev.create_cq(64);
    let opts = ConnOptions {
        peer_key: Some(key(server)),
        ..ConnOptions::default()
    };
    await_go(&dev, &lines);
    let t0 = Instant::now();
    let mut kept: Vec<Connection> = Vec::new();
    let mut refused: BTreeMap<String, u64> = BTreeMap::new();
    let (mut ok_us, mut refused_us) = (Vec::new(), Vec::new());
    for i in 0..n {
        if i == n / 5 {
            println!("midway");
        }
        if t0.elapsed() > RUN_MAX {
            fail(format!("only {i} of {n} connects after {RUN_MAX:?}"));
        }
        let t = Instant::now();
        let r = dev.connect_with(SERVER, SERVICE, &ep, &cq, &opts);
        let us = t.elapsed().as_micros() as u64;
        match r {
            Ok(c) => {
                ok_us.push(us);
                kept.push(c);
            }
            Err(e) => {
                refused_us.push(us);
                let why = match e {
                    Error::Rejected(r) => format!("{r:?}"),
                    other => format!("other: {other}"),
                };
                *refused.entry(why).or_default() += 1;
            }
        }
    }
    println!("connect_ms {}", t0.elapsed().as_millis());
    println!("cpu_ms {}", cpu_ms());
    println!("ok {}", kept.len());
    println!("refused {}", refused.values().sum::<u64>());
    for (r, k) in &refused {
        match r.strip_prefix("other: ") {
            Some(e) => println!("error_other {k} {e}"),
            None => println!("refused_{r} {k}"),
        }
    }
    for (what, mut v) in [("ok", ok_us), ("refused", refused_us)] {
        v.sort_unstable();
        if let Some(&max) = v.last() {
            println!(
                "connect_us_{what} p50 {} p90 {} p99 {} max {max}",
                v[v.len() / 2],
                v[v.len() * 9 / 10],
                v[v.len() * 99 / 100]
            );
        }
    }
    println!(
        "live {}",
        kept.iter()
            .filter(|c| c.state() == ConnState::Normal)
            .count()
    );
    println!("flooded");
    await_line(&lines, "close");
    let t1 = Instant::now();
    for c in &kept {
        c.close();
    }
    drop(kept);
    println!("close_ms {}", t1.elapsed().as_millis());
    println!("closed");
    report_or_exit(&dev, &lines);
}

/// Until "exit": on "report", the device's connections ("stats").
fn report_or_exit(dev: &Device, lines: &Receiver<String>) {
    loop {
        match lines.recv_timeout(3 * T) {
            Ok(l) if l == "report" => {
                println!("connections {}", dev.connections());
                println!("stats");
            }
            Ok(l) if l == "exit" => return,
            Ok(l) => fail(format!("unexpected line {l:?}")),
            Err(e) => fail(format!("no word from the parent: {e}")),
        }
    }
}
