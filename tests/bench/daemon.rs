//! A real guardd for the benchmarks, started the way the end-to-end tests start it: a private
//! socket, audit log and cgroup; stopped (SIGTERM, drained, reaped) on drop.

use std::{
    os::unix::{fs::PermissionsExt as _, net::UnixStream},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

/// A unique name for what a run creates (cgroups, directories).
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::AtomicU32;
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A temporary directory that guard-tool can traverse (mode 0755), removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> Result<Self> {
        let path = std::env::temp_dir().join(unique(prefix));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        Ok(Self(path))
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct Guardd {
    child: Child,
    pub socket: PathBuf,
    pub audit: PathBuf,
    // Last: removed after the daemon has stopped.
    _dir: TempDir,
}

impl Guardd {
    /// Starts guardd from `bin_dir` with `policy` (TOML text) and waits until its socket answers.
    pub fn start(bin_dir: &Path, policy: &str, extra: &[&str]) -> Result<Self> {
        let dir = TempDir::new("guard-bench-daemon")?;
        let policy_path = dir.join("policy.toml");
        std::fs::write(&policy_path, policy)?;
        let socket = dir.join("guard.sock");
        let audit = dir.join("audit.jsonl");
        let child = Command::new(bin_dir.join("guardd"))
            .arg("--policy")
            .arg(&policy_path)
            .arg("--socket")
            .arg(&socket)
            .arg("--audit")
            .arg(&audit)
            .arg("--cgroup")
            .arg(unique("guard-bench"))
            // The bench's tools write beside the log, in a temporary directory.
            .arg("--allow-writes-on-audit-fs")
            .args(extra)
            .env("RUST_LOG", "warn")
            .spawn()
            .context("spawning guardd")?;
        let mut guardd = Self {
            child,
            socket,
            audit,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while UnixStream::connect(&guardd.socket).is_err() {
            if let Some(status) = guardd.child.try_wait()? {
                bail!("guardd exited at start: {status}");
            }
            if Instant::now() > deadline {
                bail!("guardd did not listen within 20 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(guardd)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops guardd with SIGTERM (it drains its calls) and reaps it.
    pub fn stop(&mut self) -> Result<ExitStatus> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        // SAFETY: kill(2) on our own child's pid, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        Ok(self.child.wait()?)
    }

    /// The audit rows of `kind`.
    pub fn audit_rows(&self, kind: &str) -> Result<usize> {
        let text = std::fs::read_to_string(&self.audit)?;
        let mut n = 0;
        for line in text.lines() {
            let row: serde_json::Value = serde_json::from_str(line).context("audit row")?;
            n += usize::from(row["kind"] == kind);
        }
        Ok(n)
    }

    /// The stage timings of `tool`'s finished rows, each in the order guardd recorded them.
    pub fn stage_timings(&self, tool: &str) -> Result<Vec<guard::call::stages::Stages>> {
        #[derive(serde::Deserialize)]
        struct Finished {
            kind: String,
            tool: Option<String>,
            timings_us: Option<guard::call::stages::Stages>,
        }
        let text = std::fs::read_to_string(&self.audit)?;
        let mut out = Vec::new();
        for line in text.lines() {
            let row: Finished = serde_json::from_str(line).context("audit row")?;
            if row.kind == "finished" && row.tool.as_deref() == Some(tool) {
                out.extend(row.timings_us);
            }
        }
        Ok(out)
    }
}

impl Drop for Guardd {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Resident set size of `pid` in KiB (VmRSS), 0 if it is gone.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Samples a process's RSS every 10 ms until dropped, keeping the peak.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl RssSampler {
    pub fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(rss_kib(pid)));
        let thread = {
            let (stop, peak) = (stop.clone(), peak.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        Self {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    /// Stops sampling; the peak in KiB.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
