//! One boot under `qemu-system-x86_64`: the console (the guest's serial port) read line by
//! line into a log, guard's own lines echoed, the report line parsed, and the guest killed
//! when it overruns its time.

use std::{
    fs,
    io::{BufRead as _, BufReader, Write as _},
    path::Path,
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use super::{VmOptions, guest::REPORT};

/// The kernel's command line: the console on the serial port, a panic ends the guest (with
/// `-no-reboot`), and this binary is `/init`.
const APPEND: &str = "console=ttyS0 panic=-1 loglevel=4 rdinit=/init";

/// Boots `image` with `initrd`; the guest's report, `None` when it powered off without one.
pub fn boot(image: &Path, initrd: &Path, log: &Path, opts: &VmOptions) -> Result<Option<Value>> {
    let cpu = match opts.accel.as_str() {
        "tcg" => "max",
        "kvm" => "host",
        other => bail!("--accel {other}: tcg or kvm"),
    };
    let mut child = Command::new("qemu-system-x86_64")
        .args([
            "-accel",
            &opts.accel,
            "-cpu",
            cpu,
            "-m",
            "2048",
            "-smp",
            "2",
        ])
        .args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-serial",
            "stdio",
        ])
        .args(["-no-reboot", "-kernel"])
        .arg(image)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", APPEND])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running qemu-system-x86_64 (`cargo xtask setup` installs it)")?;
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().context("qemu's stdout")?;
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut console = fs::File::create(log).with_context(|| format!("{}", log.display()))?;
    let deadline = Instant::now() + Duration::from_secs(opts.timeout);
    let mut report = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let line = line.trim_end_matches('\r');
                writeln!(console, "{line}")?;
                if let Some(json) = line.strip_prefix(REPORT) {
                    report = serde_json::from_str(json).ok();
                } else if opts.verbose || line.starts_with("GUARD-VM") || line.contains("panic") {
                    println!("    {line}");
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // Our own child, by its pid.
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "timed out after {} s (console: {})",
                    opts.timeout,
                    log.display()
                );
            }
        }
    }
    let out = child.wait_with_output().context("waiting for qemu")?;
    if !out.status.success() && report.is_none() {
        bail!(
            "qemu failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(report)
}
