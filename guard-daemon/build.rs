//! Builds the kernel programs (`guard-ebpf`) for bpfel-unknown-none with the nightly toolchain,
//! so that `guardd` embeds the object it loads. `cargo xtask setup` installs what this needs.

fn main() -> anyhow::Result<()> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../guard-ebpf");
    let package = aya_build::Package {
        name: "guard-ebpf",
        root_dir: root,
        ..Default::default()
    };
    aya_build::build_ebpf([package], aya_build::Toolchain::default())
}
