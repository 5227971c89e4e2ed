//! The guest's whole file system, as one uncompressed `newc` cpio archive the kernel unpacks
//! into its rootfs: the workspace's binaries (stripped copies), the host programs the checks
//! run and every library `ldd` says they load, kept at the host's paths (and the host's
//! merged-`/usr` links), a `passwd` with the users guard needs, and `/dev/console` so the
//! first program has a console before `/dev` is mounted.

use std::{
    collections::BTreeMap,
    fs,
    io::{BufWriter, Write as _},
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Component, Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

/// One entry of the archive.
enum Entry {
    Dir,
    /// A file's contents come from a host file.
    File {
        from: PathBuf,
        mode: u32,
    },
    Bytes {
        data: Vec<u8>,
        mode: u32,
    },
    Symlink(PathBuf),
    /// A character device (major, minor).
    Char(u32, u32),
}

/// An archive being put together: entries by their absolute path in the guest.
#[derive(Default)]
pub struct Archive(BTreeMap<PathBuf, Entry>);

impl Archive {
    fn put(&mut self, at: &Path, entry: Entry) {
        for dir in at.ancestors().skip(1) {
            if dir != Path::new("/") && !self.0.contains_key(dir) {
                self.0.insert(dir.to_owned(), Entry::Dir);
            }
        }
        self.0.insert(at.to_owned(), entry);
    }

    pub fn dir(&mut self, at: &str) {
        self.put(Path::new(at), Entry::Dir);
    }

    pub fn bytes(&mut self, at: &str, data: impl Into<Vec<u8>>, mode: u32) {
        let data = data.into();
        self.put(Path::new(at), Entry::Bytes { data, mode });
    }

    pub fn char_dev(&mut self, at: &str, major: u32, minor: u32) {
        self.put(Path::new(at), Entry::Char(major, minor));
    }

    /// A host file copied in at `at`, with its mode.
    pub fn file(&mut self, at: &Path, from: &Path) -> Result<()> {
        let mode = fs::metadata(from)
            .with_context(|| format!("reading {}", from.display()))?
            .permissions()
            .mode()
            & 0o7777;
        self.put(
            at,
            Entry::File {
                from: from.to_owned(),
                mode,
            },
        );
        Ok(())
    }

    /// A program built here, at `at`, with the host libraries it loads.
    pub fn program(&mut self, at: &Path, from: &Path) -> Result<()> {
        self.file(at, from)?;
        for lib in libraries(from)? {
            self.host_path(&lib)?;
        }
        Ok(())
    }

    /// A host program or library at its own path, through the symlinks on its way, with
    /// the libraries it loads.
    pub fn host(&mut self, path: &Path) -> Result<()> {
        self.host_path(path)?;
        for lib in libraries(path)? {
            self.host_path(&lib)?;
        }
        Ok(())
    }

    /// `path` as the host has it: a link kept as a link (and what it points to added), a
    /// file at its canonical place. The top directories' own links (`/lib` -> `usr/lib`) are
    /// [`Self::merged_usr`]'s.
    fn host_path(&mut self, path: &Path) -> Result<()> {
        let parent = path.parent().context("a path with a parent")?;
        let dir = fs::canonicalize(parent).with_context(|| format!("{}", parent.display()))?;
        let here = dir.join(path.file_name().context("a file name")?);
        if self.0.contains_key(&here) {
            return Ok(());
        }
        let meta = fs::symlink_metadata(&here).with_context(|| format!("{}", here.display()))?;
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&here)?;
            self.put(&here, Entry::Symlink(target.clone()));
            return self.host_path(&dir.join(target));
        }
        self.file(&here, &here)
    }

    /// The host's links from `/bin`, `/lib`, `/lib64` and `/sbin` into `/usr`, as they are.
    pub fn merged_usr(&mut self) -> Result<()> {
        for top in ["/bin", "/sbin", "/lib", "/lib64"] {
            if fs::symlink_metadata(top).is_ok_and(|m| m.file_type().is_symlink()) {
                self.put(Path::new(top), Entry::Symlink(fs::read_link(top)?));
            }
        }
        Ok(())
    }

    /// Writes the archive to `to`.
    pub fn write(&self, to: &Path) -> Result<()> {
        let file = fs::File::create(to).with_context(|| format!("creating {}", to.display()))?;
        let mut out = BufWriter::new(file);
        for (ino, (path, entry)) in self.0.iter().enumerate() {
            let name = relative(path);
            let (mode, data, rdev) = match entry {
                Entry::Dir => (0o040755, Vec::new(), (0, 0)),
                Entry::File { from, mode } => (0o100000 | mode, read(from)?, (0, 0)),
                Entry::Bytes { data, mode } => (0o100000 | mode, data.clone(), (0, 0)),
                Entry::Symlink(t) => (0o120777, t.as_os_str().as_encoded_bytes().to_vec(), (0, 0)),
                Entry::Char(major, minor) => (0o020600, Vec::new(), (*major, *minor)),
            };
            header(&mut out, ino as u32 + 1, mode, data.len(), rdev, &name)?;
            out.write_all(&data)?;
            pad(&mut out, data.len())?;
        }
        header(&mut out, 0, 0, 0, (0, 0), "TRAILER!!!")?;
        out.flush()?;
        Ok(())
    }
}

fn read(from: &Path) -> Result<Vec<u8>> {
    fs::read(from).with_context(|| format!("reading {}", from.display()))
}

/// `path` without its leading `/`, as cpio names entries.
fn relative(path: &Path) -> String {
    path.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// A `newc` header and the entry's name, padded to four bytes.
fn header(
    out: &mut impl std::io::Write,
    ino: u32,
    mode: u32,
    size: usize,
    rdev: (u32, u32),
    name: &str,
) -> Result<()> {
    let nlink = if mode & 0o170000 == 0o040000 { 2 } else { 1 };
    let fields = [
        ino,
        mode,
        0,
        0,
        nlink,
        0,
        size as u32,
        0,
        0,
        rdev.0,
        rdev.1,
        name.len() as u32 + 1,
        0,
    ];
    let mut head = String::from("070701");
    for f in fields {
        head.push_str(&format!("{f:08x}"));
    }
    out.write_all(head.as_bytes())?;
    out.write_all(name.as_bytes())?;
    out.write_all(&[0])?;
    pad(out, head.len() + name.len() + 1)
}

fn pad(out: &mut impl std::io::Write, len: usize) -> Result<()> {
    out.write_all(&[0; 3][..(4 - len % 4) % 4])?;
    Ok(())
}

/// The shared libraries `path` loads, and its loader, as `ldd` lists them.
fn libraries(path: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(path)
        .output()
        .context("running ldd")?;
    // A static program: ldd says so, on stdout or stderr, and fails or not by version.
    let text = String::from_utf8_lossy(&out.stdout);
    let mut libs = Vec::new();
    for line in text.lines() {
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line
                .split_whitespace()
                .next()
                .filter(|p| p.starts_with('/')),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        }
    }
    Ok(libs)
}

/// A stripped copy of `from` in `stage` (the workspace's debug builds carry hundreds of
/// megabytes of debug information the guest has no use for).
pub fn stripped(from: &Path, stage: &Path) -> Result<PathBuf> {
    fs::create_dir_all(stage)?;
    let to = stage.join(from.file_name().context("a file name")?);
    let fresh = fs::metadata(&to)
        .and_then(|t| Ok(t.mtime() >= fs::metadata(from)?.mtime()))
        .unwrap_or(false);
    if fresh {
        return Ok(to);
    }
    let ok = Command::new("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(&to)
        .arg(from)
        .status()
        .context("running strip")?
        .success();
    if !ok {
        bail!("strip {} failed", from.display());
    }
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archive_is_newc_with_its_parents_and_a_trailer_all_four_byte_aligned() {
        let mut a = Archive::default();
        a.bytes("/etc/passwd", "root:x:0:0::/root:/bin/sh\n", 0o644);
        a.char_dev("/dev/console", 5, 1);
        let dir = std::env::temp_dir().join(format!("guard-cpio-{}", std::process::id()));
        a.write(&dir).unwrap();
        let bytes = fs::read(&dir).unwrap();
        let _ = fs::remove_file(&dir);
        assert_eq!(bytes.len() % 4, 0);
        let text = String::from_utf8_lossy(&bytes);
        assert_eq!(
            text.matches("070701").count(),
            5,
            "dev, console, etc, passwd, trailer"
        );
        assert!(text.contains("etc/passwd\0"));
        assert!(text.ends_with("TRAILER!!!\0\0\0\0") || text.contains("TRAILER!!!\0"));
    }
}
