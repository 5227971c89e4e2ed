//! The rules a plan maps to, on a fake file system.

use std::{ffi::OsString, time::Duration};

use super::*;
use crate::call::plan::{Confinement, Effects, Endpoint};

fn plan(argv0: &str, effects: Effects) -> LaunchPlan {
    LaunchPlan {
        tool: "t".into(),
        argv: vec![OsString::from(argv0)],
        effects,
        confinement: Confinement {
            timeout: Duration::from_secs(1),
            ..Confinement::default()
        },
        enforce: Default::default(),
    }
}

/// A fake file system: directories end with '/'.
fn fake(entries: &'static [&'static str]) -> impl Fn(&Path) -> Option<Kind> {
    move |p: &Path| {
        let s = p.to_str()?;
        entries.iter().find_map(|e| match e.strip_suffix('/') {
            Some(d) if d == s => Some(Kind::Dir),
            None if *e == s => Some(Kind::File),
            _ => None,
        })
    }
}

const FS: &[&str] = &[
    "/usr/lib/",
    "/lib/",
    "/etc/ld.so.cache",
    "/dev/null",
    "/dev/urandom",
    "/lib64/ld-linux-x86-64.so.2",
    "/usr/bin/tool",
    "/usr/bin/helper",
    "/data/",
    "/data/in.txt",
    "/out/",
    "/out/log.txt",
];

/// `access` as a read rule carries it: with Truncate, which ends landlock's walk there.
fn ended(access: BitFlags<AccessFs>) -> BitFlags<AccessFs> {
    access | AccessFs::Truncate
}

#[test]
fn read_rules_carry_truncate_unless_near_a_widened_directory_or_truncate_is_allowed() {
    let effects = Effects {
        read: vec!["/data".into(), "/out/log.txt".into()],
        write: vec!["/out/new.txt".into()],
        ..Effects::default()
    };
    let r = rules_with(&plan("/usr/bin/tool", effects.clone()), fake(FS));
    // /out is widened: its CREATE_IN grants WriteFile without Truncate, and a Truncate on a
    // read rule above or below it (however spelled) would combine with that into truncating
    // /out's files: a plan that widens gets no Truncate on any read rule.
    assert_eq!(r.access(Path::new("/data")), Some(READ_TREE));
    assert_eq!(r.access(Path::new("/out")), Some(CREATE_IN));
    assert_eq!(r.access(Path::new("/out/log.txt")), Some(READ_FILE));
    let no_widening = Effects {
        read: vec!["/data".into()],
        ..Effects::default()
    };
    let r = rules_with(&plan("/usr/bin/tool", no_widening), fake(FS));
    assert_eq!(r.access(Path::new("/data")), Some(ended(READ_TREE)));

    for name in TRUNCATE_UNCHECKED {
        let mut allowing = plan("/usr/bin/tool", effects.clone());
        allowing.confinement.allow_syscalls = vec![(*name).into()];
        let r = rules_with(&allowing, fake(FS));
        assert_eq!(r.access(Path::new("/data")), Some(READ_TREE), "{name}");
        assert_eq!(r.access(Path::new("/usr/lib")), Some(READ_TREE), "{name}");
    }
}

#[test]
fn base_set_covers_loading_and_skips_what_is_missing() {
    let r = rules_with(&plan("/usr/bin/tool", Effects::default()), fake(FS));
    // Libraries are read, never executed; the loader alone may be.
    assert_eq!(r.access(Path::new("/usr/lib")), Some(ended(READ_TREE)));
    assert_eq!(r.access(Path::new("/lib")), Some(ended(READ_TREE)));
    assert_eq!(
        r.access(Path::new("/lib64/ld-linux-x86-64.so.2")),
        Some(ended(EXEC_FILE))
    );
    assert_eq!(
        r.access(Path::new("/etc/ld.so.cache")),
        Some(ended(READ_FILE))
    );
    assert_eq!(r.access(Path::new("/dev/null")), Some(WRITE_FILE));
    assert_eq!(r.access(Path::new("/dev/urandom")), Some(ended(READ_FILE)));
    // Not on the fake file system: no rule, and base paths are not reported as skipped.
    assert_eq!(r.access(Path::new("/lib64")), None);
    assert!(r.skipped.is_empty());
    // Nothing of the user's: no /etc, /home, /tmp, /dev/tty.
    for p in ["/", "/etc", "/tmp", "/dev/tty", "/data"] {
        assert_eq!(r.access(Path::new(p)), None, "{p}");
    }
    assert!(r.connect_ports.is_empty());
}

#[test]
fn effects_map_to_read_write_exec() {
    let effects = Effects {
        read: vec!["/data".into(), "/data/in.txt".into()],
        write: vec!["/out".into()],
        exec: vec!["/usr/bin/helper".into()],
        ..Effects::default()
    };
    let r = rules_with(&plan("/usr/bin/tool", effects), fake(FS));
    // The host's system paths are opened as they resolve; the policy's following root's
    // symlinks only.
    let origin = |p: &str| {
        r.fs.iter()
            .find(|f| f.path == Path::new(p))
            .map(|f| f.origin.clone())
    };
    assert_eq!(origin("/usr/lib"), Some(Origin::Host));
    assert_eq!(origin("/data"), Some(Origin::Policy));
    assert_eq!(origin("/usr/bin/tool"), Some(Origin::Policy));
    assert_eq!(r.access(Path::new("/usr/bin/tool")), Some(ended(EXEC_FILE)));
    assert_eq!(
        r.access(Path::new("/usr/bin/helper")),
        Some(ended(EXEC_FILE))
    );
    assert_eq!(r.access(Path::new("/data")), Some(ended(READ_TREE)));
    // A file gets no directory-only rights (landlock refuses them on files).
    assert_eq!(r.access(Path::new("/data/in.txt")), Some(ended(READ_FILE)));
    let out = r.access(Path::new("/out")).expect("write rule");
    assert_eq!(out, WRITE_TREE);
    assert!(out.contains(AccessFs::ReadFile), "write implies read");
    assert!(out.contains(AccessFs::MakeReg | AccessFs::RemoveFile));
    assert!(
        !out.contains(AccessFs::Execute),
        "write does not imply exec"
    );
    assert!(!out.intersects(AccessFs::MakeChar | AccessFs::MakeBlock));
    assert!(
        out.contains(AccessFs::Refer),
        "files move within what may be written"
    );
    assert!(
        !r.access(Path::new("/data"))
            .expect("read")
            .contains(AccessFs::WriteFile)
    );
}

#[test]
fn write_to_an_existing_file_is_file_rights_only() {
    let effects = Effects {
        write: vec!["/out/log.txt".into()],
        ..Effects::default()
    };
    let r = rules_with(&plan("/usr/bin/tool", effects), fake(FS));
    assert_eq!(r.access(Path::new("/out/log.txt")), Some(WRITE_FILE));
    assert_eq!(r.access(Path::new("/out")), None);
    assert!(r.widened.is_empty());
}

#[test]
fn missing_write_target_widens_to_its_direct_parent_only() {
    let effects = Effects {
        write: vec!["/out/new.txt".into(), "/nowhere/deep/new.txt".into()],
        read: vec!["/missing".into()],
        ..Effects::default()
    };
    let r = rules_with(&plan("/usr/bin/tool", effects), fake(FS));
    assert_eq!(r.access(Path::new("/out")), Some(CREATE_IN));
    assert_eq!(
        r.widened,
        vec![(PathBuf::from("/out/new.txt"), PathBuf::from("/out"))]
    );
    // The parent of the second does not exist: never widened to "/" or any ancestor.
    assert_eq!(r.access(Path::new("/")), None);
    assert_eq!(
        r.skipped,
        vec![
            PathBuf::from("/missing"),
            PathBuf::from("/nowhere/deep/new.txt")
        ]
    );
}

#[test]
fn connect_ports_come_from_effects() {
    let ep = |port| Endpoint {
        host: "example.org".into(),
        port,
    };
    let effects = Effects {
        connect: vec![ep(443), ep(80), ep(443)],
        ..Effects::default()
    };
    let r = rules_with(&plan("/usr/bin/tool", effects), fake(FS));
    assert_eq!(r.connect_ports, vec![80, 443]);
}

#[test]
fn rights_merge_when_a_path_appears_twice() {
    let effects = Effects {
        read: vec!["/usr/bin/tool".into()],
        write: vec!["/usr/bin/tool".into()],
        ..Effects::default()
    };
    let r = rules_with(&plan("/usr/bin/tool", effects), fake(FS));
    assert_eq!(
        r.access(Path::new("/usr/bin/tool")),
        Some(ended(EXEC_FILE) | WRITE_FILE)
    );
    assert_eq!(
        r.fs.iter()
            .filter(|f| f.path == Path::new("/usr/bin/tool"))
            .count(),
        1
    );
}
