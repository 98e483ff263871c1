//! The device wait fd (issue 35): an application sleeps in its own `epoll_wait` on
//! `Device::wait_fd`, is woken when a completion, an event or a connection to accept
//! is ready, is not woken while nothing is, and its process uses next to no CPU
//! meanwhile — inline devices (driven by their wait-fd helpers) and dedicated workers,
//! on real ring ports.

use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use deposit::*;
use deposit_tests::*;

const T: Duration = Duration::from_secs(10);

/// An epoll set (level-triggered, readability only).
struct Epoll(RawFd);

impl Epoll {
    fn new() -> Epoll {
        // SAFETY: no pointer; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        assert!(
            fd >= 0,
            "epoll_create1: {}",
            std::io::Error::last_os_error()
        );
        Epoll(fd)
    }

    /// Watches `fd` for readability; `token` names it in `wait`'s answer.
    fn add(&self, fd: RawFd, token: u64) {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: a live epoll_event; both fds are open.
        let rc = unsafe { libc::epoll_ctl(self.0, libc::EPOLL_CTL_ADD, fd, &mut ev) };
        assert_eq!(rc, 0, "epoll_ctl: {}", std::io::Error::last_os_error());
    }

    fn remove(&self, fd: RawFd) {
        // SAFETY: both fds are open; DEL ignores the event.
        let rc = unsafe { libc::epoll_ctl(self.0, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
        assert_eq!(rc, 0, "epoll_ctl: {}", std::io::Error::last_os_error());
    }

    /// Sleeps up to `timeout` in `epoll_wait`; the tokens of the readable fds.
    fn wait(&self, timeout: Duration) -> Vec<u64> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `evs` holds 8 events.
        let n = unsafe { libc::epoll_wait(self.0, evs.as_mut_ptr(), 8, ms) };
        assert!(n >= 0, "epoll_wait: {}", std::io::Error::last_os_error());
        evs[..n as usize].iter().map(|e| e.u64).collect()
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: our own fd, closed once.
        unsafe { libc::close(self.0) };
    }
}

/// CPU time of the whole process (every thread: the workers and wait-fd helpers
/// too), user + system, from getrusage.
fn process_cpu() -> Duration {
    // SAFETY: a zeroed rusage is valid; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) }, 0);
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time of each thread of the process, by name (summed over threads of one
/// name), in ticks of 10 ms, from /proc/self/task/*/stat.
fn threads_cpu() -> std::collections::BTreeMap<String, u64> {
    let mut m = std::collections::BTreeMap::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        let (Some(a), Some(b)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[a + 1..b].to_string();
        let f: Vec<&str> = stat[b + 2..].split_whitespace().collect();
        let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
        *m.entry(name).or_default() += ticks;
    }
    m
}

/// Sleeps in `epoll_wait` on `ep` for `idle` (the devices armed, nothing coming) and
/// asserts that nothing became readable and that the process used under 5 % of a core.
fn idle_in_epoll(ep: &Epoll, idle: Duration, what: &str) -> f64 {
    let (t0, cpu0, threads0) = (Instant::now(), process_cpu(), threads_cpu());
    let got = ep.wait(idle);
    let (took, cpu) = (t0.elapsed(), process_cpu() - cpu0);
    let threads: Vec<String> = threads_cpu()
        .into_iter()
        .map(|(n, t)| {
            format!(
                "{n} {} ms",
                (t - threads0.get(&n).copied().unwrap_or(0)) * 10
            )
        })
        .collect();
    eprintln!("{what}: CPU by thread: {}", threads.join(", "));
    assert!(got.is_empty(), "{what}: readable while idle: {got:?}");
    assert!(
        took >= idle - Duration::from_millis(20),
        "{what}: woke after {took:?}"
    );
    let share = cpu.as_secs_f64() / took.as_secs_f64();
    eprintln!(
        "{what}: idle in epoll_wait {took:?}, process CPU {cpu:?} ({:.2} % of a core)",
        share * 100.0
    );
    assert!(
        share < 0.05,
        "{what}: the process used {cpu:?} of CPU in {took:?} idle"
    );
    share
}

/// Whether `fd` is readable now (a zero-timeout poll).
fn readable(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

const CLIENT: u64 = 1;
const SERVER: u64 = 2;

/// The whole round on a ring pair whose server and client make progress as given,
/// with `workers` shards each: an accept woken by the wait fd, an idle second, a write
/// and a software exception that wake both sides (the writer's completions, the
/// receiver's event), re-arming, arming with a completion already queued, and a burst
/// with the fd not armed that signals nothing. (One dedicated worker at most: two idle
/// ones, which nap every 2 ms, cost 2-4 % of a core together in a debug build, and the
/// idle check is about the wait fd's cost, not theirs.)
fn round(name: &str, server_progress: Progress, client_progress: Progress, workers: usize) {
    let pair = ring_pair_with(
        name,
        |c| {
            c.progress = server_progress;
            c.workers = workers;
        },
        |c| {
            c.progress = client_progress;
            c.workers = workers;
        },
    );
    let (sfd, cfd) = (
        pair.server.wait_fd().as_raw_fd(),
        pair.client.wait_fd().as_raw_fd(),
    );
    assert!(
        !readable(sfd) && !readable(cfd),
        "not readable before an arm"
    );
    // The last shard's endpoints: with two workers, the second shard's helper and
    // doorbell do the work.
    let shard = workers - 1;
    let sep = pair
        .server
        .alloc_endpoint_on(shard, 8192, Rights::REMOTE_WRITE)
        .unwrap();
    let scq = pair.server.create_cq(16);
    let l = pair.server.listen(9, &sep, &scq).unwrap();

    // 1. A connection to accept wakes the listener's device.
    let ep = Epoll::new();
    ep.add(sfd, SERVER);
    assert!(!pair.server.arm_wait_fd().unwrap(), "nothing ready yet");
    assert!(ep.wait(Duration::from_millis(30)).is_empty());
    let client = pair.client.clone();
    let dialer = std::thread::spawn(move || {
        let cep = client
            .alloc_endpoint_on(shard, 8192, Rights::REMOTE_WRITE)
            .unwrap();
        let ccq = client.create_cq(256);
        let c = client.connect([10, 0, 0, 1], 9, &cep, &ccq).unwrap();
        (c, cep, ccq)
    });
    assert_eq!(
        ep.wait(T),
        vec![SERVER],
        "woken for the connection to accept"
    );
    let s = l.accept(Duration::ZERO).expect("the connection is there");
    let (c, cep, ccq) = dialer.join().unwrap();
    assert_eq!(s.remote_number(), c.local_number());
    let signals = (pair.server.wait_fd_signals(), pair.client.wait_fd_signals());
    assert_eq!(signals.0, 1, "one signal for the arm");

    // 2. Both armed, nothing coming: not readable, and the process sleeps. Dedicated
    // workers first settle into their long naps (`idle::LONG_QUIET`, 1 s after the last
    // frame); inline devices are driven by their helpers, whose naps grow from the arm.
    ep.add(cfd, CLIENT);
    assert!(!pair.server.arm_wait_fd().unwrap());
    assert!(!pair.client.arm_wait_fd().unwrap());
    let mut client_arms = 1;
    assert!(!readable(sfd), "the arm emptied the fd");
    if server_progress == Progress::Dedicated || client_progress == Progress::Dedicated {
        assert!(ep.wait(Duration::from_millis(1100)).is_empty());
    }
    idle_in_epoll(&ep, Duration::from_secs(1), name);

    // 3. A signaled write and a software exception (an event at the server): the
    // client's fd wakes for the completions, the server's for the event.
    cep.fill(0, 4096, 0x5a).unwrap();
    let t0 = Instant::now();
    c.post(&WorkRequest::write(1, &cep, 0, 4096, 0).signaled())
        .unwrap();
    c.post(&WorkRequest::exception(2, 77).signaled()).unwrap();
    let mut wcs = Vec::new();
    let mut events = Vec::new();
    let (mut client_woke, mut server_woke) = (None, None);
    while wcs.len() < 2 || server_woke.is_none() {
        assert!(
            t0.elapsed() < T,
            "woken: client {client_woke:?}, server {server_woke:?}"
        );
        for token in ep.wait(T) {
            let now = t0.elapsed();
            if token == CLIENT {
                client_woke.get_or_insert(now);
                while let Some(wc) = ccq.poll_one() {
                    wcs.push(wc);
                }
                // Both completions, or arm again and sleep for the rest.
                if wcs.len() == 2 {
                    ep.remove(cfd);
                } else {
                    client_arms += 1;
                    pair.client.arm_wait_fd().unwrap();
                }
            } else {
                server_woke.get_or_insert(now);
                while let Some(e) = sep.events().poll().or_else(|| sep.exceptions().poll()) {
                    events.push(e);
                }
                ep.remove(sfd);
            }
        }
    }
    eprintln!("{name}: post to wake: client {client_woke:?}, server {server_woke:?}");
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0].kind, events[0].operand),
        (EventKind::Exception, 77)
    );
    assert_eq!(events[0].conn, s.local_number());
    check_pattern_byte(&sep, 0x5a);

    // 4. Drained and armed again: not readable until something comes.
    assert!(readable(sfd), "readable until the next arm");
    assert!(!pair.server.arm_wait_fd().unwrap());
    assert!(!pair.client.arm_wait_fd().unwrap());
    client_arms += 1;
    assert!(!readable(sfd) && !readable(cfd), "the arm emptied both fds");

    // 5. Arming while a completion is queued already makes the fd readable at once.
    c.post(&WorkRequest::write(3, &cep, 0, 64, 0).signaled())
        .unwrap();
    let ep = Epoll::new();
    ep.add(cfd, CLIENT);
    assert_eq!(ep.wait(T), vec![CLIENT]);
    // Not drained: the completion is still queued.
    assert!(pair.client.arm_wait_fd().unwrap(), "ready already");
    client_arms += 1;
    assert!(readable(cfd), "an arm that finds something signals at once");
    let wc = ccq.poll_one().expect("the completion");
    assert_eq!((wc.wr_id, wc.status), (3, WcStatus::Success));

    // 6. Without an arm the fd is never signalled: a burst of round trips (the server
    // armed, its helper or worker driving it) leaves the client's count alone.
    let before = pair.client.wait_fd_signals();
    assert!(!pair.server.arm_wait_fd().unwrap());
    for i in 0..200u64 {
        c.post(&WorkRequest::write(100 + i, &cep, 0, 64, 0).signaled())
            .unwrap();
        let wc = ccq.wait_one(T).expect("completion");
        assert_eq!((wc.wr_id, wc.status), (100 + i, WcStatus::Success));
    }
    assert_eq!(pair.client.wait_fd_signals(), before, "no arm, no signal");
    // Every arm signalled once at most.
    assert!(
        pair.client.wait_fd_signals() <= client_arms,
        "{} signals for {client_arms} arms",
        pair.client.wait_fd_signals()
    );
    drop((c, s));
}

/// The first 4096 bytes of `ep` hold `b`.
fn check_pattern_byte(ep: &Endpoint, b: u8) {
    let mut got = vec![0u8; 4096];
    ep.read(0, &mut got).unwrap();
    assert!(got.iter().all(|x| *x == b), "the write landed");
}

#[test]
fn wait_fd_of_inline_devices_wakes_epoll_and_idles_cheaply() {
    round("wfd_inline", Progress::Inline, Progress::Inline, 1);
}

#[test]
fn wait_fd_of_inline_devices_with_two_shards() {
    round("wfd_inline2", Progress::Inline, Progress::Inline, 2);
}

/// The server's worker thread queues the connection to accept and the event.
#[test]
fn wait_fd_of_a_dedicated_server_wakes_epoll_and_idles_cheaply() {
    round("wfd_dserver", Progress::Dedicated, Progress::Inline, 1);
}

/// The client's worker thread queues the completions.
#[test]
fn wait_fd_of_a_dedicated_client_wakes_epoll_and_idles_cheaply() {
    round("wfd_dclient", Progress::Inline, Progress::Dedicated, 1);
}

/// A thread asleep on the fd is woken by a completion whose wait started long after
/// the arm (the helper's naps have grown to their longest): the doorbell of a ring
/// port ends the nap, so the wake comes well before a nap's end would bring it.
#[test]
fn wait_fd_wakes_promptly_after_a_long_quiet() {
    let pair = ring_pair_with(
        "wfd_quiet",
        |c| c.progress = Progress::Dedicated,
        |c| c.progress = Progress::Inline,
    );
    let sep = pair
        .server
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap();
    let scq = pair.server.create_cq(16);
    let l = pair.server.listen(10, &sep, &scq).unwrap();
    let cep = pair.client.alloc_endpoint(4096, Rights::NONE).unwrap();
    let ccq = pair.client.create_cq(16);
    let c = pair.client.connect([10, 0, 0, 1], 10, &cep, &ccq).unwrap();
    let _s = l.accept(T).unwrap();
    let ep = Epoll::new();
    ep.add(pair.client.wait_fd().as_raw_fd(), CLIENT);
    let mut delays = Vec::new();
    for i in 0..5 {
        assert!(!pair.client.arm_wait_fd().unwrap());
        // The helper's naps grow to their longest meanwhile.
        assert!(ep.wait(Duration::from_millis(300)).is_empty());
        // The post wakes the sleeping helper, which sends it; the answer's doorbell
        // wakes it again.
        let t0 = Instant::now();
        c.post(&WorkRequest::write(i, &cep, 0, 64, 0).signaled())
            .unwrap();
        assert_eq!(ep.wait(T), vec![CLIENT]);
        delays.push(t0.elapsed());
        let wc = ccq.poll_one().expect("the completion");
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
    }
    delays.sort();
    eprintln!("post to wake after 300 ms of quiet: {delays:?}");
    // A helper that noticed the answer only at its naps' end would take 2 ms or more
    // (one nap for the post, one for the answer); how soon a woken thread runs is the
    // VM's, so only the median is asserted, loosely.
    assert!(delays[2] < Duration::from_millis(50), "{delays:?}");
}
