//! The guest's side: this very binary, run by the kernel as `/init` (PID 1) of the initramfs
//! [`super::initramfs`] built. It mounts what guardd needs, starts guardd with a small policy
//! (its start-up self-test runs then), asks it which layers are active, makes four confined
//! calls (an approved exec, an undeclared exec, an undeclared connect), runs the end-to-end
//! tests `/guard/plan` names, prints one `GUARD-VM-REPORT` line of JSON and powers off.

use std::{
    ffi::CString,
    fs,
    path::Path,
    process::{Child, Command},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

/// Where the workspace's binaries are in the guest: `bin()` of the test suite looks beside
/// its own directory (`/guard/debug/deps/all` -> `/guard/debug/guardd`).
pub const BIN: &str = "/guard/debug";
/// The end-to-end tests to run, one name a line.
pub const PLAN: &str = "/guard/plan";
/// The test suite's binary.
pub const SUITE: &str = "/guard/debug/deps/all";
/// The marker of the report line on the console.
pub const REPORT: &str = "GUARD-VM-REPORT ";
/// The socket of the self-test's guardd.
const SOCKET: &str = "/run/guard/guard.sock";

/// The policy of the self-test's guardd: one tool running the test tool, allowed to read
/// `/usr/bin`, to exec `/usr/bin/true` and to connect to 127.0.0.1 on `port`.
pub fn policy(port: u16) -> String {
    let mut args = String::new();
    for i in 0..3 {
        args.push_str(&format!(
            "[tools.tt.args.a{i}]\ntype = \"string\"\nrequired = false\n"
        ));
    }
    format!(
        "[settings]\nmax_allowed_tier = \"high\"\nescalation_threshold = \"high\"\n\
         disclose_reasons = true\n\n[tools.tt]\ntier = \"low\"\n\
         command = [\"{BIN}/guard-testtool\", \"{{a0}}\", \"{{a1}}\", \"{{a2}}\"]\n\
         timeout = 60\n{args}[tools.tt.effects]\nread = [\"/usr/bin\"]\n\
         exec = [\"/usr/bin/true\"]\nconnect = [\"127.0.0.1:{port}\"]\n\
         on_divergence = \"deny\"\n"
    )
}

/// PID 1: runs everything, reports, powers off.
pub fn main() -> ! {
    println!("GUARD-VM: init");
    let report = run();
    println!("{REPORT}{report}");
    // SAFETY: sync and reboot take no pointers; as PID 1 the power-off ends the guest.
    unsafe {
        libc::sync();
        libc::reboot(libc::LINUX_REBOOT_CMD_POWER_OFF);
    }
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn run() -> Value {
    let mounts = mount_all();
    if let Err(e) = loopback_up() {
        println!("GUARD-VM: lo: {e}");
    }
    let release = uname_release();
    let lsm = fs::read_to_string("/sys/kernel/security/lsm").unwrap_or_default();
    let guardd = self_test();
    // All of them, also where guardd refused to start: the rows say what holds and what not.
    let tests = e2e();
    json!({
        "release": release,
        "landlock_abi": landlock_abi(),
        "lsm": lsm.trim(),
        "mount_failures": mounts,
        "guardd": guardd,
        "tests": tests,
    })
}

/// The file systems guardd and the calls need; the ones that failed, by target.
fn mount_all() -> Vec<String> {
    const MOUNTS: &[(&str, &str, &str)] = &[
        ("proc", "/proc", ""),
        ("sysfs", "/sys", ""),
        ("devtmpfs", "/dev", ""),
        ("devpts", "/dev/pts", "ptmxmode=0666"),
        ("tmpfs", "/dev/shm", "mode=1777"),
        ("tmpfs", "/tmp", "mode=1777"),
        ("tmpfs", "/run", "mode=0755"),
        // The self-test's audit log, on a file system of its own, as guardd wants it.
        ("tmpfs", "/run/guard-audit", "mode=0700"),
        ("cgroup2", "/sys/fs/cgroup", "nsdelegate"),
        ("securityfs", "/sys/kernel/security", ""),
        ("tracefs", "/sys/kernel/tracing", ""),
        ("debugfs", "/sys/kernel/debug", ""),
        ("bpf", "/sys/fs/bpf", ""),
    ];
    let mut failed = Vec::new();
    for &(fstype, target, data) in MOUNTS {
        let _ = fs::create_dir_all(target);
        let c = |s: &str| CString::new(s).expect("no NUL");
        let (src, dir, ty, data) = (c(fstype), c(target), c(fstype), c(data));
        // SAFETY: every pointer is a NUL-terminated string that outlives the call.
        let rc = unsafe {
            libc::mount(
                src.as_ptr(),
                dir.as_ptr(),
                ty.as_ptr(),
                0,
                data.as_ptr().cast(),
            )
        };
        if rc != 0 {
            failed.push(format!("{target}: {}", std::io::Error::last_os_error()));
        }
    }
    failed
}

/// `struct ifreq` with the flags member of its union.
#[repr(C)]
struct IfReqFlags {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Brings `lo` up: the tests' listeners and the self-test canary are on 127.0.0.1.
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: socket takes no pointers.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut req = IfReqFlags {
        name: [0; 16],
        flags: 0,
        _pad: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: req is a live ifreq for both ioctls; fd is the socket opened above.
    let rc = unsafe {
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) < 0 {
            -1
        } else {
            req.flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            libc::ioctl(fd, libc::SIOCSIFFLAGS, &req)
        }
    };
    let err = std::io::Error::last_os_error();
    // SAFETY: fd is owned here.
    unsafe { libc::close(fd) };
    if rc < 0 { Err(err) } else { Ok(()) }
}

fn uname_release() -> String {
    // SAFETY: utsname is plain data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: u is a live utsname.
    unsafe { libc::uname(&mut u) };
    // SAFETY: the kernel NUL-terminates release.
    unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn landlock_abi() -> i64 {
    // SAFETY: with a NULL attr, size 0 and the VERSION flag the syscall only returns the ABI.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    if v < 0 {
        -i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        v
    }
}

/// Starts guardd, waits for its socket (its self-test runs before it listens), asks for its
/// layers and makes the four calls; stops it. When it refuses to start, says why, and does it
/// all again under `--allow-unenforced`, to show what the layers it has still hold.
fn self_test() -> Value {
    let _ = fs::create_dir_all("/run/guard");
    let listen = || std::net::TcpListener::bind("127.0.0.1:0");
    let (Ok(approved), Ok(other)) = (listen(), listen()) else {
        return json!({"started": false, "error": "no listener on 127.0.0.1 (is lo up?)"});
    };
    let port = |l: &std::net::TcpListener| l.local_addr().map(|a| a.port()).unwrap_or(0);
    let ports = (port(&approved), port(&other));
    if let Err(e) = fs::write("/run/guard/policy.toml", policy(ports.0)) {
        return json!({"started": false, "error": format!("writing the policy: {e}")});
    }
    match guardd(&[], ports) {
        Ok(up) => up,
        Err(mut refused) => {
            refused["unenforced"] = guardd(&["--allow-unenforced"], ports).unwrap_or_else(|e| e);
            refused
        }
    }
}

/// One guardd with `extra` flags: its start time, layers and calls, or why it did not start.
fn guardd(extra: &[&str], (approved, other): (u16, u16)) -> Result<Value, Value> {
    let log = "/run/guard/guardd.stderr";
    let refused = |why: String| {
        let stderr = fs::read_to_string(log).unwrap_or_default();
        println!("GUARD-VM: guardd {extra:?} did not start: {why}\n{stderr}");
        json!({"started": false, "error": why, "stderr": stderr})
    };
    let started = Instant::now();
    let stderr = fs::File::create(log).map_err(|e| refused(format!("{log}: {e}")))?;
    let _ = fs::remove_file("/run/guard-audit/audit.jsonl");
    let mut child = Command::new(format!("{BIN}/guardd"))
        .args(["--policy", "/run/guard/policy.toml", "--socket", SOCKET])
        .args(["--audit", "/run/guard-audit/audit.jsonl"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stderr(stderr)
        .spawn()
        .map_err(|e| refused(format!("spawn guardd: {e}")))?;
    if let Err(why) = wait_listening(&mut child, Duration::from_secs(300)) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(refused(why));
    }
    let start_s = started.elapsed().as_secs_f64();
    println!("GUARD-VM: guardd {extra:?} listening after {start_s:.1} s");
    let status = Command::new(format!("{BIN}/guardctl"))
        .args(["--socket", SOCKET, "status", "--json"])
        .output()
        .ok()
        .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
        .unwrap_or(Value::Null);
    let calls = json!({
        "approved_exec": call(&["exec", "/usr/bin/true"]),
        "undeclared_exec": call(&["exec", "/usr/bin/touch", "/tmp/touched"]),
        "approved_connect": call(&["connect", &format!("127.0.0.1:{approved}")]),
        "undeclared_connect": call(&["connect", &format!("127.0.0.1:{other}")]),
    });
    // SAFETY: kill takes no pointers; the pid is our child's.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    Ok(json!({"started": true, "start_s": start_s, "layers": status["layers"], "calls": calls}))
}

fn wait_listening(child: &mut Child, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    while std::os::unix::net::UnixStream::connect(SOCKET).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("guardd exited at start: {status}"));
        }
        if Instant::now() > deadline {
            return Err(format!("guardd did not listen within {within:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// One call of the self-test's tool: its exit code and the first line of its stderr.
fn call(actions: &[&str]) -> Value {
    let pairs: Vec<String> = actions
        .iter()
        .enumerate()
        .map(|(i, a)| format!("a{i}={a}"))
        .collect();
    let out = Command::new(format!("{BIN}/guard-exec"))
        .args(["--socket", SOCKET, "tt"])
        .args(&pairs)
        .output();
    match out {
        Ok(o) => {
            let stderr = String::from_utf8_lossy(&o.stderr);
            let first = stderr.lines().next().unwrap_or_default().to_owned();
            println!("GUARD-VM: call {actions:?}: {:?} {first}", o.status.code());
            json!({"code": o.status.code(), "stderr": first})
        }
        Err(e) => json!({"code": null, "stderr": e.to_string()}),
    }
}

/// Runs the planned end-to-end tests one at a time, their output on the console; each
/// test's name and whether it passed.
fn e2e() -> Value {
    let plan = fs::read_to_string(PLAN).unwrap_or_default();
    let names: Vec<&str> = plan.lines().filter(|l| !l.trim().is_empty()).collect();
    if names.is_empty() || !Path::new(SUITE).exists() {
        return json!([]);
    }
    let mut results = Vec::new();
    for name in names {
        let started = Instant::now();
        let ok = Command::new(SUITE)
            .args(["--exact", "--test-threads=1", name])
            .env("CI", "true")
            .env("HOME", "/root")
            .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
            .status()
            .is_ok_and(|s| s.success());
        let secs = started.elapsed().as_secs_f64();
        println!(
            "GUARD-VM: test {name}: {} in {secs:.1} s",
            if ok { "ok" } else { "FAILED" }
        );
        results.push(json!({"name": name, "ok": ok, "secs": secs}));
    }
    Value::Array(results)
}
