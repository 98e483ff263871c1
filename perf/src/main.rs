//! `ddperf`: the perftest-style benchmark tool of the deposit transport.
//!
//! This file is the command line only: it turns perftest's options into [`Params`] and
//! hands them to the tests, each a [`harness::Bench`] run by the one [`harness`]: the
//! ping-pongs ([`lat`]: write, instruction pointer, token, SEND), the write streams
//! ([`bw`]), reads and atomics ([`rd`]), the receiver-managed queues ([`queue`]:
//! SEND streams, many senders appending to one queue); [`raw`] is the bare DPDK
//! baseline. Habits kept from perftest
//! (docs/design.md §11): the server runs `ddperf <test> --server [opts]`, the client
//! `ddperf <test> [opts] <server-ip>` with the same options; `--loopback` runs both
//! sides in one process on two cross-connected ring ports with no setup at all.
//!
//! Exit status: 0 on success; 2 when a wait timed out; 1 for every other failure, with
//! one line on stderr. Nothing here panics on user input.

mod bw;
mod error;
mod harness;
mod incast;
mod incast_bw;
mod lat;
mod plot;
mod queue;
mod raw;
mod rd;
mod report;
mod setup;
mod stream;
mod verify;
mod warmup;

use std::net::IpAddr;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use deposit::{FaultConfig, Progress};

use crate::error::{PerfError, Result};

/// The tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum Test {
    /// RDMA-write ping-pong (ib_write_lat): RTT/2 per iteration.
    WriteLat,
    /// RDMA-write streaming (ib_write_bw).
    WriteBw,
    /// Bare DPDK frame ping-pong on the same port, no transport (the physical limit).
    RawLat,
    /// Bare DPDK burst loop on the same port, no transport (the physical limit).
    RawBw,
    /// RDMA-read latency (ib_read_lat): full RTT of a signaled read.
    ReadLat,
    /// RDMA-read streaming (ib_read_bw).
    ReadBw,
    /// Atomic latency (ib_atomic_lat, -A): full RTT of a signaled atomic.
    AtomicLat,
    /// Atomic streaming (ib_atomic_bw, -A).
    AtomicBw,
    /// SEND ping-pong (ib_send_lat): post-increment into the peer's queue, RTT/2.
    SendLat,
    /// SEND streaming (ib_send_bw): post-increment into the server's queue.
    SendBw,
    /// -q connections appending to one server queue through a global register.
    AppendBw,
    /// Instruction-pointer ping-pong, RTT/2: each side invokes the entry point the peer
    /// programmed (a WRITE at offset 0 that the instruction supplies; the sender gives
    /// only the pointer and the data) on isolated connections. Sizes up to one message.
    IpLat,
    /// Instruction-pointer streaming (as write_bw): invokes of the server's entry point,
    /// a WRITE at offset 0 that the instruction supplies, on isolated connections. With
    /// --verify the instruction writes at a ring pointer the server keeps instead
    /// (indirect post-increment, wrapping), so that every message can be checked.
    IpBw,
    /// Payload-token ping-pong, RTT/2. One iteration: the client deposits -s bytes with
    /// the server's token; the server takes the deposit's event, creates a fresh token
    /// and writes it (16 B) into the client's memory, where the client spins on it.
    TokenLat,
    /// Several senders, one receiver (an incast; issue 38's shaped bridge): the client
    /// opens a device per `--sender` (all in this process, driven by this one thread),
    /// each streaming `-s` byte writes on a connection of its own for `-D` seconds; the
    /// server (`-q`: the senders it waits for) sinks them. Per-flow goodput, Jain's
    /// index over the flows and over `--window-ms` windows, retransmissions.
    IncastBw,
}

/// The tests' names in reports and JSON, in [`Test`]'s order (clap's names too).
const NAMES: [&str; 15] = [
    "write_lat",
    "write_bw",
    "raw_lat",
    "raw_bw",
    "read_lat",
    "read_bw",
    "atomic_lat",
    "atomic_bw",
    "send_lat",
    "send_bw",
    "append_bw",
    "ip_lat",
    "ip_bw",
    "token_lat",
    "incast_bw",
];

impl Test {
    pub fn name(self) -> &'static str {
        NAMES[self as usize]
    }
    /// Whether it is a latency test (ping-pong) rather than a bandwidth test.
    pub fn is_lat(self) -> bool {
        self.name().ends_with("_lat")
    }
    /// What the client may do to the server's endpoint.
    pub fn server_rights(self) -> deposit::Rights {
        use deposit::Rights;
        match self {
            Test::ReadLat | Test::ReadBw => Rights::REMOTE_READ.union(Rights::REMOTE_WRITE),
            // The read verifies atomic_bw's final counter.
            Test::AtomicLat | Test::AtomicBw => Rights::ALL,
            _ => Rights::REMOTE_WRITE,
        }
    }
}

/// perftest's `-A`: the atomic operation of atomic_lat / atomic_bw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum AtomicOp {
    /// Fetch-and-add 1 on the server's word.
    #[default]
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
    /// Compare-and-swap k -> k+1 on the server's word (a chain that always succeeds
    /// when executed in order).
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
}

impl AtomicOp {
    pub fn name(self) -> &'static str {
        match self {
            AtomicOp::FetchAndAdd => "FETCH_AND_ADD",
            AtomicOp::CmpAndSwap => "CMP_AND_SWAP",
        }
    }
}

/// Who drives the device's worker loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum WorkerMode {
    /// The benchmark thread drives the device (no extra thread).
    Inline,
    /// A worker thread of its own polls the port.
    Dedicated,
}

/// perftest-style benchmark for the deposit transport.
#[derive(Parser, Debug)]
#[command(name = "ddperf", version, about)]
struct Cli {
    /// The test to run.
    #[arg(value_enum, required_unless_present_any = ["plot_bench", "plot_incast"])]
    test: Option<Test>,
    /// The server's IP address (client side).
    peer: Option<IpAddr>,
    /// Run the server side.
    #[arg(long)]
    server: bool,
    /// Run both sides in this process on ring:ddperf:a / ring:ddperf:b.
    #[arg(long)]
    loopback: bool,
    /// Message size in bytes (default: 2 for latency tests, 65536 for write_bw, the
    /// largest single-frame payload for raw_bw, the largest one message carries for
    /// send_bw and ip_bw).
    #[arg(short = 's', long)]
    size: Option<u64>,
    /// Iterations per size (default: 1000 for latency tests, 5000 for bandwidth tests).
    #[arg(short = 'n', long)]
    iters: Option<u64>,
    /// Latency tests: untimed ping-pongs before each size's timed ones, for this many
    /// milliseconds (at most 100000 iterations; 0: none). A freshly connected pair of
    /// processes sees several microseconds per round trip for its first ~10 ms here.
    /// incast_bw: untimed streaming before the timed span.
    #[arg(long = "warmup-ms", value_name = "MS", default_value_t = 50)]
    warmup_ms: u64,
    /// Run all sizes 2^1 .. 2^23 (raw tests: up to what fits one frame).
    #[arg(short = 'a', long)]
    all: bool,
    /// Run each size for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long)]
    duration: Option<f64>,
    /// Report bandwidth in Gb/s (10^9 bits) instead of MiB/s.
    #[arg(long = "report_gbits", alias = "report-gbits")]
    report_gbits: bool,
    /// One JSON object per size on stdout (and nothing else there).
    #[arg(long)]
    json: bool,
    /// Port spec (default memif:/tmp/ddperf.sock:server|client; ignored with --loopback).
    #[arg(long)]
    dev: Option<String>,
    /// This node's IP address (IPv4, or IPv6: the node then runs over IPv6), with its
    /// prefix length for a routed network (`10.1.0.2/24`, `fd00:1::2/64`: peers
    /// outside it go through --gateway). Default 10.0.0.1 for the server, 10.0.0.2 for
    /// a client, every peer on the link.
    #[arg(long, value_name = "ADDR[/PREFIX]", value_parser = parse_ip_prefix)]
    ip: Option<(IpAddr, u8)>,
    /// The router for peers outside --ip's prefix (its MAC is resolved by ARP, or by
    /// neighbour discovery over IPv6).
    #[arg(long, value_name = "ADDR")]
    gateway: Option<IpAddr>,
    /// The peer's MAC, configured instead of resolved by ARP (client side; the next
    /// hop's, when the peer is behind a router).
    #[arg(long = "peer-mac", value_name = "MAC", value_parser = parse_mac)]
    peer_mac: Option<[u8; 6]>,
    /// The IP traffic class of this side's frames (perftest's --tclass): DSCP in its
    /// top six bits (104: AF31, DSCP 26); the ECN bits are the transport's.
    #[arg(long, value_name = "TC", default_value_t = 0)]
    tclass: u8,
    /// Congestion control off (on by default): only the per-connection cap and the
    /// receiver's credits hold a sender back, as before issue 38 (for comparison).
    #[arg(long = "no-cc")]
    no_cc: bool,
    /// Congestion control's target queueing delay, microseconds (default 10).
    #[arg(long = "cc-target-us", value_name = "US")]
    cc_target_us: Option<u64>,
    /// Delay alone decreases the window (for paths whose switches drop instead of
    /// marking ECN: a kernel bridge with a shaper).
    #[arg(long = "cc-delay")]
    cc_delay: bool,
    /// Spray each peer's bulk frames over N paths (UDP source ports that a fabric's
    /// ECMP hashes apart; 1, the default: one per connection; at most 32).
    #[arg(long = "cc-paths", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(1..=32))]
    cc_paths: u8,
    /// The port's line rate for congestion control, Mb/s (default 100000): a receiver
    /// shares out what it drains at this rate as its senders' credit, so on a shaped
    /// path give the receiver the shaped rate.
    #[arg(long = "line-mbps", value_name = "MBPS", value_parser = clap::value_parser!(u64).range(1..))]
    line_mbps: Option<u64>,
    /// incast_bw client: a sender, its port and address (`af_packet:veth1@10.81.0.1`);
    /// once per sender, each a device of its own in this process.
    #[arg(long = "sender", value_name = "SPEC@ADDR", value_parser = parse_sender)]
    senders: Vec<(String, IpAddr)>,
    /// incast_bw: the windows Jain's index is also taken over, milliseconds.
    #[arg(long = "window-ms", value_name = "MS", default_value_t = 100)]
    window_ms: u64,
    /// The 802.1Q VLAN (1 to 4094): frames leave tagged, only that VLAN's are taken.
    #[arg(long, value_name = "ID", value_parser = clap::value_parser!(u16).range(1..=4094))]
    vlan: Option<u16>,
    /// Most writes outstanding per connection (perftest); with -q, at most 4096 over
    /// all the connections together.
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    tx_depth: u32,
    /// Signal every Nth write.
    #[arg(long = "cq-mod", default_value_t = 100)]
    cq_mod: u32,
    /// Post work requests in lists of N (perftest's --post_list): one call, and one
    /// reservation of send-queue, completion and ring places, for N requests; the last
    /// of each list is signaled (--cq-mod becomes N). The streaming tests other than
    /// send_bw.
    #[arg(short = 'l', long = "post-list", default_value_t = 1)]
    post_list: u32,
    /// Who drives the device.
    #[arg(long, value_enum, default_value_t = WorkerMode::Inline)]
    worker: WorkerMode,
    /// Connection-management service number.
    #[arg(long, default_value_t = 18515)]
    service: u32,
    /// Largest frame on the port, in bytes.
    #[arg(long = "max-frame")]
    max_frame: Option<usize>,
    /// Bound of every wait, in seconds.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// Atomic operation of atomic_lat / atomic_bw.
    #[arg(short = 'A', long = "atomic_type", alias = "atomic-type", value_enum, default_value_t = AtomicOp::FetchAndAdd)]
    atomic: AtomicOp,
    /// Connections, 1 to 65536 (write_bw: default 1; append_bw: senders sharing the
    /// server's queue, default 16; incast_bw: the senders the server waits for,
    /// default 1, and on the client one per --sender).
    ///
    /// The client opens N connections to the server, which accepts N, and posts
    /// round-robin over them (request k on connection k mod N). Outstanding requests:
    /// -t per connection as in perftest, but at most 4096 over all the connections
    /// together, i.e. min(t x N, 4096) in flight, so that memory does not grow with N
    /// beyond the connections themselves (at -q 65536: at most one request in flight
    /// per connection). Each connection signals every min(cq-mod, t, 4096 / N)th of
    /// its requests (with -t 128, from N = 2049 on: every one) and its last.
    #[arg(short = 'q', long = "qp")]
    qps: Option<u32>,
    /// Worker shards of each device, 1 to 64 (docs/design.md §6): write_bw spreads its -q
    /// connections over them on both sides (each shard serves the same memory through
    /// a nested endpoint of its own); other tests run on shard 0.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    workers: u16,
    /// write_bw: post each write as a compound operation (indirect address, two
    /// register operations and a conditional at the receiver).
    #[arg(long, hide = true)]
    compound: bool,
    /// Fault injection on the frames this process's device(s) receive, e.g.
    /// `loss=0.05,reorder=0.02,dup=0.02,corrupt=0.001,delay=0.01,delay_us=100,seed=7`
    /// (with --loopback the client's device uses seed+1). Not for raw_*.
    #[arg(long, value_name = "SPEC", value_parser = parse_faults)]
    faults: Option<FaultConfig>,
    /// Check every deposited byte and atomic result after the run; exit 1 on a
    /// mismatch. Not for raw_*.
    #[arg(long)]
    verify: bool,
    /// Retransmission timeout in microseconds (default 20000; 2000 with --faults).
    #[arg(long = "retry-timeout-us", value_name = "US")]
    retry_timeout_us: Option<u64>,
    /// Floor of the adaptive retransmission timeout, microseconds (default 100): on a
    /// loaded host a spinning side may be off its CPU for milliseconds, longer than
    /// round trips measured while it ran, and a low floor then resends what was not
    /// lost.
    #[arg(long = "min-retry-timeout-us", value_name = "US", value_parser = clap::value_parser!(u64).range(1..))]
    min_retry_timeout_us: Option<u64>,
    /// Retransmissions of the same data before a connection fails (default 7; 20
    /// with --faults).
    #[arg(long = "retry-count", value_name = "N")]
    retry_count: Option<u32>,
    /// Show DPDK's own log on stderr (start-up and driver messages, quiet by default;
    /// the same as DEPOSIT_EAL_ARGS=--log-level=*:info).
    #[arg(short = 'v', long)]
    verbose: bool,
    /// Draw the results into FILE (.svg or .png): latency tests the histogram and CDF
    /// of the samples with p50/p99/p99.9 marked (with -a: percentiles by size and a
    /// CDF per size), bandwidth tests bandwidth and message rate by size.
    #[arg(long, value_name = "FILE")]
    plot: Option<std::path::PathBuf>,
    /// scripts/bench.sh --plot: draw the rows of ROWS (tab-separated: what, deposit,
    /// raw) into --plot's file, deposit next to its raw baseline, and exit.
    #[arg(
        long = "plot-bench",
        value_name = "ROWS",
        hide = true,
        requires = "plot"
    )]
    plot_bench: Option<std::path::PathBuf>,
    /// Draw a simulated incast into --plot's file and exit: RUN is what `cargo run -p
    /// deposit-transport --example incast -- --json RUN` wrote. Above, every flow's
    /// rate per bin with their total, mean and fair share; below, the bottleneck
    /// queue's depth with its ECN threshold and buffer (run it with and without
    /// --no-cc to compare).
    #[arg(
        long = "plot-incast",
        value_name = "RUN",
        requires = "plot",
        conflicts_with = "plot_bench"
    )]
    plot_incast: Option<std::path::PathBuf>,
    /// At the end, print each device's counters that are not zero, and its refusals by
    /// reason, on stderr (the same names as DPDK telemetry's /deposit/stats).
    #[arg(long)]
    stats: bool,
    /// Secure connections (docs/design.md §10): X25519 key agreement at connect, every
    /// frame sealed with AES-256-GCM. On the server: refuse clients without it. Not for
    /// raw_*.
    #[arg(long)]
    secure: bool,
    /// A pre-shared key (64 hex digits) mixed into the secure connections' keys
    /// (implies --secure); both sides must give the same.
    #[arg(long, value_name = "HEX", value_parser = parse_psk)]
    psk: Option<[u8; 32]>,
    /// This node's identity key file (made, mode 0600, if missing), whose public key
    /// peers pin. Default with --secure, --peer-key, --tofu or --authorized-keys:
    /// $DEPOSIT_IDENTITY, else ~/.config/deposit/identity; otherwise a fresh key per
    /// run. The key is printed at start.
    #[arg(long, value_name = "FILE")]
    identity: Option<std::path::PathBuf>,
    /// The server's identity key (base64, as the server prints it): the handshake
    /// proves the server holds it. Wins over --known-peers.
    #[arg(long = "peer-key", value_name = "BASE64")]
    peer_key: Option<deposit::IdentityKey>,
    /// Known peers (like ssh's `known_hosts`: `<ip> <key>` lines): the server's key is
    /// pinned when listed, added when taken with --tofu. Default with --secure:
    /// ~/.config/deposit/known_peers.
    #[arg(long = "known-peers", value_name = "FILE")]
    known_peers: Option<std::path::PathBuf>,
    /// Trust on first use: with no key pinned for the server, take the key it names
    /// (said on stderr, and kept in --known-peers). Protects later runs, not this one.
    #[arg(long)]
    tofu: bool,
    /// Server: accept only clients whose identity key is listed in FILE (one base64
    /// key per line, like WireGuard's peers or ssh's authorized_keys).
    #[arg(long = "authorized-keys", value_name = "FILE")]
    authorized_keys: Option<std::path::PathBuf>,
}

fn parse_psk(s: &str) -> std::result::Result<[u8; 32], String> {
    let s = s.trim();
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("expected 64 hex digits (32 bytes)".into());
    }
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
    }
    Ok(k)
}

fn parse_ip_prefix(s: &str) -> std::result::Result<(IpAddr, u8), String> {
    let (addr, prefix) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let ip: IpAddr = addr.parse().map_err(|e| format!("{addr:?}: {e}"))?;
    let most = if ip.is_ipv6() { 128 } else { 32 };
    let prefix = match prefix {
        None => 0,
        Some(p) => match p.parse::<u8>() {
            Ok(n) if n <= most => n,
            _ => return Err(format!("prefix length {p:?}: 0 to {most}")),
        },
    };
    Ok((ip, prefix))
}

fn parse_sender(s: &str) -> std::result::Result<(String, IpAddr), String> {
    let (spec, ip) = s
        .rsplit_once('@')
        .ok_or_else(|| format!("{s:?}: expected SPEC@ADDR, e.g. af_packet:veth1@10.81.0.1"))?;
    spec.parse::<deposit_transport::port::PortSpec>()
        .map_err(|e| format!("{spec:?}: {e}"))?;
    let ip = ip.parse().map_err(|e| format!("{ip:?}: {e}"))?;
    Ok((spec.to_string(), ip))
}

fn parse_mac(s: &str) -> std::result::Result<[u8; 6], String> {
    deposit_transport::tables::parse_mac(s)
        .ok_or_else(|| format!("{s:?}: a MAC is six hex bytes, aa:bb:cc:dd:ee:ff"))
}

fn parse_faults(s: &str) -> std::result::Result<FaultConfig, String> {
    s.parse::<FaultConfig>().map_err(|e| e.to_string())
}

/// Which side(s) this process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Server,
    Client {
        peer: IpAddr,
    },
    /// Both sides, in one process.
    Loopback,
}

/// How long each size runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    Iters(u64),
    Duration(Duration),
}

/// Resolved options: what every test module reads.
#[derive(Debug, Clone)]
pub struct Params {
    pub test: Test,
    pub role: Role,
    /// Sizes to run, in order (one with `-s`, 2^1..2^23 with `-a`).
    pub sizes: Vec<u64>,
    pub all: bool,
    pub span: Span,
    pub report_gbits: bool,
    pub json: bool,
    /// Port spec of this process (server side with --loopback).
    pub dev: String,
    /// Client port spec with --loopback.
    pub loop_client_dev: String,
    pub ip: IpAddr,
    /// `--ip`'s prefix length (0: every peer on the link) and `--gateway`.
    pub prefix_len: u8,
    pub gateway: Option<IpAddr>,
    /// `--vlan`.
    pub vlan: Option<u16>,
    /// `--tclass`.
    pub traffic_class: u8,
    /// `--no-cc`, `--cc-target-us`, `--cc-delay`, `--line-mbps`.
    pub congestion: deposit::CcConfig,
    /// incast_bw: the client's `--sender`s (port, address) and `--window-ms`.
    pub senders: Vec<(String, IpAddr)>,
    pub window_ms: u64,
    /// `--peer-mac`: the peer's address with its configured MAC.
    pub peer_mac: Option<(IpAddr, [u8; 6])>,
    pub tx_depth: u32,
    pub cq_mod: u32,
    /// Requests per post call in the streaming tests (1: `post`; more: `post_list`).
    pub post_list: u32,
    pub progress: Progress,
    pub service: u32,
    pub max_frame: Option<usize>,
    pub timeout: Duration,
    /// `-A` of the atomic tests.
    pub atomic: AtomicOp,
    /// `-q`: connections of write_bw and append_bw (1 for the other tests).
    pub qps: u32,
    /// Worker shards of each device (`--workers`).
    pub workers: usize,
    /// write_bw `--compound`.
    pub compound: bool,
    /// Latency tests: untimed warm-up per size (see [`warmup`]).
    pub warmup: Duration,
    /// `--faults`: injected on this process's device(s) (the loopback client's with
    /// seed + 1).
    pub faults: Option<FaultConfig>,
    /// `--verify` (see [`verify`]).
    pub verify: bool,
    /// Retransmission timeout of the devices, and its adaptive floor
    /// (`--min-retry-timeout-us`; `None`: the device's default).
    pub retry_timeout: Duration,
    pub min_retry_timeout: Option<Duration>,
    /// Retransmissions before a connection fails.
    pub retry_count: u32,
    /// `--stats`: the devices' counters at the end.
    pub stats: bool,
    /// `--plot`: the picture of the results.
    pub plot: Option<std::path::PathBuf>,
    /// `--secure` / `--psk`: sealed connections.
    pub secure: bool,
    pub psk: Option<[u8; 32]>,
    /// `--identity` (or its default), loaded; `None`: a fresh key per device.
    pub identity: Option<std::sync::Arc<deposit::Identity>>,
    /// `--peer-key`, `--known-peers`, `--tofu`, `--authorized-keys` (loaded).
    pub peer_key: Option<deposit::IdentityKey>,
    pub known_peers: Option<std::path::PathBuf>,
    pub tofu: bool,
    pub authorized_keys: Option<Vec<deposit::IdentityKey>>,
}

impl Params {
    /// Largest size of the run.
    pub fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(0)
    }
}

/// Default port specs (perftest habit: nothing to configure for two local processes).
pub const SERVER_DEV: &str = "memif:/tmp/ddperf.sock:server";
pub const CLIENT_DEV: &str = "memif:/tmp/ddperf.sock:client";
/// Ports of `--loopback`.
pub const LOOP_SERVER_DEV: &str = "ring:ddperf:b";
pub const LOOP_CLIENT_DEV: &str = "ring:ddperf:a";
pub const SERVER_IP: [u8; 4] = [10, 0, 0, 1];
pub const CLIENT_IP: [u8; 4] = [10, 0, 0, 2];
/// Most connections of `-q`.
pub const MAX_QPS: u32 = 65536;
/// Largest size of `-a`: 2^23 bytes.
const ALL_MAX_LOG2: u32 = 23;

fn resolve(cli: Cli) -> Result<Params> {
    let role = if cli.server && cli.loopback {
        return Err(PerfError::Usage(
            "--server and --loopback exclude each other".into(),
        ));
    } else if let (true, Some(p)) = (cli.server || cli.loopback, cli.peer) {
        return Err(PerfError::Usage(format!(
            "--server and --loopback take no peer address (got {p})"
        )));
    } else if cli.loopback {
        Role::Loopback
    } else if cli.server {
        Role::Server
    } else if let Some(p) = cli.peer {
        Role::Client { peer: p }
    } else {
        return Err(PerfError::Usage(
            "give the server's IP address, or --server, or --loopback".into(),
        ));
    };
    let test = cli.test.expect("clap requires the test");
    if cli.all && cli.size.is_some() {
        return Err(PerfError::Usage("-a and -s exclude each other".into()));
    }
    let sizes: Vec<u64> = if matches!(test, Test::AtomicLat | Test::AtomicBw) {
        // perftest ignores -s / -a for atomics: always one 8-byte word.
        vec![8]
    } else if cli.all {
        (1..=ALL_MAX_LOG2).map(|k| 1u64 << k).collect()
    } else {
        let default = match test {
            Test::WriteLat
            | Test::RawLat
            | Test::ReadLat
            | Test::SendLat
            | Test::IpLat
            | Test::TokenLat => 2,
            Test::WriteBw | Test::ReadBw | Test::IncastBw => 65536,
            // ib_send_bw's 65536 needs several messages here: the largest one message
            // carries, resolved once the port is open.
            Test::SendBw | Test::IpBw => 0,
            // One 8-byte word, whatever -s says (perftest).
            Test::AtomicLat | Test::AtomicBw => 8,
            // A record: (connection, sequence) plus padding to one 32-byte block.
            Test::AppendBw => 32,
            // Resolved against the port's largest frame once it is open.
            Test::RawBw => 0,
        };
        vec![cli.size.unwrap_or(default)]
    };
    if cli.size == Some(0) {
        return Err(PerfError::Usage("-s must be at least 1 byte".into()));
    }
    if let Some(s) = cli.size {
        if s > u32::MAX as u64 {
            return Err(PerfError::Usage(format!(
                "-s {s}: at most {} bytes",
                u32::MAX
            )));
        }
    }
    let incast = test == Test::IncastBw;
    if incast && cli.iters.is_some() {
        return Err(PerfError::Usage(
            "incast_bw runs for a time (-D, default 5 s), not -n iterations".into(),
        ));
    }
    if !cli.senders.is_empty() && (!incast || !matches!(role, Role::Client { .. })) {
        return Err(PerfError::Usage(
            "--sender is an option of the incast_bw client".into(),
        ));
    }
    if incast && matches!(role, Role::Client { .. }) && cli.senders.is_empty() {
        return Err(PerfError::Usage(
            "the incast_bw client needs its senders: --sender SPEC@ADDR, once per sender".into(),
        ));
    }
    if incast && (cli.secure || cli.psk.is_some() || cli.verify || cli.compound) {
        return Err(PerfError::Usage(
            "incast_bw takes neither --secure, --psk, --verify nor --compound".into(),
        ));
    }
    if cli.window_ms == 0 {
        return Err(PerfError::Usage("--window-ms must be at least 1".into()));
    }
    let duration = cli.duration.or(incast.then_some(5.0));
    let span = match duration {
        Some(d) if !(d > 0.0 && d < 1e6) => {
            return Err(PerfError::Usage(format!(
                "-D {d}: give a positive number of seconds"
            )))
        }
        Some(_) if cli.iters.is_some() => {
            return Err(PerfError::Usage("-D and -n exclude each other".into()))
        }
        Some(d) => Span::Duration(Duration::from_secs_f64(d)),
        None => {
            let n = cli.iters.unwrap_or(if test.is_lat() { 1000 } else { 5000 });
            if n == 0 {
                return Err(PerfError::Usage("-n must be at least 1".into()));
            }
            Span::Iters(n)
        }
    };
    if !(cli.timeout > 0.0 && cli.timeout < 1e6) {
        return Err(PerfError::Usage(format!(
            "--timeout {}: give a positive number of seconds",
            cli.timeout
        )));
    }
    // The send queue of a connection holds 4096 work requests (cm::ConnectOptions).
    if cli.tx_depth == 0 || cli.tx_depth > 4096 {
        return Err(PerfError::Usage(format!(
            "-t {}: between 1 and 4096",
            cli.tx_depth
        )));
    }
    if cli.compound && test != Test::WriteBw {
        return Err(PerfError::Usage(
            "--compound is an option of write_bw".into(),
        ));
    }
    let uses_keys = cli.secure
        || cli.psk.is_some()
        || cli.peer_key.is_some()
        || cli.tofu
        || cli.authorized_keys.is_some();
    // A loopback's devices share a fresh key (`setup`): no file unless one is named.
    let identity = load_identity(cli.identity.as_deref(), uses_keys && role != Role::Loopback)?;
    let known_peers = cli.known_peers.clone().or_else(|| {
        (uses_keys && role != Role::Loopback)
            .then(deposit::KnownPeers::default_path)
            .flatten()
    });
    let authorized_keys = match &cli.authorized_keys {
        Some(f) => Some(
            deposit::load_authorized_keys(f)
                .map_err(|e| PerfError::Usage(format!("--authorized-keys: {e}")))?,
        ),
        None => None,
    };
    if matches!(test, Test::RawLat | Test::RawBw) && (cli.secure || cli.psk.is_some()) {
        return Err(PerfError::Usage(
            "--secure and --psk need the transport: not for raw_* tests".into(),
        ));
    }
    if matches!(test, Test::RawLat | Test::RawBw) && (cli.faults.is_some() || cli.verify) {
        return Err(PerfError::Usage(
            "--faults and --verify need the transport: not for raw_* tests".into(),
        ));
    }
    if cli.compound && cli.verify {
        return Err(PerfError::Usage(
            "--compound and --verify exclude each other (the compound operand is the write's offset)"
                .into(),
        ));
    }
    if cli.retry_timeout_us == Some(0) {
        return Err(PerfError::Usage(
            "--retry-timeout-us must be at least 1".into(),
        ));
    }
    let faulty = cli.faults.is_some();
    let retry_timeout =
        Duration::from_micros(
            cli.retry_timeout_us
                .unwrap_or(if faulty { 2_000 } else { 20_000 }),
        );
    let retry_count = cli.retry_count.unwrap_or(if faulty { 20 } else { 7 });
    let qps = match (test, cli.qps) {
        (_, Some(q)) if !(1..=MAX_QPS).contains(&q) => {
            return Err(PerfError::Usage(format!("-q {q}: between 1 and {MAX_QPS}")))
        }
        (Test::IncastBw, q) if !cli.senders.is_empty() => match q {
            Some(q) if q as usize != cli.senders.len() => {
                return Err(PerfError::Usage(format!(
                    "incast_bw: -q {q} but {} --sender(s): a connection per sender",
                    cli.senders.len()
                )))
            }
            _ => cli.senders.len() as u32,
        },
        (Test::WriteBw | Test::AppendBw | Test::IncastBw, Some(q)) => q,
        (Test::AppendBw, None) => 16,
        (_, None) => 1,
        (t, Some(_)) => {
            return Err(PerfError::Usage(format!(
                "-q is an option of write_bw and append_bw (and incast_bw), not of {}",
                t.name()
            )))
        }
    };
    if cli.cq_mod == 0 {
        return Err(PerfError::Usage("--cq-mod must be at least 1".into()));
    }
    if cli.post_list == 0 || cli.post_list > cli.tx_depth {
        return Err(PerfError::Usage(format!(
            "--post-list must be 1 to --tx-depth ({}), not {}",
            cli.tx_depth, cli.post_list
        )));
    }
    if cli.post_list > 1 && (test.is_lat() || matches!(test, Test::SendBw)) {
        return Err(PerfError::Usage(format!(
            "--post-list is an option of the streaming tests other than send_bw, not of {}",
            test.name()
        )));
    }
    // perftest's rules: a completion must come back before the send queue is full,
    // and a list's last request is signaled (the window frees a list at a time).
    let cq_mod = if cli.post_list > 1 {
        cli.post_list
    } else {
        cli.cq_mod.min(cli.tx_depth)
    };
    let server_side = !matches!(role, Role::Client { .. });
    let (dev, ip) = match role {
        Role::Loopback => (LOOP_SERVER_DEV.to_string(), SERVER_IP.into()),
        _ => (
            cli.dev
                .clone()
                .unwrap_or_else(|| if server_side { SERVER_DEV } else { CLIENT_DEV }.to_string()),
            cli.ip
                .map(|a| a.0)
                .unwrap_or(if server_side { SERVER_IP } else { CLIENT_IP }.into()),
        ),
    };
    Ok(Params {
        test,
        role,
        sizes,
        all: cli.all,
        span,
        report_gbits: cli.report_gbits,
        json: cli.json,
        dev,
        loop_client_dev: LOOP_CLIENT_DEV.to_string(),
        ip,
        prefix_len: cli.ip.map_or(0, |a| a.1),
        vlan: cli.vlan,
        traffic_class: cli.tclass,
        congestion: deposit::CcConfig {
            enabled: !cli.no_cc,
            target_delay_ns: cli
                .cc_target_us
                .map_or(deposit::CcConfig::default().target_delay_ns, |us| us * 1000),
            delay_decrease: cli.cc_delay,
            paths: cli.cc_paths,
            line_rate_mbps: cli
                .line_mbps
                .unwrap_or(deposit::CcConfig::default().line_rate_mbps),
            ..deposit::CcConfig::default()
        },
        senders: cli.senders.clone(),
        window_ms: cli.window_ms,
        gateway: cli.gateway,
        peer_mac: match (cli.peer_mac, role) {
            (Some(mac), Role::Client { peer }) => Some((peer, mac)),
            (Some(_), _) => {
                return Err(PerfError::Usage(
                    "--peer-mac is a client option (the server answers where requests come from)"
                        .into(),
                ))
            }
            (None, _) => None,
        },
        tx_depth: cli.tx_depth,
        cq_mod,
        post_list: cli.post_list,
        progress: match cli.worker {
            WorkerMode::Inline => Progress::Inline,
            WorkerMode::Dedicated => Progress::Dedicated,
        },
        service: cli.service,
        max_frame: cli.max_frame,
        timeout: Duration::from_secs_f64(cli.timeout),
        atomic: cli.atomic,
        qps,
        workers: usize::from(cli.workers),
        compound: cli.compound,
        warmup: Duration::from_millis(cli.warmup_ms),
        faults: cli.faults,
        verify: cli.verify,
        retry_timeout,
        min_retry_timeout: cli.min_retry_timeout_us.map(Duration::from_micros),
        retry_count,
        stats: cli.stats,
        plot: cli.plot,
        secure: cli.secure || cli.psk.is_some(),
        psk: cli.psk,
        identity,
        peer_key: cli.peer_key,
        known_peers,
        tofu: cli.tofu,
        authorized_keys,
    })
}

/// The identity file `--identity` names, or the default one when the run uses keys
/// (`uses_keys`), loaded or made; `None`: a fresh key per device.
fn load_identity(
    file: Option<&std::path::Path>,
    uses_keys: bool,
) -> Result<Option<std::sync::Arc<deposit::Identity>>> {
    let path = match file {
        Some(f) => f.to_path_buf(),
        None if uses_keys => match deposit::Identity::default_path() {
            Some(p) => p,
            None => return Ok(None),
        },
        None => return Ok(None),
    };
    let (id, made) = deposit::Identity::load_or_generate(&path)
        .map_err(|e| PerfError::Usage(format!("--identity: {e}")))?;
    if made {
        eprintln!("ddperf: made identity key file {}", path.display());
    }
    Ok(Some(std::sync::Arc::new(id)))
}

fn run(p: Params) -> Result<()> {
    let t = p.test;
    match t {
        Test::RawLat => raw::run_lat(&p),
        Test::RawBw => raw::run_bw(&p),
        Test::WriteLat | Test::IpLat | Test::TokenLat | Test::SendLat => {
            harness::run(&p, lat::PingPong::new(t))
        }
        Test::WriteBw | Test::IpBw => harness::run(&p, bw::Write::new(t)),
        Test::ReadLat | Test::AtomicLat | Test::ReadBw | Test::AtomicBw => {
            harness::run(&p, rd::Rd::new(t))
        }
        Test::SendBw | Test::AppendBw => {
            queue::check_span(&p)?;
            harness::run(&p, queue::Queue::new(t))
        }
        Test::IncastBw => incast_bw::run(&p),
    }
}

/// `--plot-bench`: the rows of scripts/bench.sh (what, deposit, raw; tab-separated).
fn plot_bench(rows: &std::path::Path, out: &std::path::Path) -> Result<()> {
    let text = std::fs::read_to_string(rows)
        .map_err(|e| PerfError::Usage(format!("--plot-bench {}: {e}", rows.display())))?;
    let mut parsed = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        match f.as_slice() {
            [what, d, r] => match (d.trim().parse(), r.trim().parse()) {
                (Ok(d), Ok(r)) => parsed.push((what.to_string(), d, r)),
                _ => eprintln!("ddperf: --plot-bench: skipping {line:?} (not two numbers)"),
            },
            _ => eprintln!("ddperf: --plot-bench: skipping {line:?} (not three fields)"),
        }
    }
    plot::save(out, &plot::Figure::Bench { rows: &parsed })
}

/// `--plot-incast`: the incast example's `--json` record.
fn plot_incast(run: &std::path::Path, out: &std::path::Path) -> Result<()> {
    let fail = |e: String| PerfError::Usage(format!("--plot-incast {}: {e}", run.display()));
    let text = std::fs::read_to_string(run).map_err(|e| fail(e.to_string()))?;
    let run = incast::IncastRun::parse(&text).map_err(fail)?;
    plot::save(out, &plot::Figure::Incast { run: &run })
}

fn main() {
    let cli = Cli::parse();
    if cli.verbose {
        // Before any thread or DPDK call: the EAL reads it when the first port opens,
        // after its own quiet default, so this level wins.
        let extra = std::env::var("DEPOSIT_EAL_ARGS").unwrap_or_default();
        std::env::set_var("DEPOSIT_EAL_ARGS", format!("--log-level=*:info {extra}"));
    }
    let only_draw = match (&cli.plot_bench, &cli.plot_incast, &cli.plot) {
        (Some(rows), _, Some(out)) => Some(plot_bench(rows, out)),
        (_, Some(run), Some(out)) => Some(plot_incast(run, out)),
        _ => None,
    };
    if let Some(r) = only_draw {
        if let Err(e) = r {
            eprintln!("ddperf: error: {e}");
            std::process::exit(e.exit_code());
        }
        return;
    }
    if cli.plot.is_some() {
        report::keep_samples();
    }
    let stats = cli.stats;
    let result = resolve(cli).and_then(run);
    setup::print_stats(stats);
    if let Err(e) = result {
        eprintln!("ddperf: error: {e}");
        std::process::exit(e.exit_code());
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// The options of a command line (for the tests of other modules).
    pub fn params(args: &str) -> Params {
        parse(args).expect("valid options")
    }

    fn parse(args: &str) -> Result<Params> {
        let argv = std::iter::once("ddperf").chain(args.split_whitespace());
        resolve(Cli::try_parse_from(argv).expect("clap accepts the arguments"))
    }

    fn usage_error(args: &str) -> String {
        match parse(args) {
            Err(PerfError::Usage(why)) => why,
            other => panic!("`{args}`: expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn names_are_clap_s() {
        for &t in Test::value_variants() {
            assert_eq!(t.to_possible_value().unwrap().get_name(), t.name());
        }
    }

    #[test]
    fn q_takes_one_to_65536_connections_on_write_bw_and_append_bw() {
        for t in ["write_bw", "append_bw"] {
            for q in [1, 256, 257, 10_000, 65_536] {
                let p = parse(&format!("{t} --loopback -q {q}")).unwrap();
                assert_eq!(p.qps, q, "{t} -q {q}");
            }
            assert!(usage_error(&format!("{t} --loopback -q 0")).contains("-q 0"));
            assert!(usage_error(&format!("{t} --loopback -q 65537")).contains("65536"));
        }
    }

    #[test]
    fn q_defaults_per_test() {
        assert_eq!(parse("write_bw --loopback").unwrap().qps, 1);
        assert_eq!(parse("append_bw --loopback").unwrap().qps, 16);
        assert_eq!(parse("write_lat --loopback").unwrap().qps, 1);
    }

    #[test]
    fn q_is_refused_by_tests_without_connections_to_spread() {
        let why = usage_error("write_lat --loopback -q 4");
        assert!(why.contains("write_bw and append_bw"), "{why}");
        // Out of range is said first, whatever the test.
        assert!(usage_error("read_bw --loopback -q 0").contains("between 1 and 65536"));
    }

    #[test]
    fn the_window_is_tx_depth_per_connection_capped_at_4096_in_all() {
        let p = parse("write_bw --loopback -t 128 -q 1").unwrap();
        assert_eq!(stream::window(&p, 1), 128);
        assert_eq!(stream::window(&p, 16), 2048);
        assert_eq!(stream::window(&p, 65_536), stream::MAX_OUTSTANDING);
    }
}
