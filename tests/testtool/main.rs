//! guard-testtool: the tool that tests run under guard. Its argv says what to do; actions are
//! chained with `--`. Each action prints one line on stdout (`read` prints the file itself); the
//! first failing action prints `ERR <errno-name> <errno>` on stderr and the tool exits 1.
//!
//! std + libc only: the tool must run confined, with nothing but its own binary and libc.
#![allow(
    clippy::too_many_lines,
    reason = "one action per arm, as the tests name them"
)]

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

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for k in 0..4 {
            if k <= c.len() {
                out.push(A[((n >> (18 - 6 * k)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

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
        "append" => {
            // Writes without O_TRUNC or O_CREAT: needs only landlock's WriteFile right.
            let mut f = std::fs::OpenOptions::new().append(true).open(arg(1)?)?;
            f.write_all(arg(2)?.as_bytes())?;
            println!("appended {}", arg(1)?);
            Ok(())
        }
        "truncate" => {
            // By name: truncate(2) to zero bytes.
            let path = CString::new(arg(1)?).map_err(|_| usage("NUL in path"))?;
            // SAFETY: path is NUL-terminated and outlives the call.
            if unsafe { libc::truncate(path.as_ptr(), 0) } < 0 {
                return Err(last_errno());
            }
            println!("truncated {}", arg(1)?);
            Ok(())
        }
        "open-rdonly-trunc" | "open-mode3-trunc" => {
            // open(2) with O_TRUNC for reading, or with access mode 3 (neither read nor write):
            // Linux truncates when the user may write.
            let path = CString::new(arg(1)?).map_err(|_| usage("NUL in path"))?;
            let mode = if action[0] == "open-rdonly-trunc" {
                libc::O_RDONLY
            } else {
                3
            };
            // SAFETY: path is NUL-terminated; the descriptor is closed at once.
            let fd = unsafe { libc::open(path.as_ptr(), mode | libc::O_TRUNC) };
            if fd < 0 {
                return Err(last_errno());
            }
            // SAFETY: fd was just opened here.
            unsafe { libc::close(fd) };
            println!("opened {}", arg(1)?);
            Ok(())
        }
        "ftruncate" => {
            // Through a descriptor opened for writing (without O_TRUNC): ftruncate(2) to zero.
            let f = std::fs::OpenOptions::new().write(true).open(arg(1)?)?;
            f.set_len(0)?;
            println!("truncated {}", arg(1)?);
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
        "bearer" => {
            // An HTTP request carrying the token of environment variable arg(2), as an API
            // client sends it; prints the response's body.
            let token = std::env::var(arg(2)?).map_err(|_| usage("no such variable"))?;
            let addr = resolve(arg(1)?)?;
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
            let request = format!("GET / HTTP/1.0\r\nAuthorization: Bearer {token}\r\n\r\n");
            s.write_all(request.as_bytes())?;
            let mut response = String::new();
            s.read_to_string(&mut response)?;
            let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
            println!("{body}");
            Ok(())
        }
        "print-env" | "print-env-hex" | "print-env-b64" | "print-env-split" => {
            let v = std::env::var(arg(1)?).map_err(|_| usage("no such variable"))?;
            match action[0].as_str() {
                "print-env" => println!("value {v}"),
                "print-env-hex" => {
                    let hex: String = v.bytes().map(|b| format!("{b:02x}")).collect();
                    println!("hex {hex}");
                }
                "print-env-b64" => println!("b64 {}", base64(v.as_bytes())),
                _ => {
                    // In two writes apart in time, on stderr: a value split across reads.
                    let (a, b) = v.split_at(v.len() / 2);
                    eprint!("split {a}");
                    std::thread::sleep(Duration::from_millis(200));
                    eprintln!("{b} end");
                }
            }
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
        "socketpair-dgram" => {
            let mut fds = [0; 2];
            // SAFETY: fds has room for the two descriptors socketpair writes.
            let r = unsafe {
                libc::socketpair(
                    libc::AF_UNIX,
                    libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                    0,
                    fds.as_mut_ptr(),
                )
            };
            if r < 0 {
                return Err(last_errno());
            }
            println!("socketpair dgram ok");
            Ok(())
        }
        "fork-syscall" => {
            // A child makes syscall NR and exits; the parent waits and goes on.
            let nr = num(1)?;
            // SAFETY: the child makes one raw syscall and _exits; no locks are taken after fork.
            match unsafe { libc::fork() } {
                -1 => return Err(last_errno()),
                // SAFETY: in the child: one raw syscall, then _exit.
                0 => unsafe {
                    libc::syscall(nr);
                    libc::_exit(0)
                },
                pid => {
                    let mut status = 0;
                    // SAFETY: waits for our own child; status is a valid out-pointer.
                    unsafe { libc::waitpid(pid, &mut status, 0) };
                    println!("child {pid} status {status}");
                }
            }
            Ok(())
        }
        "fork" => {
            // `fork N`: N children that wait; each line names one by its pid on the host, which
            // the child sends back through a pipe (its parent only knows the namespace's).
            let n = num(1)?;
            let mut fds = [0; 2];
            // SAFETY: fds has room for two descriptors.
            if unsafe { libc::pipe(fds.as_mut_ptr()) } < 0 {
                return Err(last_errno());
            }
            for i in 0..n {
                // SAFETY: the child only writes, sleeps and exits; no locks are taken after fork.
                match unsafe { libc::fork() } {
                    -1 => return Err(last_errno()),
                    0 => {
                        // SAFETY: getpid takes no arguments.
                        let me = unsafe { libc::getpid() };
                        // SAFETY: writes 4 bytes from this stack; pause is async-signal-safe.
                        unsafe { libc::write(fds[1], (&raw const me).cast(), 4) };
                        loop {
                            // SAFETY: pause is async-signal-safe.
                            unsafe { libc::pause() };
                        }
                    }
                    _ => {
                        let mut pid: libc::pid_t = 0;
                        // SAFETY: reads 4 bytes into a 4-byte integer.
                        unsafe { libc::read(fds[0], (&raw mut pid).cast(), 4) };
                        println!("forked {i} {}", pid_token(pid));
                    }
                }
            }
            Ok(())
        }
        "fork-wait" => {
            // `fork-wait N`: up to N children alive at once, which all leave (and are waited
            // for) before the tool does, whether or not every fork succeeded: nothing of the
            // call is left behind.
            let n = num(1)?;
            let mut fds = [0; 2];
            // SAFETY: fds has room for two descriptors.
            if unsafe { libc::pipe(fds.as_mut_ptr()) } < 0 {
                return Err(last_errno());
            }
            let mut failed = None;
            let mut forked = 0;
            for _ in 0..n {
                // SAFETY: the child only reads and exits; no locks are taken after fork.
                match unsafe { libc::fork() } {
                    -1 => {
                        failed = Some(last_errno());
                        break;
                    }
                    0 => {
                        let mut byte = 0u8;
                        // SAFETY: closes this child's copy of the write end, then reads one
                        // byte into a one-byte buffer (EOF once the parent closes its end).
                        unsafe {
                            libc::close(fds[1]);
                            libc::read(fds[0], (&raw mut byte).cast(), 1);
                            libc::_exit(0);
                        }
                    }
                    _ => forked += 1,
                }
            }
            // SAFETY: closing our write end lets every child read EOF; wait reaps them.
            unsafe {
                libc::close(fds[1]);
                while libc::wait(std::ptr::null_mut()) > 0 {}
            }
            println!("forked {forked}");
            failed.map_or(Ok(()), Err)
        }
        "touch-mib" => {
            // Takes MIB MiB of memory, every page touched, and leaves: a peak, and nothing left.
            let mut memory = vec![0u8; usize::try_from(num(1)?).map_err(|_| usage("MIB"))? << 20];
            for page in memory.chunks_mut(4096) {
                page[0] = 1;
            }
            std::hint::black_box(&memory);
            println!("touched {} MiB", num(1)?);
            Ok(())
        }
        "write-mib" => {
            // Writes MIB MiB of ones to PATH: page cache charged to the call's memory cgroup.
            let mut f = std::fs::File::create(arg(1)?)?;
            let chunk = vec![1u8; 1 << 20];
            for _ in 0..num(2)? {
                f.write_all(&chunk)?;
            }
            println!("wrote {} MiB", num(2)?);
            Ok(())
        }
        "fill" => {
            // Writes zeros to PATH until its file system is full (ENOSPC), then goes on.
            let mut f = std::fs::File::create(arg(1)?)?;
            let chunk = vec![0u8; 64 << 10];
            let mut total = 0usize;
            loop {
                match f.write(&chunk) {
                    Ok(0) => break,
                    Ok(n) => total += n,
                    Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                    Err(e) => return Err(e.into()),
                }
            }
            println!("filled {total} bytes");
            Ok(())
        }
        "dns-query" => {
            // Asks SERVER (ip:port) for NAME's A record over UDP, as a resolver does: the reply
            // must come from the server asked. Prints the answer's first address, or the rcode.
            let server = resolve(arg(1)?)?;
            let q = dns_question(0x4755, arg(2)?, 1);
            let sock = UdpSocket::bind("0.0.0.0:0")?;
            sock.set_read_timeout(Some(Duration::from_secs(3)))?;
            sock.send_to(&q, server)?;
            let mut buf = [0u8; 512];
            let (n, from) = sock.recv_from(&mut buf)?;
            if from != server {
                return Err(Fail(
                    libc::EPROTO,
                    format!("reply from {from}, not {server}"),
                ));
            }
            let rcode = buf.get(3).map_or(0xff, |b| b & 0xf);
            let answers = u16::from_be_bytes([buf[6], buf[7]]);
            if rcode != 0 || answers == 0 || n < q.len() + 16 {
                println!("rcode {rcode} answers {answers}");
                return Ok(());
            }
            let ip = &buf[q.len() + 12..q.len() + 16];
            println!("answer {}.{}.{}.{}", ip[0], ip[1], ip[2], ip[3]);
            Ok(())
        }
        "dns-types" => {
            // Asks SERVER about NAME COUNT times, each time of another made-up type (1000 on),
            // waiting for each answer: every question reaches the server before the next.
            let server = resolve(arg(1)?)?;
            let (name, count) = (arg(2)?, num(3)?);
            let sock = UdpSocket::bind("0.0.0.0:0")?;
            sock.set_read_timeout(Some(Duration::from_secs(3)))?;
            let mut buf = [0u8; 512];
            for i in 0..count {
                sock.send_to(&dns_question(i as u16, name, 1000 + i as u16), server)?;
                sock.recv_from(&mut buf)?;
            }
            println!("answered {count}");
            Ok(())
        }
        "dns-burst" => {
            // Sends SERVER COUNT questions for NAME's A record, then one for LAST, as fast as it
            // can and without waiting for an answer: the next action (or the tool's exit)
            // follows at once, with the questions still on their way.
            let server = resolve(arg(1)?)?;
            let (name, count, last) = (arg(2)?, num(3)?, arg(4)?);
            let sock = UdpSocket::bind("0.0.0.0:0")?;
            for i in 0..count {
                sock.send_to(&dns_question(i as u16, name, 1), server)?;
            }
            sock.send_to(&dns_question(0xffff, last, 1), server)?;
            println!("sent {}", count + 1);
            Ok(())
        }
        "write-at-bad-dirfd" => {
            // openat with a directory descriptor that is none: an absolute name ignores it.
            let path = CString::new(arg(1)?).map_err(|_| usage("NUL in path"))?;
            let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC;
            // SAFETY: a NUL-terminated name; the descriptor is a number the kernel checks.
            let fd = unsafe { libc::openat(9999, path.as_ptr(), flags, 0o644) };
            if fd < 0 {
                return Err(io::Error::last_os_error().into());
            }
            // SAFETY: a descriptor just opened here, owned by nothing else.
            let mut f = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            f.write_all(arg(2)?.as_bytes())?;
            println!("wrote {}", arg(1)?);
            Ok(())
        }
        "thread-write-self-cwd" => thread_write_self_cwd(arg(1)?, arg(2)?, arg(3)?),
        "chdir" => {
            std::env::set_current_dir(arg(1)?)?;
            println!("in {}", arg(1)?);
            Ok(())
        }
        "fork-append" => {
            // A child appends TEXT to PATH (relative to the working directory, as given) and
            // exits at once: gone before anyone could read its /proc entry.
            let path = CString::new(arg(1)?).map_err(|_| usage("NUL in path"))?;
            let text = arg(2)?.as_bytes().to_vec();
            // SAFETY: fork in a single-threaded process; the child only makes raw syscalls and
            // _exits.
            match unsafe { libc::fork() } {
                -1 => Err(last_errno()),
                0 => {
                    // SAFETY: raw syscalls on our own buffers; _exit never returns.
                    unsafe {
                        let flags = libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT;
                        let fd = libc::open(path.as_ptr(), flags, 0o644);
                        let ok = fd >= 0 && libc::write(fd, text.as_ptr().cast(), text.len()) >= 0;
                        libc::_exit(if ok { 0 } else { 1 })
                    }
                }
                child => {
                    let mut status = 0;
                    // SAFETY: waits for our own child.
                    unsafe { libc::waitpid(child, &mut status, 0) };
                    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                        println!("child appended {}", arg(1)?);
                        Ok(())
                    } else {
                        Err(Fail(libc::EIO, format!("child status {status}")))
                    }
                }
            }
        }
        "append-via-mapped-name" => {
            // Appends TEXT to the file whose name is in NAMEFILE, passing open(2) a pointer into
            // a fresh private mapping of NAMEFILE: the page is not faulted in until the kernel
            // itself reads the name, so a tracer reading it at syscall entry sees nothing.
            let names = std::fs::File::open(arg(1)?)?;
            let len = names.metadata()?.len() as usize;
            // SAFETY: a new read-only private mapping of a file we hold open; unmapped below.
            let map = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len.max(1),
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    std::os::fd::AsRawFd::as_raw_fd(&names),
                    0,
                )
            };
            if map == libc::MAP_FAILED {
                return Err(last_errno());
            }
            let text = arg(2)?;
            // SAFETY: the mapping holds a NUL-terminated name (the test writes it so).
            let fd = unsafe { libc::open(map.cast(), libc::O_WRONLY | libc::O_APPEND) };
            let result = if fd < 0 {
                Err(last_errno())
            } else {
                // SAFETY: our fd and buffer.
                unsafe { libc::write(fd, text.as_ptr().cast(), text.len()) };
                println!("appended through a mapped name");
                Ok(())
            };
            // SAFETY: the mapping made above.
            unsafe { libc::munmap(map, len.max(1)) };
            result
        }
        "hog" => {
            // Takes MIB MiB of memory, every page touched, says so, and sleeps: a process whose
            // exit takes a while (the kernel frees its pages before it leaves its cgroup).
            let len = usize::try_from(num(1)?).map_err(|_| usage("MIB"))? << 20;
            let mut memory = vec![0u8; len];
            for page in memory.chunks_mut(4096) {
                page[0] = 1;
            }
            println!("hogging");
            io::stdout().flush()?;
            std::thread::sleep(Duration::from_secs(60));
            std::hint::black_box(&memory);
            Ok(())
        }
        "sleep" => {
            let secs: f64 = arg(1)?.parse().map_err(|_| usage("not a number"))?;
            std::thread::sleep(Duration::from_secs_f64(secs));
            println!("slept {secs}");
            Ok(())
        }
        "stdin" => {
            // Waits for its caller: runs until stdin is closed.
            let mut buf = Vec::new();
            io::stdin().read_to_end(&mut buf)?;
            println!("read {} bytes", buf.len());
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
        "caps" => {
            // The capability sets, as /proc/self/status shows them.
            let status = std::fs::read_to_string("/proc/self/status")?;
            let sets: Vec<String> = status
                .lines()
                .filter(|l| l.starts_with("Cap"))
                .map(|l| l.split_whitespace().collect())
                .collect();
            println!("{}", sets.join(" "));
            Ok(())
        }
        "nice-raise" => {
            // A priority above the default (nice -1): CAP_SYS_NICE's.
            // SAFETY: integer arguments.
            if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -1) } < 0 {
                return Err(last_errno());
            }
            println!("nice -1");
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
        "send" => {
            // A client of guardd, not a tool: sends the frame FILE holds N times, each on a new
            // connection with this process's stdin, stdout and stderr (an exec's three
            // descriptors), the first `@N@` in it replaced by the count (0, 1, ...), and prints
            // the first line of each answer.
            let frame = std::fs::read(arg(2)?)?;
            let at = frame.windows(3).position(|w| w == b"@N@");
            for i in 0..num(3)? {
                let frame = match at {
                    Some(at) => [&frame[..at], i.to_string().as_bytes(), &frame[at + 3..]].concat(),
                    None => frame.clone(),
                };
                println!("{}", send(arg(1)?, &frame)?);
            }
            Ok(())
        }
        "flood" => {
            // A hostile client of guardd, not a tool: holds N connections to SOCKET, the first
            // FOLLOWERS of them following the tool list and never reading, and every REOPEN_MS
            // opens again those guardd closed (refused, idled out, dropped).
            let n = usize::try_from(num(2)?).map_err(|_| usage("N"))?;
            let followers = usize::try_from(num(3)?).map_err(|_| usage("FOLLOWERS"))?;
            let reopen = Duration::from_millis(u64::try_from(num(4)?).map_err(|_| usage("MS"))?);
            flood(arg(1)?, n, followers, reopen)
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
        "loop-open" | "loop-write-open" => {
            // open(2) + close(2) of PATH, N times, for reading or writing: the cost landlock,
            // seccomp, guardd's judge of write-opens and the kernel programs add to a file
            // syscall (`cargo xtask bench`).
            let path = CString::new(arg(1)?).map_err(|_| usage("NUL in path"))?;
            let n = num(2)?;
            let access = if action[0] == "loop-open" {
                libc::O_RDONLY
            } else {
                libc::O_WRONLY
            };
            let start = std::time::Instant::now();
            for _ in 0..n {
                // SAFETY: path is NUL-terminated; the fd is ours and closed at once.
                let fd = unsafe { libc::open(path.as_ptr(), access | libc::O_CLOEXEC) };
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
        "memfd-exec" => {
            // Copies this very binary into an anonymous memory file and runs that file with the
            // remaining arguments: an exec of an image that has no path on any file system.
            let image = std::fs::read("/proc/self/exe")?;
            let name = CString::new("guard-memfd").map_err(|_| usage("name"))?;
            // SAFETY: name is NUL-terminated; memfd_create returns a new fd or -1.
            let fd = unsafe { libc::memfd_create(name.as_ptr(), 0) };
            if fd < 0 {
                return Err(last_errno());
            }
            // SAFETY: fd was just created and is owned here.
            let mut file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            file.write_all(&image)?;
            let argv = cstrings(action)?;
            let ptrs = nul_terminated(&argv);
            let envp: [*const libc::c_char; 1] = [std::ptr::null()];
            let _ = io::stdout().flush();
            // SAFETY: fd is open; argv and envp are NUL-terminated arrays of NUL-terminated
            // strings that outlive the call; fexecve only returns on failure.
            unsafe { libc::fexecve(fd, ptrs.as_ptr(), envp.as_ptr()) };
            Err(last_errno())
        }
        "execveat" => {
            // execveat(dirfd of arg 1, arg 2, argv = args 2..): an exec by directory handle.
            let dir = CString::new(arg(1)?).map_err(|_| usage("NUL in path"))?;
            // SAFETY: dir is NUL-terminated; open returns a new fd or -1.
            let dirfd = unsafe { libc::open(dir.as_ptr(), libc::O_PATH | libc::O_DIRECTORY) };
            if dirfd < 0 {
                return Err(last_errno());
            }
            let name = CString::new(arg(2)?).map_err(|_| usage("NUL in name"))?;
            let argv = cstrings(&action[2..])?;
            let ptrs = nul_terminated(&argv);
            let envp: [*const libc::c_char; 1] = [std::ptr::null()];
            let _ = io::stdout().flush();
            // SAFETY: as for execve, plus an open directory fd.
            unsafe {
                libc::syscall(
                    libc::SYS_execveat,
                    dirfd,
                    name.as_ptr(),
                    ptrs.as_ptr(),
                    envp.as_ptr(),
                    0,
                )
            };
            Err(last_errno())
        }
        "symlink" => {
            std::os::unix::fs::symlink(arg(1)?, arg(2)?)?;
            println!("symlink {} -> {}", arg(2)?, arg(1)?);
            Ok(())
        }
        "flock" => {
            // flock(LOCK_SH or LOCK_EX, non-blocking) on PATH opened read-only: a lock flock
            // grants whatever the open mode.
            let file = std::fs::File::open(arg(1)?)?;
            let op = if arg(2)? == "ex" {
                libc::LOCK_EX
            } else {
                libc::LOCK_SH
            };
            // SAFETY: flock on a descriptor this action owns.
            if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), op | libc::LOCK_NB) }
                < 0
            {
                return Err(last_errno());
            }
            println!("flocked");
            Ok(())
        }
        "ofd-lock" | "ofd-getlk" | "posix-lock" => {
            // PATH MODE: an OFD or POSIX lock (rd on a read-only descriptor, wr on a read-write
            // one) on byte 0, or an OFD test of it (F_OFD_GETLK).
            let write = arg(2)? == "wr";
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(write)
                .open(arg(1)?)?;
            let cmd = match action[0].as_str() {
                "ofd-lock" => libc::F_OFD_SETLK,
                "posix-lock" => libc::F_SETLK,
                _ => libc::F_OFD_GETLK,
            };
            // SAFETY: all-zero is a valid flock struct.
            let mut lock: libc::flock = unsafe { std::mem::zeroed() };
            lock.l_type = if write { libc::F_WRLCK } else { libc::F_RDLCK } as i16;
            lock.l_whence = libc::SEEK_SET as i16;
            lock.l_len = 1;
            // SAFETY: fcntl with a pointer to a flock struct on this stack.
            if unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&file), cmd, &mut lock) } < 0 {
                return Err(last_errno());
            }
            println!("{} {}", action[0], lock.l_type);
            Ok(())
        }
        "link" => {
            std::fs::hard_link(arg(1)?, arg(2)?)?;
            println!("link {} -> {}", arg(2)?, arg(1)?);
            Ok(())
        }
        "chmod" | "chmod-empty-path" | "fchmod" | "fchmod-read" => {
            // The mode in octal. `chmod` by path (fchmodat); `chmod-empty-path` through an
            // O_PATH descriptor (fchmodat2 with AT_EMPTY_PATH), which opens nothing landlock
            // checks; `fchmod` on a descriptor opened for writing, `fchmod-read` for reading.
            let path = CString::new(arg(1)?).map_err(|_| usage("NUL in path"))?;
            let mode =
                libc::mode_t::from_str_radix(arg(2)?, 8).map_err(|_| usage("not an octal mode"))?;
            // SAFETY: path is NUL-terminated and outlives each call; the rest are integers.
            let rc = unsafe {
                match action[0].as_str() {
                    "chmod" => libc::fchmodat(libc::AT_FDCWD, path.as_ptr(), mode, 0),
                    "chmod-empty-path" => {
                        let fd = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                        if fd < 0 {
                            return Err(last_errno());
                        }
                        libc::syscall(
                            452, // fchmodat2: libc has no name for it
                            fd,
                            c"".as_ptr(),
                            mode,
                            libc::AT_EMPTY_PATH,
                        ) as libc::c_int
                    }
                    writing => {
                        let f = std::fs::OpenOptions::new()
                            .read(writing == "fchmod-read")
                            .append(writing == "fchmod")
                            .open(arg(1)?)?;
                        libc::fchmod(std::os::fd::AsRawFd::as_raw_fd(&f), mode)
                    }
                }
            };
            if rc < 0 {
                return Err(last_errno());
            }
            println!("chmod {} {:o}", arg(1)?, mode);
            Ok(())
        }
        "setflags-read" => {
            // Sets the no-atime inode flag (`chattr +A`) through a descriptor opened for reading.
            let f = std::fs::File::open(arg(1)?)?;
            let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
            let mut flags: libc::c_long = 0;
            // SAFETY: both ioctls read or write one long through the pointer.
            unsafe {
                if libc::ioctl(fd, libc::FS_IOC_GETFLAGS, &mut flags) < 0 {
                    return Err(last_errno());
                }
                flags |= 0x80; // FS_NOATIME_FL
                if libc::ioctl(fd, libc::FS_IOC_SETFLAGS, &flags) < 0 {
                    return Err(last_errno());
                }
            }
            println!("setflags {} {flags:#x}", arg(1)?);
            Ok(())
        }
        "nonblock-stdin" => {
            // Sets O_NONBLOCK on stdin's open file description, which is the caller's.
            // SAFETY: fcntl on stdin with integer arguments.
            let rc = unsafe {
                let flags = libc::fcntl(0, libc::F_GETFL);
                libc::fcntl(0, libc::F_SETFL, flags | libc::O_NONBLOCK)
            };
            if rc < 0 {
                return Err(last_errno());
            }
            println!("nonblock");
            Ok(())
        }
        "tty-echo-off" | "tty-setd" => {
            // On stdin, which the caller's terminal may be: reads its termios (what isatty
            // does), then turns its echo off, or sets its line discipline (to N_TTY, what a
            // terminal has: the attempt is what counts).
            let mut t: libc::termios = unsafe_zeroed_termios();
            // SAFETY: tcgetattr writes one termios into `t`.
            if unsafe { libc::tcgetattr(0, &mut t) } < 0 {
                return Err(last_errno());
            }
            println!("echo {}", t.c_lflag & libc::ECHO != 0);
            let rc = if action[0] == "tty-echo-off" {
                t.c_lflag &= !libc::ECHO;
                // SAFETY: tcsetattr reads `t`.
                unsafe { libc::tcsetattr(0, libc::TCSANOW, &t) }
            } else {
                let n_tty: libc::c_int = 0;
                // SAFETY: TIOCSETD reads one int through the pointer.
                unsafe { libc::ioctl(0, libc::TIOCSETD, &n_tty) }
            };
            if rc < 0 {
                return Err(last_errno());
            }
            println!("{} done", action[0]);
            Ok(())
        }
        "tty-inject" => {
            // Takes stdin's terminal as the controlling one (TIOCSCTTY), then types TEXT into
            // it (TIOCSTI), for whoever reads that terminal next.
            // SAFETY: TIOCSCTTY takes an int argument (0: do not steal).
            if unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } < 0 {
                return Err(last_errno());
            }
            for byte in arg(1)?.as_bytes() {
                // SAFETY: TIOCSTI reads one byte through the pointer.
                if unsafe { libc::ioctl(0, libc::TIOCSTI, byte) } < 0 {
                    return Err(last_errno());
                }
            }
            println!("injected");
            Ok(())
        }
        "setxattr" => {
            let path = CString::new(arg(1)?).map_err(|_| usage("NUL in path"))?;
            let name = CString::new(arg(2)?).map_err(|_| usage("NUL in name"))?;
            let value = arg(3)?;
            // SAFETY: path and name are NUL-terminated; value is read for its length.
            let rc = unsafe {
                libc::setxattr(
                    path.as_ptr(),
                    name.as_ptr(),
                    value.as_ptr().cast(),
                    value.len(),
                    0,
                )
            };
            if rc < 0 {
                return Err(last_errno());
            }
            println!("setxattr {} {}", arg(1)?, arg(2)?);
            Ok(())
        }
        "utime" | "futime" => {
            // Sets both times to the epoch: by path (utimensat with a name), or through a
            // descriptor opened for writing (futimens: utimensat with a NULL name).
            let zero = [libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            }; 2];
            let rc = if action[0] == "utime" {
                let path = CString::new(arg(1)?).map_err(|_| usage("NUL in path"))?;
                // SAFETY: path is NUL-terminated; zero is two timespecs on this stack.
                unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), zero.as_ptr(), 0) }
            } else {
                let f = std::fs::OpenOptions::new().append(true).open(arg(1)?)?;
                // SAFETY: an open descriptor; zero is two timespecs on this stack.
                unsafe { libc::futimens(std::os::fd::AsRawFd::as_raw_fd(&f), zero.as_ptr()) }
            };
            if rc < 0 {
                return Err(last_errno());
            }
            println!("utime {}", arg(1)?);
            Ok(())
        }
        "core-dump" => {
            // Raises its core limit, enters DIR and has a child crash there: the kernel writes
            // the child's memory to DIR/core with core_pattern "core", or hands it to the
            // pattern's helper (systemd-coredump, apport), which runs as root.
            let lim = libc::rlimit {
                rlim_cur: libc::RLIM_INFINITY,
                rlim_max: libc::RLIM_INFINITY,
            };
            // SAFETY: setrlimit reads `lim` from this stack.
            if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &lim) } < 0 {
                return Err(last_errno());
            }
            std::env::set_current_dir(arg(1)?)?;
            let _ = io::stdout().flush();
            // SAFETY: the child only raises a signal (the tool is its pid namespace's init,
            // which ignores its own); the parent waits for it.
            let status = unsafe {
                match libc::fork() {
                    -1 => return Err(last_errno()),
                    0 => {
                        libc::raise(libc::SIGABRT);
                        libc::_exit(0)
                    }
                    pid => {
                        let mut status = 0;
                        libc::waitpid(pid, &mut status, 0);
                        status
                    }
                }
            };
            println!(
                "crashed signal {} core {}",
                libc::WTERMSIG(status),
                libc::WCOREDUMP(status)
            );
            Ok(())
        }
        "ptrace-sibling" => {
            // Forks a child that waits, then tries to attach to it as a debugger would.
            let pid = pausing_child()?;
            // SAFETY: PTRACE_ATTACH takes a pid and no pointers.
            let rc = unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, 0, 0) };
            let err = last_errno();
            reap(pid);
            if rc < 0 {
                return Err(err);
            }
            println!("ptrace attached {pid}");
            Ok(())
        }
        "kill" => {
            // `kill child SIG` forks a waiting child of its own and signals that.
            let sig = num(2)? as libc::c_int;
            let pid = if arg(1)? == "child" {
                pausing_child()?
            } else {
                num(1)? as libc::pid_t
            };
            // SAFETY: kill takes plain integers.
            if unsafe { libc::kill(pid, sig) } < 0 {
                return Err(last_errno());
            }
            println!("killed {pid} {sig}");
            Ok(())
        }
        "prlimit" => {
            // `prlimit PID|child`: lowers the open-files limit of PID (or of a waiting child of
            // its own) to 64, as prlimit(1) --pid would.
            let pid = if arg(1)? == "child" {
                pausing_child()?
            } else {
                num(1)? as libc::pid_t
            };
            let lim = libc::rlimit64 {
                rlim_cur: 64,
                rlim_max: 64,
            };
            // SAFETY: prlimit64 reads `lim` from this stack and writes nothing (null old).
            let rc =
                unsafe { libc::prlimit64(pid, libc::RLIMIT_NOFILE, &lim, std::ptr::null_mut()) };
            let err = last_errno();
            if arg(1)? == "child" {
                reap(pid);
            }
            if rc < 0 {
                return Err(err);
            }
            println!("prlimit {pid}");
            Ok(())
        }
        "renice-user" => {
            // setpriority(PRIO_USER) on the tool's own uid: every process of that user that
            // the tool can see.
            let nice = num(1)? as libc::c_int;
            // SAFETY: integer arguments.
            if unsafe { libc::setpriority(libc::PRIO_USER, 0, nice) } < 0 {
                return Err(last_errno());
            }
            println!("reniced user {nice}");
            Ok(())
        }
        "shm-put" | "shm-get" => {
            // A System V shared memory segment under KEY: `shm-put KEY TEXT` creates it and
            // writes TEXT, `shm-get KEY` prints what it holds.
            let key = num(1)? as libc::key_t;
            let put = action[0] == "shm-put";
            let flags = if put { libc::IPC_CREAT | 0o600 } else { 0 };
            // SAFETY: integer arguments.
            let id = unsafe { libc::shmget(key, 4096, flags) };
            if id < 0 {
                return Err(last_errno());
            }
            // SAFETY: attaches the segment just found at an address the kernel picks.
            let at = unsafe { libc::shmat(id, std::ptr::null(), 0) };
            if at as isize == -1 {
                return Err(last_errno());
            }
            // SAFETY: the segment is 4096 bytes; writes and reads stay within them.
            let mem = unsafe { std::slice::from_raw_parts_mut(at.cast::<u8>(), 4096) };
            if put {
                let text = arg(2)?.as_bytes();
                let n = text.len().min(4095);
                mem[..n].copy_from_slice(&text[..n]);
                mem[n] = 0;
                println!("shm put {key:#x}");
            } else {
                let end = mem.iter().position(|&b| b == 0).unwrap_or(4096);
                println!("shm {}", String::from_utf8_lossy(&mem[..end]));
            }
            // SAFETY: detaches what shmat attached.
            unsafe { libc::shmdt(at) };
            Ok(())
        }
        "udp-recv" => {
            // `udp-recv PORT SECS`: binds UDP PORT on every address, says so, and waits SECS
            // for one datagram.
            let sock = UdpSocket::bind(("0.0.0.0", num(1)? as u16))?;
            println!("bound {}", sock.local_addr()?.port());
            io::stdout().flush()?;
            sock.set_read_timeout(Some(Duration::from_secs(num(2)? as u64)))?;
            let mut buf = [0u8; 512];
            let (n, from) = sock.recv_from(&mut buf)?;
            println!("udp got {n} bytes from {from}");
            Ok(())
        }
        "udp-recverr" => {
            // `udp-recverr 4|6 SECS`: a UDP socket on 127.0.0.1 or ::1 (a port the kernel
            // picks) that asks for ICMP errors on its error queue (IP_RECVERR, IPV6_RECVERR).
            // Prints `port P setsockopt ok|ERRNO recverr N` (N: the option as getsockopt reads
            // it back), then for SECS each error-queue entry's payload as `errqueue TEXT`.
            let v6 = arg(1)? == "6";
            let (sock, level, name) = if v6 {
                let s = UdpSocket::bind(("::1", 0))?;
                (s, libc::SOL_IPV6, libc::IPV6_RECVERR)
            } else {
                let s = UdpSocket::bind(("127.0.0.1", 0))?;
                (s, libc::SOL_IP, libc::IP_RECVERR)
            };
            let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
            let int_len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            let on: libc::c_int = 1;
            // SAFETY: setsockopt reads one int through the pointer.
            let rc = unsafe { libc::setsockopt(fd, level, name, (&raw const on).cast(), int_len) };
            let set = if rc < 0 {
                errno_name(last_errno().0)
            } else {
                "ok"
            };
            let (mut now, mut len): (libc::c_int, _) = (0, int_len);
            // SAFETY: getsockopt writes at most `len` bytes, one int, through the pointer.
            if unsafe { libc::getsockopt(fd, level, name, (&raw mut now).cast(), &mut len) } < 0 {
                return Err(last_errno());
            }
            let port = sock.local_addr()?.port();
            println!("port {port} setsockopt {set} recverr {now}");
            io::stdout().flush()?;
            let end = std::time::Instant::now() + Duration::from_secs(num(2)? as u64);
            let mut buf = [0u8; 1024];
            while std::time::Instant::now() < end {
                let mut iov = libc::iovec {
                    iov_base: buf.as_mut_ptr().cast(),
                    iov_len: buf.len(),
                };
                // SAFETY: an all-zero msghdr is a valid empty one.
                let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
                msg.msg_iov = &raw mut iov;
                msg.msg_iovlen = 1;
                // SAFETY: msg points at one iovec over buf, both live across the call.
                let n = unsafe {
                    libc::recvmsg(fd, &raw mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT)
                };
                if n > 0 {
                    let data = String::from_utf8_lossy(&buf[..n as usize]).into_owned();
                    println!("errqueue {}", data.escape_debug());
                    io::stdout().flush()?;
                } else {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            Ok(())
        }
        "tcp-listen" => {
            // `tcp-listen SECS`: listens without a bind (the kernel picks a port), prints the
            // port, and waits SECS for one connection.
            // SAFETY: socket takes integers and returns a new fd or -1.
            let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
            // SAFETY: listen takes integers.
            if fd < 0 || unsafe { libc::listen(fd, 4) } < 0 {
                return Err(last_errno());
            }
            // SAFETY: sockaddr_in is plain integers; getsockname writes at most `len` bytes.
            let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            // SAFETY: as above.
            if unsafe { libc::getsockname(fd, (&raw mut sa).cast(), &mut len) } < 0 {
                return Err(last_errno());
            }
            println!("listening {}", u16::from_be(sa.sin_port));
            io::stdout().flush()?;
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll on one pollfd on this stack.
            let ready = unsafe { libc::poll(&mut pfd, 1, (num(1)? * 1000) as libc::c_int) };
            if ready <= 0 {
                return Err(Fail(libc::ETIMEDOUT, "no connection".into()));
            }
            // SAFETY: accept on the listening fd, without asking for the peer's address.
            let conn = unsafe { libc::accept(fd, std::ptr::null_mut(), std::ptr::null_mut()) };
            if conn < 0 {
                return Err(last_errno());
            }
            println!("accepted");
            Ok(())
        }
        "ids" => {
            // SAFETY: these getters have no preconditions.
            let (r, e) = unsafe { (libc::getuid(), libc::geteuid()) };
            println!("ruid={r} euid={e}");
            Ok(())
        }
        "daemonize" => {
            // Double fork: the grandchild leaves the session, outlives its parent and sleeps;
            // its pid comes back through a pipe so the test can look for it afterwards.
            let secs = num(1)? as u32;
            let mut fds = [0; 2];
            // SAFETY: fds has room for two descriptors.
            if unsafe { libc::pipe(fds.as_mut_ptr()) } < 0 {
                return Err(last_errno());
            }
            // SAFETY: the children only call async-signal-safe functions before _exit.
            match unsafe { libc::fork() } {
                -1 => return Err(last_errno()),
                // SAFETY: in the child: async-signal-safe calls only, then _exit.
                0 => unsafe {
                    libc::setsid();
                    match libc::fork() {
                        0 => {
                            let me = libc::getpid();
                            libc::write(fds[1], (&raw const me).cast(), 4);
                            libc::close(fds[1]);
                            libc::sleep(secs);
                            libc::_exit(0)
                        }
                        _ => libc::_exit(0),
                    }
                },
                child => {
                    let mut pid: libc::pid_t = 0;
                    // SAFETY: reaps our own child; reads 4 bytes into a 4-byte integer.
                    unsafe {
                        libc::close(fds[1]);
                        libc::waitpid(child, std::ptr::null_mut(), 0);
                        libc::read(fds[0], (&raw mut pid).cast(), 4);
                    }
                    println!("daemonized {}", pid_token(pid));
                }
            }
            Ok(())
        }
        "env" => {
            for (k, v) in std::env::vars_os() {
                println!("env {}={}", k.to_string_lossy(), v.to_string_lossy());
            }
            println!("env end");
            Ok(())
        }
        "unix-connect" => {
            // Connects to a Unix socket and, if that works, sends one line and prints the reply.
            let mut s = std::os::unix::net::UnixStream::connect(arg(1)?)?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.write_all(b"{\"v\":1,\"type\":\"status\"}\n")?;
            let mut reply = String::new();
            let _ = io::BufRead::read_line(&mut io::BufReader::new(s), &mut reply);
            println!("unix-connect reply {}", reply.trim());
            Ok(())
        }
        "net" => {
            // net PROTO MODE HOST:PORT: one datagram or stream byte over a socket of protocol
            // PROTO (tcp mptcp udp udplite icmp), sent by MODE: `connect` (connect(2), then
            // send), `sendto` (sendto(2) with the address; TCP and MPTCP with MSG_FASTOPEN, a
            // connect without connect(2)).
            let addr = resolve(arg(3)?)?;
            let v6 = addr.is_ipv6();
            let (ty, proto) = match arg(1)? {
                "tcp" => (libc::SOCK_STREAM, libc::IPPROTO_TCP),
                "mptcp" => (libc::SOCK_STREAM, libc::IPPROTO_MPTCP),
                "udp" => (libc::SOCK_DGRAM, libc::IPPROTO_UDP),
                "udplite" => (libc::SOCK_DGRAM, libc::IPPROTO_UDPLITE),
                "icmp" if v6 => (libc::SOCK_DGRAM, libc::IPPROTO_ICMPV6),
                "icmp" => (libc::SOCK_DGRAM, libc::IPPROTO_ICMP),
                _ => return Err(usage("proto: tcp mptcp udp udplite icmp")),
            };
            let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
            // SAFETY: socket takes plain integers and returns a new fd or -1.
            let fd = unsafe { libc::socket(family, ty | libc::SOCK_CLOEXEC, proto) };
            if fd < 0 {
                return Err(last_errno());
            }
            // SAFETY: fd was just opened and is owned here.
            let _owned =
                unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            let (sa, len) = sockaddr(&addr);
            // An ICMP echo request (type 8, or 128 for ICMPv6); the kernel fills in the
            // identifier and the checksum of a ping socket.
            let payload: &[u8] = match (arg(1)?, v6) {
                ("icmp", false) => b"\x08\0\0\0\0\0\0\x01guard-testtool",
                ("icmp", true) => b"\x80\0\0\0\0\0\0\x01guard-testtool",
                _ => b"guard-testtool",
            };
            let sa_ptr = (&raw const sa).cast::<libc::sockaddr>();
            let n = match arg(2)? {
                "connect" => {
                    // SAFETY: sa is a live sockaddr of `len` bytes; payload outlives the call.
                    unsafe {
                        if libc::connect(fd, sa_ptr, len) < 0 {
                            return Err(last_errno());
                        }
                        libc::send(
                            fd,
                            payload.as_ptr().cast(),
                            payload.len(),
                            libc::MSG_NOSIGNAL,
                        )
                    }
                }
                "sendto" => {
                    let flags = if ty == libc::SOCK_STREAM {
                        libc::MSG_FASTOPEN | libc::MSG_NOSIGNAL
                    } else {
                        libc::MSG_NOSIGNAL
                    };
                    // SAFETY: as above.
                    unsafe {
                        libc::sendto(
                            fd,
                            payload.as_ptr().cast(),
                            payload.len(),
                            flags,
                            sa_ptr,
                            len,
                        )
                    }
                }
                _ => return Err(usage("mode: connect sendto")),
            };
            if n < 0 {
                return Err(last_errno());
            }
            println!("net {} {} {addr} sent {n}", arg(1)?, arg(2)?);
            Ok(())
        }
        "ipopt" => {
            // ipopt OPT PROTO HOST:PORT: a TCP connect (non-blocking: the SYN leaves at connect
            // and nobody need answer it) or a UDP sendto to HOST:PORT, from a socket whose
            // packets carry OPT: `rr` (an IPv4 record-route option), `lsrr=HOP` (an IPv4 loose
            // source route through HOP) or `srh=HOP` (an IPv6 segment routing header through
            // HOP). A source route sends the packet to HOP first, not to HOST.
            let addr = resolve(arg(3)?)?;
            let ty = match arg(2)? {
                "tcp" => libc::SOCK_STREAM,
                "udp" => libc::SOCK_DGRAM,
                _ => return Err(usage("proto: tcp udp")),
            };
            let (level, name, opt) = ip_option(arg(1)?)?;
            let family = if addr.is_ipv4() {
                libc::AF_INET
            } else {
                libc::AF_INET6
            };
            // SAFETY: socket takes plain integers and returns a new fd or -1.
            let fd = unsafe { libc::socket(family, ty | libc::SOCK_CLOEXEC, 0) };
            if fd < 0 {
                return Err(last_errno());
            }
            // SAFETY: fd was just opened and is owned here.
            let _owned =
                unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            let (sa, len) = sockaddr(&addr);
            let sa_ptr = (&raw const sa).cast::<libc::sockaddr>();
            let payload = b"guard-testtool";
            // SAFETY: opt, sa and payload are live buffers of the lengths given; fd is ours.
            let n = unsafe {
                if libc::setsockopt(
                    fd,
                    level,
                    name,
                    opt.as_ptr().cast(),
                    opt.len() as libc::socklen_t,
                ) < 0
                {
                    return Err(last_errno());
                }
                if ty == libc::SOCK_STREAM {
                    libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK);
                    if libc::connect(fd, sa_ptr, len) < 0
                        && io::Error::last_os_error().raw_os_error() != Some(libc::EINPROGRESS)
                    {
                        return Err(last_errno());
                    }
                    std::thread::sleep(Duration::from_millis(200));
                    0
                } else {
                    libc::sendto(fd, payload.as_ptr().cast(), payload.len(), 0, sa_ptr, len)
                }
            };
            if n < 0 {
                return Err(last_errno());
            }
            println!("ipopt {} {} {addr} sent {n}", arg(1)?, arg(2)?);
            Ok(())
        }
        "exit" => std::process::exit(num(1)? as i32),
        other => Err(usage(&format!("unknown action {other}"))),
    }
}

fn cstrings(args: &[String]) -> Result<Vec<CString>, Fail> {
    args.iter()
        .map(|a| CString::new(a.as_str()).map_err(|_| usage("NUL in argument")))
        .collect()
}

fn nul_terminated(args: &[CString]) -> Vec<*const libc::c_char> {
    let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    ptrs
}

/// The socket option (level, name, value) that puts `spec` (`rr`, `lsrr=HOP`, `srh=HOP`) on every
/// packet a socket sends.
fn ip_option(spec: &str) -> Result<(i32, i32, Vec<u8>), Fail> {
    let (kind, hop) = spec.split_once('=').unwrap_or((spec, ""));
    Ok(match kind {
        // Record route (7): length 7, pointer 4, room for one address; then a NOP to align.
        "rr" => (
            libc::IPPROTO_IP,
            libc::IP_OPTIONS,
            vec![7, 7, 4, 0, 0, 0, 0, 1],
        ),
        // NOP, then LSRR (131), length 7, pointer 4, the first hop: the kernel sends the packet
        // to that hop and puts the destination last in the route.
        "lsrr" => {
            let hop: std::net::Ipv4Addr = hop.parse().map_err(|_| usage("lsrr=IPv4"))?;
            let mut opt = vec![1, 131, 7, 4];
            opt.extend(hop.octets());
            (libc::IPPROTO_IP, libc::IP_OPTIONS, opt)
        }
        // A segment routing header (type 4) of two segments, one left: the kernel puts the
        // destination in segment 0 and sends the packet to segment 1, the hop.
        "srh" => {
            let hop: std::net::Ipv6Addr = hop.parse().map_err(|_| usage("srh=IPv6"))?;
            // next header (the kernel's), length in 8 octets past the first, type, segments
            // left, last entry, flags, tag.
            let mut opt = vec![0, 4, 4, 1, 1, 0, 0, 0];
            opt.extend([0; 16]);
            opt.extend(hop.octets());
            (libc::IPPROTO_IPV6, libc::IPV6_RTHDR, opt)
        }
        _ => return Err(usage("OPT: rr lsrr=HOP srh=HOP")),
    })
}

/// `addr` as a C socket address and its length.
fn sockaddr(addr: &std::net::SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        std::net::SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than, and aligned for, sockaddr_in.
            unsafe { std::ptr::write((&raw mut ss).cast(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        std::net::SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than, and aligned for, sockaddr_in6.
            unsafe { std::ptr::write((&raw mut ss).cast(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// A DNS query (recursion desired) with one question: NAME of QTYPE, class IN.
fn dns_question(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut q = Vec::with_capacity(12 + name.len() + 6);
    for word in [id, 0x0100, 1, 0, 0, 0] {
        q.extend(word.to_be_bytes());
    }
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend(label.as_bytes());
    }
    q.push(0);
    q.extend(qtype.to_be_bytes());
    q.extend(1u16.to_be_bytes());
    q
}

fn resolve(hostport: &str) -> Result<std::net::SocketAddr, Fail> {
    hostport
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| usage("no address"))
}

/// A child that waits for a signal, forked for an action to act on.
fn pausing_child() -> Result<libc::pid_t, Fail> {
    // SAFETY: the child only pauses; no locks are taken after fork.
    match unsafe { libc::fork() } {
        -1 => Err(last_errno()),
        0 => loop {
            // SAFETY: pause is async-signal-safe.
            unsafe { libc::pause() };
        },
        pid => Ok(pid),
    }
}

/// A termios to be filled in by tcgetattr.
fn unsafe_zeroed_termios() -> libc::termios {
    // SAFETY: termios is a plain C struct of integers and arrays, valid when zeroed.
    unsafe { std::mem::zeroed() }
}

/// Kills and reaps a child of [`pausing_child`].
fn reap(pid: libc::pid_t) {
    // SAFETY: kill and waitpid on our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
}

/// A pid of the call's as the test can find it on the host: `PID@pid:[INODE]`, its number in
/// the call's pid namespace and that namespace (`support::host_pid`). The call's own `/proc`
/// is its pid namespace's, so no number of the host's is there to read.
fn pid_token(pid: libc::pid_t) -> String {
    let ns = std::fs::read_link("/proc/self/ns/pid").unwrap_or_default();
    format!("{pid}@{}", ns.display())
}

/// The `flood` action: see its arm. Runs until killed; prints `flooding N` once the first N
/// connections were made.
fn flood(socket: &str, n: usize, followers: usize, reopen: Duration) -> Res {
    use std::os::{fd::AsRawFd, unix::net::UnixStream};
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a valid rlimit to fill and then to pass back.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
    let open = |i: usize| -> Option<UnixStream> {
        let mut s = UnixStream::connect(socket).ok()?;
        if i < followers {
            // Refused or not, it stays: a silent follower reads nothing.
            let _ = s.write_all(b"{\"v\":1,\"type\":\"tools\",\"follow\":true}\n");
        }
        Some(s)
    };
    let mut conns: Vec<Option<UnixStream>> = (0..n).map(open).collect();
    println!("flooding {n}");
    let _ = io::stdout().flush();
    loop {
        std::thread::sleep(reopen);
        let mut polled: Vec<libc::pollfd> = conns
            .iter()
            .map(|c| libc::pollfd {
                fd: c.as_ref().map_or(-1, AsRawFd::as_raw_fd),
                events: libc::POLLRDHUP,
                revents: 0,
            })
            .collect();
        // SAFETY: `polled` is an array of that many pollfds; a negative fd is skipped.
        unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, 0) };
        for (i, p) in polled.iter().enumerate() {
            let closed =
                p.fd < 0 || p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0;
            if closed {
                conns[i] = open(i);
            }
        }
    }
}

/// Sends `frame` on a new connection to `socket` with descriptors 0, 1 and 2, and reads the
/// first line of the answer.
fn send(socket: &str, frame: &[u8]) -> Result<String, Fail> {
    use std::{io::BufRead as _, os::fd::AsRawFd as _, os::unix::net::UnixStream};
    let s = UnixStream::connect(socket)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let fds: [libc::c_int; 3] = [0, 1, 2];
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: frame.as_ptr() as *mut libc::c_void,
        iov_len: frame.len(),
    };
    // SAFETY: a zeroed msghdr is valid; its pointers are set to live buffers below, and the
    // control message is written within `control` (CMSG_SPACE of three ints is 32 bytes).
    let sent = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(12) as _;
        let c = libc::CMSG_FIRSTHDR(&raw const msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(12) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast(), 3);
        libc::sendmsg(s.as_raw_fd(), &raw const msg, 0)
    };
    if sent < 0 {
        return Err(last_errno());
    }
    // The descriptors went with the first bytes; the rest of a long frame follows.
    (&s).write_all(&frame[sent as usize..])?;
    let mut line = String::new();
    io::BufReader::new(&s).read_line(&mut line)?;
    Ok(line.trim_end().to_owned())
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
        libc::EXDEV => "EXDEV",
        libc::ESRCH => "ESRCH",
        libc::ENOEXEC => "ENOEXEC",
        libc::ETXTBSY => "ETXTBSY",
        0 => "USAGE",
        _ => "E?",
    }
}

/// A thread of its own working directory (cloned without `CLONE_FS`) moves to `dir` and opens
/// `/proc/self/cwd/NAME` for writing: `self` is the process, so the open lands in the
/// process's (the leader's) working directory, not the thread's. Writes `text` there.
fn thread_write_self_cwd(dir: &str, name: &str, text: &str) -> Res {
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::SeqCst};
    struct Job {
        dir: CString,
        name: CString,
        result: AtomicI64,
        done: AtomicBool,
    }
    extern "C" fn thread(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the leader's Job, kept alive until `done` is set.
        let job = unsafe { &*(arg as *const Job) };
        // Raw syscalls: the thread has no thread-local storage of its own (no CLONE_SETTLS).
        // SAFETY: NUL-terminated names; the results are plain integers.
        let result = unsafe {
            if libc::syscall(libc::SYS_chdir, job.dir.as_ptr()) < 0 {
                -i64::from(*libc::__errno_location())
            } else {
                let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC;
                let fd = libc::syscall(
                    libc::SYS_openat,
                    libc::AT_FDCWD,
                    job.name.as_ptr(),
                    flags,
                    0o644,
                );
                if fd < 0 {
                    -i64::from(*libc::__errno_location())
                } else {
                    fd
                }
            }
        };
        job.result.store(result, SeqCst);
        job.done.store(true, SeqCst);
        // SAFETY: ends this thread only; it touches nothing of the leader's after `done`.
        unsafe { libc::syscall(libc::SYS_exit, 0) };
        0
    }
    let job = Job {
        dir: CString::new(dir).map_err(|_| usage("NUL in dir"))?,
        name: CString::new(format!("/proc/self/cwd/{name}")).map_err(|_| usage("NUL in name"))?,
        result: AtomicI64::new(0),
        done: AtomicBool::new(false),
    };
    let mut stack = vec![0u8; 256 * 1024];
    let flags = libc::CLONE_VM
        | libc::CLONE_SIGHAND
        | libc::CLONE_THREAD
        | libc::CLONE_FILES
        | libc::CLONE_SYSVSEM;
    // SAFETY: the stack is ours and outlives the thread (the leader waits for `done`, and the
    // thread exits right after); `job` likewise.
    let tid = unsafe {
        libc::clone(
            thread,
            stack.as_mut_ptr().add(stack.len()).cast(),
            flags,
            std::ptr::from_ref(&job).cast_mut().cast(),
        )
    };
    if tid < 0 {
        return Err(io::Error::last_os_error().into());
    }
    while !job.done.load(SeqCst) {
        std::thread::yield_now();
    }
    // Let the thread's exit finish with the stack before it is freed.
    std::thread::sleep(Duration::from_millis(20));
    let result = job.result.load(SeqCst);
    if result < 0 {
        let errno = i32::try_from(-result).unwrap_or(0);
        return Err(Fail(errno, format!("opening {name} in a thread")));
    }
    // SAFETY: the descriptor the thread opened, shared through CLONE_FILES, owned by nothing else.
    let mut f = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(result as i32) };
    f.write_all(text.as_bytes())?;
    println!("wrote {name} from a thread in {dir}");
    Ok(())
}
