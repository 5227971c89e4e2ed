//! Kernels from Debian's archive, and nothing else: a suite's `InRelease` checked with `gpgv`
//! against the host's Debian keyring, its `Packages.xz` checked against the SHA256 the signed
//! `InRelease` gives, and the kernel's `.deb` checked against the SHA256 of its stanza in that
//! index, then unpacked with `dpkg-deb -x`. Everything lands under `target/vm/`: an index is
//! kept by its hash, a kernel by its package name, so a second run fetches only `InRelease`
//! (and, when deb.debian.org cannot be reached, boots the kernel it unpacked last).

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};
use sha2::{Digest as _, Sha256};

use crate::repo::check;

/// The archive every kernel comes from.
const MIRROR: &str = "https://deb.debian.org/debian";
/// The keyring `debian-archive-keyring` installs, holding every release's signing keys.
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
/// The metapackage that names a suite's current cloud kernel (no modules needed: virtio,
/// the serial console, landlock, BPF and cgroups are built in).
const FLAVOUR: &str = "linux-image-cloud-amd64";

/// A kernel unpacked from its package.
pub struct Kernel {
    /// The binary package, e.g. `linux-image-6.1.0-41-cloud-amd64`.
    pub package: String,
    pub version: String,
    /// `boot/vmlinuz-*` inside the unpacked package.
    pub image: PathBuf,
}

/// One paragraph of a `Packages` index: its fields, by name.
struct Stanza<'a>(Vec<(&'a str, &'a str)>);

impl<'a> Stanza<'a> {
    fn get(&self, key: &str) -> Option<&'a str> {
        self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

fn stanzas(text: &str) -> impl Iterator<Item = Stanza<'_>> {
    text.split("\n\n").map(|para| {
        Stanza(
            para.lines()
                .filter(|l| !l.starts_with(' '))
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k, v.trim()))
                .collect(),
        )
    })
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Downloads `url` to `to` with curl (retrying, failing on an HTTP error).
fn download(url: &str, to: &Path) -> Result<()> {
    if let Some(dir) = to.parent() {
        fs::create_dir_all(dir)?;
    }
    check(
        Command::new("curl")
            .args(["-fsSL", "--retry", "3", "--connect-timeout", "20", "-o"])
            .arg(to)
            .arg(url),
    )
    .with_context(|| format!("downloading {url}"))
}

/// The suite's signed `InRelease`, checked, as the text its signature covers.
fn release(cache: &Path, suite: &str) -> Result<String> {
    let signed = cache.join(format!("{suite}.InRelease"));
    download(&format!("{MIRROR}/dists/{suite}/InRelease"), &signed)?;
    if !Path::new(KEYRING).exists() {
        bail!(
            "{KEYRING} is missing (Debian's debian-archive-keyring): cannot check {suite}'s index"
        );
    }
    let out = Command::new("gpgv")
        .args(["--quiet", "--keyring", KEYRING, "--output", "-"])
        .arg(&signed)
        .output()
        .context("running gpgv")?;
    if !out.status.success() {
        bail!(
            "gpgv refused {suite}'s InRelease: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// The SHA256 the signed release gives for `file` (a path below `dists/SUITE/`).
fn release_sha256(release: &str, file: &str) -> Option<String> {
    let sums = release.split_once("\nSHA256:")?.1;
    sums.lines()
        .skip(1)
        .take_while(|l| l.starts_with(' '))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() == 3 && f[2] == file)
        .map(|f| f[0].to_owned())
}

/// The suite's `main/binary-amd64/Packages`, from the cache when its hash is the signed one.
fn packages(cache: &Path, suite: &str, release: &str) -> Result<String> {
    const FILE: &str = "main/binary-amd64/Packages.xz";
    let Some(want) = release_sha256(release, FILE) else {
        bail!("{suite}'s InRelease names no {FILE}");
    };
    let kept = cache.join("index").join(format!("{suite}-{want}.Packages"));
    if let Ok(text) = fs::read_to_string(&kept) {
        return Ok(text);
    }
    let xz = cache.join(format!("{suite}.Packages.xz"));
    download(&format!("{MIRROR}/dists/{suite}/{FILE}"), &xz)?;
    let got = sha256_hex(&fs::read(&xz)?);
    if got != want {
        bail!("{suite}'s {FILE} has SHA256 {got}, its InRelease says {want}");
    }
    let out = Command::new("xz")
        .arg("-dc")
        .arg(&xz)
        .output()
        .context("running xz")?;
    if !out.status.success() {
        bail!("xz -dc {} failed", xz.display());
    }
    let dir = kept.parent().expect("index dir");
    fs::create_dir_all(dir)?;
    // The suite's older indices: superseded.
    for old in fs::read_dir(dir)?.filter_map(Result::ok) {
        if old
            .file_name()
            .to_string_lossy()
            .starts_with(&format!("{suite}-"))
        {
            let _ = fs::remove_file(old.path());
        }
    }
    fs::write(&kept, &out.stdout)?;
    fs::remove_file(&xz)?;
    Ok(String::from_utf8(out.stdout)?)
}

/// The kernel package the suite's [`FLAVOUR`] metapackage depends on, and its stanza's
/// `Filename`, `SHA256` and `Version`.
fn pick(index: &str, suite: &str) -> Result<(String, String, String, String)> {
    let meta = stanzas(index)
        .find(|s| s.get("Package") == Some(FLAVOUR))
        .with_context(|| format!("{suite} has no {FLAVOUR}"))?;
    let depends = meta.get("Depends").unwrap_or_default();
    let Some(name) = depends
        .split(',')
        .map(|d| d.split_whitespace().next().unwrap_or_default())
        .find(|d| d.starts_with("linux-image-"))
    else {
        bail!("{suite}'s {FLAVOUR} depends on no linux-image-*: {depends}");
    };
    let stanza = stanzas(index)
        .find(|s| s.get("Package") == Some(name))
        .with_context(|| format!("{suite} has no stanza for {name}"))?;
    let field = |k: &str| {
        stanza
            .get(k)
            .map(str::to_owned)
            .with_context(|| format!("{name} in {suite} has no {k}"))
    };
    Ok((
        name.to_owned(),
        field("Filename")?,
        field("SHA256")?,
        field("Version")?,
    ))
}

/// The kernel of Debian's `suite`, fetched, checked and unpacked under `cache`, or the one
/// unpacked there last when the archive cannot be reached.
pub fn kernel(cache: &Path, suite: &str) -> Result<Kernel> {
    let last = cache.join(format!("{suite}.last"));
    let fresh = release(cache, suite)
        .and_then(|r| packages(cache, suite, &r))
        .and_then(|index| pick(&index, suite));
    let (package, filename, sha, version) = match fresh {
        Ok(found) => found,
        Err(e) => {
            let kept = fs::read_to_string(&last).map_err(|_| e)?;
            let mut f = kept.lines().map(str::to_owned);
            let (p, v) = (f.next().unwrap_or_default(), f.next().unwrap_or_default());
            eprintln!("vm: {suite}: the archive is out of reach; booting {p} {v}, unpacked before");
            return unpacked(cache, &p, &v);
        }
    };
    let dir = cache.join("kernels").join(&package);
    if !dir.join(".verified").exists() {
        let deb = cache.join(format!("{package}.deb"));
        download(&format!("{MIRROR}/{filename}"), &deb)?;
        let got = sha256_hex(&fs::read(&deb)?);
        if got != sha {
            bail!("{filename} has SHA256 {got}, {suite}'s Packages index says {sha}");
        }
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        check(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&dir))?;
        // The image is all a boot needs: its modules (most of the package) go.
        for unused in ["lib", "usr"] {
            let _ = fs::remove_dir_all(dir.join(unused));
        }
        fs::write(dir.join(".verified"), &sha)?;
        fs::remove_file(&deb)?;
    }
    fs::write(&last, format!("{package}\n{version}\n"))?;
    unpacked(cache, &package, &version)
}

/// The kernel unpacked under `cache` for `package`.
fn unpacked(cache: &Path, package: &str, version: &str) -> Result<Kernel> {
    let boot = cache.join("kernels").join(package).join("boot");
    let image = fs::read_dir(&boot)
        .with_context(|| format!("reading {}", boot.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .with_context(|| format!("no vmlinuz-* in {}", boot.display()))?;
    Ok(Kernel {
        package: package.to_owned(),
        version: version.to_owned(),
        image,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const INDEX: &str = "Package: linux-image-cloud-amd64\nSource: linux-signed-amd64\n\
        Version: 6.1.158-1\nDepends: linux-image-6.1.0-41-cloud-amd64 (= 6.1.158-1)\n\n\
        Package: linux-image-6.1.0-41-cloud-amd64\nVersion: 6.1.158-1\n\
        Description: Linux\n for cloud\nFilename: pool/main/l/x.deb\nSHA256: abc\n";

    #[test]
    fn the_metapackage_names_the_kernel_and_its_stanza_its_file_and_hash() {
        let (name, file, sha, version) = pick(INDEX, "bookworm").unwrap();
        assert_eq!(name, "linux-image-6.1.0-41-cloud-amd64");
        assert_eq!(file, "pool/main/l/x.deb");
        assert_eq!(sha, "abc");
        assert_eq!(version, "6.1.158-1");
        assert!(pick("Package: other\n", "bookworm").is_err());
    }

    #[test]
    fn the_release_gives_the_index_hash_from_its_sha256_section_only() {
        let release = "Origin: Debian\nMD5Sum:\n 111 10 main/binary-amd64/Packages.xz\n\
            SHA256:\n 222 10 main/binary-amd64/Packages\n 333 10 main/binary-amd64/Packages.xz\n";
        assert_eq!(
            release_sha256(release, "main/binary-amd64/Packages.xz").as_deref(),
            Some("333")
        );
        assert_eq!(release_sha256(release, "contrib/x"), None);
    }
}
