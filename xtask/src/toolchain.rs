//! The one toolchain guard's kernel programs and fuzz targets build with, and the check that
//! bpf-linker reads that toolchain's bitcode. `cargo xtask setup` installs what this names, and
//! `guard-daemon/build.rs` includes this file (`#[path]`), so the name lives here alone.
//!
//! Why a dated nightly: plain `nightly` moves to a newer LLVM than the bpf-linker a host can
//! build, and bitcode from a newer LLVM is an "Invalid record" to an older one.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

/// The rustup toolchain that builds `guard-ebpf` (and `fuzz/`); installed with `rust-src`.
pub const EBPF_TOOLCHAIN: &str = "nightly-2026-06-01";

/// The bpf-linker release setup builds; its `llvm-N` features name the LLVM it links.
pub const BPF_LINKER_VERSION: &str = "0.13.0";

/// The LLVM major a `rustc -vV` reports (`LLVM version: 22.1.6`).
pub fn rustc_llvm_major(verbose_version: &str) -> Option<u32> {
    verbose_version
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version:"))
        .and_then(|v| leading_number(v.trim()))
}

/// The LLVM major an installed bpf-linker links: the `llvm-N` feature cargo recorded when it
/// installed it (`~/.cargo/.crates2.json`), else the `libLLVM` its `ldd` output names.
pub fn linker_llvm_major(crates2_json: Option<&str>, ldd: Option<&str>) -> Option<u32> {
    let from_cargo = crates2_json.and_then(|json| {
        // The install record of bpf-linker is one object keyed "bpf-linker VERSION (...)";
        // its features list ends at the first ']'.
        let record = &json[json.find("\"bpf-linker ")?..];
        let features = &record[record.find("\"features\"")?..];
        let features = &features[..features.find(']')?];
        features
            .split("\"llvm-")
            .skip(1)
            .find_map(|rest| rest.split('"').next()?.parse().ok())
    });
    from_cargo.or_else(|| {
        ldd?.lines().find_map(|l| {
            let lib = l.split_whitespace().next()?;
            // libLLVM.so.22.1, libLLVM-22.so, libLLVM.so.22
            let rest = lib.strip_prefix("libLLVM")?;
            let digits = rest.trim_start_matches(|c: char| !c.is_ascii_digit());
            leading_number(digits)
        })
    })
}

/// The LLVM major of the installed [`EBPF_TOOLCHAIN`], or None when it is not installed.
pub fn toolchain_llvm() -> Option<u32> {
    let out = Command::new("rustup")
        .args(["run", EBPF_TOOLCHAIN, "rustc", "-vV"])
        // A probe: a missing toolchain is an answer, not something to download here.
        .env("RUSTUP_AUTO_INSTALL", "0")
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    rustc_llvm_major(&String::from_utf8_lossy(&out.stdout))
}

/// Where bpf-linker is: on PATH, else in cargo's bin directory. None when it does not run.
pub fn linker_path() -> Option<PathBuf> {
    let on_path = env::var_os("PATH").and_then(|path| {
        env::split_paths(&path)
            .map(|d| d.join("bpf-linker"))
            .find(|p| p.is_file())
    });
    on_path
        .or_else(|| Some(cargo_home().join("bin/bpf-linker")))
        .filter(|p| {
            Command::new(p)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
}

/// The LLVM major of the bpf-linker at `path` (see [`linker_llvm_major`]).
pub fn linker_llvm(path: &Path) -> Option<u32> {
    let crates2 = fs::read_to_string(cargo_home().join(".crates2.json")).ok();
    // The cargo record speaks of cargo's own copy only.
    let crates2 = crates2.filter(|_| path.starts_with(cargo_home()));
    let ldd = Command::new("ldd")
        .arg(path)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    linker_llvm_major(crates2.as_deref(), ldd.as_deref())
}

/// `$CARGO_HOME`, else `~/.cargo`.
pub fn cargo_home() -> PathBuf {
    env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from("/root/.cargo"))
}

fn leading_number(s: &str) -> Option<u32> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s[..end].parse().ok()
}

/// Whether bpf-linker can link what the pinned toolchain emits: one line naming both versions
/// and the fix when it cannot.
pub fn check_llvm(toolchain_llvm: Option<u32>, linker_llvm: Option<u32>) -> Result<(), String> {
    const FIX: &str = "run `cargo xtask setup`";
    match (toolchain_llvm, linker_llvm) {
        (None, _) => Err(format!(
            "the toolchain {EBPF_TOOLCHAIN} that builds guard's kernel programs is not installed \
             (or its rustc does not name its LLVM): {FIX}"
        )),
        (Some(_), None) => Err(format!(
            "bpf-linker is not installed, or its LLVM version cannot be told: {FIX} \
             (it builds bpf-linker {BPF_LINKER_VERSION})"
        )),
        (Some(rustc), Some(linker)) if rustc != linker => Err(format!(
            "bpf-linker links LLVM {linker} but {EBPF_TOOLCHAIN} emits LLVM {rustc} bitcode: \
             {FIX} (it rebuilds bpf-linker against LLVM {rustc})"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUSTC_VV: &str = "rustc 1.98.0-nightly (abc 2026-05-31)\nbinary: rustc\n\
                            host: x86_64-unknown-linux-gnu\nrelease: 1.98.0-nightly\n\
                            LLVM version: 22.1.6\n";

    #[test]
    fn rustc_llvm_major_reads_the_llvm_line() {
        assert_eq!(rustc_llvm_major(RUSTC_VV), Some(22));
        assert_eq!(rustc_llvm_major("rustc 1.98.0\nbinary: rustc\n"), None);
    }

    #[test]
    fn linker_llvm_major_from_cargo_record_or_ldd() {
        let crates2 = r#"{"installs":{"cargo-fuzz 0.12.0 (registry+x)":{"features":["llvm-1"]},
            "bpf-linker 0.13.0 (registry+https://x)":{"version_req":null,"bins":["bpf-linker"],
            "features":["llvm-22"],"all_features":false,"no_default_features":true}}}"#;
        assert_eq!(linker_llvm_major(Some(crates2), None), Some(22));
        let ldd = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                   \tlibLLVM.so.22.1 => /usr/lib/llvm-22/lib/libLLVM.so.22.1 (0x00007f)\n";
        assert_eq!(linker_llvm_major(None, Some(ldd)), Some(22));
        assert_eq!(
            linker_llvm_major(None, Some("\tlibLLVM-23.so => /x (0x1)\n")),
            Some(23)
        );
        // Installed with the default features: nothing says which LLVM.
        let default = r#"{"installs":{"bpf-linker 0.13.0 (r)":{"features":[]}}}"#;
        assert_eq!(
            linker_llvm_major(Some(default), Some("\tlibc.so.6 => x\n")),
            None
        );
    }

    #[test]
    fn check_llvm_matching_mismatched_missing() {
        assert_eq!(check_llvm(Some(22), Some(22)), Ok(()));
        let mismatch = check_llvm(Some(23), Some(22)).unwrap_err();
        assert!(
            mismatch.contains("LLVM 22") && mismatch.contains("LLVM 23"),
            "{mismatch}"
        );
        assert!(mismatch.contains("cargo xtask setup"), "{mismatch}");
        assert!(!mismatch.contains('\n'), "one line: {mismatch}");
        let no_linker = check_llvm(Some(22), None).unwrap_err();
        assert!(
            no_linker.contains("bpf-linker is not installed"),
            "{no_linker}"
        );
        let no_toolchain = check_llvm(None, Some(22)).unwrap_err();
        assert!(no_toolchain.contains(EBPF_TOOLCHAIN), "{no_toolchain}");
    }
}
