//! Where a call works: its workspace, the `[workspaces]` root that holds the caller's working
//! directory, and, for a tool that runs as the workspace's owner, that owner.
//!
//! The caller names its working directory, but guardd resolves it (symlinks and all) and picks
//! the workspace from the roots the admin declared, so a caller can only choose among them, and
//! a call works in a workspace for its owner alone (or root, who could anyway): a caller that
//! named another user's directory would get guardd's reach there (a tool of guard-tool reading
//! what the caller cannot), so it is refused, whatever user the tool runs as. A call that runs
//! as the workspace's owner never runs as root: the uid a call gets is one its caller has.
//!
//! A call no one makes (a policy's examples at load, `guardctl check --policy`) is placed by
//! its path as written where the path does not exist, and its owner left unresolved: it is
//! decided, never run, and a policy's meaning does not hang on who owns a directory today.

use std::{
    os::unix::fs::MetadataExt as _,
    path::{Component, Path, PathBuf},
};

use super::{Policy, Tool, rules::glob_match, template::Context};
use crate::call::{intent::Intent, plan::RUN_AS_OWNER};

/// A call's workspace and working directory, both real paths, and the user it runs as there
/// when its tool runs as the workspace's owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub workspace: PathBuf,
    pub cwd: PathBuf,
    pub owner: Option<String>,
}

impl Place {
    /// Where `intent` of `tool` works; `None` for a tool that works in no workspace, `Err`
    /// with the reason for a call that cannot run where its caller is.
    pub fn of(policy: &Policy, tool: &Tool, intent: &Intent) -> Result<Option<Self>, String> {
        if !tool.in_workspace {
            return Ok(None);
        }
        let Some(asked) = &intent.cwd else {
            return Err(
                "it works in a workspace, and its caller sent no working directory: \
                        call it from inside one (guard-exec sends its own; guard-mcp its client's \
                        roots, else the directory it was started in; the hook Claude Code's cwd)"
                    .into(),
            );
        };
        if !asked.is_absolute() {
            return Err(format!(
                "working directory {} is not absolute",
                asked.display()
            ));
        }
        let dry = intent.caller.is_none();
        let cwd = match std::fs::canonicalize(asked) {
            Ok(cwd) => cwd,
            Err(_) if dry => super::args::normalize(asked),
            Err(e) => return Err(format!("working directory {}: {e}", asked.display())),
        };
        if !dry && !cwd.is_dir() {
            return Err(format!(
                "working directory {} is no directory",
                cwd.display()
            ));
        }
        let workspace = policy.workspace_of(&cwd).ok_or_else(|| {
            format!(
                "working directory {} is in none of the policy's workspaces: call it from a \
                 directory inside one of [workspaces] roots ({})",
                cwd.display(),
                policy.workspace_roots().join(", ")
            )
        })?;
        let owner = if dry {
            // Who owns a directory is the host's state, not the policy's.
            None
        } else {
            let uid = std::fs::metadata(&workspace)
                .map_err(|e| format!("workspace {}: {e}", workspace.display()))?
                .uid();
            caller_s(&workspace, uid, intent.caller)?;
            match tool.confinement.run_as.as_deref() {
                Some(RUN_AS_OWNER) => Some(owner(&workspace, uid)?),
                _ => None,
            }
        };
        Ok(Some(Self {
            workspace,
            cwd,
            owner,
        }))
    }

    /// The context templates are filled from.
    pub fn context(&self) -> Context<'_> {
        Context {
            workspace: Some(&self.workspace),
            cwd: Some(&self.cwd),
        }
    }
}

/// Refuses a caller other than `workspace`'s owner (`uid`) or root.
fn caller_s(workspace: &Path, uid: u32, caller: Option<u32>) -> Result<(), String> {
    match caller {
        Some(caller) if caller != uid && caller != 0 => Err(format!(
            "the workspace {} belongs to uid {uid}, and a call works in a workspace for its \
             owner only (the caller is uid {caller})",
            workspace.display()
        )),
        _ => Ok(()),
    }
}

/// The name of `workspace`'s owner, `uid`, for a call to run as: never root.
fn owner(workspace: &Path, uid: u32) -> Result<String, String> {
    if uid == 0 {
        return Err(format!(
            "the workspace {} belongs to root, and no call runs as root for being its owner",
            workspace.display()
        ));
    }
    let user = nix::unistd::User::from_uid(uid.into())
        .ok()
        .flatten()
        .ok_or_else(|| {
            format!(
                "the owner of the workspace {}, uid {uid}, has no user entry",
                workspace.display()
            )
        })?;
    Ok(user.name)
}

impl Policy {
    /// `[workspaces] roots`, as written.
    pub(crate) fn workspace_roots(&self) -> Vec<String> {
        let roots = self.settings.workspaces.iter();
        roots.map(|r| r.display().to_string()).collect()
    }

    /// The workspace that holds `cwd` (a real path): the first `[workspaces]` root whose
    /// components match `cwd`'s first ones, as that prefix of `cwd`.
    pub(crate) fn workspace_of(&self, cwd: &Path) -> Option<PathBuf> {
        let names = |p: &Path| -> Vec<String> {
            p.components()
                .filter_map(|c| match c {
                    Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
                    _ => None,
                })
                .collect()
        };
        let have = names(cwd);
        self.settings.workspaces.iter().find_map(|root| {
            let want = names(root);
            let matched =
                want.len() <= have.len() && want.iter().zip(&have).all(|(w, h)| glob_match(w, h));
            matched.then(|| {
                let mut ws = PathBuf::from("/");
                ws.extend(&have[..want.len()]);
                ws
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(roots: &[&str]) -> Policy {
        let roots: Vec<String> = roots.iter().map(|r| format!("{r:?}")).collect();
        Policy::parse(
            Path::new("p.toml"),
            &format!("[workspaces]\nroots = [{}]\n", roots.join(", ")),
        )
        .expect("policy")
    }

    #[test]
    fn a_workspace_is_the_prefix_of_the_cwd_a_root_matches() {
        let p = policy(&["/srv/agent/workspace", "/home/*/projects/*"]);
        let ws = |cwd: &str| p.workspace_of(Path::new(cwd));
        assert_eq!(
            ws("/srv/agent/workspace/src/x"),
            Some("/srv/agent/workspace".into())
        );
        assert_eq!(
            ws("/home/ann/projects/guard/src"),
            Some("/home/ann/projects/guard".into())
        );
        assert_eq!(
            ws("/home/ann/projects/guard"),
            Some("/home/ann/projects/guard".into())
        );
        assert_eq!(ws("/home/ann/projects"), None);
        assert_eq!(ws("/home/ann/other/guard"), None);
        assert_eq!(ws("/srv/agent/workspace2"), None);
        assert_eq!(ws("/srv/agent"), None);
    }

    /// A policy whose workspaces are the directories of `root`, with a shell tool that works
    /// in the caller's directory as the workspace's owner.
    fn shell_in(root: &Path) -> Policy {
        let text = format!(
            r#"
[workspaces]
roots = ["{}/*"]
[tools.shell]
tier = "low"
command = ["/bin/sh", "-c", "{{command}}"]
cwd = "{{cwd}}"
run_as = "owner"
env = {{ HOME = "{{workspace}}" }}
[tools.shell.args.command]
type = "string"
[tools.shell.effects]
write = ["{{workspace}}/out"]
[tools.cat]
tier = "low"
command = ["/bin/cat", "{{file}}"]
[tools.cat.args.file]
type = "path"
base = "{{cwd}}"
within = ["{{workspace}}"]
[tools.cat.effects]
read = ["{{file}}"]
"#,
            root.display()
        );
        Policy::parse(Path::new("p.toml"), &text).expect("policy")
    }

    #[test]
    fn a_call_works_in_its_caller_s_workspace_as_its_owner_and_never_as_root() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: chowns a workspace to another user");
            return;
        }
        let root = std::env::temp_dir().join(format!("guard-ws-{}", std::process::id()));
        let ws = root.join("proj");
        std::fs::create_dir_all(ws.join("src")).expect("mkdir");
        let root = std::fs::canonicalize(&root).expect("real root");
        let ws = root.join("proj");
        let p = shell_in(&root);
        let call = |tool: &str, args: serde_json::Value, cwd: &Path, caller: u32| {
            let mut intent = Intent::new(tool, args.as_object().cloned().unwrap_or_default());
            intent.cwd = Some(cwd.to_owned());
            intent.caller = Some(caller);
            p.decide(&intent)
        };
        let shell = serde_json::json!({"command": "ls"});
        // Root's workspace: no call runs as root for owning it.
        let v = call("shell", shell.clone(), &ws.join("src"), 0);
        assert_eq!(v.row.decision, crate::call::decision::Decision::Block);
        assert!(v.row.reason.contains("belongs to root"), "{}", v.row.reason);
        // nobody's workspace: nobody's calls run as nobody, in the caller's directory.
        std::os::unix::fs::chown(&ws, Some(65534), None).expect("chown");
        let v = call("shell", shell.clone(), &ws.join("src"), 65534);
        let plan = v.plan.expect("allowed");
        assert_eq!(plan.confinement.cwd, Some(ws.join("src")));
        assert_eq!(plan.effects.write, [ws.join("out")]);
        assert_eq!(
            plan.confinement.env,
            [("HOME".to_owned(), ws.display().to_string())]
        );
        let owner = nix::unistd::User::from_uid(65534.into()).ok().flatten();
        assert_eq!(plan.confinement.run_as, owner.map(|u| u.name));
        // Someone else's calls do not run as nobody; root's may.
        let v = call("shell", shell.clone(), &ws, 1234);
        assert_eq!(v.row.decision, crate::call::decision::Decision::Block);
        assert!(call("shell", shell.clone(), &ws, 0).plan.is_some());
        // Outside every workspace, or no directory at all: blocked.
        let v = call("shell", shell.clone(), &root, 65534);
        assert!(
            v.row.reason.contains("none of the policy's workspaces"),
            "{}",
            v.row.reason
        );
        let mut bare = Intent::new("shell", shell.as_object().cloned().unwrap_or_default());
        bare.caller = Some(65534);
        assert!(p.decide(&bare).row.reason.contains("no working directory"));
        // Another user's workspace is no place for their calls, whoever the tool runs as.
        let other = call("cat", serde_json::json!({ "file": "main.rs" }), &ws, 1234);
        assert!(
            other.row.reason.contains("for its owner only"),
            "{}",
            other.row.reason
        );
        // Paths are taken from the caller's directory and held to its workspace.
        let cat = |f: &str| call("cat", serde_json::json!({ "file": f }), &ws.join("src"), 0);
        let plan = cat("main.rs").plan.expect("allowed");
        assert_eq!(plan.effects.read, [ws.join("src/main.rs")]);
        assert!(cat("../../x").plan.is_none(), "out of the workspace");
        std::fs::remove_dir_all(&root).expect("cleanup");
    }

    #[test]
    fn a_tool_in_a_workspace_needs_roots_and_judges_have_none() {
        let text = r#"
[tools.t]
tier = "low"
command = ["/bin/true"]
cwd = "{workspace}"
"#;
        let err = Policy::parse(Path::new("p.toml"), text).expect_err("no roots");
        assert!(err.to_string().contains("no [workspaces] roots"), "{err}");
        let text = r#"
[workspaces]
roots = ["/srv"]
[tools.t]
tier = "low"
command = ["/bin/true"]
[tools.t.args.workspace]
type = "string"
[judges.j]
command = ["/bin/true", "{workspace}"]
"#;
        let err = Policy::parse(Path::new("p.toml"), text)
            .expect_err("reserved")
            .to_string();
        assert!(err.contains("tools.t.args.workspace"), "{err}");
        assert!(err.contains("judges.j.command"), "{err}");
    }

    #[test]
    fn roots_are_absolute_real_paths() {
        for bad in ["srv/x", "/srv/../etc", "/", "/srv/./x"] {
            let text = format!("[workspaces]\nroots = [{bad:?}]\n");
            let err = Policy::parse(Path::new("p.toml"), &text).expect_err(bad);
            assert!(err.to_string().contains("workspaces.roots"), "{bad}: {err}");
        }
    }
}
