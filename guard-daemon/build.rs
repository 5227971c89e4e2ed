//! Builds the kernel programs (`guard-ebpf`) for bpfel-unknown-none with guard's pinned
//! toolchain, so that `guardd` embeds the object it loads. `cargo xtask setup` installs what this
//! needs; what is missing or mismatched is one line here, not an LLVM stack dump later.

#[path = "../xtask/src/toolchain.rs"]
mod toolchain;

fn main() -> anyhow::Result<()> {
    // A build for guard-exec alone (`cargo xtask build` links it against musl): nothing there
    // loads a kernel program, so the library embeds an empty object, which guardd refuses.
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    // As aya-build reads it; it then builds nothing, and this writes the empty object.
    let skip =
        std::env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if skip {
        let out = std::env::var_os("OUT_DIR").ok_or_else(|| anyhow::anyhow!("OUT_DIR not set"))?;
        std::fs::write(std::path::Path::new(&out).join("guard"), [])?;
        return Ok(());
    }
    let linker = toolchain::linker_path();
    toolchain::check_llvm(
        toolchain::toolchain_llvm(),
        linker.as_deref().and_then(toolchain::linker_llvm),
    )
    .map_err(anyhow::Error::msg)?;
    // aya-build turns every line the inner cargo prints into a cargo warning: keep it to the
    // ones that matter (errors and real warnings), not a "Compiling" line per crate.
    // SAFETY: the build script is single-threaded here; nothing reads the environment concurrently.
    unsafe { std::env::set_var("CARGO_TERM_QUIET", "true") };
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../guard-ebpf");
    let package = aya_build::Package {
        name: "guard-ebpf",
        root_dir: root,
        ..Default::default()
    };
    aya_build::build_ebpf(
        [package],
        aya_build::Toolchain::Custom(toolchain::EBPF_TOOLCHAIN),
    )
}
