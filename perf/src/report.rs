//! Turning samples into perftest's numbers, and printing them: tables, the
//! HdrHistogram line, JSON.
//!
//! * Latency: the two highest RTT samples are dropped (perftest), each sample is
//!   reported as RTT/2, `t_typical` is the median; the 99% / 99.9% columns come from
//!   the sorted samples like perftest's, the JSON's `t_p*` and the histogram line from
//!   an HdrHistogram (3 significant digits) of the same samples.
//! * Bandwidth: MiB/s with 1 MiB = 2^20 B, `--report_gbits` uses 10^9 bits/s, MsgRate
//!   in 10^6 messages/s. The peak is [`PeakRate`]'s.
//!
//! With `--json`, stdout carries one JSON object per size and nothing else; tables go
//! to stdout only without it. This module is never called inside a measured loop
//! except [`PeakRate::record`], which does no allocation.

use std::io::Write;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::json;

use crate::Test;

const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// Latency figures of one size, in microseconds (RTT/2).
#[derive(Debug, Clone)]
pub struct LatStats {
    pub bytes: u64,
    pub iterations: u64,
    pub min: f64,
    pub max: f64,
    pub typical: f64,
    pub avg: f64,
    pub stdev: f64,
    pub p99: f64,
    pub p999: f64,
    pub hdr_p50: f64,
    pub hdr_p99: f64,
    pub hdr_p999: f64,
    pub hdr_p9999: f64,
    pub hdr_max: f64,
    /// The kept samples in microseconds, sorted, when a picture will be drawn
    /// ([`keep_samples`]).
    pub samples: Vec<f64>,
}

/// Whether latency statistics keep their samples (`--plot`).
static KEEP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Latency statistics keep their samples from now on (for `--plot`).
pub fn keep_samples() {
    KEEP.store(true, std::sync::atomic::Ordering::Relaxed);
}

impl LatStats {
    /// Statistics of round-trip samples in nanoseconds (sorted in place), reported as
    /// RTT/2 (write and send latency, perftest).
    pub fn from_rtts(bytes: u64, rtts_ns: &mut [u64]) -> LatStats {
        LatStats::from_samples(bytes, rtts_ns, 2)
    }

    /// Statistics of round-trip samples reported as the full RTT (read and atomic
    /// latency, perftest).
    pub fn from_full_rtts(bytes: u64, rtts_ns: &mut [u64]) -> LatStats {
        LatStats::from_samples(bytes, rtts_ns, 1)
    }

    /// Statistics of samples in nanoseconds, each reported divided by `div`.
    fn from_samples(bytes: u64, rtts_ns: &mut [u64], div: u64) -> LatStats {
        rtts_ns.sort_unstable();
        let iterations = rtts_ns.len() as u64;
        // perftest drops the two highest samples.
        let kept = if rtts_ns.len() > 2 {
            &rtts_ns[..rtts_ns.len() - 2]
        } else {
            &rtts_ns[..]
        };
        let n = kept.len().max(1) as f64;
        let us = |rtt_ns: u64| rtt_ns as f64 / (1000 * div) as f64;
        let at = |q: f64| -> f64 {
            if kept.is_empty() {
                return 0.0;
            }
            let i = ((q * kept.len() as f64).ceil() as usize).clamp(1, kept.len()) - 1;
            us(kept[i])
        };
        let avg = kept.iter().map(|&v| us(v)).sum::<f64>() / n;
        let var = kept.iter().map(|&v| (us(v) - avg).powi(2)).sum::<f64>() / n;
        let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
            .expect("valid histogram bounds");
        for &v in kept {
            hist.saturating_record((v / div).max(1));
        }
        let hq = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
        LatStats {
            bytes,
            iterations,
            min: kept.first().map(|&v| us(v)).unwrap_or(0.0),
            max: kept.last().map(|&v| us(v)).unwrap_or(0.0),
            typical: at(0.5),
            avg,
            stdev: var.sqrt(),
            p99: at(0.99),
            p999: at(0.999),
            hdr_p50: hq(0.5),
            hdr_p99: hq(0.99),
            hdr_p999: hq(0.999),
            hdr_p9999: hq(0.9999),
            hdr_max: hist.max() as f64 / 1000.0,
            samples: if KEEP.load(std::sync::atomic::Ordering::Relaxed) {
                kept.iter().map(|&v| us(v)).collect()
            } else {
                Vec::new()
            },
        }
    }
}

/// Bandwidth figures of one size.
#[derive(Debug, Clone, Copy)]
pub struct BwStats {
    pub bytes: u64,
    /// Messages of the run (the table's #iterations).
    pub iterations: u64,
    /// Messages that arrived within `elapsed` (a receiver does not time the first
    /// burst it sees: it only learns that the stream started).
    pub timed: u64,
    pub elapsed: Duration,
    /// Peak message rate (messages per second).
    pub peak_rate: f64,
}

impl BwStats {
    /// Average message rate (messages per second).
    pub fn rate(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.timed as f64 / s
        } else {
            0.0
        }
    }
    fn mib_s(&self, rate: f64) -> f64 {
        rate * self.bytes as f64 / (1u64 << 20) as f64
    }
    fn gbps(&self, rate: f64) -> f64 {
        rate * self.bytes as f64 * 8.0 / 1e9
    }
}

/// The peak rate of a stream of completions: the highest rate over any window of
/// `WINDOW` consecutive events (an event = one poll that retired work, with the
/// cumulative count retired so far). Chosen over fixed time bins because it needs no
/// storage proportional to the run (`-D` runs have no known length) and no clock read
/// per message: with cq_mod 100 at 5 Mpps a window spans ~300 µs. Runs with fewer
/// events than a window report the average as the peak.
pub struct PeakRate {
    ring: [(Instant, u64); PeakRate::WINDOW],
    events: usize,
    peak: f64,
}

impl PeakRate {
    pub const WINDOW: usize = 16;

    pub fn new(start: Instant) -> PeakRate {
        PeakRate {
            ring: [(start, 0); PeakRate::WINDOW],
            events: 0,
            peak: 0.0,
        }
    }

    /// `total` messages have been retired by `now`.
    #[inline]
    pub fn record(&mut self, now: Instant, total: u64) {
        let slot = self.events % Self::WINDOW;
        if self.events >= Self::WINDOW {
            let (t0, n0) = self.ring[slot];
            let dt = now.duration_since(t0).as_secs_f64();
            if dt > 0.0 {
                let r = (total - n0) as f64 / dt;
                if r > self.peak {
                    self.peak = r;
                }
            }
        }
        self.ring[slot] = (now, total);
        self.events += 1;
    }

    /// The peak, or `avg` when the run was shorter than one window.
    pub fn peak(&self, avg: f64) -> f64 {
        if self.events > Self::WINDOW {
            self.peak.max(avg)
        } else {
            avg
        }
    }
}

/// Prints one test's results: a title block, then one row per size (as each size
/// finishes), then a closing rule. Silent when disabled (the loopback side whose numbers
/// the other side prints).
pub struct Reporter {
    test: Test,
    json: bool,
    gbits: bool,
    enabled: bool,
    title: String,
    info: Vec<(&'static str, String)>,
    started: bool,
    /// JSON objects held until [`Reporter::finish`] (`--faults` / `--verify`: their
    /// keys are known only at the end).
    defer: bool,
    rows: Vec<serde_json::Value>,
    extras: serde_json::Map<String, serde_json::Value>,
    /// The connections are sealed (`--secure`).
    secure: bool,
    outcome: crate::verify::Outcome,
    /// Connections the test runs on (`-q`): the title block's "Queues" line and every
    /// JSON object's `queues`; the worker shards of this side's device (`--workers`):
    /// its "Workers" line and `workers`.
    queues: usize,
    workers: usize,
    /// `--plot`: the file, and what it will show.
    plot: Option<std::path::PathBuf>,
    lat_rounds: Vec<(u64, Vec<f64>)>,
    bw_rows: Vec<(u64, f64, f64)>,
}

impl Reporter {
    pub fn new(test: Test, json: bool, gbits: bool, enabled: bool) -> Reporter {
        let title = match test {
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::WriteBw => "RDMA_Write BW Test",
            Test::RawLat => "Raw DPDK Latency Test (no transport)",
            Test::RawBw => "Raw DPDK BW Test (no transport)",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::ReadBw => "RDMA_Read BW Test",
            Test::AtomicLat => "Atomic Latency Test",
            Test::AtomicBw => "Atomic BW Test",
            Test::SendLat => "Send Latency Test",
            Test::SendBw => "Send BW Test",
            Test::AppendBw => "Queue Append BW Test (many senders, one queue)",
            Test::IpLat => "Instruction-Pointer Latency Test",
            Test::IpBw => "Instruction-Pointer BW Test",
            Test::TokenLat => "Payload Token Latency Test",
            Test::IncastBw => "Incast BW Test (several senders, one receiver)",
        };
        Reporter {
            test,
            json,
            gbits,
            enabled,
            title: title.to_string(),
            info: Vec::new(),
            started: false,
            defer: false,
            rows: Vec::new(),
            extras: serde_json::Map::new(),
            secure: false,
            outcome: crate::verify::Outcome::default(),
            queues: 1,
            workers: 1,
            plot: None,
            lat_rounds: Vec::new(),
            bw_rows: Vec::new(),
        }
    }

    /// Draws the rows into `path` at the end ([`crate::plot`]).
    pub fn plot_to(&mut self, path: Option<std::path::PathBuf>) {
        self.plot = path;
    }

    /// Holds the JSON objects until [`Reporter::finish`], which adds the keys given to
    /// [`Reporter::extra`] to each.
    pub fn defer_json(&mut self) {
        self.defer = true;
    }

    /// A key added to every JSON object (with [`Reporter::defer_json`]).
    pub fn extra(&mut self, key: &str, v: serde_json::Value) {
        self.extras.insert(key.to_string(), v);
    }

    /// What this side's `--verify` checks found so far.
    pub fn outcome(&mut self) -> &mut crate::verify::Outcome {
        &mut self.outcome
    }

    fn emit_json(&mut self, j: serde_json::Value) {
        if self.defer {
            self.rows.push(j);
        } else {
            println!("{j}");
        }
    }

    /// Adds a note to the title (e.g. which side's numbers these are).
    pub fn subtitle(&mut self, s: &str) {
        self.title = format!("{} - {s}", self.title);
    }

    /// The number of worker shards of this side's device and of connections (queues)
    /// the test runs on, as lines of the title block (call it where they belong) and
    /// `workers` and `queues` in every JSON object.
    pub fn queues(&mut self, workers: usize, n: usize) {
        self.workers = workers;
        self.queues = n;
        self.info("Workers", workers.to_string());
        self.info("Queues", n.to_string());
    }

    /// The connections are sealed (with a pre-shared key when `psk`): a "Security" line
    /// and `"secure": true` in every JSON object.
    pub fn secure(&mut self, psk: bool) {
        self.secure = true;
        let psk = if psk { " and a pre-shared key" } else { "" };
        self.info(
            "Security",
            format!("sealed: AES-256-GCM per frame, keys from the Noise IK handshake{psk}"),
        );
    }

    /// The "Connection" line: local and remote connection numbers.
    pub fn connection(&mut self, conn: &deposit::Connection) {
        self.info(
            "Connection",
            format!(
                "local {} -> remote {}",
                conn.local_number(),
                conn.remote_number()
            ),
        );
    }

    /// Adds a line to the title block.
    pub fn info(&mut self, key: &'static str, value: impl Into<String>) {
        self.info.push((key, value.into()));
    }

    fn columns(&self) -> Vec<&'static str> {
        if self.test.is_lat() {
            vec![
                "#bytes",
                "#iterations",
                "t_min[usec]",
                "t_max[usec]",
                "t_typical[usec]",
                "t_avg[usec]",
                "t_stdev[usec]",
                "99% percentile[usec]",
                "99.9% percentile[usec]",
            ]
        } else if self.gbits {
            vec![
                "#bytes",
                "#iterations",
                "BW peak[Gb/sec]",
                "BW average[Gb/sec]",
                "MsgRate[Mpps]",
            ]
        } else {
            vec![
                "#bytes",
                "#iterations",
                "BW peak[MiB/sec]",
                "BW average[MiB/sec]",
                "MsgRate[Mpps]",
            ]
        }
    }

    /// The header line: the column labels, one space apart.
    fn header(&self) -> String {
        format!(" {}", self.columns().join(" "))
    }

    /// A row: each value left-aligned under its label (a value wider than its label
    /// pushes the rest of the row right by what it overflows).
    fn row(&self, values: &[String]) -> String {
        let mut line = String::new();
        let mut col = 0usize; // where the current column starts
        for (label, v) in self.columns().iter().zip(values) {
            line.push(' ');
            col += 1;
            while line.len() < col {
                line.push(' ');
            }
            line.push_str(v);
            col += label.len();
            col = col.max(line.len());
        }
        line
    }

    fn start(&mut self) {
        if self.started || !self.enabled || self.json {
            self.started = true;
            return;
        }
        self.started = true;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{RULE}");
        let _ = writeln!(
            out,
            "{:>width$}",
            self.title,
            width = (RULE.len() + self.title.len()) / 2
        );
        for (k, v) in &self.info {
            let _ = writeln!(out, " {k:<15}: {v}");
        }
        let _ = writeln!(out, "{RULE}");
        let _ = writeln!(out, "{}", self.header());
    }

    /// Reports one size of a latency test.
    pub fn lat(&mut self, s: &LatStats) {
        if !self.enabled {
            return;
        }
        if self.plot.is_some() && !s.samples.is_empty() {
            self.lat_rounds.push((s.bytes, s.samples.clone()));
        }
        self.start();
        if self.json {
            let j = json!({
                "test": self.test.name(),
                "bytes": s.bytes,
                "iterations": s.iterations,
                "t_min_us": s.min,
                "t_max_us": s.max,
                "t_typical_us": s.typical,
                "t_avg_us": s.avg,
                "t_stdev_us": s.stdev,
                "t_p50_us": s.hdr_p50,
                "t_p99_us": s.hdr_p99,
                "t_p999_us": s.hdr_p999,
                "t_p9999_us": s.hdr_p9999,
                "queues": self.queues,
                "workers": self.workers,
                "secure": self.secure,
            });
            self.emit_json(j);
            return;
        }
        let f = |v: f64| format!("{v:.2}");
        println!(
            "{}",
            self.row(&[
                s.bytes.to_string(),
                s.iterations.to_string(),
                f(s.min),
                f(s.max),
                f(s.typical),
                f(s.avg),
                f(s.stdev),
                f(s.p99),
                f(s.p999),
            ])
        );
        println!(
            " HdrHistogram[usec]: p50 {:.2}  p99 {:.2}  p99.9 {:.2}  p99.99 {:.2}  max {:.2}",
            s.hdr_p50, s.hdr_p99, s.hdr_p999, s.hdr_p9999, s.hdr_max
        );
    }

    /// Reports one size of a bandwidth test.
    pub fn bw(&mut self, s: &BwStats) {
        if !self.enabled {
            return;
        }
        self.start();
        let avg = s.rate();
        let peak = s.peak_rate.max(avg);
        let shown = if self.gbits {
            s.gbps(avg)
        } else {
            s.mib_s(avg)
        };
        self.bw_rows.push((s.bytes, shown, avg / 1e6));
        if self.json {
            let j = json!({
                "test": self.test.name(),
                "bytes": s.bytes,
                "iterations": s.iterations,
                "bw_peak_mib_s": s.mib_s(peak),
                "bw_avg_mib_s": s.mib_s(avg),
                "msg_rate_mpps": avg / 1e6,
                "bw_avg_gbps": s.gbps(avg),
                "queues": self.queues,
                "workers": self.workers,
                "secure": self.secure,
            });
            self.emit_json(j);
            return;
        }
        let (p, a) = if self.gbits {
            (s.gbps(peak), s.gbps(avg))
        } else {
            (s.mib_s(peak), s.mib_s(avg))
        };
        println!(
            "{}",
            self.row(&[
                s.bytes.to_string(),
                s.iterations.to_string(),
                format!("{p:.2}"),
                format!("{a:.2}"),
                format!("{:.6}", avg / 1e6),
            ])
        );
    }

    /// Closes the table, and draws the picture of `--plot`.
    pub fn finish(&mut self) -> crate::error::Result<()> {
        if self.enabled && !self.json && self.started {
            println!("{RULE}");
        }
        for mut j in std::mem::take(&mut self.rows) {
            if let Some(o) = j.as_object_mut() {
                for (k, v) in &self.extras {
                    o.insert(k.clone(), v.clone());
                }
            }
            println!("{j}");
        }
        let Some(path) = self.plot.as_ref().filter(|_| self.enabled) else {
            return Ok(());
        };
        let title = self.title.split(" - ").next().unwrap_or("").to_string();
        let fig = if self.test.is_lat() {
            if self.lat_rounds.is_empty() {
                return Ok(());
            }
            crate::plot::Figure::Latency {
                title: &title,
                rounds: &self.lat_rounds,
            }
        } else {
            let unit = if self.gbits { "Gb/s" } else { "MiB/s" };
            crate::plot::Figure::Bandwidth {
                title: &title,
                unit,
                rows: &self.bw_rows,
            }
        };
        crate::plot::save(path, &fig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_drops_the_two_highest_and_halves_rtts() {
        let mut rtts: Vec<u64> = vec![2000, 4000, 6000, 1_000_000, 2_000_000];
        let s = LatStats::from_rtts(2, &mut rtts);
        assert_eq!(s.iterations, 5);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 3.0);
        assert_eq!(s.typical, 2.0);
        assert!((s.avg - 2.0).abs() < 1e-9);
    }

    #[test]
    fn full_rtt_is_not_halved() {
        let mut rtts: Vec<u64> = vec![2000, 4000, 6000, 1_000_000, 2_000_000];
        let s = LatStats::from_full_rtts(8, &mut rtts);
        assert_eq!(s.min, 2.0);
        assert_eq!(s.max, 6.0);
        assert_eq!(s.typical, 4.0);
        assert!((s.hdr_p50 - 4.0).abs() < 0.01);
    }

    #[test]
    fn rows_align_under_the_header() {
        let r = Reporter::new(Test::WriteBw, false, false, true);
        let h = r.header();
        let row = r.row(&[
            "2".into(),
            "5000".into(),
            "1.00".into(),
            "2.00".into(),
            "3.000000".into(),
        ]);
        for (label, v) in ["#iterations", "BW average[MiB/sec]", "MsgRate[Mpps]"]
            .iter()
            .zip(["5000", "2.00", "3.000000"])
        {
            assert_eq!(h.find(label), row.find(v), "{h}\n{row}");
        }
    }

    #[test]
    fn peak_is_the_best_window() {
        let t = Instant::now();
        let mut p = PeakRate::new(t);
        for i in 0..=(2 * PeakRate::WINDOW as u64) {
            // 1000 messages per ms, then 4000 per ms in the second half.
            let n = if i <= PeakRate::WINDOW as u64 {
                1000 * i
            } else {
                1000 * 16 + 4000 * (i - 16)
            };
            p.record(t + Duration::from_millis(i), n);
        }
        assert!((p.peak(0.0) - 4_000_000.0).abs() < 1.0, "{}", p.peak(0.0));
    }
}
