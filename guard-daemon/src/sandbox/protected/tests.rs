//! The protected names found, refused past their bound, and not looked for where nothing
//! outside guard follows them.

use super::*;

#[test]
fn more_protected_paths_than_a_view_holds_refuse_the_launch_rather_than_leave_one_out() {
    let dir = crate::audit::testdir::TestDir::new("protected-max");
    let ws = dir.path();
    // Decoy submodules: each one's git directory, hooks and config are kept.
    for i in 0..400 {
        let m = ws.join(format!(".git/modules/m{i}"));
        std::fs::create_dir_all(m.join("hooks")).expect("mkdir");
        std::fs::write(m.join("config"), "").expect("config");
    }
    let e = within(&[Writable::at(ws)], None, None).expect_err("too many");
    assert!(e.to_string().contains("more than"), "{e}");
    // Fewer: every one kept.
    for i in 300..400 {
        std::fs::remove_dir_all(ws.join(format!(".git/modules/m{i}"))).expect("rm");
    }
    let (kept, _) = within(&[Writable::at(ws)], None, None).expect("kept");
    let hooks = kept
        .iter()
        .filter(|k| k.read_only && k.place.path.to_bytes().ends_with(b"/hooks"));
    assert_eq!(hooks.count(), 300);
}

#[test]
fn the_call_s_own_temporary_directory_and_files_are_not_looked_in() {
    let dir = crate::audit::testdir::TestDir::new("protected-tmp");
    let (ws, tmp) = (dir.path().join("ws"), dir.path().join("tmp"));
    for d in [&ws, &tmp] {
        std::fs::create_dir_all(d.join(".git/hooks")).expect("mkdir");
    }
    let file = dir.path().join("file");
    std::fs::write(&file, "").expect("file");
    let writable = [Writable::at(&ws), Writable::at(&tmp), Writable::at(&file)];
    let (kept, absent) = within(&writable, None, Some(&tmp)).expect("kept");
    let hooks: Vec<_> = kept
        .iter()
        .filter(|k| k.read_only && k.place.path.to_bytes().ends_with(b"/.git/hooks"))
        .map(|k| k.place.path.to_string_lossy().into_owned())
        .collect();
    assert_eq!(hooks, [format!("{}/.git/hooks", ws.display())]);
    // The workspace's absent names are watched; nothing of the tmp directory's or the file's.
    let watched: std::collections::BTreeSet<_> = absent.names.iter().map(|n| n.2.clone()).collect();
    assert_eq!(
        watched.into_iter().collect::<Vec<_>>(),
        [ws.display().to_string()]
    );
}

/// Issue 49: a project beneath the workspace root had none of its names kept, and the
/// developer's next commit there ran a hook a call wrote.
#[test]
fn a_project_beneath_the_writable_directory_has_its_names_kept() {
    let dir = crate::audit::testdir::TestDir::new("protected-beneath");
    let ws = dir.path();
    for d in [
        "proj/.git/hooks",
        "proj/.claude",
        "org/deep/repo/.git/hooks",
        "node_modules/x/.git/hooks",
    ] {
        std::fs::create_dir_all(ws.join(d)).expect("mkdir");
    }
    std::fs::write(ws.join("proj/.git/config"), "").expect("config");
    std::fs::write(ws.join("proj/.envrc"), "").expect("envrc");
    let (kept, _) = within(&[Writable::at(ws)], None, None).expect("kept");
    let read_only: Vec<String> = kept
        .iter()
        .filter(|k| k.read_only)
        .map(|k| k.place.path.to_string_lossy().into_owned())
        .collect();
    for name in [
        "proj/.git/hooks",
        "proj/.git/config",
        "proj/.claude",
        "proj/.envrc",
        "org/deep/repo/.git/hooks",
    ] {
        let path = format!("{}/{name}", ws.display());
        assert!(read_only.contains(&path), "{path} not kept: {read_only:?}");
    }
    // A tree programs fill is not walked.
    assert!(
        !read_only.iter().any(|p| p.contains("node_modules")),
        "{read_only:?}"
    );
}

/// What a call makes beneath a writable directory is found at its end, wherever it is within
/// the walk's bounds, and moved aside; a worktree `git worktree add` made is no plant.
#[test]
fn names_made_beneath_are_found_at_the_end_but_a_worktree_of_a_known_repository_is_not() {
    let dir = crate::audit::testdir::TestDir::new("protected-made");
    let ws = std::fs::canonicalize(dir.path()).expect("real");
    for d in ["proj/.git/hooks", "proj/src", "old"] {
        std::fs::create_dir_all(ws.join(d)).expect("mkdir");
    }
    std::fs::write(ws.join("old/.envrc"), "").expect("an .envrc before the call");
    let (_, absent) = within(&[Writable::at(&ws)], None, None).expect("kept");
    // The call: a repository made in a new project, an .envrc in a directory that was there,
    // and a worktree of the known repository.
    std::fs::create_dir_all(ws.join("new/.git/hooks")).expect("git init");
    std::fs::write(ws.join("proj/src/.envrc"), "evil").expect("envrc");
    std::fs::create_dir_all(ws.join("proj/.git/worktrees/wt")).expect("admin");
    std::fs::write(ws.join("proj/.git/worktrees/wt/commondir"), "../..\n").expect("commondir");
    std::fs::create_dir(ws.join("wt")).expect("wt");
    let gitdir = format!("gitdir: {}/proj/.git/worktrees/wt\n", ws.display());
    std::fs::write(ws.join("wt/.git"), &gitdir).expect("wt/.git");
    // ...and a `.git` file pointing anywhere else.
    std::fs::create_dir(ws.join("fake")).expect("fake");
    std::fs::write(ws.join("fake/.git"), "gitdir: ../proj/src\n").expect("fake/.git");
    let mut planted: Vec<String> = absent
        .made_and_moved("t")
        .into_iter()
        .map(|p| {
            p.path
                .strip_prefix(&format!("{}/", ws.display()))
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    planted.sort();
    assert_eq!(planted, ["fake/.git", "new/.git", "proj/src/.envrc"]);
    assert!(ws.join("wt/.git").exists(), "the worktree stays");
    assert!(ws.join("old/.envrc").exists(), "what was there stays");
    assert!(!ws.join("new/.git").exists(), "moved aside");
}

#[test]
fn a_protected_name_is_named_at_any_depth() {
    let named = |p: &str| named(std::path::Path::new(p), None);
    for (path, name) in [
        ("/ws/.git/hooks/pre-commit", ".git/hooks"),
        ("/ws/proj/.git/hooks/pre-commit", ".git/hooks"),
        ("/ws/a/b/c/.git/config", ".git/config"),
        ("/ws/proj/.claude/settings.json", ".claude"),
        ("/ws/proj/.envrc", ".envrc"),
        (
            "/ws/.git/modules/sub/hooks/post-checkout",
            ".git/modules/sub/hooks",
        ),
        (
            "/ws/.git/modules/a/modules/b/config",
            ".git/modules/a/modules/b/config",
        ),
        (
            "/ws/.git/worktrees/wt/commondir",
            ".git/worktrees/wt/commondir",
        ),
        ("/ws/wt/.git", ".git"),
    ] {
        assert_eq!(named(path).as_deref(), Some(name), "{path}");
    }
    for path in [
        "/ws/src/main.rs",
        "/ws/.git/index",
        "/ws/.git/worktrees/wt/HEAD",
        "/ws/.gitignore",
        "/ws/docs/hooks/x",
        "/ws/.github/workflows/ci.yml",
        "/ws/.git/s/x/hooks",
    ] {
        assert_eq!(named(path), None, "{path}");
    }
}

/// Issue 49: a call made 4,100 directories sorting before the projects, the walk stopped
/// there, and the next call wrote a project's hooks; or moved a project into `node_modules`
/// and left a link, and wrote its hooks there. Now a workspace the walk cannot read whole is
/// refused, a repository at any depth is found, and it and the directories above it are pinned.
#[test]
fn a_workspace_the_walk_cannot_read_whole_is_refused_and_a_project_cannot_be_moved() {
    let dir = crate::audit::testdir::TestDir::new("protected-walk");
    let ws = std::fs::canonicalize(dir.path()).expect("real");
    std::fs::create_dir_all(ws.join("org/team/proj/.git/hooks")).expect("mkdir");
    std::fs::create_dir_all(ws.join("a/b/c/d/e/f/g/deep/.git/hooks")).expect("mkdir");
    let (kept, _) = within(&[Writable::at(&ws)], None, None).expect("kept");
    let shown = |k: &Kept| {
        let path = k.place.path.to_string_lossy().into_owned();
        path.strip_prefix(&format!("{}/", ws.display()))
            .unwrap_or_default()
            .to_owned()
    };
    let pinned: Vec<String> = kept.iter().filter(|k| !k.read_only).map(shown).collect();
    let (org, team, proj) = (
        pinned.iter().position(|p| p == "org"),
        pinned.iter().position(|p| p == "org/team"),
        pinned.iter().position(|p| p == "org/team/proj"),
    );
    assert!(
        org < team && team < proj && org.is_some(),
        "ancestors first: {pinned:?}"
    );
    let hooks = kept
        .iter()
        .position(|k| shown(k) == "org/team/proj/.git/hooks")
        .expect("hooks kept");
    assert!(
        proj < Some(hooks),
        "a place before what is beneath it: {pinned:?}"
    );
    assert!(
        kept.iter()
            .any(|k| k.read_only && shown(k) == "a/b/c/d/e/f/g/deep/.git/hooks"),
        "a repository eight levels down is found"
    );
    // Decoys beyond the walk's reach: refused, naming the directory.
    for i in 0..discover::MAX_DIRS {
        std::fs::create_dir_all(ws.join(format!("aaa/{}/{}", i / 128, i % 128))).expect("mkdir");
    }
    let e = within(&[Writable::at(&ws)], None, None).expect_err("cut");
    assert!(matches!(e, Unkept::Unwalked(_)), "{e}");
    assert!(e.to_string().contains(&ws.display().to_string()), "{e}");
}

/// A file named `HEAD` (a log's, an archive's) is no bare repository; with `objects/` and
/// `refs/` beside it, made during a call, it is, and is moved aside.
#[test]
fn a_head_is_a_bare_repository_only_beside_objects_and_refs() {
    let dir = crate::audit::testdir::TestDir::new("protected-head");
    let ws = std::fs::canonicalize(dir.path()).expect("real");
    std::fs::create_dir_all(ws.join("notes")).expect("mkdir");
    std::fs::create_dir_all(ws.join("bare")).expect("mkdir");
    std::fs::create_dir_all(ws.join("common")).expect("mkdir");
    let (_, absent) = within(&[Writable::at(&ws)], None, None).expect("kept");
    for d in ["", "notes/", "bare/", "common/"] {
        std::fs::write(ws.join(format!("{d}HEAD")), "n\n").expect("HEAD");
    }
    // A commondir names where git finds objects/ and refs/: beside a HEAD, a repository.
    std::fs::write(ws.join("common/commondir"), "../bare\n").expect("commondir");
    std::fs::create_dir_all(ws.join("notes/logs")).expect("logs");
    std::fs::write(ws.join("notes/logs/HEAD"), "n\n").expect("HEAD");
    for d in ["bare/objects", "bare/refs"] {
        std::fs::create_dir_all(ws.join(d)).expect("mkdir");
    }
    let mut planted: Vec<String> = absent
        .made_and_moved("t")
        .into_iter()
        .map(|p| p.path)
        .collect();
    planted.sort();
    assert_eq!(
        planted,
        [
            format!("{}/bare/HEAD", ws.display()),
            format!("{}/common/HEAD", ws.display())
        ]
    );
    assert!(ws.join("HEAD").exists() && ws.join("notes/logs/HEAD").exists());
}
