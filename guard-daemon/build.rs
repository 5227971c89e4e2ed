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
