//! The second process of the two-process memif tests.
//!
//! ```text
//! testnode sweep-server <socket> <seed>   accept one connection, wait for the size
//!                                          sweep, verify every byte, exit 0 / 1
//! testnode inject <socket> <server-ip>    connect as a memif client, mix hostile raw
//!                                          frames with legitimate writes, check the
//!                                          completions, exit 0 / 1
//! ```
//! Every wait is bounded; failures print one line on stderr and exit 1.

use std::process::exit;
use std::time::Duration;

use deposit::*;
use deposit_tests::*;

const T: Duration = Duration::from_secs(20);

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("testnode: {msg}");
    exit(1)
}

fn sweep_server(sock: &str, seed: u64) {
    let dev = Device::open(DeviceConfig::new(
        &format!("memif:{sock}:server"),
        [10, 0, 0, 1],
    ))
    .unwrap_or_else(|e| fail(e));
    let (layout, len) = sweep_layout();
    let ep = dev
        .alloc_endpoint(len, Rights::REMOTE_WRITE)
        .unwrap_or_else(|e| fail(e));
    let cq = dev.create_cq(64);
    let l = dev.listen(7, &ep, &cq).unwrap_or_else(|e| fail(e));
    println!("ready");
    let conn = l.accept(T).unwrap_or_else(|e| fail(e));
    if !wait_until(&dev, T, || conn.arrivals() >= layout.len() as u64) {
        fail(format!(
            "only {} of {} writes arrived",
            conn.arrivals(),
            layout.len()
        ));
    }
    let mut prev_end = 0;
    for &(off, size) in &layout {
        check_zero(&ep, prev_end, off - prev_end).unwrap_or_else(|e| fail(e));
        check_pattern(&ep, off, size, seed, off as u64).unwrap_or_else(|e| fail(e));
        prev_end = off + size;
    }
    check_zero(&ep, prev_end, len - prev_end).unwrap_or_else(|e| fail(e));
    // Keep serving a moment so the client's last acknowledgements get out.
    let end = std::time::Instant::now() + Duration::from_millis(300);
    while std::time::Instant::now() < end {
        dev.progress();
    }
    println!("verified {} writes", layout.len());
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
        conn.post_write(
            &WriteRequest::inline(round as u64, &data, off)
                .unwrap()
                .signaled(),
        )
        .unwrap_or_else(|e| fail(e));
        conn.post_write(&WriteRequest::inline(1000 + round as u64, &data, 4090).unwrap())
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
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("sweep-server") if args.len() == 4 => {
            sweep_server(&args[2], args[3].parse().unwrap_or_else(|e| fail(e)))
        }
        Some("inject") if args.len() == 4 => {
            let ip: std::net::Ipv4Addr = args[3].parse().unwrap_or_else(|e| fail(e));
            inject(&args[2], ip.octets())
        }
        _ => fail("usage: testnode sweep-server <socket> <seed> | inject <socket> <server-ip>"),
    }
}
