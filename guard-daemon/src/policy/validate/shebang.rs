//! A `#!` script as a program's `command[0]` runs its interpreter too, and the kernel opens the
//! interpreter for execution: landlock refuses it unless the program's exec effects cover it,
//! and the tool, judge, approver or notifier then fails at every run ("confined child failed at
//! exec: Permission denied"). Checked at load instead, following each interpreter that is a
//! script itself, and through `#!/usr/bin/env NAME` to what env finds on the confined PATH.
//! A program (or interpreter) that cannot be read at load is not checked here: the loader
//! does not require programs to exist.

use std::{
    io::Read as _,
    path::{Path, PathBuf},
};

use crate::policy::{
    args::ArgSpec,
    overlap::Reach,
    raw::RawTool,
    source::{Diag, S},
    template::{Elem, placeholder},
};

/// The PATH a confined program starts with unless its tool sets one (the clean environment of
/// `sandbox::launch`): where `#!/usr/bin/env NAME` looks for NAME.
const DEFAULT_PATH: &str = "/usr/bin:/bin";

/// What the kernel reads of a script for its `#!` line (`BINPRM_BUF_SIZE`).
const LINE_MAX: u64 = 256;

/// How many interpreters the kernel follows, each a script run by the next, before it refuses
/// the exec (ELOOP).
const DEPTH_MAX: usize = 5;

/// One program the kernel (or env) execs to run a script, and how it came to.
struct Step {
    path: PathBuf,
    how: String,
}

/// Checks tool `t` (compiled `args` and exec effects `exec`), under `tk`.
pub(super) fn tool(d: &mut Diag, tk: &str, t: &RawTool, args: &[ArgSpec], exec: &[Elem<PathBuf>]) {
    let Some(program) = t.command.as_ref().and_then(|c| c.first()) else {
        return;
    };
    // An interpreter in a workspace (`{workspace}/...`) is taken as covered by nothing: a
    // program a call may write is refused at load anyway.
    let reach: Vec<Reach> = exec.iter().map(|e| Reach::elem(e, args, &[])).collect();
    // The tool's own PATH, if it sets one; an argument's is unknown until a call.
    let path = match t.env.iter().find(|(name, _)| name.v == "PATH") {
        None => Some(DEFAULT_PATH),
        Some((_, value)) => match placeholder(&value.v) {
            Ok(None) => Some(value.v.as_str()),
            _ => None,
        },
    };
    check(d, tk, program, &reach, path);
}

/// Checks a judge's, approver's or notifier's `command` (its exec effects `exec`), under `tk`.
pub(super) fn helper(d: &mut Diag, tk: &str, command: &[S<String>], exec: &[PathBuf]) {
    if let Some(program) = command.first() {
        let reach: Vec<Reach> = exec.iter().map(|p| Reach::literal(p)).collect();
        check(d, tk, program, &reach, Some(DEFAULT_PATH));
    }
}

/// Reports at `program`, under `{tk}.command` (`tk` as `tools.fmt` or `judges.safety`), a `#!`
/// script whose interpreters are not all within `exec` (the exec effects, and the program
/// itself). `path` is the confined PATH, `None` when an argument chooses it.
fn check(d: &mut Diag, tk: &str, program: &S<String>, exec: &[Reach], path: Option<&str>) {
    // command[0] must be absolute, or it has its own error already.
    if !program.v.starts_with('/') {
        return;
    }
    let key = format!("{tk}.command");
    let steps = match chain(Path::new(&program.v), path) {
        Ok(steps) => steps,
        Err(why) => {
            d.err(&program.at, &key, format!("{}: {why}", program.v));
            return;
        }
    };
    let covered = |p: &Path| {
        let reach = Reach::literal(p);
        p == Path::new(&program.v) || exec.iter().any(|e| e.meet(&reach).is_some())
    };
    let missing: Vec<String> = steps
        .iter()
        .filter(|s| !covered(&s.path))
        .map(|s| s.path.display().to_string())
        .collect();
    if missing.is_empty() {
        return;
    }
    let ran: Vec<&str> = steps.iter().map(|s| s.how.as_str()).collect();
    let quoted: Vec<String> = missing.iter().map(|m| format!("\"{m}\"")).collect();
    let message = format!(
        "{} is a #! script, run by {}: {tk}.effects.exec does not cover {}, so the kernel \
         refuses to execute it at every run (Permission denied); add {}",
        program.v,
        ran.join(", then "),
        missing.join(" or "),
        quoted.join(", ")
    );
    d.err(&program.at, &key, message);
}

/// The programs that run `program`: its interpreter, the interpreter's own when that is a
/// script, and what `env` runs. Empty for a program that is no script, or cannot be read.
fn chain(program: &Path, path: Option<&str>) -> Result<Vec<Step>, String> {
    let mut steps: Vec<Step> = Vec::new();
    let mut script = program.to_path_buf();
    while let Some((interpreter, arg)) = shebang(&script) {
        if steps.len() == DEPTH_MAX {
            return Err(format!(
                "its interpreters are scripts more than {DEPTH_MAX} deep: the kernel refuses \
                 to run it (ELOOP)"
            ));
        }
        let how = if steps.is_empty() {
            format!("its interpreter {}", interpreter.display())
        } else {
            let of = script.display();
            format!("{of}'s interpreter {}", interpreter.display())
        };
        steps.push(Step {
            path: interpreter.clone(),
            how,
        });
        script = interpreter;
        if script.file_name().is_some_and(|n| n == "env")
            && let Some(name) = arg.as_deref().and_then(env_program)
        {
            // env execs NAME itself: a path as written, else the first match on its PATH.
            let found = if name.contains('/') {
                Some(PathBuf::from(name))
            } else {
                path.and_then(|p| lookup(name, p))
            };
            let Some(found) = found else {
                // Nothing to check it against (an argument's PATH), or nothing there now.
                break;
            };
            let path = path.unwrap_or_default();
            let how = format!(
                "{name}, which env finds on the confined PATH ({path}) at {}",
                found.display()
            );
            steps.push(Step {
                path: found.clone(),
                how,
            });
            script = found;
        }
    }
    Ok(steps)
}

/// The interpreter of `file` and its one optional argument, as the kernel reads its first line;
/// `None` when it is no script (or cannot be read, or names its interpreter relatively).
fn shebang(file: &Path) -> Option<(PathBuf, Option<String>)> {
    let mut head = Vec::new();
    std::fs::File::open(file)
        .ok()?
        .take(LINE_MAX)
        .read_to_end(&mut head)
        .ok()?;
    let line = head.strip_prefix(b"#!")?;
    let end = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
    let line = String::from_utf8_lossy(&line[..end]);
    let line = line.trim_matches([' ', '\t', '\r']);
    let (interpreter, arg) = match line.split_once([' ', '\t']) {
        Some((i, a)) => (i, Some(a.trim_matches([' ', '\t']).to_owned())),
        None => (line, None),
    };
    let arg = arg.filter(|a| !a.is_empty());
    interpreter
        .starts_with('/')
        .then(|| (PathBuf::from(interpreter), arg))
}

/// The program `env` runs, given the `#!` line's argument (`python3`, `-S python3 -u`,
/// `-i PATH=/x tool`): its first word that is neither an option nor an assignment.
fn env_program(arg: &str) -> Option<&str> {
    arg.split_whitespace()
        .map(|w| w.strip_prefix("-S").filter(|r| !r.is_empty()).unwrap_or(w))
        .find(|w| !w.starts_with('-') && !w.contains('='))
}

/// The first `dir/name` on `path` that is a file, as env's execvp finds it.
fn lookup(name: &str, path: &str) -> Option<PathBuf> {
    path.split(':')
        .filter(|dir| dir.starts_with('/'))
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_runs_its_first_word_that_is_no_option_or_assignment() {
        assert_eq!(env_program("python3"), Some("python3"));
        assert_eq!(env_program("-S python3 -u"), Some("python3"));
        assert_eq!(env_program("-Spython3 -u"), Some("python3"));
        assert_eq!(env_program("-i LANG=C node"), Some("node"));
        assert_eq!(env_program("-i"), None);
    }

    #[test]
    fn the_first_line_names_the_interpreter_and_one_argument() {
        let dir = std::env::temp_dir().join(format!("guard-shebang-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let s = write("a", "#! /bin/sh  -e \nexit 0\n");
        assert_eq!(
            shebang(&s),
            Some((PathBuf::from("/bin/sh"), Some("-e".to_owned())))
        );
        let s = write("b", "#!/usr/bin/env python3\n");
        let (env, arg) = shebang(&s).unwrap();
        assert_eq!(
            (env.to_str(), arg.as_deref()),
            (Some("/usr/bin/env"), Some("python3"))
        );
        assert_eq!(shebang(&write("c", "\x7fELF")), None);
        assert_eq!(shebang(&write("d", "#!sh\n")), None);
        assert_eq!(shebang(&dir.join("missing")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
