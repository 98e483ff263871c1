//! The record of a simulated incast, as `cargo run -p deposit-transport --example
//! incast -- --json FILE` writes it, read for `ddperf --plot-incast FILE` and laid on
//! one time grid ([`Timeline`]) for [`crate::plot`] to draw: each flow's rate per bin,
//! their total and mean, the fair share, and the bottleneck queue's depth.
//!
//! The file (one JSON object; keys not listed are ignored, so older and newer
//! examples' files both read):
//!
//! ```text
//! { "senders": 64, "rate_gbps": 25.0, "buffer_kib": 256, "ecn_kib": 32, "ecn": true,
//!   "cc": true, "bin_ns": 100000, "target_us": 10,            (target_us: optional)
//!   "summary": { "start_ns": T0, "elapsed_ns": E, ... },     (elapsed_ns: optional)
//!   "flows": [ { "from": 1, "bytes_per_bin": [[bin start ns, bytes], ...] }, ... ],
//!   "queue": { "max_depth_per_bin": [[bin start ns, bytes], ...] } }
//! ```
//!
//! Times are the simulation's, bins `bin_ns` wide and aligned to multiples of it; a
//! bin that saw nothing is absent (0 bytes delivered, an empty queue). A flow's bytes
//! are its frames' as the fabric counts them (headers included, not the 24 bytes of
//! preamble, FCS and gap). Nothing here draws or panics on a malformed file: it is
//! an error naming what is wrong.

use serde_json::Value;

/// What the plot needs of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct IncastRun {
    pub senders: usize,
    pub rate_gbps: f64,
    /// The bottleneck's buffer and ECN threshold, bytes.
    pub buffer_bytes: u64,
    pub ecn_bytes: u64,
    /// Whether the senders' frames were ECN-capable (`--no-ecn`: not).
    pub ecn: bool,
    /// Congestion control on (`--no-cc`: off).
    pub cc: bool,
    /// The congestion control's target delay, ns (files that predate it: none).
    pub target_ns: Option<u64>,
    pub bin_ns: u64,
    /// When the writes were posted, and how long the run took (simulated ns).
    pub start_ns: u64,
    pub elapsed_ns: Option<u64>,
    /// Per data flow (one per sender): its sending host and `(bin start, bytes)`.
    pub flows: Vec<(u64, Vec<(u64, u64)>)>,
    /// The bottleneck queue's largest depth per bin: `(bin start, bytes)`.
    pub queue: Vec<(u64, u64)>,
    /// The run's summary line, when the file has one: goodput, fairness, drops.
    pub summary: Option<String>,
}

/// A run on one grid of bins, from the bin of the posts to the last flow's last bin.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// Each bin's middle, ms after the posts.
    pub t_ms: Vec<f64>,
    /// Per flow, its rate in each bin, Gb/s.
    pub flows: Vec<Vec<f64>>,
    /// The flows' summed rate per bin.
    pub total: Vec<f64>,
    /// The mean rate of the flows sending in the bin (started and not done: a flow
    /// waiting on a timeout counts, at 0); `None` when none is.
    pub mean: Vec<Option<f64>>,
    /// The line's rate over the flows sending in the bin.
    pub fair: Vec<Option<f64>>,
    /// The bottleneck queue's largest depth in the bin, KiB.
    pub queue_kib: Vec<f64>,
}

/// Why a file is not an incast record.
fn bad(what: &str) -> String {
    format!("not an incast record (cargo run --example incast -- --json FILE): {what}")
}

fn u64_of(v: &Value, key: &str) -> Result<u64, String> {
    v.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| bad(&format!("no whole number \"{key}\"")))
}

/// `[[t, x], ...]` of whole numbers, `t` increasing.
fn bins(v: Option<&Value>, what: &str) -> Result<Vec<(u64, u64)>, String> {
    let list = v
        .and_then(Value::as_array)
        .ok_or_else(|| bad(&format!("{what} is not a list")))?;
    let mut out = Vec::with_capacity(list.len());
    for p in list {
        match p.as_array().map(Vec::as_slice) {
            Some([t, x]) => match (t.as_u64(), x.as_u64()) {
                (Some(t), Some(x)) if out.last().is_none_or(|l: &(u64, u64)| l.0 < t) => {
                    out.push((t, x))
                }
                (Some(_), Some(_)) => return Err(bad(&format!("{what}: bins out of order"))),
                _ => return Err(bad(&format!("{what}: {p} is not two whole numbers"))),
            },
            _ => return Err(bad(&format!("{what}: {p} is not a [time, value] pair"))),
        }
    }
    Ok(out)
}

impl IncastRun {
    /// Reads the text of a `--json` file.
    pub fn parse(text: &str) -> Result<IncastRun, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| bad(&e.to_string()))?;
        let summary = v.get("summary").ok_or_else(|| bad("no \"summary\""))?;
        let bin_ns = u64_of(&v, "bin_ns")?;
        if bin_ns == 0 {
            return Err(bad("\"bin_ns\" is 0"));
        }
        let rate_gbps = v
            .get("rate_gbps")
            .and_then(Value::as_f64)
            .filter(|r| *r > 0.0)
            .ok_or_else(|| bad("no positive \"rate_gbps\""))?;
        let flows = v
            .get("flows")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("no \"flows\" list"))?
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let what = format!("flow {i}'s bytes_per_bin");
                Ok((u64_of(f, "from")?, bins(f.get("bytes_per_bin"), &what)?))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let queue = bins(
            v.get("queue").and_then(|q| q.get("max_depth_per_bin")),
            "queue.max_depth_per_bin",
        )?;
        let flag = |k: &str| v.get(k).and_then(Value::as_bool);
        let num = |k: &str| summary.get(k).and_then(Value::as_f64);
        let count = |k: &str| summary.get(k).and_then(Value::as_u64);
        let line = match (num("goodput_gbps"), count("drops"), count("timeouts")) {
            (Some(g), Some(d), Some(t)) => {
                let jain = num("jain_10ms_mean").map_or("none".into(), |j| format!("{j:.3}"));
                Some(format!(
                    "goodput {g:.2} Gb/s, Jain over 10 ms {jain}, {d} drops, {t} timeouts"
                ))
            }
            _ => None,
        };
        Ok(IncastRun {
            senders: u64_of(&v, "senders")? as usize,
            rate_gbps,
            buffer_bytes: u64_of(&v, "buffer_kib")? << 10,
            ecn_bytes: u64_of(&v, "ecn_kib")? << 10,
            ecn: flag("ecn").unwrap_or(true),
            cc: flag("cc").ok_or_else(|| bad("no \"cc\""))?,
            target_ns: v.get("target_us").and_then(Value::as_u64).map(|u| u * 1000),
            bin_ns,
            start_ns: u64_of(summary, "start_ns")?,
            elapsed_ns: summary.get("elapsed_ns").and_then(Value::as_u64),
            flows,
            queue,
            summary: line,
        })
    }

    /// The run on one grid of bins (empty when no flow delivered anything).
    pub fn timeline(&self) -> Timeline {
        let bin = self.bin_ns;
        let first = self.start_ns - self.start_ns % bin;
        let last = self
            .flows
            .iter()
            .filter_map(|f| f.1.last().map(|b| b.0))
            .max()
            .unwrap_or(0);
        let n = if last >= first {
            ((last - first) / bin + 1) as usize
        } else {
            0
        };
        let slot = |t: u64| (t >= first).then(|| ((t - first) / bin) as usize);
        let gbps = |bytes: u64| bytes as f64 * 8.0 / bin as f64;
        let mut flows = Vec::with_capacity(self.flows.len());
        let mut sending = vec![0usize; n];
        for (_, f) in &self.flows {
            let mut r = vec![0.0; n];
            for &(t, b) in f {
                if let Some(i) = slot(t).filter(|&i| i < n) {
                    r[i] = gbps(b);
                }
            }
            // Sending from its first bin to its last (bins before the posts: from the
            // grid's first).
            if let (Some(a), Some(z)) = (f.first(), f.last().and_then(|b| slot(b.0))) {
                for s in &mut sending[slot(a.0).unwrap_or(0)..=z] {
                    *s += 1;
                }
            }
            flows.push(r);
        }
        let total: Vec<f64> = (0..n).map(|i| flows.iter().map(|f| f[i]).sum()).collect();
        let per = |i: usize, x: f64| (sending[i] > 0).then(|| x / sending[i] as f64);
        let mut queue_kib = vec![0.0; n];
        for &(t, d) in &self.queue {
            if let Some(i) = slot(t).filter(|&i| i < n) {
                queue_kib[i] = d as f64 / 1024.0;
            }
        }
        Timeline {
            t_ms: (0..n)
                .map(|i| {
                    (first as f64 + (i as f64 + 0.5) * bin as f64 - self.start_ns as f64) / 1e6
                })
                .collect(),
            mean: (0..n).map(|i| per(i, total[i])).collect(),
            fair: (0..n).map(|i| per(i, self.rate_gbps)).collect(),
            total,
            flows,
            queue_kib,
        }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// Two flows in bins of 1 µs from t0 = 10 500 ns: flow 1 in bins 10..=12, flow 2 in
    /// bins 11..=13 with nothing in 12 (a stall: it still counts as sending); the queue
    /// before the posts (not shown) and in bins 11 and 13.
    pub const RUN: &str = r#"{"senders":2,"rate_gbps":10,"buffer_kib":64,"ecn_kib":8,
        "msg_kib":1,"ecn":true,"cc":false,"seed":1,"bin_ns":1000,"target_us":10,
        "summary":{"start_ns":10500,"elapsed_ns":3600,"goodput_gbps":4.5,
                   "jain_10ms_mean":null,"drops":3,"timeouts":1},
        "flows":[{"from":1,"to":0,"src_port":9,"bytes":2500,
                  "bytes_per_bin":[[10000,500],[11000,1000],[12000,1000]]},
                 {"from":2,"to":0,"src_port":9,"bytes":1500,
                  "bytes_per_bin":[[11000,1000],[13000,500]]}],
        "queue":{"port":"ToHost(0)","max_depth_per_bin":[[2000,64],[11000,2048],[13000,1024]]}}"#;

    #[test]
    fn an_incast_record_reads_into_rates_a_mean_a_fair_share_and_the_queue() {
        let r = IncastRun::parse(RUN).unwrap();
        assert_eq!(
            (r.senders, r.buffer_bytes, r.ecn_bytes, r.cc, r.target_ns),
            (2, 64 << 10, 8 << 10, false, Some(10_000))
        );
        assert_eq!(
            (r.start_ns, r.elapsed_ns, r.flows.len()),
            (10_500, Some(3600), 2)
        );
        assert_eq!(
            r.summary.as_deref(),
            Some("goodput 4.50 Gb/s, Jain over 10 ms none, 3 drops, 1 timeouts")
        );
        let t = r.timeline();
        // Bins 10..=13 µs, their middles after the posts at 10.5 µs.
        assert_eq!(t.t_ms, [0.0, 0.001, 0.002, 0.003]);
        // 1000 bytes in 1 µs: 8 Gb/s.
        assert_eq!(
            t.flows,
            [vec![4.0, 8.0, 8.0, 0.0], vec![0.0, 8.0, 0.0, 4.0]]
        );
        assert_eq!(t.total, [4.0, 16.0, 8.0, 4.0]);
        assert_eq!(t.mean, [Some(4.0), Some(8.0), Some(4.0), Some(4.0)]);
        assert_eq!(t.fair, [Some(10.0), Some(5.0), Some(5.0), Some(10.0)]);
        assert_eq!(t.queue_kib, [0.0, 2.0, 0.0, 1.0]);
    }

    #[test]
    fn a_record_without_the_newer_keys_still_reads() {
        let old = RUN
            .replace(r#""target_us":10,"#, "")
            .replace(r#""elapsed_ns":3600,"#, "");
        let r = IncastRun::parse(&old).unwrap();
        assert_eq!((r.target_ns, r.elapsed_ns), (None, None));
        assert_eq!(r.timeline(), IncastRun::parse(RUN).unwrap().timeline());
    }

    #[test]
    fn what_is_not_an_incast_record_is_refused_with_what_is_wrong() {
        for (from, to, says) in [
            (r#""bin_ns":1000"#, r#""bin_ns":0"#, "\"bin_ns\" is 0"),
            (r#""cc":false,"#, "", "no \"cc\""),
            ("[12000,1000]]}", "[12000]]}", "not a [time, value] pair"),
            ("[12000,1000]]}", "[9000,1000]]}", "out of order"),
            ("[13000,500]", "[13000,-5]", "not two whole numbers"),
            (r#""rate_gbps":10"#, r#""rate_gbps":0"#, "rate_gbps"),
        ] {
            assert!(RUN.contains(from), "{from}");
            let why = IncastRun::parse(&RUN.replace(from, to)).unwrap_err();
            assert!(why.contains(says), "{from} -> {to}: {why}");
        }
        assert!(IncastRun::parse("{")
            .unwrap_err()
            .contains("not an incast record"));
        assert!(IncastRun::parse("{}").unwrap_err().contains("summary"));
    }
}
