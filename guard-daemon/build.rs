//! Builds the kernel programs (`guard-ebpf`) for bpfel-unknown-none with guard's pinned
//! toolchain, so that `guardd` embeds the object it loads. `cargo xtask setup` installs what this
//! needs; what is missing or mismatched is one line here, not an LLVM stack dump later.

#[path = "../xtask/src/toolchain.rs"]
mod toolchain;

fn main() -> anyhow::Result<()> {
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
