//! The unit under a real systemd, as an operator meets it: `cargo xtask install`, then
//! `systemctl start`, `reload` and `stop` against the host's own systemd, booted as PID 1 of
//! private pid, mount, cgroup, uts, ipc and net namespaces (`tests/systemd/boot.sh`), on a
//! read-only view of the host's root: nothing of the host changes.

use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use super::support::{self, TempDir, output};

/// Where the staged install puts guard (`--prefix`): its own tmpfs in the booted system.
const PREFIX: &str = "/opt/guard";

/// The host's systemd, PID 1 of its own namespaces; killed, with everything it started, on drop.
struct Booted {
    unshare: Child,
    pid1: u32,
    /// The host cgroup the namespaces are rooted at.
    cgroup: PathBuf,
    console: PathBuf,
    _dir: TempDir,
}

impl Booted {
    /// Stages `cargo xtask install` and boots systemd on it.
    fn boot() -> Self {
        let dir = TempDir::new("guard-systemd");
        let stage = dir.join("stage");
        let install = output({
            let mut c = Command::new(support::bin("xtask"));
            c.args(["install", "--prebuilt-debug", "--prefix", PREFIX, "--root"])
                .arg(&stage);
            c
        });
        assert!(install.status.success(), "xtask install: {install:?}");
        let scratch = dir.join("scratch");
        std::fs::create_dir(&scratch).expect("scratch dir");
        let unified = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .find(|m| Path::new(m).join("cgroup.controllers").exists())
            .expect("a cgroup v2 mount");
        let cgroup = Path::new(unified).join(support::unique("guard-systemd"));
        std::fs::create_dir(&cgroup).expect("host cgroup");
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(cgroup.join("cgroup.procs"))
            .expect("cgroup.procs");
        let console = dir.join("console.log");
        let log = std::fs::File::create(&console).expect("console log");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/boot.sh");
        let mut cmd = Command::new("unshare");
        cmd.args(["--pid", "--mount", "--cgroup", "--uts", "--ipc", "--net"])
            .args(["--fork", "--kill-child"])
            .arg(script)
            .arg(&stage)
            .arg(&scratch)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup"))
            .stderr(log);
        // SAFETY: write(2) on a descriptor opened before fork is async-signal-safe.
        unsafe {
            use std::os::fd::AsRawFd as _;
            let fd = procs.as_raw_fd();
            cmd.pre_exec(move || {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let unshare = cmd.spawn().expect("spawn unshare");
        let mut booted = Self {
            pid1: 0,
            unshare,
            cgroup,
            console,
            _dir: dir,
        };
        booted.pid1 = booted.wait_pid1();
        booted.wait_running();
        booted
    }

    /// The pid (in the host's namespace) of unshare's child, once it is systemd.
    fn wait_pid1(&mut self) -> u32 {
        let children = format!("/proc/{0}/task/{0}/children", self.unshare.id());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.unshare.try_wait() {
                panic!("boot failed ({status}): {}", self.console());
            }
            let pid = std::fs::read_to_string(&children)
                .ok()
                .and_then(|c| c.split_whitespace().next()?.parse::<u32>().ok());
            if let Some(pid) = pid
                && std::fs::read_link(format!("/proc/{pid}/exe"))
                    .is_ok_and(|e| e.ends_with("systemd"))
            {
                return pid;
            }
            assert!(Instant::now() < deadline, "no systemd: {}", self.console());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the system reached its target.
    fn wait_running(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state = self.sh("systemctl is-system-running");
            let state = String::from_utf8_lossy(&state.stdout).trim().to_owned();
            match state.as_str() {
                "running" => return,
                "degraded" => panic!(
                    "booted degraded: {}",
                    text(&self.sh("systemctl --failed --no-pager"))
                ),
                _ => assert!(
                    Instant::now() < deadline,
                    "system {state:?} after 30 s: {}",
                    self.console()
                ),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs `script` with sh inside the booted system, as root.
    fn sh(&self, script: &str) -> Output {
        let mut cmd = Command::new("nsenter");
        cmd.arg("-t")
            .arg(self.pid1.to_string())
            .args(["-m", "-p", "-u", "-i", "-n", "-C", "--", "/bin/sh", "-c"])
            .arg(format!("PATH={PREFIX}/bin:$PATH; {script}"));
        output(cmd)
    }

    /// Runs `script` and asserts it exits 0; its stdout.
    fn ok(&self, script: &str) -> String {
        let out = self.sh(script);
        assert!(
            out.status.success(),
            "{script}: {}\njournal: {}",
            text(&out),
            text(&self.sh("journalctl -u guardd --no-pager -n 40"))
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn console(&self) -> String {
        std::fs::read_to_string(&self.console).unwrap_or_default()
    }
}

impl Drop for Booted {
    fn drop(&mut self) {
        if self.pid1 != 0 {
            // SAFETY: kill has no memory effects; PID 1 of the namespace dies with the rest.
            unsafe { libc::kill(self.pid1 as i32, libc::SIGKILL) };
        }
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
        let deadline = Instant::now() + Duration::from_secs(10);
        while remove_tree(&self.cgroup).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Removes a cgroup directory and its children, deepest first.
fn remove_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)?.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path())?;
        }
    }
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn text(out: &Output) -> String {
    format!(
        "{} stdout: {} stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A unit property, as `systemctl show` gives it.
fn property(sys: &Booted, name: &str) -> String {
    sys.ok(&format!("systemctl show guardd -P {name}"))
        .trim()
        .to_owned()
}

#[test]
fn the_unit_runs_reloads_and_stops_under_a_real_systemd() {
    if !support::privileged("the_unit_runs_reloads_and_stops_under_a_real_systemd") {
        return;
    }
    let sys = Booted::boot();
    // An operator's steps: the socket's group, with a user in it, then start.
    sys.ok(
        "groupadd guard-clients && useradd -M -G guard-clients agent && useradd -M outsider \
         && mkdir -p /etc/systemd/system/guardd.service.d \
         && printf '[Service]\\nEnvironment=GUARDD_SOCKET_GROUP=guard-clients\\n' \
            > /etc/systemd/system/guardd.service.d/group.conf \
         && echo hello > /srv/agent/workspace/notes.txt \
         && chown -R agent: /srv/agent/workspace \
         && systemctl daemon-reload && systemctl start guardd",
    );
    // Type=notify: active once guardd said READY=1, with its status line.
    assert_eq!(property(&sys, "ActiveState"), "active");
    assert_eq!(property(&sys, "SubState"), "running");
    assert!(
        property(&sys, "StatusText").starts_with("enforcing:"),
        "{}",
        property(&sys, "StatusText")
    );

    // The journal stamps guardd's lines; guardd does not stamp them again.
    let journal = sys.ok("journalctl -u guardd -o cat --no-pager | grep 'policy loaded'");
    assert!(!journal.starts_with("20"), "a second timestamp: {journal}");
    // Every layer proven at start (the syscall tracepoints are off unless asked for).
    let status: serde_json::Value =
        serde_json::from_str(&sys.ok("guardctl status --json")).expect("status JSON");
    let layers = status["layers"].as_array().expect("layers");
    assert!(layers.len() > 10, "{status}");
    for layer in layers {
        let off_by_default = layer["name"] == "ebpf:syscalls";
        let want = if off_by_default { "off" } else { "active" };
        assert_eq!(layer["state"], want, "{layer}");
    }
    assert_eq!(status["enforced"], true);

    // A call from a member of the socket's group, not root; someone else is not served.
    let listed = sys.ok("cd /srv/agent/workspace && runuser -u agent -- guard-exec list_dir dir=.");
    assert!(listed.contains("notes.txt"), "{listed}");
    let outsider =
        sys.sh("cd /srv/agent/workspace && runuser -u outsider -- guard-exec list_dir dir=.");
    assert_eq!(outsider.status.code(), Some(69), "{}", text(&outsider));

    // The calls' cgroups are the unit's (Delegate=yes), guardd itself in a leaf beside them.
    let unit = format!("/sys/fs/cgroup{}", property(&sys, "ControlGroup"));
    let main_pid = property(&sys, "MainPID");
    let own = sys.ok(&format!("cat /proc/{main_pid}/cgroup"));
    assert!(
        own.lines()
            .any(|l| l == "0::/system.slice/guardd.service/guardd"),
        "{own}"
    );
    // (The default policy's shell, run by the workspace's owner in it, runs as that owner.)
    let during = sys.ok(&format!(
        "cd /srv/agent/workspace && runuser -u agent -- guard-exec shell command='sleep 2' & \
         for i in $(seq 100); do ls -d {unit}/calls/call-* 2>/dev/null && break; sleep 0.02; done; \
         wait $!"
    ));
    assert!(
        during.contains(&format!("{unit}/calls/call-")),
        "no call cgroup under {unit}: {during:?}"
    );

    // Reload: a good policy is in force and says so; a broken one fails `systemctl reload`
    // with guardd's reasons and changes nothing.
    sys.ok("systemctl reload guardd");
    sys.ok("cp /etc/guard/policy.toml /tmp/p");
    let broken = sys.sh(
        "echo '[[[broken' >> /etc/guard/policy.toml && systemctl reload guardd; \
         rc=$?; cp /tmp/p /etc/guard/policy.toml; journalctl -u guardd --no-pager -n 5; exit $rc",
    );
    assert!(!broken.status.success(), "{}", text(&broken));
    assert!(
        String::from_utf8_lossy(&broken.stdout).contains("policy.toml:"),
        "the journal does not name the broken line: {}",
        text(&broken)
    );
    assert_eq!(property(&sys, "ActiveState"), "active");
    sys.ok("cd /srv/agent/workspace && runuser -u agent -- guard-exec list_dir dir=.");

    // A secret as the service convention hands it over: systemd's LoadCredential=, read by
    // guardd from $CREDENTIALS_DIRECTORY at its start; the tool gets it, its caller sees the mask.
    let added = "\n[secrets.api]\nsource = \"credential:api\"\nhosts = [\"127.0.0.1:9\"]\n\n\
                 [tools.show_token]\ntier = \"low\"\ncommand = [\"/usr/bin/printenv\", \"TOKEN\"]\n\
                 env = { TOKEN = \"{secret:api}\" }\n[tools.show_token.effects]\nread = [\"/usr\"]\n";
    let credential = sys.sh(&format!(
        "install -d -m 700 /etc/guard/credentials \
         && printf 'tok-from-systemd-42\\n' > /etc/guard/credentials/api \
         && chmod 600 /etc/guard/credentials/api \
         && printf '[Service]\\nLoadCredential=api:/etc/guard/credentials/api\\n' \
            > /etc/systemd/system/guardd.service.d/credential.conf \
         && cat >> /etc/guard/policy.toml <<'EOF'\n{added}EOF\n\
         systemctl daemon-reload && systemctl restart guardd \
         || {{ journalctl -u guardd --no-pager -n 20; exit 1; }}"
    ));
    assert!(credential.status.success(), "{}", text(&credential));
    let shown = sys.ok("cd /srv/agent/workspace && runuser -u agent -- guard-exec show_token");
    assert_eq!(shown, "[secret:api]\n");
    let audit = sys.sh("grep -rl 'tok-from-systemd' /var/lib/guard /run/guard 2>/dev/null");
    let holding = String::from_utf8_lossy(&audit.stdout);
    assert!(holding.trim().is_empty(), "the value in: {holding}");

    // The exposure the book's install page quotes is the real unit's.
    let security = sys.ok("systemd-analyze security guardd.service --no-pager");
    let exposure = security
        .lines()
        .find_map(|l| l.split("exposure level for guardd.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no exposure level in: {security}"));
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/book/src/install.md");
    let page = std::fs::read_to_string(page).expect("the install page");
    assert!(
        page.contains(&format!(
            "`systemd-analyze security` rates it **{exposure} (OK)**"
        )),
        "the install page does not quote the unit's exposure {exposure}"
    );

    // A clean stop drains the calls running (KillMode=mixed: SIGTERM to guardd alone, which
    // lets them end), then no failure, the socket and the calls' cgroups gone with the unit.
    let drained = sys.ok(
        "cd /srv/agent/workspace && (runuser -u agent -- guard-exec shell command='sleep 1 && echo done'; \
         echo \"exit $?\") > /tmp/drained & \
         for i in $(seq 100); do ls -d /sys/fs/cgroup/system.slice/guardd.service/calls/call-* \
         >/dev/null 2>&1 && break; sleep 0.02; done; systemctl stop guardd; wait; cat /tmp/drained",
    );
    assert_eq!(
        drained, "done\nexit 0\n",
        "the running call was not drained"
    );
    assert_eq!(property(&sys, "ActiveState"), "inactive");
    assert_eq!(property(&sys, "Result"), "success");
    let left = sys.sh(&format!("ls /run/guard/guard.sock {unit}"));
    assert!(!left.status.success(), "left behind: {}", text(&left));
}
