//! Getting two sides of a test to meet: devices, endpoints, connections, the
//! in-process loopback pair, and the memif socket file.
//!
//! The server listens (`Device::listen` / `Listener::accept`), the client connects
//! (`Device::connect`): the tool's two sides meet through the transport's connection
//! management with no side channel (docs/design.md §7). With `--loopback` both devices live
//! in this process on `ring:ddperf:b` (server, 10.0.0.1) and `ring:ddperf:a` (client,
//! 10.0.0.2), and the server side runs on a spawned thread.
//!
//! Nothing here runs inside a measured loop.

use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;

use deposit::{Completion, ConnOptions, Connection, Device, DeviceConfig, Endpoint, Rights};
use deposit_transport::port::{self, PortSpec};

use crate::error::{PerfError, Result, Wait};
use crate::exchange::Layout;
use crate::Params;

/// A placeholder completion to size poll buffers with.
pub const EMPTY_WC: Completion = Completion::EMPTY;

/// The memif socket file a server creates: a stale one (no process listening) is
/// removed before the port opens, ours is removed when this guard drops. Create it
/// before the port so it drops after.
pub struct SocketFile(Option<PathBuf>);

impl SocketFile {
    /// Guards the socket of `spec` when it is a memif server port.
    pub fn for_spec(spec: &str) -> SocketFile {
        let Ok(PortSpec::Memif { socket, role }) = spec.parse::<PortSpec>() else {
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
pub fn open_device(p: &Params, spec: &str, ip: [u8; 4]) -> Result<Device> {
    let mut cfg = DeviceConfig::new(spec, ip).progress(p.progress);
    if let Some(m) = p.max_frame {
        cfg = cfg.max_frame(m);
    }
    cfg.cm_timeout = p.timeout;
    // -q connections on this device, beyond the default limit when -q is large.
    cfg.max_connections = cfg.max_connections.max(p.qps as usize + 16);
    cfg.workers = p.workers;
    cfg.retry_timeout = p.retry_timeout;
    cfg.retry_count = p.retry_count;
    cfg.faults = p.faults.map(|mut f| {
        if p.role == crate::Role::Loopback && spec == crate::LOOP_CLIENT_DEV {
            f.seed = f.seed.wrapping_add(1);
        }
        f
    });
    let dev = Device::open(cfg).map_err(|e| explain_open(spec, e.into()))?;
    if p.stats {
        OPENED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(dev.clone());
    }
    Ok(dev)
}

/// The devices `--stats` reports at the end (kept open until then).
static OPENED: std::sync::Mutex<Vec<Device>> = std::sync::Mutex::new(Vec::new());

/// Prints the counters of the devices this run opened with `--stats` (those not zero,
/// then the refusals by reason), on stderr, and closes them.
pub fn print_stats() {
    let devs = std::mem::take(&mut *OPENED.lock().unwrap_or_else(|e| e.into_inner()));
    for d in devs {
        let s = d.stats();
        let ip = std::net::Ipv4Addr::from(d.local_addr().ip);
        eprintln!("stats: {} {ip}", d.port_spec());
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
    }
}

/// Adds the likely cause to a failure to open a port: a memif client whose server
/// is not running fails at once in DPDK (`rte_eth_dev_start`: operation not permitted).
pub fn explain_open(spec: &str, e: PerfError) -> PerfError {
    match spec.parse::<PortSpec>() {
        Ok(PortSpec::Memif {
            socket,
            role: port::MemifRole::Client,
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

/// One side of a connected write test.
pub struct Session {
    pub dev: Device,
    pub ep: Endpoint,
    pub conn: Connection,
    pub lay: Layout,
}

impl Session {
    /// Closes the connection and gives the worker a few turns to tell the peer.
    pub fn close(&self) {
        self.conn.close();
        for _ in 0..64 {
            self.dev.progress();
        }
    }
}

fn endpoint_and_cq(
    dev: &Device,
    p: &Params,
    lay: &Layout,
    rights: Rights,
    conns: usize,
) -> Result<(Endpoint, deposit::CompletionQueue)> {
    let ep = dev.alloc_endpoint(lay.len as u64, rights)?;
    // Room for every outstanding request to complete with an error (a flush) at once:
    // the stream's window over all the connections, not a depth per connection (which
    // -q 65536 would make gigabytes).
    let depth = crate::stream::window(p, conns) as usize + 64;
    let cq = dev.create_cq(depth.max(256));
    Ok((ep, cq))
}

/// Server: listens, calls `listening` (the loopback client may connect from then on)
/// and accepts one connection.
pub fn serve(dev: Device, p: &Params, lay: Layout, listening: impl FnOnce()) -> Result<Session> {
    let (s, _) = serve_with(
        dev,
        p,
        lay,
        &ConnOptions::default(),
        |_| Ok(()),
        listening,
        1,
    )?;
    Ok(s)
}

/// [`serve`] for every test: the endpoint gets the test's rights
/// ([`crate::Test::server_rights`]), `prepare` runs on it before the server listens
/// (register set-up), accepted connections get `opts`, and `conns` connections are
/// accepted (the first is the session's, the others are returned; they share its
/// endpoint and completion queue).
pub fn serve_with(
    dev: Device,
    p: &Params,
    lay: Layout,
    opts: &ConnOptions,
    prepare: impl FnOnce(&Endpoint) -> Result<()>,
    listening: impl FnOnce(),
    conns: usize,
) -> Result<(Session, Vec<Connection>)> {
    let rights = p.test.server_rights();
    let (ep, cq) = endpoint_and_cq(&dev, p, &lay, rights, conns)?;
    prepare(&ep)?;
    // The session's connection comes to `--service` alone, so both sides agree which
    // one it is; the others come to the next service, to one listener per shard they
    // spread over (each on a nested endpoint of that shard over the same memory).
    let session = dev.listen_with(p.service, &ep, &cq, opts)?;
    let listeners = if conns > 1 {
        shard_endpoints(&dev, p, &ep, rights, conns, opts)?
            .iter()
            .map(|e| dev.listen_with(more_service(p), e, &cq, opts))
            .collect::<std::result::Result<Vec<_>, _>>()?
    } else {
        Vec::new()
    };
    listening();
    let conn = session.accept(p.timeout)?;
    let mut more = Vec::with_capacity(conns - 1);
    if let [l] = listeners.as_slice() {
        for _ in 1..conns {
            more.push(l.accept(p.timeout)?);
        }
    } else {
        // Several listeners: look at each in turn, driving the device between rounds.
        let mut wait = Wait::new(p.timeout, "the client's connections");
        while more.len() < conns - 1 {
            let before = more.len();
            let zero = std::time::Duration::ZERO;
            more.extend(listeners.iter().filter_map(|l| l.accept(zero).ok()));
            if more.len() == before {
                dev.progress();
                wait.tick()?;
            }
        }
    }
    Ok((Session { dev, ep, conn, lay }, more))
}

/// The service the connections after the session's come to.
fn more_service(p: &Params) -> u32 {
    p.service.wrapping_add(1)
}

/// Client: waits for the link (memif: the server process) and connects.
pub fn dial(dev: Device, p: &Params, lay: Layout, peer: [u8; 4]) -> Result<Session> {
    let (s, _) = dial_with(dev, p, lay, peer, &ConnOptions::default(), 1)?;
    Ok(s)
}

/// [`dial`] with options for the server's messages here, and `conns` connections
/// (sharing one endpoint and one completion queue; the first is the session's).
pub fn dial_with(
    dev: Device,
    p: &Params,
    lay: Layout,
    peer: [u8; 4],
    opts: &ConnOptions,
    conns: usize,
) -> Result<(Session, Vec<Connection>)> {
    wait_link(|| dev.link_up(), p)?;
    let (ep, cq) = endpoint_and_cq(&dev, p, &lay, Rights::REMOTE_WRITE, conns)?;
    let eps = shard_endpoints(&dev, p, &ep, Rights::REMOTE_WRITE, conns, opts)?;
    let mut next = 0;
    // The session's connection first, to `--service`; the others to the next service,
    // from endpoints of every shard in turn (see `serve_with`).
    let mut connect = || {
        let (on, service) = match next {
            0 => (&ep, p.service),
            n => (&eps[n % eps.len()], more_service(p)),
        };
        next += 1;
        dev.connect_with(peer, service, on, &cq, opts)
            .map_err(|e| match e {
                deposit::Error::Rejected(deposit::RejectReason::Timeout) => PerfError::Timeout {
                    what: "the server to accept the connection (is `ddperf <test> --server` running with the same --service?)",
                    secs: p.timeout.as_secs_f64(),
                },
                e => e.into(),
            })
    };
    let conn = connect()?;
    let mut more = Vec::with_capacity(conns.saturating_sub(1));
    for _ in 1..conns {
        more.push(connect()?);
    }
    Ok((Session { dev, ep, conn, lay }, more))
}

/// The endpoints connections go through: `ep`, or — write_bw with several workers,
/// several connections and options that name no register or instruction window (those
/// are one shard's) — a nested endpoint over all of `ep` on each shard, so that the
/// connections spread over the shards.
fn shard_endpoints(
    dev: &Device,
    p: &Params,
    ep: &Endpoint,
    rights: Rights,
    conns: usize,
    opts: &ConnOptions,
) -> Result<Vec<Endpoint>> {
    // append_bw's senders share one queue: a global register of the server's
    // endpoint, which is one shard's.
    let spread = p.workers > 1
        && conns > 1
        && p.test == crate::Test::WriteBw
        && opts.registers == deposit::Registers::None
        && opts.instructions.is_none();
    if !spread {
        return Ok(vec![ep.clone()]);
    }
    let mut eps = vec![ep.clone()];
    for k in 0..dev.workers().min(conns) {
        if k != ep.shard() {
            eps.push(dev.sub_endpoint_on(k, ep, 0, ep.len(), rights)?);
        }
    }
    Ok(eps)
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
