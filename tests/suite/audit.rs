//! The audit log, end to end: the library writing and `guardctl audit verify` checking.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
};

use guard::audit::{self, AuditError, AuditLog, Options, chain};
use serde_json::{Map, Value, json};

use super::support;

/// A directory removed when the test ends, however it ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(support::unique(&format!("guard-audit-{name}")));
        fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }

    fn log(&self) -> PathBuf {
        self.0.join("audit.jsonl")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn row(i: u64) -> Map<String, Value> {
    let v = json!({
        "kind": "decision",
        "call_id": format!("call-{i}"),
        "peer": {"pid": 4242, "uid": 1000, "gid": 1000},
        "tool": "bash",
        "args": ["-c", "ls -l"],
        "note": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!("literal object"),
    }
}

fn write_rows(options: Options, n: u64) -> audit::Appended {
    let log = AuditLog::open(options).expect("open");
    let mut last = None;
    for i in 0..n {
        last = Some(log.append_blocking(row(i)).expect("append"));
    }
    last.expect("n > 0")
}

/// Runs `guardctl audit verify FILE`: (exit code, stdout).
fn guardctl_verify(file: &Path) -> (i32, String) {
    let out = Command::new(support::bin("guardctl"))
        .args(["audit", "verify"])
        .arg(file)
        .output()
        .expect("run guardctl");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    (
        out.status
            .code()
            .unwrap_or_else(|| panic!("guardctl killed; stderr: {stderr}")),
        stdout,
    )
}

/// Byte offset where each line of `bytes` starts.
fn line_starts(bytes: &[u8]) -> Vec<usize> {
    std::iter::once(0)
        .chain(
            bytes
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        )
        .collect()
}

#[test]
fn thousand_rows_from_concurrent_tasks_verify() {
    let dir = TempDir::new("thousand");
    let log = Arc::new(AuditLog::open(Options::new(dir.log())).expect("open"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let tasks: Vec<_> = (0..50u64)
            .map(|t| {
                let log = log.clone();
                tokio::spawn(async move {
                    for i in 0..20 {
                        log.append(row(t * 20 + i)).await.expect("append");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
    });
    let stats = log.stats();
    assert_eq!(stats.rows, 1000);
    assert!(
        stats.syncs < stats.rows,
        "rows did not share syncs: {stats:?}"
    );

    // Nothing else queued: a lone append is synced at once, by exactly one fdatasync.
    let last = log.append_blocking(row(1000)).expect("lone append");
    assert_eq!(last.seq, 1000);
    assert_eq!(log.stats().syncs, stats.syncs + 1);

    let (code, out) = guardctl_verify(&dir.log());
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.trim(),
        format!("ok: 1001 rows in 1 files, last hash {}", last.hash)
    );
    let seqs: Vec<u64> = audit::read_rows(&dir.log())
        .expect("read")
        .map(|r| r.expect("row")["seq"].as_u64().expect("seq"))
        .collect();
    assert_eq!(seqs, (0..1001).collect::<Vec<_>>());
}

#[test]
fn a_flipped_byte_is_reported_at_its_line() {
    let dir = TempDir::new("flip");
    write_rows(Options::new(dir.log()), 100);
    let mut bytes = fs::read(dir.log()).expect("read");
    let starts = line_starts(&bytes);
    // An `x` of the note on line 50 (seq 49): the row still parses, its hash no longer holds.
    let line = &bytes[starts[49]..starts[50]];
    let at = starts[49] + line.windows(4).position(|w| w == b"xxxx").expect("note") + 2;
    bytes[at] = b'y';
    fs::write(dir.log(), &bytes).expect("write");

    let (code, out) = guardctl_verify(&dir.log());
    assert_eq!(code, 1, "{out}");
    let expected = format!(
        "broken: {}:50 (seq 49): row hashes to ",
        dir.log().display()
    );
    assert!(out.starts_with(&expected), "{out}");
}

#[test]
fn a_torn_tail_is_cut_at_reopen_and_the_chain_goes_on() {
    let dir = TempDir::new("torn");
    write_rows(Options::new(dir.log()), 5);
    let bytes = fs::read(dir.log()).expect("read");
    let starts = line_starts(&bytes);
    // Half of a real row, as a crash in the middle of a write leaves it.
    let half = &bytes[starts[2]..starts[2] + (starts[3] - starts[2]) / 2];
    let mut torn = bytes.clone();
    torn.extend_from_slice(half);
    fs::write(dir.log(), &torn).expect("write");

    let log = AuditLog::open(Options::new(dir.log())).expect("reopen");
    assert_eq!(log.recovery().truncated_bytes, half.len() as u64);
    assert_eq!(log.recovery().last_seq, Some(4));
    assert_eq!(
        fs::read(dir.log()).expect("read"),
        bytes,
        "recovery must restore the file"
    );
    assert_eq!(log.append_blocking(row(5)).expect("append").seq, 5);
    drop(log);

    let (code, out) = guardctl_verify(&dir.log());
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("ok: 6 rows in 1 files"), "{out}");
}

#[test]
fn rotation_keeps_the_chain_across_files() {
    let dir = TempDir::new("rotate");
    let options = Options {
        path: dir.log(),
        rotate_bytes: 2000,
        ..Options::new("")
    };
    let last = write_rows(options, 100);
    let rotated = |n: u64| PathBuf::from(format!("{}.{n}", dir.log().display()));
    let files = (1..).take_while(|n| rotated(*n).exists()).count() + 1;
    assert!(files >= 5, "only {files} files");

    let (code, out) = guardctl_verify(&dir.log());
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.trim(),
        format!("ok: 100 rows in {files} files, last hash {}", last.hash)
    );

    // Rewrite the first row of file 3 with another `prev`, and re-hash it so the row is
    // consistent on its own: only the link across the boundary is wrong.
    let text = fs::read_to_string(rotated(3)).expect("read");
    let (first, rest) = text.split_once('\n').expect("a row");
    let mut fields: Map<String, Value> = serde_json::from_str(first).expect("row");
    let seq = fields.remove("seq").and_then(|v| v.as_u64()).expect("seq");
    let ts = fields
        .remove("ts")
        .and_then(|v| v.as_str().map(str::to_owned))
        .expect("ts");
    fields.remove("prev");
    fields.remove("hash");
    let forged = chain::seal(fields, seq, ts, &"f".repeat(64));
    let mut edited = forged.line;
    edited.extend_from_slice(rest.as_bytes());
    fs::write(rotated(3), &edited).expect("write");
    let (code, out) = guardctl_verify(&dir.log());
    assert_eq!(code, 1, "{out}");
    let expected = format!(
        "broken: {}:1 (seq {seq}): prev is ffff",
        rotated(3).display()
    );
    assert!(out.starts_with(&expected), "{out}");

    // Put it back, then drop a middle file: the next file no longer follows.
    fs::write(rotated(3), text).expect("write");
    assert_eq!(guardctl_verify(&dir.log()).0, 0);
    fs::remove_file(rotated(2)).expect("remove");
    let (code, out) = guardctl_verify(&dir.log());
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with(&format!("broken: {}:1 (seq ", rotated(3).display())),
        "{out}"
    );
    assert!(out.contains("expected"), "{out}");
}

#[test]
fn guardctl_verify_exits_2_when_the_log_cannot_be_read() {
    let dir = TempDir::new("missing");
    let (code, out) = guardctl_verify(&dir.log());
    assert_eq!(code, 2, "{out}");
}

/// A tmpfs mounted for one test, unmounted when dropped.
pub(super) struct Tmpfs(TempDir);

impl Tmpfs {
    pub(super) fn mount(size: &str) -> Self {
        let dir = TempDir::new("tmpfs");
        let options = format!("size={size},mode=0700");
        nix::mount::mount(
            Some("tmpfs"),
            &dir.0,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some(options.as_str()),
        )
        .expect("mount tmpfs");
        Self(dir)
    }

    pub(super) fn path(&self) -> &Path {
        &self.0.0
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

#[test]
fn a_full_disk_makes_the_log_unavailable_until_space_returns() {
    if !support::privileged("a_full_disk_makes_the_log_unavailable_until_space_returns") {
        return;
    }
    let fs_ = Tmpfs::mount("64k");
    let path = fs_.0.log();
    // A small reserve, which the log spends first when the disk is full.
    let log = AuditLog::open(Options {
        reserve_bytes: 8 << 10,
        ..Options::new(&path)
    })
    .expect("open");
    let mut written = 0;
    for i in 0..3 {
        log.append_blocking(row(i)).expect("append with space");
        written += 1;
    }

    // Fill the rest of the file system.
    let filler = fs_.0.0.join("filler");
    let chunk = vec![0u8; 4096];
    {
        use std::io::Write as _;
        let mut f = fs::File::create(&filler).expect("filler");
        while f.write_all(&chunk).is_ok() {}
    }

    // Rows may still fit in the log's last page; within a few KiB the disk is full.
    let mut big = row(0);
    big.insert("args".into(), json!(["x".repeat(1500)]));
    let reason = loop {
        match log.append_blocking(big.clone()) {
            Ok(a) => {
                assert_eq!(a.seq, written);
                written += 1;
                assert!(written < 40, "the disk never filled");
            }
            Err(AuditError::Unavailable(reason)) => break reason,
            Err(e) => panic!("expected Unavailable, got {e}"),
        }
    };
    assert!(reason.contains("No space left"), "{reason}");
    // No partial row was left, and the log keeps answering (not wedged).
    let summary = audit::verify(&path).expect("chain intact while full");
    assert_eq!((summary.rows, summary.torn_bytes), (written, 0));
    assert!(matches!(
        log.append_blocking(big.clone()),
        Err(AuditError::Unavailable(_))
    ));

    // Space returns: the next append succeeds and continues the chain.
    fs::remove_file(&filler).expect("free space");
    let a = log
        .append_blocking(big)
        .expect("append after space returned");
    assert_eq!(a.seq, written);
    drop(log);
    let summary = audit::verify(&path).expect("chain intact after recovery");
    assert_eq!((summary.rows, summary.last_hash), (written + 1, a.hash));
}

/// Not a test on its own: the child that `a_killed_writer_loses_no_acknowledged_row` runs and
/// kills. Appends until killed, printing each acknowledged seq.
#[test]
#[ignore = "run by a_killed_writer_loses_no_acknowledged_row"]
fn crash_child() {
    let Some(path) = std::env::var_os("GUARD_AUDIT_CRASH_LOG") else {
        return;
    };
    let log = AuditLog::open(Options {
        path: path.into(),
        rotate_bytes: 16 * 1024,
        ..Options::new("")
    })
    .expect("open");
    for i in 0.. {
        let a = log.append_blocking(row(i)).expect("append");
        println!("acked {}", a.seq);
    }
}

/// A SIGKILL, not a power cut: the page cache survives, so this checks that rows are
/// acknowledged only after they are written and that a killed writer's log reopens cleanly
/// (lock released, chain continued), not fdatasync itself.
#[test]
fn a_killed_writer_loses_no_acknowledged_row() {
    use std::io::{BufRead as _, BufReader};

    let dir = TempDir::new("kill");
    let mut child = Command::new(std::env::current_exe().expect("current_exe"))
        .args([
            "--ignored",
            "--exact",
            "suite::audit::crash_child",
            "--nocapture",
        ])
        .env("GUARD_AUDIT_CRASH_LOG", dir.log())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("stdout");
    let mut acked = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read child");
        if let Some(seq) = line.strip_prefix("acked ") {
            acked.push(seq.parse::<u64>().expect("seq"));
            if acked.len() == 300 {
                break;
            }
        }
    }
    child.kill().expect("kill child");
    child.wait().expect("reap child");
    assert_eq!(acked.len(), 300, "child stopped early");

    // Reopening recovers (the lock died with the child) and keeps every acknowledged row.
    let log = AuditLog::open(Options {
        path: dir.log(),
        rotate_bytes: 16 * 1024,
        ..Options::new("")
    })
    .expect("reopen");
    let last = log.recovery().last_seq.expect("rows");
    assert!(last >= 299, "last seq {last} < last acknowledged");
    let next = log.append_blocking(row(0)).expect("append after crash");
    assert_eq!(next.seq, last + 1);
    drop(log);
    let summary = audit::verify(&dir.log()).expect("chain intact after kill");
    assert!(summary.files > 1, "expected rotations during the run");
    let seqs: Vec<u64> = audit::read_rows(&dir.log())
        .expect("read")
        .map(|r| r.expect("row")["seq"].as_u64().expect("seq"))
        .collect();
    assert_eq!(seqs, (0..=last + 1).collect::<Vec<_>>());
}

/// An ext4 file system in a file, loop-mounted for one test (tmpfs has no immutable files).
struct Ext4(TempDir);

impl Ext4 {
    fn mount(size_mib: u64) -> Self {
        let dir = TempDir::new("ext4");
        let image = dir.0.join("image");
        let f = fs::File::create(&image).expect("image");
        f.set_len(size_mib << 20).expect("size image");
        let mkfs = Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(&image)
            .output()
            .expect("run mkfs.ext4");
        assert!(mkfs.status.success(), "mkfs.ext4: {mkfs:?}");
        fs::create_dir(dir.0.join("fs")).expect("mount point");
        let mount = Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(dir.0.join("fs"))
            .output()
            .expect("run mount");
        assert!(mount.status.success(), "mount: {mount:?}");
        Self(dir)
    }

    fn path(&self) -> PathBuf {
        self.0.0.join("fs")
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.path()).status();
    }
}

/// Sets or clears the immutable attribute: ext4 then refuses writes through open descriptors too.
fn immutable(path: &Path, on: bool) {
    let out = Command::new("chattr")
        .arg(if on { "+i" } else { "-i" })
        .arg(path)
        .output()
        .expect("run chattr");
    assert!(out.status.success(), "chattr: {out:?}");
}

/// A guardd running the escape suite's tool, its audit log on an ext4 file system of its own.
fn guardd_logging_on_ext4() -> (Ext4, super::escape::Setup, support::Guardd) {
    let fs_ = Ext4::mount(32);
    let audit = fs_.path().join("audit.jsonl");
    let s = super::escape::Setup::new();
    let guardd = support::Guardd::start_with(
        &s.policy("", ""),
        &["--audit", audit.to_str().expect("utf-8")],
    );
    (fs_, s, guardd)
}

#[test]
fn a_call_whose_end_the_log_cannot_record_is_no_success_for_its_caller() {
    use std::io::Write as _;
    if !support::privileged("a_call_whose_end_the_log_cannot_record_is_no_success_for_its_caller") {
        return;
    }
    // The log on a file system that refuses its writes once the call is running (after its
    // decision row): the call's `finished` row cannot be written, reserve or not. guardd said
    // so only in its own log; the caller saw the tool's 0.
    let (fs_, _tool, guardd) = guardd_logging_on_ext4();
    let audit = fs_.path().join("audit.jsonl");
    let mut child = guardd
        .exec("tt", &["a0=stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn guard-exec");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !guardd.audit_rows().iter().any(|r| r["kind"] == "decision") {
        assert!(std::time::Instant::now() < deadline, "no decision row");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    immutable(&audit, true);
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"hello").expect("write stdin");
    drop(stdin);
    let out = child.wait_with_output().expect("wait guard-exec");
    immutable(&audit, false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout, "read 5 bytes\n", "the tool ran to its end");
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    let call_id = guardd.last_decision_id();
    assert!(
        stderr.contains("the call ran (code 0), but the audit log could not record how it ended")
            && stderr.contains(&format!("(call {call_id})")),
        "{stderr}"
    );
    let rows = guardd.audit_rows();
    assert!(
        !rows.iter().any(|r| r["kind"] == "finished"),
        "the finished row was written after all: {rows:#?}"
    );

    // Nothing else was lost: once the log can be written again, calls are recorded after the
    // decision row, on an intact chain.
    recorded_again(&guardd, &audit);
    drop(guardd);
}

#[test]
fn a_call_whose_decision_the_log_cannot_record_never_runs_its_tool() {
    if !support::privileged("a_call_whose_decision_the_log_cannot_record_never_runs_its_tool") {
        return;
    }
    // The call's process is cloned and confines itself while its decision row is written, and
    // waits at a gate the writer opens once the row is on disk: refused, the row shuts it.
    let (fs_, _tool, guardd) = guardd_logging_on_ext4();
    let audit = fs_.path().join("audit.jsonl");
    let ran = super::escape::call(&guardd, &["ids"]);
    assert_eq!(ran.status.code(), Some(0), "{ran:?}");
    assert!(
        !ran.stdout.is_empty(),
        "the control printed nothing: {ran:?}"
    );
    let before = guardd.audit_rows().len();
    immutable(&audit, true);
    let refused = super::escape::call(&guardd, &["ids"]);
    immutable(&audit, false);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(refused.stdout.is_empty(), "the tool ran: {refused:?}");
    assert_ne!(refused.status.code(), Some(0), "{refused:?}");
    assert!(stderr.contains("could not be recorded"), "{stderr}");
    assert_eq!(
        guardd.audit_rows().len(),
        before,
        "a row of the refused call"
    );
    recorded_again(&guardd, &audit);
    drop(guardd);
}

/// Once the log can be written again, a call runs and is recorded, on an intact chain (the
/// first may be refused while guardd takes its reserve back: 75).
fn recorded_again(guardd: &support::Guardd, audit: &Path) {
    let recorded = (0..2).any(|_| {
        let out = super::escape::call(guardd, &["exit", "3"]);
        let code = out.status.code();
        assert!(matches!(code, Some(3 | 75)), "{out:?}");
        code == Some(3)
    });
    assert!(recorded, "no call ran once the log had room again");
    let (code, verified) = guardctl_verify(audit);
    assert_eq!(code, 0, "{verified}");
    let rows = guardd.audit_rows();
    assert_eq!(rows.last().expect("rows")["kind"], "finished", "{rows:#?}");
}

/// Makes `audit` immutable once it holds more than `decisions` decision rows: the call that
/// row decided is running, and its end cannot be recorded.
fn freeze_once_decided(audit: &Path, decisions: usize) -> std::thread::JoinHandle<()> {
    let audit = audit.to_owned();
    std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let decided = || {
            fs::read_to_string(&audit)
                .unwrap_or_default()
                .matches(r#""kind":"decision""#)
                .count()
        };
        while decided() <= decisions {
            assert!(std::time::Instant::now() < deadline, "no decision row");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        immutable(&audit, true);
    })
}

#[test]
fn a_call_whose_end_the_log_cannot_record_is_an_error_for_mcp_and_python_callers() {
    let test = "a_call_whose_end_the_log_cannot_record_is_an_error_for_mcp_and_python_callers";
    if !support::privileged(test) {
        return;
    }
    let Some(python) = support::python(test) else {
        return;
    };
    let (fs_, _tool, guardd) = guardd_logging_on_ext4();
    let audit = fs_.path().join("audit.jsonl");
    let decisions = || {
        let rows = guardd.audit_rows();
        rows.iter().filter(|r| r["kind"] == "decision").count()
    };
    // Each call sleeps long enough for the log to be frozen under it once it is decided.
    let sleeping = json!({"a0": "sleep", "a1": "1.5"});

    // MCP: an error result that says so, not the tool's output as a success.
    let frozen = freeze_once_decided(&audit, decisions());
    let plan = json!([{"call": "tt", "arguments": sleeping}]);
    let steps = super::mcp::session(&python, &guardd.socket, &plan);
    frozen.join().expect("froze the log");
    immutable(&audit, false);
    let result = &steps[0];
    assert_eq!(result["isError"], true, "{result}");
    assert!(
        result.to_string().contains("could not record how it ended"),
        "{result}"
    );
    recorded_again(&guardd, &audit);

    // The Python client: CallFailed, not a Result.
    let frozen = freeze_once_decided(&audit, decisions());
    let script = format!(
        "import sys\n\
         from guard_client import Client, CallFailed\n\
         try:\n    r = Client(sys.argv[1]).run('tt', {sleeping})\n    \
         print('returned', r.exit_code)\n\
         except CallFailed as e:\n    print('CallFailed:', e)\n"
    );
    let mut cmd = Command::new(python);
    cmd.arg("-c")
        .arg(script)
        .arg(&guardd.socket)
        .env(
            "PYTHONPATH",
            support::workspace().join("clients/python/src"),
        )
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let out = support::output(cmd);
    frozen.join().expect("froze the log");
    immutable(&audit, false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("CallFailed:") && stdout.contains("could not record how it ended"),
        "{out:?}"
    );
    recorded_again(&guardd, &audit);
    drop(guardd);
}

#[test]
fn every_call_a_crash_interrupts_has_its_end_recorded_at_the_next_start() {
    if !support::privileged("every_call_a_crash_interrupts_has_its_end_recorded_at_the_next_start")
    {
        return;
    }
    let s = super::escape::Setup::new();
    let mut guardd = support::Guardd::start(&s.policy("", ""));
    // Control: a call that ends has its own end.
    let done = super::escape::call(&guardd, &["ids"]);
    assert_eq!(done.status.code(), Some(0), "{done:?}");
    // Five calls running when guardd dies.
    let mut callers: Vec<std::process::Child> = (0..5)
        .map(|_| {
            let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
            guardd
                .exec("tt", &["a0=sleep", "a1=60"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("guard-exec")
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let running = support::output(guardd.ctl(&["calls", "--running", "--json"]));
        if String::from_utf8_lossy(&running.stdout).lines().count() == 5 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{running:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    guardd.crash();
    guardd.start_again();
    let rows = guardd.audit_rows();
    let allowed: Vec<&Value> = rows
        .iter()
        .filter(|r| r["kind"] == "decision" && r["decision"]["decision"] == "allow")
        .map(|r| &r["call_id"])
        .collect();
    assert_eq!(allowed.len(), 6, "{rows:#?}");
    let ends = |id: &Value| -> Vec<&Value> {
        rows.iter()
            .filter(|r| r["kind"] == "finished" && &r["call_id"] == id)
            .collect()
    };
    let mut interrupted = 0;
    for id in &allowed {
        let end = ends(id);
        assert_eq!(end.len(), 1, "{id}: {rows:#?}");
        if !end[0]["interrupted"].is_null() {
            interrupted += 1;
            // Its cgroup was found (and what was left in it killed) at the start.
            assert!(
                end[0]["interrupted"]["processes_killed"].is_u64(),
                "{:#}",
                end[0]
            );
            assert!(end[0]["exit"].is_null(), "{:#}", end[0]);
        }
    }
    assert_eq!(interrupted, 5, "{rows:#?}");
    // guardctl no longer shows them running, and says how they ended.
    let audit = guardd.audit.to_str().expect("utf-8").to_owned();
    let calls = support::output(guardd.ctl(&["calls", "--json", "--audit", &audit]));
    let said = String::from_utf8_lossy(&calls.stdout);
    assert_eq!(said.matches("\"interrupted\":true").count(), 5, "{said}");
    // Said once: the next start finds nothing left open.
    guardd.restart();
    let again = guardd
        .audit_rows()
        .iter()
        .filter(|r| r["kind"] == "finished")
        .count();
    assert_eq!(again, 6);
    for c in &mut callers {
        let _ = c.wait();
    }
}

#[test]
fn a_writer_that_takes_every_free_block_takes_no_room_of_running_calls() {
    if !support::privileged("a_writer_that_takes_every_free_block_takes_no_room_of_running_calls") {
        return;
    }
    use std::{
        io::Write as _,
        sync::atomic::{AtomicBool, AtomicU64, Ordering},
    };
    let (fs_, _tool, guardd) = guardd_logging_on_ext4();
    // A call running when the file system fills.
    let running = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        guardd
            .exec("tt", &["a0=sleep", "a1=2"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("guard-exec")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !guardd.audit_rows().iter().any(|r| r["kind"] == "decision") {
        assert!(std::time::Instant::now() < deadline, "no decision row");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // A writer outside guard that takes every block the file system frees, retrying.
    let stop = Arc::new(AtomicBool::new(false));
    let full = Arc::new(AtomicU64::new(0));
    let filler = {
        let (stop, full) = (stop.clone(), full.clone());
        let path = fs_.path().join("filler");
        std::thread::spawn(move || {
            let mut f = fs::File::create(&path).expect("filler");
            while !stop.load(Ordering::SeqCst) {
                if f.write_all(&[7u8; 4096]).is_err() {
                    full.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        })
    };
    while full.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // Root's calls are admitted on the half of the room kept for root and admins (issue 49),
    // and have their rows; once the file system refuses the room, a caller that is neither
    // waits (75: `status` says guardd admits no call of theirs; `bounds.rs` makes one).
    for _ in 0..20 {
        let out = super::escape::call(&guardd, &["ids"]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    let status = support::output(guardd.ctl(&["status", "--json"]));
    let status: Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    assert_eq!(status["audit"]["admitting"], false, "{status:#}");
    let out = running.wait_with_output().expect("the running call");
    assert_eq!(out.status.code(), Some(0), "the running call: {out:?}");
    stop.store(true, Ordering::SeqCst);
    filler.join().expect("filler");
    // Every call that was admitted has its end, on an intact chain.
    let rows = guardd.audit_rows();
    let decided = rows.iter().filter(|r| r["kind"] == "decision").count();
    let finished = rows.iter().filter(|r| r["kind"] == "finished").count();
    assert_eq!(decided, finished, "{rows:#?}");
    assert_eq!(decided, 21, "{rows:#?}");
    let audit = fs_.path().join("audit.jsonl");
    audit::verify(&audit).expect("the chain holds");
    // And calls are admitted again once there is room.
    fs::remove_file(fs_.path().join("filler")).expect("rm filler");
    let out = super::escape::call(&guardd, &["ids"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}
