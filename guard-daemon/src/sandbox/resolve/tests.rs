//! The walk on a real directory tree: root's links followed, anyone else's refused.

use std::{
    fs,
    os::{fd::AsRawFd as _, unix::fs::PermissionsExt as _},
};

use super::*;

/// A fresh root-owned directory (0755) for one test, or `None` when not run as root.
fn tree(name: &str) -> Option<PathBuf> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: the walk trusts root's links, and these tests make them as root");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("guard-resolve-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("data")).expect("mkdir");
    fs::write(dir.join("data/f"), "x").expect("write");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
    Some(dir)
}

fn subdir(dir: &Path, name: &str, mode: u32) -> PathBuf {
    let sub = dir.join(name);
    fs::create_dir(&sub).expect("mkdir");
    fs::set_permissions(&sub, fs::Permissions::from_mode(mode)).expect("chmod");
    sub
}

/// What `path` opens, by the path the kernel gives its descriptor.
fn opened(path: &Path, flags: OFlag) -> Result<PathBuf, ResolveError> {
    let fd = open(path, flags)?;
    Ok(fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("readlink"))
}

#[test]
fn root_s_links_in_root_s_directories_are_followed() {
    let Some(dir) = tree("root") else { return };
    std::os::unix::fs::symlink(dir.join("data"), dir.join("abs")).expect("symlink");
    std::os::unix::fs::symlink("data/../data", dir.join("rel")).expect("symlink");
    let f = dir.join("data/f");
    assert_eq!(opened(&dir.join("abs/f"), OFlag::empty()).expect("abs"), f);
    assert_eq!(opened(&dir.join("rel/f"), OFlag::empty()).expect("rel"), f);
    assert_eq!(
        opened(&dir.join("rel"), OFlag::O_DIRECTORY).expect("dir"),
        dir.join("data")
    );
    assert!(matches!(
        open(&dir.join("rel/f"), OFlag::O_DIRECTORY),
        Err(ResolveError::Sys(Errno::ENOTDIR))
    ));
    assert!(matches!(
        open(&dir.join("abs/missing"), OFlag::empty()),
        Err(ResolveError::Sys(Errno::ENOENT))
    ));
    // A sticky directory: no one else may replace root's entry.
    let sticky = subdir(&dir, "sticky", 0o1777);
    std::os::unix::fs::symlink(dir.join("data"), sticky.join("l")).expect("symlink");
    assert_eq!(
        opened(&sticky.join("l"), OFlag::empty()).expect("sticky"),
        dir.join("data")
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_link_anyone_else_could_point_elsewhere_is_refused() {
    let Some(dir) = tree("other") else { return };
    let nobody = 65534;
    // Root's link in a directory others may write: they could replace it.
    let open_dir = subdir(&dir, "ww", 0o777);
    std::os::unix::fs::symlink("/", open_dir.join("l")).expect("symlink");
    // Someone else's link in root's directory.
    std::os::unix::fs::symlink("/", dir.join("theirs")).expect("symlink");
    std::os::unix::fs::lchown(dir.join("theirs"), Some(nobody), Some(nobody)).expect("lchown");
    // Root's link in someone else's directory.
    let their_dir = subdir(&dir, "home", 0o755);
    std::os::unix::fs::chown(&their_dir, Some(nobody), Some(nobody)).expect("chown");
    std::os::unix::fs::symlink("/", their_dir.join("l")).expect("symlink");
    for (path, why) in [
        (open_dir.join("l/etc"), "others may write"),
        (dir.join("theirs/etc"), "only root may change"),
        (their_dir.join("l/etc"), "not owned by root"),
    ] {
        match open(&path, OFlag::empty()) {
            Err(ResolveError::Untrusted { writable, .. }) => assert_eq!(writable, why, "{path:?}"),
            other => panic!("{path:?} was opened: {other:?}"),
        }
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_loop_of_links_is_an_error() {
    let Some(dir) = tree("loop") else { return };
    std::os::unix::fs::symlink(dir.join("b"), dir.join("a")).expect("symlink");
    std::os::unix::fs::symlink(dir.join("a"), dir.join("b")).expect("symlink");
    assert!(matches!(
        open(&dir.join("a"), OFlag::empty()),
        Err(ResolveError::TooManyLinks)
    ));
    let _ = fs::remove_dir_all(&dir);
}

/// What the walk that stands in for `openat2(RESOLVE_BENEATH)` opens of `rel` beneath `root`,
/// by the path the kernel gives its descriptor (the fallback where openat2 answers ENOSYS).
fn walked_beneath(root: &Path, rel: &str) -> Result<PathBuf, ResolveError> {
    let root_fd = open(root, OFlag::O_DIRECTORY)?;
    let base = Dir {
        stat: nix::sys::stat::fstat(&root_fd)?,
        fd: root_fd,
        path: root.to_owned(),
    };
    let fd = walk(vec![base], Path::new(rel), Links::Beneath, OFlag::empty())?;
    Ok(fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("readlink"))
}

#[test]
fn the_walk_beneath_a_root_answers_as_openat2_does() {
    let Some(dir) = tree("beneath") else { return };
    let ws = subdir(&dir, "ws", 0o755);
    fs::create_dir(ws.join("sub")).expect("mkdir");
    fs::write(ws.join("sub/f"), "x").expect("write");
    std::os::unix::fs::symlink("sub/f", ws.join("rel")).expect("symlink");
    std::os::unix::fs::symlink("../data/f", ws.join("up")).expect("symlink");
    std::os::unix::fs::symlink(dir.join("data/f"), ws.join("abs")).expect("symlink");
    std::os::unix::fs::symlink("/proc/self/root/etc", ws.join("magic")).expect("symlink");
    // Inside: both open the same file, through a link of anyone's.
    for rel in ["sub/f", "rel", "sub/../rel", "./sub//f"] {
        let by_openat2 = beneath(&ws, &ws.join(rel)).expect(rel);
        let by_openat2 = fs::read_link(format!("/proc/self/fd/{}", by_openat2.as_raw_fd()));
        assert_eq!(
            walked_beneath(&ws, rel).expect(rel),
            ws.join("sub/f"),
            "{rel}"
        );
        assert_eq!(by_openat2.expect("readlink"), ws.join("sub/f"), "{rel}");
    }
    // Out: `..` above the root, a link up, an absolute link, a magic one: EXDEV for both.
    for rel in ["../data/f", "up", "abs", "sub/../../data/f", "magic"] {
        assert!(
            matches!(
                walked_beneath(&ws, rel),
                Err(ResolveError::Sys(Errno::EXDEV))
            ),
            "the walk opened {rel}: {:?}",
            walked_beneath(&ws, rel)
        );
        assert!(
            matches!(
                beneath(&ws, &ws.join(rel)),
                Err(ResolveError::Sys(Errno::EXDEV | Errno::ELOOP))
            ),
            "openat2 opened {rel}"
        );
    }
    let _ = fs::remove_dir_all(&dir);
}
