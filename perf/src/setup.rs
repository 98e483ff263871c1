//! Where the two sides of a test run: the role dispatch every test shares ([`roles`]),
//! devices, the in-process loopback pair, and the memif socket file.
//!
//! With `--loopback` both sides live in this process on `ring:ddperf:b` (server,
//! 10.0.0.1) and `ring:ddperf:a` (client, 10.0.0.2), and the server side runs on a
//! spawned thread.
//!
//! Nothing here runs inside a measured loop.

use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;

use deposit::{Completion, Device, DeviceConfig};
use deposit_transport::port::{self, PortSpec};

use crate::error::{PerfError, Result, Wait};
use crate::{Params, Role};

/// The one-shot call a server makes once a client may come (it listens, or its port
/// is up).
pub type Ready = Box<dyn FnOnce() + Send>;

/// Where one side runs: its port and address, the ports to name in its title, whether
/// it prints the table and the start-up line.
pub struct Place {
    pub spec: String,
    pub ip: std::net::IpAddr,
    pub ports: String,
    pub report: bool,
    pub banner: bool,
}

/// Runs this process's side(s): `server` with a [`Ready`] call, `client` given the
/// server's address. In two processes a bandwidth server prints the table too; with
/// `--loopback` only the client does, or only the server when `loop_server_reports`
/// (raw_bw: the received rate). What the server returns (its port) is dropped after
/// the client is done (see [`loopback`]).
pub fn roles<K: Send + 'static>(
    p: &Params,
    loop_server_reports: bool,
    server: impl FnOnce(Place, Ready) -> Result<K> + Send + 'static,
    client: impl FnOnce(Place, std::net::IpAddr) -> Result<()>,
) -> Result<()> {
    let place = |spec: &str, ip, ports: &str, report, banner| Place {
        spec: spec.to_string(),
        ip,
        ports: ports.to_string(),
        report,
        banner,
    };
    match p.role {
        Role::Server => {
            let _socket = SocketFile::for_spec(&p.dev);
            let at = place(&p.dev, p.ip, &p.dev, !p.test.is_lat(), true);
            server(at, Box::new(|| {})).map(drop)
        }
        Role::Client { peer } => client(place(&p.dev, p.ip, &p.dev, true, true), peer),
        Role::Loopback => {
            let ports = format!("{} <-> {}", crate::LOOP_CLIENT_DEV, crate::LOOP_SERVER_DEV);
            let s = place(
                crate::LOOP_SERVER_DEV,
                crate::SERVER_IP.into(),
                &ports,
                loop_server_reports,
                false,
            );
            let c = place(
                crate::LOOP_CLIENT_DEV,
                crate::CLIENT_IP.into(),
                &ports,
                !loop_server_reports,
                true,
            );
            loopback(
                p,
                move |ready| server(s, ready),
                || client(c, crate::SERVER_IP.into()),
            )
            .map(drop)
        }
    }
}

/// A placeholder completion to size poll buffers with.
pub const EMPTY_WC: Completion = Completion::EMPTY;

/// The memif socket file a server creates: a stale one (no process listening) is
/// removed before the port opens, ours is removed when this guard drops. Create it
/// before the port so it drops after.
pub struct SocketFile(Option<PathBuf>);

impl SocketFile {
    /// Guards the socket of `spec` when it is a memif server port.
    pub fn for_spec(spec: &str) -> SocketFile {
        let Ok(PortSpec::Memif { socket, role, .. }) = spec.parse::<PortSpec>() else {
            return SocketFile(None);
        };
        if role != port::MemifRole::Server {
            return SocketFile(None);
        }
        let path = PathBuf::from(socket);
        let is_socket = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket());
        if is_socket {
            if let Err(e) = std::os::unix::net::UnixStream::connect(&path) {
                if e.kind() == std::io::ErrorKind::ConnectionRefused {
                    eprintln!("ddperf: removing stale memif socket {}", path.display());
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        SocketFile(Some(path))
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Opens a device for this run: `--faults` on what it receives (the loopback client's
/// device with seed + 1, so the two directions see different faults), the retry
/// settings.
pub fn open_device(p: &Params, spec: &str, ip: std::net::IpAddr) -> Result<Device> {
    let mut cfg = DeviceConfig::new(spec, ip).progress(p.progress);
    if let Some(m) = p.max_frame {
        cfg = cfg.max_frame(m);
    }
    cfg.cm_timeout = p.timeout;
    cfg.congestion = p.congestion;
    if p.role != Role::Loopback {
        cfg.prefix_len = p.prefix_len;
        cfg.vlan = p.vlan;
        cfg.gateway = p.gateway;
        if let Some((ip, mac)) = p.peer_mac {
            cfg.nodes.push(deposit::NodeAddr {
                mac,
                ip,
                udp_port: deposit::UDP_PORT,
            });
        }
    }
    // -q connections on this device, beyond the default limit when -q is large, all
    // from one peer.
    cfg.max_connections = cfg.max_connections.max(p.qps as usize + 16);
    cfg.cm_limits.per_source_connections = cfg
        .cm_limits
        .per_source_connections
        .max(p.qps.saturating_add(16));
    cfg.workers = p.workers;
    cfg.retry_timeout = p.retry_timeout;
    if let Some(t) = p.min_retry_timeout {
        cfg.min_retry_timeout = t;
    }
    cfg.retry_count = p.retry_count;
    cfg.faults = p.faults.map(|mut f| {
        if p.role == crate::Role::Loopback && spec == crate::LOOP_CLIENT_DEV {
            f.seed = f.seed.wrapping_add(1);
        }
        f
    });
    // A loopback's two devices are one node's two sides: one identity, which the
    // client pins (`harness`).
    cfg.identity = match (&p.identity, p.role) {
        (Some(id), _) => Some(id.clone()),
        (None, Role::Loopback) => Some(loopback_identity()?),
        (None, _) => None,
    };
    cfg.known_peers = p.known_peers.clone();
    let dev = Device::open(cfg).map_err(|e| explain_open(spec, e.into()))?;
    let server =
        p.role == Role::Server || p.role == Role::Loopback && spec == crate::LOOP_SERVER_DEV;
    let name = if server { "server" } else { "client" };
    if p.role == Role::Server {
        eprintln!("ddperf: identity key {}", dev.identity());
    }
    OPENED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((name, dev.clone()));
    Ok(dev)
}

/// The identity both devices of a loopback run share (made once per process).
fn loopback_identity() -> Result<std::sync::Arc<deposit::Identity>> {
    static ID: std::sync::OnceLock<std::sync::Arc<deposit::Identity>> = std::sync::OnceLock::new();
    if let Some(id) = ID.get() {
        return Ok(id.clone());
    }
    let id = deposit::Identity::generate()
        .map_err(|e| PerfError::Failed(format!("identity key: {e}")))?;
    Ok(ID.get_or_init(|| std::sync::Arc::new(id)).clone())
}

/// The devices this process opened, each with its side's name: `--faults` and
/// `--stats` report them at the end, when they are closed (a loopback server's device
/// outlives its thread: frames of its pool may still sit in the client's ring).
static OPENED: std::sync::Mutex<Vec<(&'static str, Device)>> = std::sync::Mutex::new(Vec::new());

/// The devices this process opened so far, client first.
pub fn opened() -> Vec<(&'static str, Device)> {
    let mut v = OPENED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    v.sort_by_key(|(n, _)| *n != "client");
    v
}

/// Prints the counters of the devices this run opened with `--stats` (those not zero,
/// then the refusals by reason), on stderr, and closes them.
pub fn print_stats(show: bool) {
    let devs = std::mem::take(&mut *OPENED.lock().unwrap_or_else(|e| e.into_inner()));
    for (_, d) in devs.into_iter().filter(|_| show) {
        let s = d.stats();
        let ip = d.local_addr().ip;
        eprintln!("stats: {} {ip}", d.port());
        let mut zero = 0;
        s.each(|name, v| {
            if v == 0 {
                zero += 1;
            } else {
                eprintln!("  {name:<24} {v:>16}");
            }
        });
        for (r, n) in s.drops() {
            eprintln!("  drops {:<18} {n:>16}  ({r})", r.name());
        }
        eprintln!("  ({zero} other counters 0)");
        // Congestion control's view of each peer (docs/design.md §5).
        for p in d.peers() {
            let c = p.counters;
            eprintln!(
                "  peer {}: window {} B, in flight {} B, pace {}, rtt base {:.1} us smoothed {:.1} us, receiver's hold {:.1} us, marks {}, decreases {}, quick adapts {}, waits for window {} pace {}",
                p.peer_ip,
                p.window,
                p.inflight,
                if p.paced_rate == 0 {
                    "none".to_string()
                } else {
                    format!("{:.3} Gb/s", p.paced_rate as f64 * 8.0 / 1e9)
                },
                p.base_rtt_ns as f64 / 1e3,
                p.srtt_ns as f64 / 1e3,
                p.hold_ns as f64 / 1e3,
                c.marks,
                c.decreases,
                c.quick_adapts,
                c.window_waits,
                c.pace_waits
            );
            // Its spray paths (--cc-paths): source port, in flight, round trip, state.
            for q in &p.paths {
                eprintln!(
                    "    path {}: in flight {} B, rtt {:.1} us, {}frames {}, marks {}, losses {}, left out {} times",
                    q.port,
                    q.inflight,
                    q.srtt_ns as f64 / 1e3,
                    if q.excluded {
                        "left out, "
                    } else if q.probing {
                        "on probation, "
                    } else {
                        ""
                    },
                    q.counters.frames,
                    q.counters.marks,
                    q.counters.losses,
                    q.counters.exclusions
                );
            }
        }
        let shards = d.shard_stats();
        if shards.len() > 1 {
            // Where frames came in: a shard with a queue of its own forwards what the
            // port's hashing gave it of another's; one without forwards nothing.
            for (k, s) in shards.iter().enumerate() {
                eprintln!(
                    "  shard {k}: frames_rx {} frames_forwarded {} frames_tx {}",
                    s.frames_rx, s.frames_forwarded, s.frames_tx
                );
            }
        }
    }
}

/// Adds the likely cause to a failure to open a port: a memif client whose server
/// is not running fails at once in DPDK (`rte_eth_dev_start`: operation not permitted).
pub fn explain_open(spec: &str, e: PerfError) -> PerfError {
    match spec.parse::<PortSpec>() {
        Ok(PortSpec::Memif {
            socket,
            role: port::MemifRole::Client,
            ..
        }) => PerfError::Failed(format!(
            "{e} (cannot connect to the memif socket {socket}: is the server `ddperf <test> --server` running?)"
        )),
        _ => e,
    }
}

/// The one line on stderr every run starts with: port(s), max frame, hugepages.
pub fn banner(ports: &str, max_frame: usize) {
    let huge = match port::eal_info() {
        Some(i) if i.hugepages => {
            format!("DPDK on hugepages ({} MiB free at start)", i.huge_free_mb)
        }
        Some(_) => "DPDK without hugepages (--no-huge, slower)".to_string(),
        None => "DPDK not initialised".to_string(),
    };
    eprintln!("ddperf: port {ports}, max frame {max_frame} B, {huge}");
}

/// Waits until the port's link is up (memif: the peer process has connected).
pub fn wait_link(mut up: impl FnMut() -> bool, p: &Params) -> Result<()> {
    let mut wait = Wait::new(
        p.timeout,
        "the link to come up (is the peer `ddperf <test> --server` running?)",
    );
    while !up() {
        std::thread::sleep(std::time::Duration::from_millis(1));
        for _ in 0..Wait::CHECK_EVERY {
            wait.tick()?;
        }
    }
    Ok(())
}

/// Runs the two sides of `--loopback`: `server` on a thread of its own, given a
/// one-shot "ready" call (it listens, or its port is up); `client` here once the server
/// is ready. A client failure wins (the server may still be waiting for it); a server
/// that fails before it is ready reports its own error.
///
/// The server should return its port or device: it is dropped only after the client
/// is done. Dropping a port frees its mempool, and frames from that pool may still sit
/// in the cross-connected ring for the client to read (a use after free otherwise).
pub fn loopback<S: Send + 'static, C>(
    p: &Params,
    server: impl FnOnce(Box<dyn FnOnce() + Send>) -> Result<S> + Send + 'static,
    client: impl FnOnce() -> Result<C>,
) -> Result<(S, C)> {
    // Here, not on the server's thread: rte_eal_init pins its caller to the main
    // lcore, and the two spinning sides must not share a CPU (see `pin_to_nth_cpu`).
    port::eal_init(&port::EalConfig::default())?;
    let (tx, rx) = mpsc::channel::<()>();
    let ready: Box<dyn FnOnce() + Send> = Box::new(move || {
        let _ = tx.send(());
    });
    let pin = p.progress == deposit::Progress::Inline;
    let h = std::thread::Builder::new()
        .name("ddperf-server".into())
        .spawn(move || {
            if pin {
                pin_to_nth_cpu(1);
            }
            server(ready)
        })
        .map_err(|e| PerfError::Failed(format!("cannot spawn the server thread: {e}")))?;
    match rx.recv_timeout(p.timeout) {
        Ok(()) => {}
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            return Err(join(h).err().unwrap_or_else(|| {
                PerfError::Failed("the loopback server ended before it was ready".into())
            }))
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            return Err(PerfError::Timeout {
                what: "the loopback server to be ready",
                secs: p.timeout.as_secs_f64(),
            })
        }
    }
    if pin {
        pin_to_nth_cpu(0);
    }
    let c = client()?;
    let s = join(h)?;
    Ok((s, c))
}

fn join<T>(h: JoinHandle<Result<T>>) -> Result<T> {
    h.join()
        .unwrap_or_else(|_| Err(PerfError::Failed("the server thread panicked".into())))
}

/// Pins the calling thread to the `n`th CPU it may run on, when it may run on more
/// than `n`. The two spinning sides of `--loopback` (inline progress) must not share a
/// CPU: on a small machine the scheduler may leave a new thread on its parent's CPU
/// for milliseconds, and time-sliced spinning turns a 100 µs run into 10 ms. Devices
/// are opened before this, so dedicated worker threads keep the full CPU set.
fn pin_to_nth_cpu(n: usize) {
    let _ = deposit_transport::port::pin_current_thread_to_nth_cpu(n);
}
