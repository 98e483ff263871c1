//! Virtual multicast against M unicasts on a real in-process ring pair:
//! `cargo bench -p deposit --bench multicast`. For M = 1, 4, 16 member connections
//! (each to its own server endpoint) and 64 B / 4 KiB writes, posts `N` writes through
//! a `MulticastGroup` and, in the same run, the same writes as M separate posts, and
//! prints the delivered message rate (writes x members per second, every completion
//! polled) of each, best of 5 (the machine is shared and noisy). The server runs a
//! dedicated worker; the client is driven inline by this thread.

use std::time::{Duration, Instant};

use deposit::{
    CompletionQueue, Connection, Device, DeviceConfig, Endpoint, Listener, Progress, Rights,
    WorkRequest,
};

const N: u64 = 20_000;
const LEN: usize = 1 << 20;
const T: Duration = Duration::from_secs(30);

struct Setup {
    client: Device,
    cep: Endpoint,
    cq: CompletionQueue,
    conns: Vec<Connection>,
    _server: (Device, Vec<(Endpoint, Listener, Connection)>),
}

fn setup(m: usize) -> Setup {
    let name = format!("mcbench{m}");
    let server = Device::open(
        DeviceConfig::new(&format!("ring:{name}:b"), [10, 0, 0, 1]).progress(Progress::Dedicated),
    )
    .expect("server device");
    let client = Device::open(DeviceConfig::new(&format!("ring:{name}:a"), [10, 0, 0, 2]))
        .expect("client device");
    let cep = client
        .alloc_endpoint(LEN as u64, Rights::REMOTE_WRITE)
        .unwrap();
    let cq = client.create_cq(1 << 16);
    let mut conns = Vec::new();
    let mut held = Vec::new();
    for i in 0..m {
        let sep = server
            .alloc_endpoint(LEN as u64, Rights::REMOTE_WRITE)
            .unwrap();
        let scq = server.create_cq(16);
        let l = server.listen(100 + i as u32, &sep, &scq).unwrap();
        conns.push(
            client
                .connect([10, 0, 0, 1], 100 + i as u32, &cep, &cq)
                .unwrap(),
        );
        let s = l.accept(T).unwrap();
        held.push((sep, l, s));
    }
    Setup {
        client,
        cep,
        cq,
        conns,
        _server: (server, held),
    }
}

/// Posts `N` writes of `size` bytes, each to every member (by `post`), keeping at most
/// `depth` writes outstanding per member; returns delivered messages per second.
fn run(s: &Setup, size: u32, multicast: bool) -> f64 {
    let m = s.conns.len() as u64;
    let members: Vec<&Connection> = s.conns.iter().collect();
    let group = s.client.multicast_group(&members).unwrap();
    let depth = 256u64;
    let (mut posted, mut done) = (0u64, 0u64);
    let start = Instant::now();
    while done < N * m {
        while posted < N && posted * m - done < depth * m {
            let off = (posted * u64::from(size)) % (LEN as u64 - u64::from(size));
            let wr = WorkRequest::write(posted, &s.cep, off, size, off as u32).signaled();
            if multicast {
                group.post(&wr).unwrap();
            } else {
                for c in &s.conns {
                    c.post(&wr).unwrap();
                }
            }
            posted += 1;
        }
        s.client.progress();
        while let Some(c) = s.cq.poll_one() {
            assert!(c.status.is_ok(), "{c:?}");
            done += 1;
        }
        assert!(start.elapsed() < T, "stalled at {done} of {}", N * m);
    }
    (N * m) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    println!(
        "{:<8} {:>6} {:>16} {:>16} {:>7}",
        "members", "bytes", "unicast [Mmsg/s]", "multicast", "ratio"
    );
    for m in [1usize, 4, 16] {
        let s = setup(m);
        for size in [64u32, 4096] {
            let (mut uni, mut multi) = (0f64, 0f64);
            for _ in 0..5 {
                uni = uni.max(run(&s, size, false));
                multi = multi.max(run(&s, size, true));
            }
            println!(
                "{m:<8} {size:>6} {:>16.3} {:>16.3} {:>7.2}",
                uni / 1e6,
                multi / 1e6,
                multi / uni
            );
        }
    }
}
