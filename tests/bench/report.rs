//! The report: one row per metric, guard next to its baseline from the same run, printed as a
//! table and written as JSON.

use std::{fmt::Write as _, path::Path};

use serde_json::{Value, json};

/// What a metric must reach.
#[derive(Clone, Copy, Debug)]
pub enum Goal {
    /// Reported to explain other rows (a stage's time, a peer's), not counted among the goals.
    Info,
    /// guard ≤ this.
    AtMost(f64),
    /// guard ≥ this.
    AtLeast(f64),
    /// guard == this.
    Exactly(f64),
    /// guard / baseline ≤ this.
    RatioAtMost(f64),
}

pub struct Row {
    pub metric: String,
    pub unit: &'static str,
    pub guard: f64,
    /// The baseline's name and value, measured in the same run.
    pub baseline: Option<(String, f64)>,
    pub goal: Goal,
    pub note: String,
}

impl Row {
    pub fn new(metric: impl Into<String>, unit: &'static str, guard: f64) -> Self {
        Self {
            metric: metric.into(),
            unit,
            guard,
            baseline: None,
            goal: Goal::Info,
            note: String::new(),
        }
    }

    pub fn baseline(mut self, name: impl Into<String>, value: f64) -> Self {
        self.baseline = Some((name.into(), value));
        self
    }

    pub fn goal(mut self, goal: Goal) -> Self {
        self.goal = goal;
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    /// guard / baseline.
    pub fn ratio(&self) -> Option<f64> {
        self.baseline
            .as_ref()
            .filter(|(_, b)| *b > 0.0)
            .map(|(_, b)| self.guard / b)
    }

    pub fn met(&self) -> Option<bool> {
        match self.goal {
            Goal::Info => None,
            Goal::AtMost(x) => Some(self.guard <= x),
            Goal::AtLeast(x) => Some(self.guard >= x),
            Goal::Exactly(x) => Some(self.guard == x),
            Goal::RatioAtMost(x) => self.ratio().map(|r| r <= x),
        }
    }

    fn goal_text(&self) -> String {
        match self.goal {
            Goal::Info => "info".into(),
            Goal::AtMost(x) => format!("<= {}", num(x, self.unit)),
            Goal::AtLeast(x) => format!(">= {}", num(x, self.unit)),
            Goal::Exactly(x) => format!("= {}", num(x, self.unit)),
            Goal::RatioAtMost(x) => format!("ratio <= {x}"),
        }
    }
}

/// A value with its unit, to about three significant digits.
fn num(v: f64, unit: &str) -> String {
    let digits = if v == 0.0 || v.abs() >= 100.0 {
        0
    } else if v.abs() >= 10.0 {
        1
    } else {
        2
    };
    if unit.is_empty() {
        format!("{v:.digits$}")
    } else {
        format!("{v:.digits$} {unit}")
    }
}

pub struct Report {
    pub rows: Vec<Row>,
    /// What could not be measured, and why.
    pub skipped: Vec<String>,
}

impl Report {
    /// (goals met, goals): informational rows are not counted; a goal without its baseline
    /// (a peer that could not run) counts as missed.
    pub fn score(&self) -> (usize, usize) {
        let goals = self.rows.iter().filter(|r| !matches!(r.goal, Goal::Info));
        let (met, all) = goals.fold((0, 0), |(m, n), r| {
            (m + usize::from(r.met() == Some(true)), n + 1)
        });
        (met, all)
    }

    pub fn table(&self) -> String {
        let header = ["metric", "guard", "baseline", "ratio", "goal", "met?"];
        let cells: Vec<[String; 6]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    r.metric.clone(),
                    num(r.guard, r.unit),
                    r.baseline.as_ref().map_or("-".into(), |(name, v)| {
                        format!("{} ({name})", num(*v, r.unit))
                    }),
                    r.ratio().map_or("-".into(), |x| format!("{x:.2}x")),
                    r.goal_text(),
                    match r.met() {
                        None if matches!(r.goal, Goal::Info) => "-".into(),
                        None => "NO (no baseline)".into(),
                        Some(true) => "yes".into(),
                        Some(false) => "NO".into(),
                    },
                ]
            })
            .collect();
        let mut width = header.map(str::len);
        for row in &cells {
            for (w, c) in width.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        let line = |out: &mut String, row: &[String]| {
            let mut l = String::from("|");
            for (c, w) in row.iter().zip(width) {
                let pad = w - c.chars().count();
                let _ = write!(l, " {c}{} |", " ".repeat(pad));
            }
            out.push_str(&l);
            out.push('\n');
        };
        line(&mut out, &header.map(String::from));
        line(&mut out, &width.map(|w| "-".repeat(w)));
        for row in &cells {
            line(&mut out, row);
        }
        let notes: Vec<_> = self.rows.iter().filter(|r| !r.note.is_empty()).collect();
        if !notes.is_empty() {
            out.push_str("\nnotes:\n");
            for r in notes {
                let _ = writeln!(out, "  {}: {}", r.metric, r.note);
            }
        }
        for s in &self.skipped {
            let _ = writeln!(out, "skipped: {s}");
        }
        let (met, goals) = self.score();
        let _ = writeln!(
            out,
            "goals met: {met} of {goals} (informational rows not counted)"
        );
        out
    }

    pub fn json(&self, quick: bool) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                json!({
                    "metric": r.metric,
                    "unit": r.unit,
                    "guard": r.guard,
                    "baseline": r.baseline.as_ref().map(|(_, v)| *v),
                    "baseline_name": r.baseline.as_ref().map(|(n, _)| n),
                    "ratio": r.ratio(),
                    "goal": r.goal_text(),
                    "met": r.met(),
                    "informational": matches!(r.goal, Goal::Info),
                    "note": r.note,
                })
            })
            .collect();
        json!({
            "quick": quick,
            "commit": commit(),
            "host": {
                "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
                "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease")
                    .unwrap_or_default().trim(),
                "cpu": cpu_model(),
            },
            "goals": {"met": self.score().0, "of": self.score().1},
            "rows": rows,
            "skipped": self.skipped,
        })
    }

    pub fn write(&self, path: &Path, quick: bool) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let text =
            serde_json::to_string_pretty(&self.json(quick)).map_err(std::io::Error::other)?;
        std::fs::write(path, text + "\n")
    }
}

/// The commit the bench ran at (`git rev-parse --short HEAD` of this checkout), `-dirty` when
/// tracked files differ from it; None outside a git checkout. The book's performance page
/// prints it beside the numbers (`cargo xtask docs`).
fn commit() -> Option<String> {
    let dir = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let head = git(&["rev-parse", "--short", "HEAD"])?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}

/// The CPU's model name, from /proc/cpuinfo.
fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("model name"))?;
    Some(line.split_once(':')?.1.trim().to_owned())
}

/// Median and 99th percentile (nearest rank) of `samples`, which it sorts.
pub fn p50_p99(samples: &mut [f64]) -> (f64, f64) {
    if samples.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    samples.sort_by(f64::total_cmp);
    let rank = |p: f64| {
        let i = ((p * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
        samples[i - 1]
    };
    (rank(0.50), rank(0.99))
}

/// The median of `samples`, which it sorts.
pub fn median(samples: &mut [f64]) -> f64 {
    p50_p99(samples).0
}
