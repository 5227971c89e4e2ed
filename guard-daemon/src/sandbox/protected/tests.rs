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
