//! guard-testtool: the tool that tests run under guard. Its argv says what to do; actions are
//! chained with `--`. Each action prints one line on stdout (`read` prints the file itself); the
//! first failing action prints `ERR <errno-name> <errno>` on stderr and the tool exits 1.
//!
//! std + libc only: the tool must run confined, with nothing but its own binary and libc.

use std::{
    ffi::CString,
    io::{self, Read as _, Write as _},
    net::{TcpStream, ToSocketAddrs, UdpSocket},
    process::ExitCode,
    time::Duration,
};

/// A failed action: the errno it failed with, or a usage problem (errno 0).
struct Fail(i32, String);

impl From<io::Error> for Fail {
    fn from(e: io::Error) -> Self {
        Fail(e.raw_os_error().unwrap_or(0), e.to_string())
    }
}

type Res = Result<(), Fail>;

fn last_errno() -> Fail {
    io::Error::last_os_error().into()
}

fn usage(msg: &str) -> Fail {
    Fail(0, msg.to_owned())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    for action in args.split(|a| a == "--") {
        if action.is_empty() {
            continue;
        }
        if let Err(Fail(errno, msg)) = run(action) {
            let _ = io::stdout().flush();
            eprintln!("ERR {} {errno} ({}: {msg})", errno_name(errno), action[0]);
            return ExitCode::from(1);
        }
        let _ = io::stdout().flush();
    }
    ExitCode::SUCCESS
}

fn run(action: &[String]) -> Res {
    let arg = |i: usize| {
        action
            .get(i)
            .map(String::as_str)
            .ok_or_else(|| usage("missing argument"))
    };
    let num = |i: usize| -> Result<i64, Fail> {
        let s = arg(i)?;
        let parsed = match s.strip_prefix("0x") {
            Some(hex) => i64::from_str_radix(hex, 16),
            None => s.parse(),
        };
        parsed.map_err(|_| usage("not a number"))
    };
    match action[0].as_str() {
        "read" => {
            let mut f = std::fs::File::open(arg(1)?)?;
            let mut buf = Vec::new();
            f.read_to_end(&mut buf)?;
            io::stdout().write_all(&buf)?;
            Ok(())
        }
        "write" => {
            std::fs::write(arg(1)?, arg(2)?)?;
            println!("wrote {}", arg(1)?);
            Ok(())
        }
        "exec" => {
            let path = CString::new(arg(1)?).map_err(|_| usage("NUL in path"))?;
            let argv: Vec<CString> = action[1..]
                .iter()
                .map(|a| CString::new(a.as_str()).map_err(|_| usage("NUL in argument")))
                .collect::<Result<_, _>>()?;
            let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
            ptrs.push(std::ptr::null());
            let envp: [*const libc::c_char; 1] = [std::ptr::null()];
            let _ = io::stdout().flush();
            // SAFETY: path, argv and envp are NUL-terminated and outlive the call; execve only
            // returns on failure.
            unsafe { libc::execve(path.as_ptr(), ptrs.as_ptr(), envp.as_ptr()) };
            Err(last_errno())
        }
        "connect" => {
            let addr = resolve(arg(1)?)?;
            let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
            println!("connected {}", s.peer_addr()?);
            Ok(())
        }
        "sendto" => {
            let addr = resolve(arg(1)?)?;
            let bind = if addr.is_ipv4() {
                "0.0.0.0:0"
            } else {
                "[::]:0"
            };
            let s = UdpSocket::bind(bind)?;
            let n = s.send_to(b"guard-testtool", addr)?;
            println!("sent {n} {addr}");
            Ok(())
        }
        "syscall" => {
            let nr = num(1)?;
            let mut a = [0i64; 6];
            for (i, slot) in a.iter_mut().enumerate() {
                if action.len() > i + 2 {
                    *slot = num(i + 2)?;
                }
            }
            // SAFETY: the test asks for an arbitrary syscall on purpose; arguments are plain
            // integers, and tests only pass ones that need no valid pointers.
            let rc = unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]) };
            if rc < 0 {
                let e = io::Error::last_os_error().raw_os_error().unwrap_or(0);
                println!("syscall {nr} errno {} {e}", errno_name(e));
            } else {
                println!("syscall {nr} ok {rc}");
            }
            Ok(())
        }
        "socket" => {
            let family = match arg(1)? {
                "unix" => libc::AF_UNIX,
                "inet" => libc::AF_INET,
                "inet6" => libc::AF_INET6,
                "packet" => libc::AF_PACKET,
                "netlink" => libc::AF_NETLINK,
                _ => return Err(usage("family: unix inet inet6 packet netlink")),
            };
            let ty = match arg(2)? {
                "stream" => libc::SOCK_STREAM,
                "dgram" => libc::SOCK_DGRAM,
                "raw" => libc::SOCK_RAW,
                "seqpacket" => libc::SOCK_SEQPACKET,
                _ => return Err(usage("type: stream dgram raw seqpacket")),
            };
            // SAFETY: socket takes plain integers and returns a new fd or -1.
            let fd = unsafe { libc::socket(family, ty | libc::SOCK_CLOEXEC, 0) };
            if fd < 0 {
                return Err(last_errno());
            }
            println!("socket {} {} ok", arg(1)?, arg(2)?);
            Ok(())
        }
        "fork" => {
            let n = num(1)?;
            for i in 0..n {
                // SAFETY: the child only sleeps and exits; no locks are taken after fork.
                match unsafe { libc::fork() } {
                    -1 => return Err(last_errno()),
                    0 => loop {
                        // SAFETY: pause and _exit are async-signal-safe.
                        unsafe { libc::pause() };
                    },
                    pid => println!("forked {i} {pid}"),
                }
            }
            Ok(())
        }
        "sleep" => {
            let secs: f64 = arg(1)?.parse().map_err(|_| usage("not a number"))?;
            std::thread::sleep(Duration::from_secs_f64(secs));
            println!("slept {secs}");
            Ok(())
        }
        "whoami" => {
            // SAFETY: getuid and getgid have no preconditions.
            let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
            let mut groups = [0 as libc::gid_t; 64];
            // SAFETY: the buffer holds 64 entries, the size passed.
            let n = unsafe { libc::getgroups(64, groups.as_mut_ptr()) };
            if n < 0 {
                return Err(last_errno());
            }
            let groups: Vec<String> = groups[..n as usize].iter().map(|g| g.to_string()).collect();
            let status = std::fs::read_to_string("/proc/self/status")?;
            let nnp = status
                .lines()
                .find_map(|l| l.strip_prefix("NoNewPrivs:"))
                .map(str::trim)
                .unwrap_or("?");
            println!(
                "uid={uid} gid={gid} groups=[{}] nnp={nnp}",
                groups.join(",")
            );
            Ok(())
        }
        "io_uring" => {
            let mut params = [0u8; 120]; // struct io_uring_params
            // SAFETY: params is a zeroed buffer of sizeof(struct io_uring_params).
            let rc = unsafe { libc::syscall(libc::SYS_io_uring_setup, 4, params.as_mut_ptr()) };
            if rc < 0 {
                return Err(last_errno());
            }
            println!("io_uring ok");
            Ok(())
        }
        "ptrace" => {
            // SAFETY: PTRACE_TRACEME takes no pointers.
            let rc = unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) };
            if rc < 0 {
                return Err(last_errno());
            }
            println!("ptrace ok");
            Ok(())
        }
        "unshare-user" => {
            // SAFETY: unshare takes a flag word.
            if unsafe { libc::unshare(libc::CLONE_NEWUSER) } < 0 {
                return Err(last_errno());
            }
            println!("unshare ok");
            Ok(())
        }
        "fds" => {
            // Lists this process's open fds (other than the one used to list them).
            let mut fds: Vec<String> = std::fs::read_dir("/proc/self/fd")?
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            fds.sort();
            println!("fds {}", fds.join(","));
            Ok(())
        }
        "loop-open" => {
            // open(2) + close(2) of PATH, N times: the cost landlock, seccomp and the kernel
            // programs add to a file syscall (`cargo xtask bench`).
            let path = CString::new(arg(1)?).map_err(|_| usage("NUL in path"))?;
            let n = num(2)?;
            let start = std::time::Instant::now();
            for _ in 0..n {
                // SAFETY: path is NUL-terminated; the fd is ours and closed at once.
                let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
                if fd < 0 {
                    return Err(last_errno());
                }
                // SAFETY: fd was just opened by this loop.
                unsafe { libc::close(fd) };
            }
            println!("loop-open n={n} ns={}", start.elapsed().as_nanos());
            Ok(())
        }
        "loop-connect" => {
            // TCP connect(2) + close(2) to HOST:PORT, N times. Closed with SO_LINGER 0 (a RST),
            // so no TIME_WAIT piles up and the loop cannot run out of ports.
            let addr = match resolve(arg(1)?)? {
                std::net::SocketAddr::V4(a) => a,
                std::net::SocketAddr::V6(_) => return Err(usage("loop-connect takes IPv4")),
            };
            let n = num(2)?;
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: addr.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*addr.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            let linger = libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            let start = std::time::Instant::now();
            for _ in 0..n {
                // SAFETY: socket takes plain integers and returns a new fd or -1.
                let fd = unsafe {
                    libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0)
                };
                if fd < 0 {
                    return Err(last_errno());
                }
                // SAFETY: linger and sin are live, correctly sized structs; fd is ours.
                let rc = unsafe {
                    libc::setsockopt(
                        fd,
                        libc::SOL_SOCKET,
                        libc::SO_LINGER,
                        (&raw const linger).cast(),
                        size_of::<libc::linger>() as libc::socklen_t,
                    );
                    libc::connect(
                        fd,
                        (&raw const sin).cast(),
                        size_of::<libc::sockaddr_in>() as libc::socklen_t,
                    )
                };
                let err = (rc < 0).then(last_errno);
                // SAFETY: fd was opened by this iteration.
                unsafe { libc::close(fd) };
                if let Some(e) = err {
                    return Err(e);
                }
            }
            println!("loop-connect n={n} ns={}", start.elapsed().as_nanos());
            Ok(())
        }
        "exit" => std::process::exit(num(1)? as i32),
        other => Err(usage(&format!("unknown action {other}"))),
    }
}

fn resolve(hostport: &str) -> Result<std::net::SocketAddr, Fail> {
    hostport
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| usage("no address"))
}

fn errno_name(e: i32) -> &'static str {
    match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EEXIST => "EEXIST",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::EROFS => "EROFS",
        libc::ENOSYS => "ENOSYS",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        0 => "USAGE",
        _ => "E?",
    }
}
