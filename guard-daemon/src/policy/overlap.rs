//! Which paths an effect template can name, as far as load time can know, and whether a
//! program a call may run is also a path it may write.
//!
//! A placeholder is always a whole element (see `template`), so a template is either a literal
//! path or one `{arg}`; the argument's `within` roots bound what it can become, since
//! `args::check` refuses a value that resolves outside them. Without `within` it can be any path.

use std::path::{Path, PathBuf};

use super::{
    args::{ArgSpec, resolve},
    rules::is_glob,
    template::Elem,
};

/// The paths one effect template can name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Each path and everything beneath it, in every spelling the kernel may see (as written
    /// and with symlinks resolved: landlock follows the inode, the exec allow-list keys both).
    Beneath(Vec<PathBuf>),
    /// Any path: a placeholder whose argument has no `within`.
    Anywhere,
}

impl Reach {
    /// A literal absolute path.
    pub fn literal(p: &Path) -> Self {
        Reach::Beneath(spellings(p))
    }

    /// A `{arg}` placeholder of a path argument; `workspaces` are the policy's roots, what a
    /// `{workspace}` or `{cwd}` root can be.
    pub fn arg(spec: &ArgSpec, workspaces: &[PathBuf]) -> Self {
        if spec.within.is_empty() {
            return Reach::Anywhere;
        }
        let mut roots = Vec::new();
        for r in &spec.within {
            match Reach::elem(r, &[], workspaces) {
                Reach::Beneath(r) => roots.extend(r),
                Reach::Anywhere => return Reach::Anywhere,
            }
        }
        Reach::Beneath(roots)
    }

    /// `{workspace}` or `{cwd}`, with anything below: beneath what the policy's roots hold
    /// before their first glob.
    pub fn workspace(workspaces: &[PathBuf]) -> Self {
        Reach::Beneath(
            workspaces
                .iter()
                .flat_map(|w| {
                    let literal: PathBuf = w
                        .components()
                        .take_while(|c| !is_glob(&c.as_os_str().to_string_lossy()))
                        .collect();
                    spellings(&literal)
                })
                .collect(),
        )
    }

    /// What the template `e` of a tool with arguments `args` can name.
    pub fn elem(e: &Elem<PathBuf>, args: &[ArgSpec], workspaces: &[PathBuf]) -> Self {
        match e {
            Elem::Lit(p) => Reach::literal(p),
            Elem::Arg(i) => args
                .get(*i)
                .map_or(Reach::Anywhere, |spec| Reach::arg(spec, workspaces)),
            Elem::Ctx(..) => Reach::workspace(workspaces),
        }
    }

    /// A path both can name, the deeper of two overlapping roots; `None` when they are apart.
    /// `Some(None)` when both are [`Reach::Anywhere`].
    pub fn meet(&self, other: &Reach) -> Option<Option<PathBuf>> {
        match (self, other) {
            (Reach::Anywhere, Reach::Anywhere) => Some(None),
            (Reach::Anywhere, Reach::Beneath(roots)) | (Reach::Beneath(roots), Reach::Anywhere) => {
                roots.first().map(|r| Some(r.clone()))
            }
            (Reach::Beneath(a), Reach::Beneath(b)) => a.iter().find_map(|x| {
                b.iter().find_map(|y| {
                    if x.starts_with(y) {
                        Some(Some(x.clone()))
                    } else if y.starts_with(x) {
                        Some(Some(y.clone()))
                    } else {
                        None
                    }
                })
            }),
        }
    }
}

/// `p` as written and, when different, with the symlinks of its existing prefix resolved.
fn spellings(p: &Path) -> Vec<PathBuf> {
    let real = resolve(p);
    if real == p {
        vec![p.to_path_buf()]
    } else {
        vec![p.to_path_buf(), real]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(p: &str) -> Reach {
        Reach::Beneath(vec![PathBuf::from(p)])
    }

    #[test]
    fn overlap_is_by_whole_components_in_either_direction() {
        let got = lit("/opt/tools/bin/fmt").meet(&lit("/opt/tools"));
        assert_eq!(got, Some(Some("/opt/tools/bin/fmt".into())));
        let got = lit("/opt/tools").meet(&lit("/opt/tools/new"));
        assert_eq!(got, Some(Some("/opt/tools/new".into())));
        assert_eq!(lit("/opt/toolsmith").meet(&lit("/opt/tools")), None);
        assert_eq!(lit("/usr/bin/make").meet(&lit("/tmp")), None);
        assert_eq!(
            Reach::Anywhere.meet(&lit("/usr/bin/tee")),
            Some(Some("/usr/bin/tee".into()))
        );
        assert_eq!(Reach::Anywhere.meet(&Reach::Anywhere), Some(None));
    }

    #[test]
    fn symlinked_spellings_count() {
        let root = std::env::temp_dir().join(format!("guard-overlap-{}", std::process::id()));
        let real = root.join("real");
        std::fs::create_dir_all(&real).expect("mkdir");
        let link = root.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let real = std::fs::canonicalize(&real).expect("canonicalize");
        // Writing through the link reaches the program named by its real path.
        let write = Reach::literal(&link);
        let exec = Reach::literal(&real.join("tool"));
        assert!(write.meet(&exec).is_some());
        std::fs::remove_dir_all(&root).expect("cleanup");
    }
}
