//! deposit's DPDK telemetry commands: the counters and connections
//! of every device of a running process, for `dpdk-telemetry.py` or any client of the
//! telemetry socket. Registered when the first device opens, unless the process runs
//! with `DEPOSIT_TELEMETRY=0`:
//!
//! | command | parameters | answer |
//! |---|---|---|
//! | `/deposit/devices` | | each device's index: its port, address and workers |
//! | `/deposit/stats` | `DEVICE` (0) | every counter of [`crate::DeviceStats`], by name |
//! | `/deposit/drops` | `DEVICE` (0) | refusals by [`crate::DropReason`] |
//! | `/deposit/conns` | `DEVICE[,FROM]` | connections from number `FROM`: peer, state, counts |
//! | `/deposit/peers` | `DEVICE` (0) | each peer's congestion state: its address, shard, window, flight, pace, round trips, marks, decreases |

use std::sync::{Arc, OnceLock};

use deposit_transport::node::ConnSummary;
use deposit_transport::oplogic::DropReason;
use deposit_transport::port::telemetry::{self, register, Reply, TelValue};

use crate::device::{live_devices, DeviceInner};

/// Connections one `/deposit/conns` answer lists (DPDK's dictionary holds 256 entries
/// and 16 KiB of text).
const CONNS_PER_ANSWER: usize = 128;

/// Registers the commands, once per process (when a device opens), unless telemetry
/// is off.
pub(crate) fn register_commands() {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    REGISTERED.get_or_init(|| {
        if !telemetry::enabled() {
            return;
        }
        for (cmd, help, f) in COMMANDS {
            if let Err(e) = register(cmd, help, f) {
                eprintln!("deposit: telemetry command {cmd} not registered: {e}");
            }
        }
    });
}

type Command = (&'static str, &'static str, fn(&str) -> Reply);

const COMMANDS: [Command; 5] = [
    (
        "/deposit/devices",
        "The process's deposit devices: index -> port, address, workers.",
        devices,
    ),
    (
        "/deposit/stats",
        "Counters of a deposit device. Parameters: device index (0).",
        stats,
    ),
    (
        "/deposit/drops",
        "Refusals of a deposit device by reason. Parameters: device index (0).",
        drops,
    ),
    (
        "/deposit/conns",
        "Connections of a deposit device. Parameters: device index (0), first number (0).",
        conns,
    ),
    (
        "/deposit/peers",
        "Congestion state of a deposit device's peers (window, flight, pace, round trips, marks). Parameters: device index (0).",
        peers,
    ),
];

/// The `i`-th parameter as a number (`default` when absent or not a number).
fn param(params: &str, i: usize, default: u64) -> u64 {
    params
        .split(',')
        .nth(i)
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or(default)
}

/// The device the first parameter names, or an answer saying there is none.
fn device(params: &str) -> Result<Arc<DeviceInner>, Reply> {
    let i = param(params, 0, 0) as usize;
    let mut devs = live_devices();
    if i < devs.len() {
        Ok(devs.swap_remove(i))
    } else {
        Err(vec![(
            "error".into(),
            TelValue::Str(format!("no device {i} ({} open)", devs.len())),
        )])
    }
}

fn devices(_: &str) -> Reply {
    live_devices()
        .iter()
        .enumerate()
        .map(|(i, d)| {
            (
                i.to_string(),
                TelValue::Strs(vec![
                    d.port().to_string(),
                    d.local().ip.to_string(),
                    format!("{} workers", d.shards()),
                ]),
            )
        })
        .collect()
}

fn stats(params: &str) -> Reply {
    let d = match device(params) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let mut r = Reply::new();
    d.stats()
        .each(|name, v| r.push((name.to_string(), TelValue::U64(v))));
    r
}

fn drops(params: &str) -> Reply {
    let d = match device(params) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let s = d.stats();
    DropReason::ALL
        .iter()
        .map(|r| (r.name().to_string(), TelValue::U64(s.dropped(*r))))
        .collect()
}

fn peers(params: &str) -> Reply {
    let d = match device(params) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let all: Vec<_> = d
        .call_all(|w| w.peer_summaries())
        .into_iter()
        .enumerate()
        .flat_map(|(shard, v)| v.into_iter().map(move |p| (shard, p)))
        .collect();
    let mut r: Reply = vec![(
        "fields".into(),
        TelValue::Strs(
            [
                "peer_ip",
                "shard",
                "window",
                "inflight",
                "paced_rate",
                "base_rtt_ns",
                "srtt_ns",
                "parked",
                "marks",
                "decreases",
                "quick_adapts",
                "paths",
                "paths_in_use",
                "path_exclusions",
                "hold_ns",
            ]
            .map(String::from)
            .to_vec(),
        ),
    )];
    // (Keyed by their place: telemetry names hold no dots.)
    for (i, (shard, p)) in all.into_iter().enumerate() {
        let c = p.counters;
        let in_use = p.paths.iter().filter(|q| !q.excluded).count();
        let exclusions: u64 = p.paths.iter().map(|q| q.counters.exclusions).sum();
        let mut v = vec![p.peer_ip.to_string()];
        v.extend(
            [
                shard as u64,
                p.window,
                p.inflight,
                p.paced_rate,
                p.base_rtt_ns,
                p.srtt_ns,
                p.parked as u64,
                c.marks,
                c.decreases,
                c.quick_adapts,
                p.paths.len() as u64,
                in_use as u64,
                exclusions,
                p.hold_ns,
            ]
            .map(|v| v.to_string()),
        );
        r.push((i.to_string(), TelValue::Strs(v)));
    }
    r
}

fn conns(params: &str) -> Reply {
    let d = match device(params) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let from = param(params, 1, 0).min(u64::from(u32::MAX)) as u32;
    let mut total = 0;
    let mut all: Vec<ConnSummary> = Vec::new();
    // One more than an answer holds from each shard: whether any is left over says
    // whether there is a next page.
    for (n, v) in d.call_all(move |w| w.conn_summaries(from, CONNS_PER_ANSWER + 1)) {
        total += n;
        all.extend(v);
    }
    all.sort_unstable_by_key(|c| c.number);
    let more = all.len() > CONNS_PER_ANSWER;
    all.truncate(CONNS_PER_ANSWER);
    let mut r: Reply = vec![
        ("total".into(), TelValue::U64(total as u64)),
        (
            "fields".into(),
            TelValue::Strs(
                [
                    "peer_ip",
                    "peer_conn",
                    "state",
                    "arrivals",
                    "dropped",
                    "inflight",
                ]
                .map(String::from)
                .to_vec(),
            ),
        ),
    ];
    if more {
        let next = all.last().map_or(0, |c| c.number + 1);
        r.push(("next".into(), TelValue::U64(u64::from(next))));
    }
    for c in all {
        r.push((
            c.number.to_string(),
            TelValue::Strs(vec![
                c.peer_ip.to_string(),
                c.peer_conn.to_string(),
                format!("{:?}", c.state),
                c.arrivals.to_string(),
                c.dropped.to_string(),
                c.inflight.to_string(),
            ]),
        ));
    }
    r
}
