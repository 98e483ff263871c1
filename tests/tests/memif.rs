//! Two processes over memif: this test process is one node, `testnode` the other.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use deposit::*;
use deposit_tests::*;

const T: Duration = Duration::from_secs(20);

/// Waits (bounded) for a child to exit; kills it on timeout.
fn wait_child(mut child: Child, timeout: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("child did not exit within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `testnode sweep-server` on `sock` and waits for its "ready" (the memif
/// socket exists). Returns it, its stdin (dropping it releases the server) and its
/// stdout.
fn sweep_server(sock: &str, seed: u64) -> (Child, ChildStdin, BufReader<ChildStdout>) {
    sweep_server_with(sock, seed, &[])
}

/// [`sweep_server`] with testnode's extra arguments (`readable`).
fn sweep_server_with(
    sock: &str,
    seed: u64,
    extra: &[&str],
) -> (Child, ChildStdin, BufReader<ChildStdout>) {
    let mut server = Command::new(env!("CARGO_BIN_EXE_testnode"))
        .args(["sweep-server", sock, &seed.to_string()])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let release = server.stdin.take().unwrap();
    let mut out = BufReader::new(server.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    (server, release, out)
}

/// Writes the size sweep from `ep` over `conn` (each range its pattern of `seed`),
/// waits for every completion, then keeps acknowledging until the server says it
/// verified them (its line read on a thread, so the wait stays bounded). Returns what
/// the server said.
fn write_sweep_until_verified(
    dev: &Device,
    conn: &Connection,
    ep: &Endpoint,
    cq: &CompletionQueue,
    seed: u64,
    server: &mut Child,
    out: BufReader<ChildStdout>,
) -> Vec<String> {
    let (layout, _) = sweep_layout();
    for (i, &(off, size)) in layout.iter().enumerate() {
        fill_pattern(ep, off, size, seed, off as u64);
        conn.post(
            &WorkRequest::write(i as u64, ep, off as u64, size as u32, off as u32).signaled(),
        )
        .unwrap();
    }
    for wc in wait_completions(cq, layout.len(), T) {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in out.lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut said = Vec::new();
    while !said.iter().any(|l: &String| l.starts_with("verified")) {
        dev.progress();
        said.extend(rx.try_iter());
        if start.elapsed() > T || server.try_wait().unwrap().is_some() {
            let _ = server.kill();
            panic!("server did not verify: {said:?}");
        }
    }
    said
}

#[test]
fn writes_from_1_byte_to_1_mib_land_byte_exact_across_processes() {
    let dir = TempDir::new("sweep");
    let sock = dir.sock();
    let seed = 77u64;
    let (mut server, release, out) = sweep_server(&sock, seed);

    let dev = Device::open(DeviceConfig::new(
        &format!("memif:{sock}:client"),
        [10, 0, 0, 2],
    ))
    .unwrap();
    let (_, len) = sweep_layout();
    let ep = dev
        .alloc_endpoint(len as u64, Rights::REMOTE_WRITE)
        .unwrap();
    let cq = dev.create_cq(256);
    let conn = dev.connect([10, 0, 0, 1], 7, &ep, &cq).unwrap();
    let said = write_sweep_until_verified(&dev, &conn, &ep, &cq, seed, &mut server, out);
    // memif copies each frame as it sends it: the large payloads went by reference.
    let by_ref = dev.stats().payloads_by_reference;
    assert!(
        by_ref >= 100,
        "{by_ref} frames took their payload by reference"
    );
    // Neither side polls while the other leaves (see testnode's wait_for_release):
    // close our port first, then let the server go.
    drop((conn, ep, cq, dev));
    drop(release);
    let status = wait_child(server, T);
    assert!(status.success(), "server failed after verifying: {said:?}");
}

#[test]
fn a_zero_copy_client_writes_and_reads_back_1_byte_to_1_mib_byte_exact() {
    // The client shares its buffer memory with the server (zero-copy=yes): frames it
    // receives are the server's writes into that memory, and its own frames are read
    // where they lie. Writes of the sweep go out from the client (no payload by
    // reference: endpoint memory is not shared), the server checks them, then the
    // client reads every range back (answers of up to 1 MiB, many frames each, into
    // the zero-copy receive side) and checks them too.
    let dir = TempDir::new("zc");
    let sock = dir.sock();
    let seed = 78u64;
    let (mut server, release, out) = sweep_server_with(&sock, seed, &["readable"]);
    let spec = format!("memif:{sock}:client:zero-copy");
    let dev = Device::open(DeviceConfig::new(&spec, [10, 0, 0, 2])).unwrap();
    let (layout, len) = sweep_layout();
    let ep = dev.alloc_endpoint(len as u64, Rights::NONE).unwrap();
    // On the connection's shard (a device of several workers: DEPOSIT_WORKERS=2).
    let back = dev
        .alloc_endpoint_on(ep.shard(), len as u64, Rights::NONE)
        .unwrap();
    let cq = dev.create_cq(256);
    let conn = dev.connect([10, 0, 0, 1], 7, &ep, &cq).unwrap();
    let said = write_sweep_until_verified(&dev, &conn, &ep, &cq, seed, &mut server, out);
    for (i, &(off, size)) in layout.iter().enumerate() {
        conn.post(
            &WorkRequest::read(i as u64, &back, off as u64, size as u32, off as u32).signaled(),
        )
        .unwrap();
    }
    for wc in wait_completions(&cq, layout.len(), T) {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    for &(off, size) in &layout {
        check_pattern(&back, off, size, seed, off as u64).unwrap();
    }
    assert_eq!(dev.stats().payloads_by_reference, 0);
    // Done: the server stops polling, then this side leaves, then the server does.
    let mut release = release;
    std::io::Write::write_all(&mut release, b"stop\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    drop((conn, ep, back, cq, dev));
    drop(release);
    let status = wait_child(server, T);
    assert!(status.success(), "server failed after verifying: {said:?}");
}

#[test]
fn a_second_process_injecting_garbage_cannot_disturb_a_running_receiver() {
    let dir = TempDir::new("inject");
    let sock = dir.sock();
    let dev = Device::open(
        DeviceConfig::new(&format!("memif:{sock}:server"), [10, 0, 0, 1])
            .progress(Progress::Dedicated),
    )
    .unwrap();
    let ep = dev.alloc_endpoint(4096, Rights::REMOTE_WRITE).unwrap();
    let cq = dev.create_cq(64);
    let l = dev.listen(9, &ep, &cq).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_testnode"))
        .args(["inject", &sock, "10.0.0.1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let release = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let conn = l.accept(T).unwrap();
    // The injector says "injected" when done, then stops polling and waits.
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(
        line.starts_with("injected"),
        "injector saw a wrong completion: {line:?}"
    );
    // 50 legitimate writes (and 50 refused ones) arrived.
    assert!(wait_until(&dev, T, || conn.arrivals() == 100));
    let st = dev.stats();
    for r in [
        DropReason::WrongKey,
        DropReason::UnknownConnection,
        DropReason::BadCrc,
        DropReason::OutOfBounds,
    ] {
        assert!(st.dropped(r) > 0, "{r:?} not counted: {st:?}");
    }
    assert_eq!(st.dropped(DropReason::OutOfBounds), 50);
    // Only the legitimate 16-byte writes are in memory, at their offsets.
    let mut buf = vec![0u8; 4096];
    ep.read(0, &mut buf).unwrap();
    for (i, b) in buf.iter().enumerate() {
        let slot = i / 64;
        let in_write = i % 64 < 16 && slot < 32;
        if !in_write {
            assert_eq!(*b, 0, "byte {i} written");
        } else {
            assert_ne!(*b, 0, "byte {i} missing");
            assert!(*b & 0x80 != 0);
        }
    }
    // Close our port before the injector leaves (see testnode's wait_for_release).
    drop((conn, l, ep, cq, dev));
    drop(release);
    assert!(wait_child(child, T).success(), "injector failed at exit");
}

/// A memif client opened before its server exists fails (DPDK cannot start it), and
/// the failed port gives back its virtual device: the same spec opens once the server
/// is there (the libfabric provider's ranks retry this way).
#[test]
fn a_memif_client_opened_before_its_server_opens_once_the_server_is_there() {
    let dir = TempDir::new("early");
    let sock = dir.sock();
    let spec = format!("memif:{sock}:client");
    let early = Device::open(DeviceConfig::new(&spec, [10, 0, 0, 2]));
    assert!(early.is_err(), "a client with no server opened");
    let (mut server, _release, _out) = sweep_server(&sock, 1);
    let dev = Device::open(DeviceConfig::new(&spec, [10, 0, 0, 2]))
        .expect("the same spec opens once the server is there");
    let start = Instant::now();
    while !dev.link_up() {
        assert!(start.elapsed() < T, "the memif link did not come up");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(dev);
    let _ = server.kill();
    let _ = server.wait();
}
