//! What the OTLP export (`guardd --otlp-endpoint`) costs a call: `guard-exec true` through a
//! guardd exporting every row and event to a loopback receiver, against the same through a
//! guardd without export, both up at once and called in turn, so both see the same noise. And
//! what the export carries per call: audit rows, their bytes, the bytes of the requests.

use std::{
    io::{Read as _, Write as _},
    net::{Ipv4Addr, TcpListener, TcpStream},
    path::Path,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::{Result, bail};

use crate::{
    Scale,
    daemon::Guardd,
    report::{Goal, Report, Row, p50_p99},
    time_run,
};

/// `/bin/true` as a tool.
const POLICY: &str = "[tools.true]\ntier = \"low\"\ncommand = [\"/bin/true\"]\n";

/// A loopback OTLP/HTTP receiver that takes every request, answers 200 and counts requests and
/// body bytes, until dropped.
struct Receiver {
    port: u16,
    requests: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Receiver {
    fn start() -> Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        let (requests, bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (requests, bytes, stop) = (requests.clone(), bytes.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok((mut s, _)) = listener.accept() else {
                        continue;
                    };
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    if let Some(n) = read_request(&mut s) {
                        requests.fetch_add(1, Ordering::Relaxed);
                        bytes.fetch_add(n as u64, Ordering::Relaxed);
                        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
                    }
                }
            })
        };
        Ok(Self {
            port,
            requests,
            bytes,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept so the thread sees the flag.
        let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads one request to the end of its body; the body's length.
fn read_request(s: &mut TcpStream) -> Option<usize> {
    let (mut buf, mut chunk) = (Vec::new(), [0u8; 16384]);
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|n| n.trim().parse().ok())?;
            if buf.len() >= end + 4 + length {
                return Some(length);
            }
        }
        let n = s.read(&mut chunk).ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// `launch with OTLP export`: the launch row with export on against export off.
pub fn launch_with_export(bin_dir: &Path, scale: &Scale, report: &mut Report) -> Result<()> {
    let receiver = Receiver::start()?;
    let url = format!("http://127.0.0.1:{}", receiver.port);
    let off = Guardd::start(bin_dir, POLICY, &[])?;
    let on = Guardd::start(bin_dir, POLICY, &["--otlp-endpoint", &url])?;
    let exec = |g: &Guardd| {
        let mut c = Command::new(bin_dir.join("guard-exec"));
        c.arg("--socket").arg(&g.socket).arg("true");
        c
    };
    // One unmeasured run each: warms caches.
    time_run(&mut exec(&off))?;
    time_run(&mut exec(&on))?;
    let (mut s_off, mut s_on) = (Vec::new(), Vec::new());
    for round in 0..scale.launch_runs {
        // Each goes first every other round.
        if round % 2 == 0 {
            s_off.push(time_run(&mut exec(&off))?);
            s_on.push(time_run(&mut exec(&on))?);
        } else {
            s_on.push(time_run(&mut exec(&on))?);
            s_off.push(time_run(&mut exec(&off))?);
        }
    }
    let calls = scale.launch_runs + 1;
    // The export's last batch waits for more records for 200 ms before it goes.
    std::thread::sleep(Duration::from_secs(1));
    let (requests, bytes) = (
        receiver.requests.load(Ordering::Relaxed),
        receiver.bytes.load(Ordering::Relaxed),
    );
    if requests == 0 {
        bail!("guardd exported nothing to {url}");
    }
    let (rows, row_bytes) = audit(&on.audit)?;
    let ((off50, _), (on50, _)) = (p50_p99(&mut s_off), p50_p99(&mut s_on));
    report.rows.push(
        Row::new(
            "launch with OTLP export p50 vs export off",
            "ms",
            on50 / 1e3,
        )
        .baseline("export off", off50 / 1e3)
        .goal(Goal::RatioAtMost(1.05))
        .note(format!(
            "guard-exec true through two guardds up at once, called in turn, {} runs each; \
                 every row and event exported to a loopback receiver answering 200 ({requests} \
                 requests)",
            scale.launch_runs
        )),
    );
    let per_call = |n: f64| n / calls as f64;
    report.rows.push(
        Row::new(
            "OTLP export: audit rows per call",
            "rows",
            per_call(rows as f64),
        )
        .note("`guard-exec true`: its decision and finished rows"),
    );
    report.rows.push(
        Row::new(
            "OTLP export: bytes per audit row",
            "B",
            row_bytes as f64 / rows.max(1) as f64,
        )
        .note("the rows' lines as written, each a record's body"),
    );
    report.rows.push(
        Row::new(
            "OTLP export: request bytes per call",
            "B",
            per_call(bytes as f64),
        )
        .note("protobuf bodies POSTed: the rows and the bus's events (decision, launch, exit)"),
    );
    Ok(())
}

/// Rows in the audit log at `path`, and their bytes.
fn audit(path: &Path) -> Result<(usize, usize)> {
    let text = std::fs::read_to_string(path)?;
    Ok((text.lines().count(), text.len()))
}
