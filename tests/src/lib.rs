//! Helpers shared by the integration tests (which run on real DPDK PMDs: ring
//! in-process, memif between processes, null for the tx path).

pub mod memif_peer;
pub mod netns;
pub mod programs;
pub mod ring_fixture;
pub mod seed_priority;

pub use ring_fixture::{RegFixture, FIXTURE_LEN};
pub mod soak;
pub mod telemetry;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use deposit_transport::wire::{
    op, ControlRepr, FrameWriter, TransportRepr, UnderlayRepr, UDP_PORT,
};

use deposit::{
    Completion, CompletionQueue, ConnOptions, Connection, Device, DeviceConfig, Endpoint, Listener,
    Progress, Rights,
};

/// Deterministic content of byte `off` for a test run `seed`.
pub fn pattern(seed: u64, off: u64) -> u8 {
    let mut x = off.wrapping_add(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 29;
    (x as u8) | 1
}

/// Fills `len` bytes of `ep` at `off` with the pattern (keyed by `pat_off`).
pub fn fill_pattern(ep: &Endpoint, off: usize, len: usize, seed: u64, pat_off: u64) {
    let buf: Vec<u8> = (0..len as u64)
        .map(|i| pattern(seed, pat_off + i))
        .collect();
    ep.write(off as u64, &buf).unwrap();
}

/// Checks `len` bytes of `ep` at `off` hold the pattern; returns the first mismatch.
pub fn check_pattern(
    ep: &Endpoint,
    off: usize,
    len: usize,
    seed: u64,
    pat_off: u64,
) -> Result<(), String> {
    let mut buf = vec![0u8; len];
    ep.read(off as u64, &mut buf).unwrap();
    for (i, b) in buf.iter().enumerate() {
        let want = pattern(seed, pat_off + i as u64);
        if *b != want {
            return Err(format!(
                "byte {} of {len} at offset {off}: got {b:#04x}, want {want:#04x}",
                i
            ));
        }
    }
    Ok(())
}

/// Checks a range is all zero (nothing written there).
pub fn check_zero(ep: &Endpoint, off: usize, len: usize) -> Result<(), String> {
    let mut buf = vec![0u8; len];
    ep.read(off as u64, &mut buf).unwrap();
    match buf.iter().position(|b| *b != 0) {
        None => Ok(()),
        Some(i) => Err(format!(
            "byte at offset {} written ({:#04x})",
            off + i,
            buf[i]
        )),
    }
}

/// Writes of 4 KiB the real client of the spoofed-connect test makes (testnode
/// spoof-client, checked by spoof-server).
pub const SPOOF_WRITES: u64 = 512;

/// The offsets at which the size-sweep tests put a write of each size, and the
/// endpoint size they need.
pub const SWEEP_SIZES: &[usize] = &[
    1,
    2,
    7,
    31,
    32,
    33,
    48,
    79,
    80,
    81,
    255,
    1000,
    4095,
    4096,
    4097,
    8912,
    8913,
    9000,
    65_536,
    100_000,
    1 << 20,
];

/// (offset, size) of each sweep write; writes are separated by a 64-byte gap that
/// must stay zero.
pub fn sweep_layout() -> (Vec<(usize, usize)>, usize) {
    let mut off = 64;
    let mut v = Vec::new();
    for &s in SWEEP_SIZES {
        v.push((off, s));
        off += s + 64;
        off = off.next_multiple_of(8);
    }
    (v, off + 64)
}

/// Two nodes in one process on a cross-connected ring pair: (client, server).
/// The server runs a dedicated worker, the client is driven inline by the test.
pub struct RingPair {
    pub client: Device,
    pub server: Device,
}

impl RingPair {
    pub fn new(name: &str) -> RingPair {
        let server = Device::open(
            DeviceConfig::new(&format!("ring:{name}:b"), [10, 0, 0, 1])
                .progress(Progress::Dedicated),
        )
        .expect("server device");
        let client = Device::open(DeviceConfig::new(&format!("ring:{name}:a"), [10, 0, 0, 2]))
            .expect("client device");
        RingPair { client, server }
    }

    /// Connects a client endpoint to a server endpoint of `len` bytes each.
    pub fn connect(&self, len: usize, service: u32) -> Conns {
        self.connect_with(len, service, Rights::REMOTE_WRITE, &ConnOptions::default())
            .0
    }

    /// [`RingPair::connect`] with the server endpoint's `rights` and the server's
    /// connection options; also returns the server's completion queue.
    pub fn connect_with(
        &self,
        len: usize,
        service: u32,
        rights: Rights,
        opts: &ConnOptions,
    ) -> (Conns, CompletionQueue) {
        let sep = self.server.alloc_endpoint(len as u64, rights).unwrap();
        let scq = self.server.create_cq(4096);
        let listener = self.server.listen_with(service, &sep, &scq, opts).unwrap();
        let cep = self
            .client
            .alloc_endpoint(len as u64, Rights::REMOTE_WRITE)
            .unwrap();
        let ccq = self.client.create_cq(4096);
        let client = self
            .client
            .connect([10, 0, 0, 1], service, &cep, &ccq)
            .unwrap();
        let server = listener.accept(Duration::from_secs(5)).unwrap();
        let conns = Conns {
            client,
            server,
            cep,
            sep,
            ccq,
            _listener: listener,
        };
        (conns, scq)
    }
}

impl Conns {
    /// Assembles the pieces of a connection set up by hand.
    pub fn from_parts(
        client: Connection,
        server: Connection,
        cep: Endpoint,
        sep: Endpoint,
        ccq: CompletionQueue,
        listener: Listener,
    ) -> Conns {
        Conns {
            client,
            server,
            cep,
            sep,
            ccq,
            _listener: listener,
        }
    }
}

/// Both ends of a connection and their endpoints.
pub struct Conns {
    pub client: Connection,
    pub server: Connection,
    pub cep: Endpoint,
    pub sep: Endpoint,
    pub ccq: CompletionQueue,
    _listener: Listener,
}

impl Conns {
    /// Writes [`fill_pattern`]'s bytes (`seed`, keyed by offset) at each `(offset,
    /// size)` of `layout` from the client's endpoint to the same offset of the server's,
    /// one signaled write each (`wr_id`: its index), then waits (bounded by `timeout`)
    /// for their completions, returned in order, and until the server has counted every
    /// one as arrived (the client's device, `client`, driven meanwhile).
    pub fn write_layout(
        &self,
        client: &Device,
        layout: &[(usize, usize)],
        seed: u64,
        timeout: Duration,
    ) -> Vec<Completion> {
        for (i, &(off, size)) in layout.iter().enumerate() {
            fill_pattern(&self.cep, off, size, seed, off as u64);
            let wr = deposit::WorkRequest::write(
                i as u64,
                &self.cep,
                off as u64,
                size as u32,
                off as u32,
            );
            self.client.post(&wr.signaled()).unwrap();
        }
        let wcs = wait_completions(&self.ccq, layout.len(), timeout);
        let n = layout.len() as u64;
        assert!(
            wait_until(client, timeout, || self.server.arrivals() == n),
            "{} of {n} writes arrived",
            self.server.arrivals()
        );
        wcs
    }
}

/// Waits for `n` completions (bounded), returning them.
pub fn wait_completions(cq: &CompletionQueue, n: usize, timeout: Duration) -> Vec<Completion> {
    let start = Instant::now();
    let mut out = Vec::new();
    while out.len() < n {
        if let Some(c) = cq.poll_one() {
            out.push(c);
        } else if start.elapsed() > timeout {
            panic!("only {} of {n} completions after {timeout:?}", out.len());
        }
    }
    out
}

/// Waits until `f` is true, driving `dev` (bounded).
pub fn wait_until(dev: &Device, timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !f() {
        if start.elapsed() > timeout {
            return false;
        }
        if dev.progress() == 0 {
            std::thread::yield_now();
        }
    }
    true
}

/// Waits for an event on `ep`, driving the (inline) sending device meanwhile.
pub fn wait_event(sender: &Device, ep: &Endpoint, timeout: Duration) -> Option<deposit::Event> {
    let start = Instant::now();
    let q = ep.events();
    loop {
        if let Some(e) = q.poll() {
            return Some(e);
        }
        if start.elapsed() > timeout {
            return None;
        }
        if sender.progress() == 0 {
            std::thread::yield_now();
        }
    }
}

/// A child process, killed and reaped on drop whatever happens (a failed assertion
/// included).
pub struct ChildGuard(pub std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The lines a child writes on stdout, read on a thread so that waits on them stay
/// bounded (`recv_timeout`).
pub fn line_reader(out: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// A fresh directory for memif sockets, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let mut b = [0u8; 8];
        getrandom::getrandom(&mut b).unwrap();
        let p = std::env::temp_dir().join(format!(
            "deposit-{tag}-{}-{:x}",
            std::process::id(),
            u64::from_ne_bytes(b)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn sock(&self) -> String {
        self.0.join("memif.sock").display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A WRITE message (last of its work request) of `data` at `off`.
pub fn write_msg(off: u32, data: &[u8]) -> (ControlRepr, Vec<u8>) {
    (
        ControlRepr {
            opcode: op::WRITE,
            flags: 1,
            operand: off,
            length: data.len() as u32,
            ..Default::default()
        },
        data.to_vec(),
    )
}

/// A raw frame from node 10.0.0.2 to 10.0.0.1 carrying `msgs`, built with the wire
/// module, for hostile-input tests to corrupt.
pub fn raw_frame(dst_conn: u32, key: u64, seq: u32, msgs: &[(ControlRepr, Vec<u8>)]) -> Vec<u8> {
    let mut buf = vec![0u8; 9000];
    let underlay = UnderlayRepr {
        src_mac: deposit::NodeAddr::from_ip([10, 0, 0, 2], UDP_PORT).mac,
        dst_mac: deposit::NodeAddr::from_ip([10, 0, 0, 1], UDP_PORT).mac,
        src_ip: [10, 0, 0, 2].into(),
        dst_ip: [10, 0, 0, 1].into(),
        src_port: 50000,
        dst_port: UDP_PORT,
        traffic_class: 0,
    };
    let hdr = TransportRepr {
        dst_conn,
        key,
        seq,
        src_conn: 1,
        ..Default::default()
    };
    let mut w = FrameWriter::new(&mut buf, &underlay, &hdr).expect("9000-byte buffer");
    for (c, p) in msgs {
        w.push(c, p).expect("message fits");
    }
    let n = w.finish();
    buf.truncate(n);
    buf
}

/// Two nodes on a cross-connected ring pair, like [`RingPair::new`], with each side's
/// configuration adjusted by `server` and `client` first (event queue depth, RNR
/// retries, ...). The server still runs a dedicated worker, the client inline.
pub fn ring_pair_with(
    name: &str,
    server: impl FnOnce(&mut DeviceConfig),
    client: impl FnOnce(&mut DeviceConfig),
) -> RingPair {
    let mut scfg =
        DeviceConfig::new(&format!("ring:{name}:b"), [10, 0, 0, 1]).progress(Progress::Dedicated);
    server(&mut scfg);
    let mut ccfg = DeviceConfig::new(&format!("ring:{name}:a"), [10, 0, 0, 2]);
    client(&mut ccfg);
    RingPair {
        server: Device::open(scfg).expect("server device"),
        client: Device::open(ccfg).expect("client device"),
    }
}

/// The values of every register of window `w` (for "nothing changed" checks).
pub fn register_snapshot(dev: &Device, w: deposit::RegWindow) -> Vec<u64> {
    (0..w.len)
        .map(|i| dev.read_register(w, i).expect("register in window"))
        .collect()
}

/// A copy of `len` bytes of `ep` from offset 0 (for "nothing written" checks).
pub fn memory_snapshot(ep: &Endpoint, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    ep.read(0, &mut b).expect("range inside the endpoint");
    b
}

/// Waits (bounded) for a child process to exit; kills and reaps it on timeout and
/// returns `None` then.
pub fn wait_child_for(
    child: &mut std::process::Child,
    timeout: Duration,
) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A raw frame with every header field chosen by the caller (hostile-input tests):
/// `underlay` addresses, transport header `hdr` (flags, connection, key, sequence) and
/// the messages `msgs`, with a valid CRC.
pub fn raw_frame_with(
    underlay: &UnderlayRepr,
    hdr: &TransportRepr,
    msgs: &[(ControlRepr, Vec<u8>)],
) -> Vec<u8> {
    let mut buf = vec![0u8; 9000];
    let mut w = FrameWriter::new(&mut buf, underlay, hdr).expect("9000-byte buffer");
    for (c, p) in msgs {
        w.push(c, p).expect("message fits");
    }
    let n = w.finish();
    buf.truncate(n);
    buf
}

/// The underlay of a frame from node `src` to node `dst` (derived MACs, our UDP port).
pub fn underlay_between(src: [u8; 4], dst: [u8; 4]) -> UnderlayRepr {
    UnderlayRepr {
        src_mac: deposit::NodeAddr::from_ip(src, UDP_PORT).mac,
        dst_mac: deposit::NodeAddr::from_ip(dst, UDP_PORT).mac,
        src_ip: src.into(),
        dst_ip: dst.into(),
        src_port: UDP_PORT,
        dst_port: UDP_PORT,
        traffic_class: 0,
    }
}
