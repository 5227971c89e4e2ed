//! Helpers shared by the suites: privilege checks, binaries of the workspace, RAII guards.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// True when this test may use root and the kernel. Otherwise prints why it skips, or, under
/// `CI=true`, fails: CI runs as root on a machine that has everything, so a skip there hides a
/// regression.
pub fn privileged(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let why = "needs root (cgroups, BPF, setuid)";
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {why}, and privileged tests may not skip under CI=true");
    }
    eprintln!("skipping {test}: {why}");
    false
}

/// Path of a binary built from this workspace (`cargo xtask test` builds them first).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/all-HASH -> target/<profile>/<name>
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is not built; run `cargo xtask test`",
        path.display()
    );
    path
}

/// A unique name for things a test creates (cgroups, sockets), so parallel tests never meet.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The default policy's workspace, `/srv/agent/workspace`, made if missing and owned by
/// `nobody`, as a developer's workspace is theirs: the default policy's `shell` runs as its
/// owner, and never as root.
pub fn default_workspace() -> &'static Path {
    let ws = Path::new("/srv/agent/workspace");
    std::fs::create_dir_all(ws).expect("the default policy's workspace");
    std::os::unix::fs::chown(ws, Some(NOBODY), Some(NOBODY)).expect("chown the workspace");
    ws
}

/// The uid (and gid) of `nobody`, a user that exists everywhere and owns nothing.
pub const NOBODY: u32 = 65534;

/// A temporary directory that guard-tool can traverse (mode 0755), removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let path = std::env::temp_dir().join(unique(prefix));
        std::fs::create_dir_all(&path).expect("create temp dir");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .expect("chmod temp dir");
        Self(path)
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

/// A real guardd on a private socket, audit log and cgroup; SIGTERMed and reaped on drop.
pub struct Guardd {
    pub child: std::process::Child,
    pub dir: TempDir,
    pub socket: PathBuf,
    pub audit: PathBuf,
    pub cgroup: String,
    /// guardd's arguments, for [`Guardd::restart`].
    argv: Vec<std::ffi::OsString>,
}

impl Guardd {
    /// Starts guardd with `policy` (TOML text) and waits until its socket answers.
    pub fn start(policy: &str) -> Self {
        Self::start_with(policy, &[])
    }

    pub fn start_with(policy: &str, extra: &[&str]) -> Self {
        let dir = TempDir::new("guardd");
        let policy_path = dir.join("policy.toml");
        std::fs::write(&policy_path, policy).expect("write policy");
        let socket = dir.join("guard.sock");
        let audit = match extra.iter().position(|a| *a == "--audit") {
            Some(i) => PathBuf::from(extra[i + 1]),
            None => dir.join("audit.jsonl"),
        };
        let cgroup = match extra.iter().position(|a| *a == "--cgroup") {
            Some(i) => extra[i + 1].to_owned(),
            None => unique("guard-e2e"),
        };
        let mut argv: Vec<std::ffi::OsString> = vec![
            "--policy".into(),
            policy_path.into(),
            "--socket".into(),
            socket.clone().into(),
        ];
        if !extra.contains(&"--audit") {
            argv.extend(["--audit".into(), audit.clone().into()]);
        }
        if !extra.contains(&"--cgroup") {
            argv.extend(["--cgroup".into(), cgroup.clone().into()]);
        }
        argv.extend(extra.iter().map(Into::into));
        // The tests' write effects and audit logs share /tmp; the audit suite tests the
        // refusal without this opt-in.
        argv.push("--allow-writes-on-audit-fs".into());
        let child = Self::spawn(&argv);
        let mut guardd = Self {
            child,
            dir,
            socket,
            audit,
            cgroup,
            argv,
        };
        guardd.wait_listening();
        guardd
    }

    fn spawn(argv: &[std::ffi::OsString]) -> std::process::Child {
        std::process::Command::new(bin("guardd"))
            .args(argv)
            .env("RUST_LOG", "warn")
            .spawn()
            .expect("spawn guardd")
    }

    /// Stops guardd (SIGTERM) and starts it again with the same arguments, state and socket.
    pub fn restart(&mut self) {
        let status = self.stop();
        assert!(status.success(), "guardd stopped with {status}");
        self.child = Self::spawn(&self.argv);
        self.wait_listening();
    }

    /// Kills guardd: SIGKILL, no shutdown.
    pub fn crash(&mut self) {
        self.child.kill().expect("kill -9 guardd");
        self.child.wait().expect("reap guardd");
    }

    /// Starts guardd again with the same arguments after [`Guardd::crash`]: it sweeps what the
    /// dead one left.
    pub fn start_again(&mut self) {
        self.child = Self::spawn(&self.argv);
        self.wait_listening();
    }

    /// Waits until the socket answers.
    fn wait_listening(&mut self) {
        let guardd = self;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&guardd.socket).is_err() {
            if let Ok(Some(status)) = guardd.child.try_wait() {
                panic!("guardd exited at start: {status}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "guardd did not listen within 20 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// A guard-exec command aimed at this daemon.
    pub fn exec(&self, tool: &str, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(bin("guard-exec"));
        cmd.arg("--socket").arg(&self.socket).arg(tool).args(args);
        cmd
    }

    /// A guardctl command aimed at this daemon.
    pub fn ctl(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(bin("guardctl"));
        cmd.arg("--socket").arg(&self.socket).args(args);
        cmd
    }

    /// The audit rows written so far.
    pub fn audit_rows(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("audit row is JSON"))
            .collect()
    }

    /// The call id of the last decision row.
    pub fn last_decision_id(&self) -> String {
        self.audit_rows()
            .into_iter()
            .rev()
            .find(|r| r["kind"] == "decision")
            .and_then(|r| r["call_id"].as_str().map(str::to_owned))
            .expect("a decision row")
    }

    /// Stops guardd with SIGTERM and returns its exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().expect("wait guardd")
    }
}

impl Drop for Guardd {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// Copying the test tool (a file open for writing) and forking exclude each other: a child
/// forked while another test writes its copy would hold that write fd until exec, and the other
/// test's exec of its copy would fail with ETXTBSY. [`ToolDir`] links rather than copies where it
/// can, so the lock matters only on the copy fallback.
pub static FORK_LOCK: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// A temp directory `guard-tool` can traverse, holding `guard-testtool` (the target directory
/// may not be traversable by that user).
pub struct ToolDir {
    pub dir: TempDir,
    pub tool: PathBuf,
}

impl ToolDir {
    pub fn new(prefix: &str) -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = TempDir::new(prefix);
        let tool = dir.join("guard-testtool");
        // A hard link has no writer, so no fork anywhere can make its exec fail with ETXTBSY; a
        // copy (another file system) is made under the fork lock.
        if std::fs::hard_link(bin("guard-testtool"), &tool).is_err() {
            let _copying = FORK_LOCK.write().unwrap_or_else(|e| e.into_inner());
            std::fs::copy(bin("guard-testtool"), &tool).expect("copy testtool");
        }
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755))
            .expect("chmod testtool");
        Self { dir, tool }
    }

    /// A subdirectory with `mode`.
    pub fn subdir(&self, name: &str, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let d = self.dir.join(name);
        std::fs::create_dir(&d).expect("mkdir");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).expect("chmod");
        d
    }
}

/// Runs `cmd` to its end with no stdin, capturing its output. The spawn holds the fork lock (see
/// [`FORK_LOCK`]).
pub fn output(mut cmd: std::process::Command) -> std::process::Output {
    use std::process::Stdio;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = {
        let _forking = FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        cmd.spawn().expect("spawn")
    };
    child.wait_with_output().expect("wait")
}

/// The host's pid of a call's process, from the tool's `PID@pid:[INODE]` (its pid in the call's
/// pid namespace, and that namespace): `u32::MAX`, no process's, once it is gone.
pub fn host_pid(token: &str) -> u32 {
    let Some((pid, ns)) = token.split_once('@') else {
        panic!("PID@pid:[INODE]: {token:?}");
    };
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return u32::MAX;
    };
    for entry in entries.flatten() {
        let Some(host) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let same_ns = std::fs::read_link(entry.path().join("ns/pid"))
            .is_ok_and(|l| l.to_string_lossy() == ns);
        let nspid = std::fs::read_to_string(entry.path().join("status"))
            .ok()
            .and_then(|s| {
                let line = s.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
                line.split_whitespace().last().map(str::to_owned)
            });
        if same_ns && nspid.as_deref() == Some(pid) {
            return host;
        }
    }
    u32::MAX
}

/// Field `n` of `/proc/PID/stat`, numbered as proc(5) numbers them (3 is the state): counted
/// after the ")" that ends the command name, which may hold spaces.
pub fn stat_field(pid: u32, n: usize) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = stat.rsplit_once(')').expect("stat").1;
    after
        .split_whitespace()
        .nth(n - 3)
        .expect("field")
        .to_owned()
}

/// True when `pid` is gone or a zombie (dead, waiting to be reaped) within `within`.
pub fn dead(pid: u32, within: std::time::Duration) -> bool {
    let stat = std::path::Path::new("/proc")
        .join(pid.to_string())
        .join("stat");
    let deadline = std::time::Instant::now() + within;
    loop {
        match std::fs::read_to_string(&stat) {
            Err(_) => return true,
            // The state follows the ")" that ends the command name.
            Ok(s)
                if s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z')) =>
            {
                return true;
            }
            Ok(_) if std::time::Instant::now() >= deadline => return false,
            Ok(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
}

/// The workspace's root (tests/ is one of its members).
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the workspace")
        .to_owned()
}

/// The shipped default policy (`policies/default.toml`), its workspace moved to `ws`.
pub fn default_policy_in(ws: &std::path::Path) -> String {
    let default = workspace().join("policies/default.toml");
    let text = std::fs::read_to_string(default).expect("default policy");
    text.replace("/srv/agent/workspace", &ws.display().to_string())
}

/// The Python of the virtual environment `cargo xtask setup` makes under target/ (with the MCP
/// SDK and the Python client installed), or `None` after saying why the test skips. Under
/// `CI=true` a missing environment fails: setup must have made it.
pub fn python(test: &str) -> Option<PathBuf> {
    let python = workspace().join("target/venv/bin/python");
    if python.exists() {
        return Some(python);
    }
    let why = format!("{} is missing; run `cargo xtask setup`", python.display());
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {why}, and tests may not skip under CI=true");
    }
    eprintln!("skipping {test}: {why}");
    None
}

/// The `node_modules` directory `cargo xtask setup` fills under target/ (with the MCP
/// TypeScript SDK), or `None` after saying why the test skips. Under `CI=true` a missing one
/// fails: setup must have made it.
pub fn node_modules(test: &str) -> Option<PathBuf> {
    let modules = workspace().join("target/node/node_modules");
    if modules.join("@modelcontextprotocol/sdk").exists() {
        return Some(modules);
    }
    let why = format!(
        "{} has no MCP SDK; run `cargo xtask setup`",
        modules.display()
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {why}, and tests may not skip under CI=true");
    }
    eprintln!("skipping {test}: {why}");
    None
}

/// The code block of `doc` (a path from the workspace's root) whose info string is
/// `LANG NAME`, e.g. ```` ```json vscode ````: the docs' recipes, tested as written.
pub fn doc_block(doc: &str, name: &str) -> String {
    let text = std::fs::read_to_string(workspace().join(doc)).expect("read the doc");
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let info = line.trim_start_matches("```");
        if line.starts_with("```") && info.split_whitespace().nth(1) == Some(name) {
            let block: Vec<&str> = lines
                .by_ref()
                .take_while(|l| !l.starts_with("```"))
                .collect();
            return block.join("\n") + "\n";
        }
    }
    panic!("{doc} has no block named {name}");
}
