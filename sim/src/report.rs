//! The report folder of a run: `report.md` (header, notes, tables, plot links),
//! `sessions.csv` (one row per request), `summary.csv` (every table's rows) and PNG plots.
//!
//! Runner-agnostic on purpose: the simulator fills a [`Report`] from virtual time, and
//! `vigil lab` can fill the same structure from real processes' measurements (the `mode`
//! and the notes say which), so both produce folders a reader compares side by side.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Once;

use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use image::{ColorType, ImageEncoder};
use plotters::prelude::*;
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("creating report folder {0}: {1}")]
    Dir(PathBuf, std::io::Error),
    #[error("writing {0}: {1}")]
    Write(PathBuf, std::io::Error),
    #[error("writing {0}: {1}")]
    Csv(PathBuf, csv::Error),
    #[error("plotting {0}: {1}")]
    Plot(PathBuf, String),
}

/// A table of the report (Markdown in `report.md`, CSV rows in `summary.csv`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// One line of a plot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line plot, written as `<file>.png`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plot {
    /// File stem (no extension), e.g. `response_mean`.
    pub file: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

/// One request as a client saw it: the raw material of every figure.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SessionRow {
    /// The compared arm (policy) this request ran under.
    pub policy: String,
    /// The ramp step, sweep rate or phase the request fell in.
    pub step: String,
    /// The session's id within its arm (u64::MAX for a rejected request in `vod`).
    pub session: u64,
    pub client: u64,
    pub camera: String,
    /// Requested recording time (ms since the epoch), or 0 for live.
    pub time_ms: i64,
    /// Seconds since the run's start (virtual or wall).
    pub requested_s: f64,
    /// Empty when rejected.
    pub node: String,
    pub rejected: bool,
    /// Request sent → first keyframe received, redirect included (ms); empty if rejected.
    pub response_ms: Option<f64>,
    pub redirected: bool,
    /// The first segment came from the node's cache.
    pub first_hit: bool,
    pub scale: f64,
    pub migrations: u32,
    /// Playback stalled waiting for storage (ms).
    pub stall_ms: f64,
    pub ended_s: Option<f64>,
}

/// A whole report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub title: String,
    pub scenario: String,
    /// "simulation" or "lab".
    pub mode: String,
    pub seed: u64,
    /// The command that produced it.
    pub command: String,
    /// Paragraphs: paper, scaling, storage emulation, machine, calibration.
    pub notes: Vec<(String, String)>,
    pub tables: Vec<Table>,
    pub plots: Vec<Plot>,
    pub sessions: Vec<SessionRow>,
}

/// What [`Report::write`] wrote, relative to the folder.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    pub dir: PathBuf,
    pub files: Vec<String>,
}

impl Table {
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "| {} |", self.columns.join(" | "));
        let _ = writeln!(
            s,
            "|{}",
            self.columns.iter().map(|_| "---|").collect::<String>()
        );
        for r in &self.rows {
            let _ = writeln!(s, "| {} |", r.join(" | "));
        }
        s
    }
}

/// One run of the "Simulator speed" table.
pub struct Speed {
    pub arm: String,
    pub simulated_s: f64,
    pub wall_s: f64,
    pub events: u64,
}

impl Table {
    /// Simulated time against wall time per run: the simulator's throughput.
    pub fn speed(runs: &[Speed]) -> Table {
        Table {
            title: "Simulator speed".into(),
            columns: [
                "policy",
                "simulated",
                "wall",
                "events",
                "simulated h / wall s",
            ]
            .map(String::from)
            .to_vec(),
            rows: runs
                .iter()
                .map(|r| {
                    vec![
                        r.arm.clone(),
                        format!("{:.0} s", r.simulated_s),
                        format!("{:.2} s", r.wall_s),
                        r.events.to_string(),
                        format!("{:.4}", r.simulated_s / 3600.0 / r.wall_s.max(1e-9)),
                    ]
                })
                .collect(),
        }
    }
}

impl Report {
    /// A simulation's report of `sc`: its title, scenario, seed and command filled in.
    pub fn simulation(sc: &crate::scenario::Scenario, command: &str) -> Report {
        Report {
            title: format!("{}: {}", sc.name, sc.description),
            scenario: sc.name.clone(),
            mode: "simulation".into(),
            seed: sc.seed,
            command: command.into(),
            ..Report::default()
        }
    }

    /// The Markdown of `report.md`.
    pub fn markdown(&self) -> String {
        let mut s = format!("# {}\n\n", self.title);
        let _ = writeln!(
            s,
            "Scenario `{}`, {} run, seed {}.\n\n```sh\n{}\n```\n",
            self.scenario, self.mode, self.seed, self.command
        );
        for (head, text) in &self.notes {
            let _ = writeln!(s, "**{head}.** {text}\n");
        }
        for t in &self.tables {
            let _ = writeln!(s, "## {}\n\n{}", t.title, t.markdown());
        }
        if !self.plots.is_empty() {
            let _ = writeln!(s, "## Plots\n");
            for p in &self.plots {
                let _ = writeln!(s, "![{}]({}.png)\n", p.title, p.file);
            }
        }
        let _ = writeln!(
            s,
            "Raw data: `sessions.csv` ({} requests), `summary.csv` (the tables above).",
            self.sessions.len()
        );
        s
    }

    /// Writes the folder (created if missing; files in it are replaced).
    pub fn write(&self, dir: &Path) -> Result<Written, ReportError> {
        std::fs::create_dir_all(dir).map_err(|e| ReportError::Dir(dir.to_path_buf(), e))?;
        let mut files = Vec::new();
        let md = dir.join("report.md");
        std::fs::write(&md, self.markdown()).map_err(|e| ReportError::Write(md.clone(), e))?;
        files.push("report.md".to_string());

        let path = dir.join("sessions.csv");
        let mut w = csv::Writer::from_path(&path).map_err(|e| ReportError::Csv(path.clone(), e))?;
        for r in &self.sessions {
            w.serialize(r)
                .map_err(|e| ReportError::Csv(path.clone(), e))?;
        }
        if self.sessions.is_empty() {
            // A header even with no rows, so a reader always finds the columns.
            w.serialize(SessionRow::default())
                .map_err(|e| ReportError::Csv(path.clone(), e))?;
        }
        w.flush().map_err(|e| ReportError::Write(path.clone(), e))?;
        files.push("sessions.csv".to_string());

        let path = dir.join("summary.csv");
        let mut w = csv::WriterBuilder::new()
            .flexible(true)
            .from_path(&path)
            .map_err(|e| ReportError::Csv(path.clone(), e))?;
        for t in &self.tables {
            let mut head = vec!["table".to_string()];
            head.extend(t.columns.iter().cloned());
            w.write_record(&head)
                .map_err(|e| ReportError::Csv(path.clone(), e))?;
            for r in &t.rows {
                let mut row = vec![t.title.clone()];
                row.extend(r.iter().cloned());
                w.write_record(&row)
                    .map_err(|e| ReportError::Csv(path.clone(), e))?;
            }
        }
        w.flush().map_err(|e| ReportError::Write(path.clone(), e))?;
        files.push("summary.csv".to_string());

        for p in &self.plots {
            let name = format!("{}.png", p.file);
            let path = dir.join(&name);
            draw(p, &path).map_err(|e| ReportError::Plot(path.clone(), e))?;
            files.push(name);
        }
        Ok(Written {
            dir: dir.to_path_buf(),
            files,
        })
    }
}

const FONT: &str = "sans-serif";

/// Registers the embedded font once per process (plotters' `ab_glyph` font table).
fn font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The bytes are a known-good TTF shipped by the `dejavu` crate; a failure would
        // only lose the text, and `draw` reports any drawing error.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
    });
}

/// Distinct, print-safe line colours (Okabe–Ito).
const COLOURS: [RGBColor; 6] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
];

fn draw(p: &Plot, path: &Path) -> Result<(), String> {
    font();
    let pts = p.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, y) in pts {
        if x.is_finite() && y.is_finite() {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y1 = y1.max(y);
        }
    }
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 > 0.0 { y1 * 1.1 } else { 1.0 };
    let mut rgb = vec![0u8; (W * H * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (W, H)).into_drawing_area();
        chart(p, &root, (x0, x1, y1))?;
        root.present().map_err(|e| e.to_string())?;
    }
    let file = std::fs::File::create(path).map_err(|e| e.to_string())?;
    let enc = PngEncoder::new_with_quality(
        std::io::BufWriter::new(file),
        CompressionType::Best,
        FilterType::Adaptive,
    );
    enc.write_image(&rgb, W, H, ColorType::Rgb8)
        .map_err(|e| e.to_string())
}

const W: u32 = 720;
const H: u32 = 420;

fn chart(
    p: &Plot,
    root: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    (x0, x1, y1): (f64, f64, f64),
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(root)
        .caption(&p.title, (FONT, 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, 0.0..y1)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(p.x_label.as_str())
        .y_desc(p.y_label.as_str())
        .label_style((FONT, 13))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, s) in p.series.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&(x, y)| Circle::new((x, y), 3, c.filled())))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .label_font((FONT, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_complete_folder() {
        let dir = tempfile::tempdir().unwrap();
        let r = Report {
            title: "t".into(),
            scenario: "s".into(),
            mode: "simulation".into(),
            seed: 3,
            command: "vigil sim s".into(),
            notes: vec![("Scaling".into(), "none".into())],
            tables: vec![Table {
                title: "Figures".into(),
                columns: vec!["a".into(), "b".into()],
                rows: vec![vec!["1".into(), "2".into()]],
            }],
            plots: vec![Plot {
                file: "p".into(),
                title: "P".into(),
                x_label: "x".into(),
                y_label: "y".into(),
                series: vec![Series {
                    name: "one".into(),
                    points: vec![(0.0, 1.0), (1.0, 3.0)],
                }],
            }],
            sessions: vec![SessionRow {
                policy: "least-load".into(),
                response_ms: Some(12.5),
                ..SessionRow::default()
            }],
        };
        let w = r.write(dir.path()).unwrap();
        assert_eq!(
            w.files,
            vec!["report.md", "sessions.csv", "summary.csv", "p.png"]
        );
        let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
        assert!(md.contains("| a | b |\n|---|---|\n| 1 | 2 |"), "{md}");
        assert!(md.contains("![P](p.png)"));
        let csv = std::fs::read_to_string(dir.path().join("sessions.csv")).unwrap();
        assert!(csv.starts_with("policy,step,session,"), "{csv}");
        assert!(csv.contains("least-load,,0,0,,0,0.0,,false,12.5,"), "{csv}");
        let png = std::fs::read(dir.path().join("p.png")).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert!(
            png.len() > 2000,
            "a plot with text and lines: {} bytes",
            png.len()
        );
    }
}
