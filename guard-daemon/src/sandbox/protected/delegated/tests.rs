use std::path::Path;

use super::*;

/// What the configs `files` (name, text) of a repository at `/w` hand to its worktree.
fn handed(files: &[(&str, &str)]) -> Delegated {
    of(Path::new("/w"), |name| {
        files.iter().find(|f| f.0 == name).map(|f| f.1.to_owned())
    })
}

fn hooks(config: &str) -> Vec<String> {
    handed(&[(".git/config", config)]).hooks
}

/// Each way the line-splitting reader before this one read a hooks path wrongly (M4).
#[test]
fn the_hooks_path_is_read_whatever_the_layout() {
    let layouts = [
        "[core]\n\thooksPath = .githooks ; x\n",
        "[core]\n\thooksPath = .githooks # x\n",
        "[core]\n\thooksPath = \".git\"hooks\n",
        "[core] hooksPath = .githooks\n",
        "[core]\n\thooksPath = .git\\\nhooks\n",
        "[CORE]\n\tHOOKSPATH\t=\t\".githooks\"   ; \"\n",
        "[core]\n\thooksPath = /w/.githooks\n",
        "[core]\n\thooksPath = sub/../.githooks\n",
        "[core]\n\thooksPath = :(optional).githooks\n",
    ];
    let missed: Vec<_> = layouts
        .iter()
        .filter(|config| hooks(config) != [".githooks"])
        .collect();
    assert!(missed.is_empty(), "{missed:#?}");
    // What is not a hooks path: another section's key, a subsection's, a home's.
    for config in [
        "[core \"x\"]\n\thooksPath = .githooks\n",
        "[core.x]\n\thooksPath = .githooks\n",
        "[other]\n\thooksPath = .githooks\n",
        "[core]\n\thooksPath = ~/hooks\n",
        "[core]\n\t# hooksPath = .githooks\n",
        "[core]\n\tx = \"a\\\nhooksPath = .githooks\"\n",
    ] {
        assert_eq!(hooks(config), Vec::<String>::new(), "{config:?}");
    }
    // Beside the repository, in the workspace (an outside pass's F1): named by its path, and
    // kept wherever a call may write it.
    assert_eq!(hooks("[core]\n\thooksPath = ../shared\n"), ["/shared"]);
}

#[test]
fn includes_are_followed_each_from_its_own_directory() {
    let got = handed(&[
        (".git/config", "[include]\n\tpath = ../cfg/one ; first\n"),
        (
            "cfg/one",
            "[includeIf \"gitdir:/w/\"]\n\tpath = two/three\n",
        ),
        ("cfg/two/three", "[core]\n\thooksPath = .githooks\n"),
    ]);
    assert_eq!(got.includes, ["cfg/one", "cfg/two/three"]);
    assert_eq!(got.hooks, [".githooks"]);
    // A worktree's own config is read too.
    let got = handed(&[(".git/config.worktree", "[core]\nhooksPath = h\n")]);
    assert_eq!(got.hooks, ["h"]);
}

#[test]
fn includes_stop_at_git_s_depth_and_at_a_cycle() {
    let mut files: Vec<(String, String)> =
        vec![(".git/config".into(), "[include]\npath = ../c1\n".into())];
    for i in 1..=12 {
        files.push((format!("c{i}"), format!("[include]\npath = c{}\n", i + 1)));
    }
    files.push(("c13".into(), "[core]\nhooksPath = deep\n".into()));
    let got = of(Path::new("/w"), |name| {
        files.iter().find(|f| f.0 == name).map(|f| f.1.clone())
    });
    // c1 is at depth 1, c10 at depth 10: the last git reads; it names c11, which is kept.
    assert_eq!(got.includes.len(), 11, "{:?}", got.includes);
    assert!(got.hooks.is_empty());
    let got = handed(&[
        (".git/config", "[include]\npath = ../a\n"),
        ("a", "[include]\npath = b\n"),
        ("b", "[include]\npath = a\n[core]\nhooksPath = h\n"),
    ]);
    assert_eq!(got.includes, ["a", "b", "a"]);
    assert_eq!(got.hooks, ["h"]);
}

#[test]
fn the_programs_commands_run_from_the_worktree_are_named() {
    let config = "[core]\n\tfsmonitor = ./tools/fsm.sh\n\tsshCommand = \"bin/ssh -v\"\n\
        \tpager = less\n\teditor = /w/ed.sh --wait\n\taskPass = /usr/bin/askpass\n\
        [sequence]\n\teditor = sh scripts/seq.sh\n\
        [diff \"bin\"]\n\ttextconv = 'conv/x' --flag\n\tcommand = d/cmd\n\
        [filter \"lfs\"]\n\tclean = git-lfs clean -- %f\n\tsmudge = f/smudge\n\tprocess = f/proc\n\
        [merge \"m\"]\n\tdriver = m/drv %O %A %B\n\
        [credential]\n\thelper = !./cred/help.sh\n\
        [credential \"https://x\"]\n\thelper = store --file=secrets/creds\n\
        [gpg]\n\tprogram = g/gpg\n[gpg \"ssh\"]\n\tprogram = g/ssh-keygen\n\
        [alias]\n\tx = !FOO=1 tools/alias.sh && echo done | a/b; $HOME/no\n\ty = log ./not\n\
        [uploadpack]\n\tpackObjectsHook = up/hook\n\
        [pager]\n\tlog = p/pager\n\
        [url \"https://example.com/\"]\n\tinsteadOf = gh:x/y\n";
    let got = handed(&[(".git/config", config)]);
    assert_eq!(
        got.commands,
        [
            "tools/fsm.sh",
            "bin/ssh",
            "ed.sh",
            // Outside the repository: kept where a call may write it, else nothing to keep.
            "/usr/bin/askpass",
            "scripts/seq.sh",
            "conv/x",
            "d/cmd",
            "f/smudge",
            "f/proc",
            "m/drv",
            "cred/help.sh",
            "secrets/creds",
            "g/gpg",
            "g/ssh-keygen",
            "tools/alias.sh",
            "a/b",
            "up/hook",
            "p/pager",
        ]
    );
    // An included config's commands are named too, from the worktree's top.
    let got = handed(&[
        (".git/config", "[include]\npath = ../cfg/inc\n"),
        ("cfg/inc", "[core]\nfsmonitor = \"./x.sh\" ; run\n"),
    ]);
    assert_eq!(got.commands, ["x.sh"]);
}

#[test]
fn words_are_split_as_a_shell_splits_them() {
    let paths =
        |v: &str| -> Vec<String> { words(v).into_iter().filter(|w| w.contains('/')).collect() };
    assert_eq!(
        paths("!f() { ./a/b \"c d/e\" 'g/h'\\ i; }; f `./j/k` $(./l/m)>o/p"),
        ["./a/b", "c d/e", "g/h i", "./j/k", "./l/m", "o/p"]
    );
    assert!(paths("https://x/y --opt -o/x").is_empty());
    // An interpreter and its script (an outside pass's F3); what an expansion starts a word
    // with, taken for the top (F4).
    assert_eq!(words("sh fsm.sh"), ["sh", "fsm.sh"]);
    assert_eq!(
        words("\"$(git rev-parse --show-toplevel)\"/tools/conv.sh"),
        ["tools/conv.sh"]
    );
    assert_eq!(words("$GIT_DIR/../x ${PWD}/y"), ["../x", "y"]);
}

/// Read from the disk: a FIFO holds nothing up, a link is followed only within the
/// repository, and a path beneath a hooks path is named for a write outside a call.
#[test]
fn files_are_read_without_blocking_or_leaving_the_repository() {
    let dir = std::env::temp_dir().join(format!("guard-delegated-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (top, out) = (dir.join("repo"), dir.join("out"));
    std::fs::create_dir_all(top.join(".git")).expect("mkdir");
    std::fs::create_dir_all(&out).expect("mkdir");
    let top = std::fs::canonicalize(&top).expect("real");
    std::fs::write(
        top.join(".git/config"),
        "[include]\npath = ../fifo\npath = ../outside\npath = ../inside\n",
    )
    .expect("config");
    nix::unistd::mkfifo(&top.join("fifo"), nix::sys::stat::Mode::S_IRWXU).expect("fifo");
    std::fs::write(out.join("cfg"), "[core]\nhooksPath = from-outside\n").expect("cfg");
    std::os::unix::fs::symlink(out.join("cfg"), top.join("outside")).expect("link");
    std::fs::write(top.join("real.cfg"), "[core]\nhooksPath = .githooks\n").expect("cfg");
    std::os::unix::fs::symlink("real.cfg", top.join("inside")).expect("link");
    let names = names(&Writable::at(&top));
    assert_eq!(names, [".githooks", "fifo", "outside", "inside"]);
    assert_eq!(
        super::handed(&top.join(".githooks/pre-commit")).as_deref(),
        Some(".githooks")
    );
    assert_eq!(super::handed(&top.join("src/main.rs")), None);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
