//! Landlock ABI 1 to 3 on any kernel: a ruleset prepared for an older ABI
//! (`landlock::prepare_for`) holds only that ABI's rights, and a newer kernel enforces it as the
//! older one would. Each ABI's ruleset is enforced in a forked child (never in this process),
//! which tries the same file operations and reports each errno back. What ABI 1 and 2 lose
//! (truncation under a directory opened up for a new file) is shown beside what the launch does
//! about it: refuses such a plan, naming the tool, the right and the ABI.

use std::{ffi::CString, fs, os::fd::AsRawFd as _, path::Path};

use guard::sandbox::landlock::{
    self, CREATE_IN, FsRule, LandlockError, LandlockRules, Origin, READ_TREE, WRITE_TREE,
};

use super::support::TempDir;

/// The operations the child tries, in order, and their names for the failure messages.
const OPS: [&str; 6] = [
    "read ro/file",
    "write ro/file",
    "create rw/new",
    "rename rw/a to rw/sub/a",
    "truncate widened/existing",
    "create widened/new",
];

fn rule(path: &Path, access: landlock::Access) -> FsRule {
    FsRule {
        path: path.to_owned(),
        access,
        origin: Origin::Policy,
    }
}

/// A tree with a read-only, a writable and an opened-up directory, and rules for each.
fn setup() -> (TempDir, LandlockRules) {
    let dir = TempDir::new("guard-landlock-abi");
    for sub in ["ro", "rw/sub", "widened"] {
        fs::create_dir_all(dir.join(sub)).expect("mkdir");
    }
    fs::write(dir.join("ro/file"), "keep").expect("write");
    fs::write(dir.join("rw/a"), "a").expect("write");
    fs::write(dir.join("widened/existing"), "keep").expect("write");
    let rules = LandlockRules {
        tool: "abi-test".into(),
        fs: vec![
            rule(&dir.join("ro"), READ_TREE),
            rule(&dir.join("rw"), WRITE_TREE),
            rule(&dir.join("widened"), CREATE_IN),
        ],
        kernel_judges: true,
        ..LandlockRules::default()
    };
    (dir, rules)
}

/// Enforces `rules` prepared for `abi` in a forked child that tries [`OPS`]; each one's errno
/// (0: it succeeded).
fn errnos(abi: i32, dir: &TempDir, rules: &LandlockRules) -> Vec<i32> {
    let prepared = landlock::prepare_for(abi, rules, false).expect("prepare");
    let c =
        |p: &str| CString::new(dir.join(p).into_os_string().into_encoded_bytes()).expect("a path");
    let paths = [
        c("ro/file"),
        c("rw/new"),
        c("rw/a"),
        c("rw/sub/a"),
        c("widened/existing"),
        c("widened/new"),
    ];
    let (read, write) = nix::unistd::pipe().expect("pipe");
    // SAFETY: the child makes raw syscalls only (restrict_self is async-signal-safe) and exits.
    match unsafe { nix::unistd::fork() }.expect("fork") {
        nix::unistd::ForkResult::Child => {
            // SAFETY: raw syscalls on buffers built before fork; the child ends with _exit.
            unsafe {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                if prepared.restrict_self(c"/proc", false, None).is_err() {
                    libc::_exit(2);
                }
                let errno = || *libc::__errno_location();
                let open = |p: &CString, flags| {
                    let fd = libc::open(p.as_ptr(), flags | libc::O_CLOEXEC, 0o644);
                    if fd < 0 {
                        errno()
                    } else {
                        libc::close(fd);
                        0
                    }
                };
                let rc = |r: libc::c_int| if r < 0 { errno() } else { 0 };
                let results: [i32; 6] = [
                    open(&paths[0], libc::O_RDONLY),
                    open(&paths[0], libc::O_WRONLY),
                    open(&paths[1], libc::O_WRONLY | libc::O_CREAT),
                    rc(libc::rename(paths[2].as_ptr(), paths[3].as_ptr())),
                    rc(libc::truncate(paths[4].as_ptr(), 0)),
                    open(&paths[5], libc::O_WRONLY | libc::O_CREAT),
                ];
                libc::write(
                    write.as_raw_fd(),
                    results.as_ptr().cast(),
                    size_of_val(&results),
                );
                libc::_exit(0);
            }
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(write);
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut fs::File::from(read), &mut bytes).expect("read");
            let status = nix::sys::wait::waitpid(child, None).expect("waitpid");
            assert_eq!(
                status,
                nix::sys::wait::WaitStatus::Exited(child, 0),
                "the child could not restrict itself at ABI {abi}"
            );
            bytes
                .chunks_exact(4)
                .map(|b| i32::from_ne_bytes(b.try_into().expect("four bytes")))
                .collect()
        }
    }
}

#[test]
fn landlock_abi_1_to_3_enforce_their_own_rights_and_no_more() {
    // Every ABI up to the kernel's own: on Debian 12's 6.1 (`cargo xtask vm bookworm`), ABI 1
    // and 2 on a kernel that has no more.
    if landlock::kernel_abi() < 1 {
        eprintln!("skipping: this kernel has no landlock");
        return;
    }
    for abi in 1..=landlock::kernel_abi().min(6) {
        let (dir, rules) = setup();
        let got = errnos(abi, &dir, &rules);
        let refer = if abi < landlock::abi::REFER {
            libc::EXDEV
        } else {
            0
        };
        let truncate = if abi < landlock::abi::TRUNCATE {
            0
        } else {
            libc::EACCES
        };
        let want = [0, libc::EACCES, 0, refer, truncate, 0];
        for ((op, got), want) in OPS.iter().zip(&got).zip(want) {
            assert_eq!(*got, want, "ABI {abi}: {op}: errno {got}, expected {want}");
        }
        // What ABI 1 and 2 let through is the file's content: kept at ABI 3 and later.
        let left = fs::read_to_string(dir.join("widened/existing")).expect("read");
        assert_eq!(left.is_empty(), abi < landlock::abi::TRUNCATE, "ABI {abi}");
    }
}

#[test]
fn landlock_below_abi_3_refuses_a_launch_that_opens_up_a_directory() {
    let (dir, mut rules) = setup();
    rules.widened = vec![(dir.join("widened/new"), dir.join("widened"))];
    for abi in 1..landlock::abi::TRUNCATE {
        match landlock::prepare_for(abi, &rules, false) {
            Err(
                e @ LandlockError::Lacks {
                    right: "TRUNCATE", ..
                },
            ) => {
                let text = e.to_string();
                assert!(text.contains("tool abi-test"), "{text}");
                assert!(text.contains(&format!("ABI {abi}")), "{text}");
                assert!(text.contains("widened/new"), "{text}");
            }
            other => panic!("ABI {abi}: expected a refusal, got {other:?}"),
        }
    }
    // Control: with TRUNCATE the same plan is prepared (and is the kernel's to enforce).
    if landlock::kernel_abi() >= landlock::abi::TRUNCATE {
        landlock::prepare_for(landlock::abi::TRUNCATE, &rules, false).expect("prepared at ABI 3");
    }
}
