//! The write and exec judge's walk and rights, against real files.
use std::os::{
    fd::AsRawFd as _,
    unix::{ffi::OsStrExt as _, fs::MetadataExt as _},
};

use super::*;

fn id_of(p: &std::path::Path) -> Id {
    let m = std::fs::metadata(p).expect("stat");
    (m.dev(), m.ino())
}

#[test]
fn rights_add_up_along_the_chain() {
    let mut rules = WriteRules::default();
    rules.by_identity.insert((1, 2), AccessFs::MakeReg.into());
    rules.by_identity.insert((1, 3), AccessFs::WriteFile.into());
    let both = AccessFs::MakeReg | AccessFs::WriteFile;
    assert!(rules.grant(&[(1, 1), (1, 2), (1, 3), (1, 4)], both));
    assert!(!rules.grant(&[(1, 1), (1, 2)], both));
    assert!(rules.grant(&[(1, 2)], AccessFs::MakeReg.into()));
    assert!(!rules.grant(&[(1, 1), (1, 9)], AccessFs::WriteFile.into()));
}

#[test]
fn a_name_is_found_as_its_thread_would_find_it() {
    let dir = crate::audit::testdir::TestDir::new("walk");
    let base = std::fs::canonicalize(dir.path()).expect("real path");
    let ws = base.join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    std::fs::write(ws.join("file"), "x").expect("write");
    std::os::unix::fs::symlink(&ws, base.join("link")).expect("symlink");
    std::os::unix::fs::symlink(ws.join("new"), base.join("dangling")).expect("symlink");
    let open = |p: &std::path::Path| {
        nix::fcntl::open(p, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).expect("open")
    };
    let root = Root::slash().expect("/");
    let walker = Walker {
        pid: std::process::id() as i32,
        root: &root,
    };
    // Through a link: the file, and its directory on the chain.
    match walker.find(Some(open(&base)), b"link/./file", false) {
        Ok(Found::File { chain, .. }) => {
            assert_eq!(chain.last(), Some(&id_of(&ws.join("file"))));
            assert!(chain.contains(&id_of(&ws)) && chain.contains(&id_of(&base)));
        }
        _ => panic!("link/file not found"),
    }
    // A dangling link, created through: the file it names, in its directory.
    match walker.find(Some(open(&base)), b"dangling", false) {
        Ok(Found::New { chain, name, .. }) => {
            assert_eq!(name, "new");
            assert_eq!(chain.last(), Some(&id_of(&ws)));
        }
        _ => panic!("dangling not found"),
    }
    // procfs's `self` is the thread's, however the name reaches it.
    let file = std::fs::File::open(ws.join("file")).expect("open");
    let name = format!("//proc/./self/fd/{}", file.as_raw_fd());
    match walker.find(Some(open(&base)), name.as_bytes(), false) {
        Ok(Found::File { chain, .. }) => {
            assert_eq!(chain.last(), Some(&id_of(&ws.join("file"))));
        }
        _ => panic!("{name} not found"),
    }
    // An absolute name needs no directory to start at; a relative one does.
    let absolute = ws.join("file");
    match walker.find(None, absolute.as_os_str().as_bytes(), false) {
        Ok(Found::File { stat, chain, .. }) => {
            assert_eq!((stat.st_dev, stat.st_ino), id_of(&absolute));
            assert_eq!(chain.last(), Some(&id_of(&absolute)));
            assert_eq!(chain.first(), Some(&id_of(std::path::Path::new("/"))));
        }
        _ => panic!("{absolute:?} not found"),
    }
    assert!(matches!(
        walker.find(None, b"file", false),
        Err(Lost::Fails)
    ));
    let missing = walker.find(Some(open(&base)), b"missing/x", false);
    assert!(matches!(missing, Err(Lost::Fails)));
    let nofollow = walker.find(Some(open(&base)), b"link", true);
    assert!(matches!(nofollow, Err(Lost::Fails)), "O_NOFOLLOW");
}

#[test]
fn procfs_self_is_the_thread_s_process_and_thread_self_the_thread() {
    let root = Root::slash().expect("/");
    let (tx, rx) = std::sync::mpsc::channel();
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        // SAFETY: gettid takes no arguments.
        tx.send(unsafe { libc::gettid() }).expect("send");
        let _ = wait.recv();
    });
    let tid = rx.recv().expect("tid");
    let walker = Walker {
        pid: tid,
        root: &root,
    };
    let found = |name: &str| match walker.find(None, name.as_bytes(), false) {
        Ok(Found::File { stat, .. }) => (stat.st_dev, stat.st_ino),
        _ => panic!("{name} not found"),
    };
    // The kernel resolves `self` to the thread group's directory, whatever thread asks: a
    // thread that unshared its working directory would otherwise hide where its opens go.
    let process = id_of(std::path::Path::new(&format!(
        "/proc/{}",
        std::process::id()
    )));
    assert_eq!(found("/proc/self"), process);
    assert_eq!(found("/proc/thread-self"), found(&format!("/proc/{tid}")));
    assert_ne!(found("/proc/thread-self"), process);
    done.send(()).expect("send");
    thread.join().expect("join");
}

#[test]
fn a_directory_deeper_than_the_walk_follows_is_granted_by_no_rule() {
    let dir = crate::audit::testdir::TestDir::new("deep");
    let root = Root::slash().expect("/");
    let walker = Walker {
        pid: std::process::id() as i32,
        root: &root,
    };
    let flags = OFlag::O_PATH | OFlag::O_CLOEXEC;
    let mut at = nix::fcntl::open(dir.path(), flags, Mode::empty()).expect("open");
    for _ in 0..=walk::MAX_DEPTH {
        nix::sys::stat::mkdirat(&at, "d", Mode::from_bits_truncate(0o755)).expect("mkdir");
        at = nix::fcntl::openat(&at, "d", flags, Mode::empty()).expect("open");
    }
    // A `..` from there climbs past what the walk knows of: not "no such name", unknown.
    let found = walker.find(Some(at), b"x", false);
    assert!(matches!(found, Err(Lost::Unfollowed)));
}
