//! Pictures of a run (`--plot FILE`, `.svg` or `.png`) with `plotters`:
//!
//! * latency tests, one size: the histogram of the samples (RTT/2 or RTT, as the table)
//!   and their CDF, p50 / p99 / p99.9 marked on both;
//! * latency tests, several sizes (`-a`): p50 / p99 / p99.9 against size, and the CDF
//!   of every size;
//! * bandwidth tests: bandwidth and message rate against size;
//! * `scripts/bench.sh --plot`: each row of its table, deposit next to its raw-DPDK
//!   baseline ([`Figure::Bench`], through `ddperf --plot-bench`);
//! * a simulated incast (`ddperf --plot-incast`, [`Figure::Incast`]): every flow's rate
//!   over time with their total, mean and fair share above the bottleneck queue's
//!   depth, its ECN threshold and buffer marked.
//!
//! Text is laid out with DejaVu Sans (Debian's `fonts-dejavu-core`, which
//! scripts/deps.sh installs), read when a picture is drawn.

use std::error::Error;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::error::{PerfError, Result};
use crate::incast::IncastRun;

/// Where the font is read from.
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

type Res = std::result::Result<(), Box<dyn Error>>;

/// What a picture shows.
pub enum Figure<'a> {
    /// Per size: the size and its samples in microseconds, sorted.
    Latency {
        title: &'a str,
        rounds: &'a [(u64, Vec<f64>)],
    },
    /// Per size: the size, the bandwidth (in `unit`) and the message rate (Mpps).
    Bandwidth {
        title: &'a str,
        unit: &'a str,
        rows: &'a [(u64, f64, f64)],
    },
    /// Per row: what it measures (with its unit), deposit's figure, raw DPDK's.
    Bench { rows: &'a [(String, f64, f64)] },
    /// A simulated incast's record.
    Incast { run: &'a IncastRun },
}

/// Draws `fig` into `path` (`.svg` or `.png`).
pub fn save(path: &Path, fig: &Figure<'_>) -> Result<()> {
    let fail = |e: Box<dyn Error>| PerfError::Failed(format!("--plot {}: {e}", path.display()));
    font().map_err(fail)?;
    let size = match fig {
        Figure::Bench { rows } => (1200, 260 * rows.len().div_ceil(3) as u32),
        Figure::Incast { .. } => (1200, 900),
        _ => (1200, 500),
    };
    let r = match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => draw(&SVGBackend::new(path, size).into_drawing_area(), fig),
        Some("png") => draw(&BitMapBackend::new(path, size).into_drawing_area(), fig),
        _ => {
            return Err(PerfError::Usage(format!(
                "--plot {}: give a .svg or .png file",
                path.display()
            )))
        }
    };
    r.map_err(fail)?;
    eprintln!("ddperf: plot written to {}", path.display());
    Ok(())
}

fn font() -> Res {
    static DONE: std::sync::OnceLock<std::result::Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let bytes =
            std::fs::read(FONT).map_err(|e| format!("{FONT}: {e} (install fonts-dejavu-core)"))?;
        plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            Box::leak(bytes.into_boxed_slice()),
        )
        .map_err(|_| format!("{FONT} is not a font plotters can use"))
    })
    .clone()
    .map_err(Into::into)
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, fig: &Figure<'_>) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    match *fig {
        Figure::Latency {
            title,
            rounds: [(size, s)],
        } => {
            let (l, r) = root.split_horizontally(600);
            histogram(&l, &format!("{title}, {size} B: histogram"), s)?;
            cdf(
                &r,
                &format!("{title}, {size} B: CDF"),
                &[(*size, s.clone())],
                true,
            )?;
        }
        Figure::Latency { title, rounds } => {
            let (l, r) = root.split_horizontally(600);
            percentiles(&l, &format!("{title}: percentiles by size"), rounds)?;
            cdf(&r, &format!("{title}: CDF per size"), rounds, false)?;
        }
        Figure::Bandwidth { title, unit, rows } => {
            let (l, r) = root.split_horizontally(600);
            let bw: Vec<(u64, f64)> = rows.iter().map(|r| (r.0, r.1)).collect();
            let rate: Vec<(u64, f64)> = rows.iter().map(|r| (r.0, r.2)).collect();
            by_size(
                &l,
                &format!("{title}: bandwidth"),
                &format!("BW average [{unit}]"),
                &bw,
                false,
            )?;
            by_size(
                &r,
                &format!("{title}: message rate"),
                "MsgRate [Mpps]",
                &rate,
                true,
            )?;
        }
        Figure::Bench { rows } => {
            let cells = root.split_evenly((rows.len().div_ceil(3), 3));
            for (cell, row) in cells.iter().zip(rows) {
                bars(cell, row)?;
            }
        }
        Figure::Incast { run } => incast(root, run)?,
    }
    root.present()?;
    Ok(())
}

/// A legend's line of `color`.
fn swatch<C: Color + Copy + 'static>(color: C) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2))
}

/// Draws a chart's legend at `pos`.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    c: &mut ChartContext<'a, DB, CT>,
    pos: SeriesLabelPosition,
) -> Res
where
    DB::ErrorType: 'static,
{
    c.configure_series_labels()
        .position(pos)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// The value at quantile `q` of sorted samples.
fn at(s: &[f64], q: f64) -> f64 {
    s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1]
}

const MARKS: [(f64, &str, RGBColor); 3] = [
    (0.5, "p50", GREEN),
    (0.99, "p99", MAGENTA),
    (0.999, "p99.9", RED),
];

fn histogram<DB: DrawingBackend>(a: &DrawingArea<DB, Shift>, title: &str, s: &[f64]) -> Res
where
    DB::ErrorType: 'static,
{
    // Up to a little past p99.9 (at most three times p99, so that a far tail does not
    // squeeze the body); what lies beyond is counted in the axis label.
    let (lo, hi) = (s[0], (at(s, 0.999) * 1.25).min(at(s, 0.99) * 3.0) + 1e-3);
    let bins = 80;
    let w = (hi - lo) / bins as f64;
    let mut n = vec![0u32; bins];
    for &v in s.iter().filter(|&&v| v < hi) {
        n[(((v - lo) / w) as usize).min(bins - 1)] += 1;
    }
    let beyond = s.iter().filter(|&&v| v >= hi).count();
    let top = f64::from(*n.iter().max().unwrap_or(&1)) * 1.1;
    let mut c = ChartBuilder::on(a)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(lo..hi, 0.0..top)?;
    c.configure_mesh()
        .x_desc(format!(
            "latency [us] ({beyond} of {} samples beyond {hi:.2} not shown)",
            s.len()
        ))
        .y_desc("samples")
        .draw()?;
    c.draw_series(n.iter().enumerate().map(|(i, &k)| {
        let x = lo + i as f64 * w;
        Rectangle::new([(x, 0.0), (x + w, f64::from(k))], BLUE.mix(0.6).filled())
    }))?;
    for (q, name, color) in MARKS {
        let x = at(s, q);
        c.draw_series(LineSeries::new([(x, 0.0), (x, top)], color.stroke_width(2)))?
            .label(format!("{name} {x:.2} us"))
            .legend(swatch(color));
    }
    legend(&mut c, SeriesLabelPosition::UpperRight)
}

/// The y of quantile `q` on the nines scale: 0 at 0, 1 at 90 %, 2 at 99 %, ...
fn nines(q: f64) -> f64 {
    -(1.0 - q).log10()
}

fn cdf<DB: DrawingBackend>(
    a: &DrawingArea<DB, Shift>,
    title: &str,
    rounds: &[(u64, Vec<f64>)],
    marks: bool,
) -> Res
where
    DB::ErrorType: 'static,
{
    let lo = rounds
        .iter()
        .map(|r| r.1[0])
        .fold(f64::MAX, f64::min)
        .max(1e-3);
    let hi = rounds
        .iter()
        .map(|r| r.1[r.1.len() - 1])
        .fold(0.0, f64::max)
        .max(lo * 1.01);
    let n = rounds.iter().map(|r| r.1.len()).max().unwrap_or(1) as f64;
    let mut c = ChartBuilder::on(a)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..nines(n / (n + 1.0)).ceil())?;
    c.configure_mesh()
        .x_desc("latency [us], log scale")
        .y_desc("fraction of samples at or below (nines)")
        .x_labels(8)
        .y_labels(8)
        .y_label_formatter(&|y| {
            // Whole nines only: 0%, 90%, 99%, 99.9%, ...
            let k = y.round();
            if (y - k).abs() > 1e-6 {
                String::new()
            } else if k == 0.0 {
                "0%".into()
            } else {
                format!(
                    "{:.*}%",
                    (k as usize).saturating_sub(2),
                    100.0 - 100.0 * 10f64.powf(-k)
                )
            }
        })
        .draw()?;
    for (i, (size, s)) in rounds.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        // The fraction at or below sample j is (j + 1) / (len + 1), so that the last
        // is finite on the nines scale; at most ~4000 points a line.
        let k = (s.len() / 4000).max(1);
        let len = s.len() as f64 + 1.0;
        let pts = s
            .iter()
            .enumerate()
            .filter(|(j, _)| j % k == 0 || *j == s.len() - 1);
        let line = pts.map(|(j, &v)| (v, nines((j + 1) as f64 / len)));
        let series = c.draw_series(LineSeries::new(line, color.stroke_width(2)))?;
        if rounds.len() <= 8 {
            series.label(format!("{size} B")).legend(swatch(color));
        }
    }
    if !marks && rounds.len() > 8 {
        return Ok(()); // no labels: one colour per size, smallest first
    }
    if marks {
        let s = &rounds[0].1;
        for (q, name, color) in MARKS {
            let x = at(s, q);
            c.draw_series([Circle::new((x, nines(q)), 5, color.filled())])?
                .label(format!("{name} {x:.2} us"))
                .legend(move |(x, y)| Circle::new((x + 9, y), 5, color.filled()));
        }
    }
    legend(&mut c, SeriesLabelPosition::LowerRight)
}

fn percentiles<DB: DrawingBackend>(
    a: &DrawingArea<DB, Shift>,
    title: &str,
    rounds: &[(u64, Vec<f64>)],
) -> Res
where
    DB::ErrorType: 'static,
{
    let pts =
        |q: f64| -> Vec<(u64, f64)> { rounds.iter().map(|(size, s)| (*size, at(s, q))).collect() };
    let top = rounds.iter().map(|(_, s)| at(s, 0.999)).fold(0.0, f64::max) * 1.5;
    let bottom = rounds.iter().map(|(_, s)| s[0]).fold(f64::MAX, f64::min) * 0.7;
    let mut c = size_chart(a, title).build_cartesian_2d(sizes(), (bottom..top).log_scale())?;
    c.configure_mesh()
        .x_label_formatter(&bytes)
        .x_desc("message size [B]")
        .y_desc("latency [us], log scale")
        .draw()?;
    for (q, name, color) in MARKS {
        c.draw_series(LineSeries::new(pts(q), color.stroke_width(2)).point_size(3))?
            .label(name)
            .legend(swatch(color));
    }
    legend(&mut c, SeriesLabelPosition::UpperRight)
}

/// A size in bytes as "512", "64K", "8M".
fn bytes(x: &u64) -> String {
    match *x {
        x if x >= 1 << 20 => format!("{}M", x >> 20),
        x if x >= 1 << 10 => format!("{}K", x >> 10),
        x => x.to_string(),
    }
}

fn by_size<DB: DrawingBackend>(
    a: &DrawingArea<DB, Shift>,
    title: &str,
    y: &str,
    pts: &[(u64, f64)],
    log: bool,
) -> Res
where
    DB::ErrorType: 'static,
{
    let top = pts.iter().map(|p| p.1).fold(0.0, f64::max) * 1.15 + 1e-9;
    let bottom = pts
        .iter()
        .map(|p| p.1)
        .fold(f64::MAX, f64::min)
        .max(top * 1e-6)
        * 0.8;
    let line = || LineSeries::new(pts.iter().copied(), BLUE.stroke_width(2)).point_size(4);
    if log {
        let mut c = size_chart(a, title).build_cartesian_2d(sizes(), (bottom..top).log_scale())?;
        c.configure_mesh()
            .x_label_formatter(&bytes)
            .x_desc("message size [B]")
            .y_desc(format!("{y}, log scale"))
            .draw()?;
        c.draw_series(line())?;
    } else {
        let mut c = size_chart(a, title).build_cartesian_2d(sizes(), 0.0..top)?;
        c.configure_mesh()
            .x_label_formatter(&bytes)
            .x_desc("message size [B]")
            .y_desc(y)
            .draw()?;
        c.draw_series(line())?;
    }
    Ok(())
}

/// The size axis: 1 B to 16 MiB, log 2.
fn sizes() -> LogCoord<u64> {
    (1u64..1u64 << 24).log_scale().base(2.0).into()
}

fn size_chart<'a, 'b, DB: DrawingBackend>(
    a: &'a DrawingArea<DB, Shift>,
    title: &'b str,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(a);
    b.caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70);
    b
}

/// A simulated incast, two panels on one time axis. Above, every flow's rate per bin
/// (thin, a colour each), their total, the mean of the flows sending and the fair
/// share, on a log scale: a flow at a sixty-fourth of the line and the line itself
/// both readable (a bin with nothing delivered sits on the floor). Below, the
/// bottleneck queue's largest depth per bin against its ECN threshold, the target
/// delay's bytes and the buffer.
fn incast<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, run: &IncastRun) -> Res
where
    DB::ErrorType: 'static,
{
    let t = run.timeline();
    let (Some(&first), Some(&last)) = (t.t_ms.first(), t.t_ms.last()) else {
        return Err("no flow delivered anything".into());
    };
    let title = format!(
        "incast {}:1 at {} Gb/s, congestion control {}{}",
        run.senders,
        run.rate_gbps,
        if run.cc { "on" } else { "off" },
        if run.ecn {
            ""
        } else {
            ", frames not ECN-capable"
        }
    );
    let root = root.titled(&title, ("sans-serif", 22))?;
    let (top, bottom) = root.split_vertically(500);
    let half = run.bin_ns as f64 / 2e6;
    let xs = (first - half).min(0.0)..last + half;
    let bin_us = run.bin_ns as f64 / 1e3;
    let floor = run.rate_gbps / run.senders.max(1) as f64 / 50.0;
    let lift = |v: f64| v.max(floor);
    let mut c = ChartBuilder::on(&top)
        .caption(run.summary.as_deref().unwrap_or(""), ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(70)
        // Room above the line's rate for the legend.
        .build_cartesian_2d(xs.clone(), (floor..run.rate_gbps * 12.0).log_scale())?;
    c.configure_mesh()
        .x_desc("time after the writes were posted [ms]")
        .y_desc(format!("delivered per {bin_us} us bin [Gb/s], log"))
        .draw()?;
    let n = t.flows.len();
    for (i, f) in t.flows.iter().enumerate() {
        let color = Palette99::pick(i).mix(0.45);
        let pts = t.t_ms.iter().zip(f).map(|(&x, &v)| (x, lift(v)));
        let s = c.draw_series(LineSeries::new(pts, color.stroke_width(1)))?;
        if i == 0 {
            s.label(format!("each of the {n} flows"))
                .legend(swatch(Palette99::pick(0).mix(0.45)));
        }
    }
    let line = |v: &[Option<f64>]| -> Vec<(f64, f64)> {
        t.t_ms
            .iter()
            .zip(v)
            .filter_map(|(&x, v)| v.map(|v| (x, lift(v))))
            .collect()
    };
    c.draw_series(LineSeries::new(
        t.t_ms.iter().zip(&t.total).map(|(&x, &v)| (x, lift(v))),
        BLACK.stroke_width(2),
    ))?
    .label("total")
    .legend(swatch(BLACK));
    c.draw_series(LineSeries::new(line(&t.mean), BLUE.stroke_width(3)))?
        .label("mean of the flows sending")
        .legend(swatch(BLUE));
    c.draw_series(DashedLineSeries::new(
        line(&t.fair),
        8,
        5,
        RED.stroke_width(2),
    ))?
    .label(format!(
        "fair share: {} Gb/s over the flows sending",
        run.rate_gbps
    ))
    .legend(swatch(RED));
    legend(&mut c, SeriesLabelPosition::UpperRight)?;

    let kib = |b: u64| b as f64 / 1024.0;
    let peak = t.queue_kib.iter().copied().fold(0.0, f64::max);
    let mut q = ChartBuilder::on(&bottom)
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(xs.clone(), 0.0..kib(run.buffer_bytes).max(peak) * 1.15)?;
    q.configure_mesh()
        .x_desc("time after the writes were posted [ms]")
        .y_desc(format!("bottleneck queue, most per {bin_us} us bin [KiB]"))
        .draw()?;
    let level = |y: f64| [(xs.start, y), (xs.end, y)];
    q.draw_series(LineSeries::new(
        level(kib(run.buffer_bytes)),
        RED.stroke_width(2),
    ))?
    .label(format!("buffer {} KiB", run.buffer_bytes >> 10))
    .legend(swatch(RED));
    let orange = RGBColor(230, 140, 0);
    q.draw_series(DashedLineSeries::new(
        level(kib(run.ecn_bytes)),
        8,
        5,
        orange.stroke_width(2),
    ))?
    .label(format!(
        "ECN threshold {} KiB{}",
        run.ecn_bytes >> 10,
        if run.ecn {
            ""
        } else {
            " (unused: frames not ECN-capable)"
        }
    ))
    .legend(swatch(orange));
    if let Some(ns) = run.target_ns.filter(|_| run.cc) {
        let bytes = (ns as f64 * run.rate_gbps / 8.0) as u64;
        q.draw_series(DashedLineSeries::new(
            level(kib(bytes)),
            3,
            4,
            GREEN.stroke_width(2),
        ))?
        .label(format!(
            "target delay {} us: {:.1} KiB at the line rate",
            ns / 1000,
            kib(bytes)
        ))
        .legend(swatch(GREEN));
    }
    q.draw_series(LineSeries::new(
        t.t_ms.iter().copied().zip(t.queue_kib.iter().copied()),
        BLUE.stroke_width(2),
    ))?
    .label("queue depth")
    .legend(swatch(BLUE));
    // Between a queue kept short and one held at the buffer.
    legend(&mut q, SeriesLabelPosition::MiddleLeft)
}

fn bars<DB: DrawingBackend>(
    a: &DrawingArea<DB, Shift>,
    (what, dep, raw): &(String, f64, f64),
) -> Res
where
    DB::ErrorType: 'static,
{
    let top = dep.max(*raw) * 1.3 + 1e-9;
    let mut c = ChartBuilder::on(a)
        .caption(what, ("sans-serif", 14))
        .margin(8)
        .x_label_area_size(10)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..2.0, 0.0..top)?;
    c.configure_mesh().disable_x_mesh().x_labels(0).draw()?;
    for (i, (v, color, who)) in [
        (*dep, BLUE, "deposit"),
        (*raw, RGBColor(128, 128, 128), "raw DPDK"),
    ]
    .into_iter()
    .enumerate()
    {
        let x = i as f64;
        let shown = match v {
            v if v < 10.0 => format!("{v:.3}"),
            v if v < 1000.0 => format!("{v:.1}"),
            v => format!("{v:.0}"),
        };
        c.draw_series([Rectangle::new(
            [(x + 0.2, 0.0), (x + 0.8, v)],
            color.filled(),
        )])?;
        c.draw_series([Text::new(
            format!("{who} {shown}"),
            (x + 0.2, v + top * 0.08),
            ("sans-serif", 14),
        )])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_picture_draws_into_svg_and_png() {
        if std::fs::metadata(FONT).is_err() {
            eprintln!("skipped: no {FONT}");
            return;
        }
        let dir = std::env::temp_dir().join(format!("ddperf-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let s: Vec<f64> = (1..=1000)
            .map(|i| 1.0 + (i as f64 / 100.0).powi(2) / 10.0)
            .collect();
        let one = [(32, s.clone())];
        let many = [(2, s.clone()), (64, s.iter().map(|v| v * 2.0).collect())];
        let bw = [(2, 10.0, 5.0), (1024, 3000.0, 3.0)];
        let rows = [
            ("a [Mpps]".to_string(), 3.0, 5.0),
            ("b [us]".to_string(), 1.0, 0.5),
        ];
        let run = IncastRun::parse(crate::incast::tests::RUN).unwrap();
        let figs = [
            Figure::Latency {
                title: "t",
                rounds: &one,
            },
            Figure::Latency {
                title: "t",
                rounds: &many,
            },
            Figure::Bandwidth {
                title: "t",
                unit: "MiB/s",
                rows: &bw,
            },
            Figure::Bench { rows: &rows },
            Figure::Incast { run: &run },
        ];
        for (i, f) in figs.iter().enumerate() {
            for ext in ["svg", "png"] {
                let path = dir.join(format!("{i}.{ext}"));
                save(&path, f).unwrap();
                assert!(
                    std::fs::metadata(&path).unwrap().len() > 1000,
                    "{}",
                    path.display()
                );
            }
        }
        assert!(save(&dir.join("x.pdf"), &figs[0]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
