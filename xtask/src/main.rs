//! `cargo xtask`: what cargo alone cannot do for guard: prepare the host, run the daemon,
//! run the privileged tests, the lints and the benchmarks, build the book, install.
mod docs;
mod fuzz;
mod imports;
mod install;
mod links;
mod lint;
mod node;
mod repo;
mod report;
mod run;
mod setup;
mod toolchain;
mod venv;
mod vm;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check the host and install what guard needs (idempotent; installs only as root).
    Setup(setup::Options),
    /// Build every binary, the kernel programs embedded in guardd.
    Build(run::BuildOptions),
    /// Set up, build, and run guardd in the foreground with policies/default.toml.
    Run(run::RunOptions),
    /// Set up, build, and run every test, unit and privileged.
    Test(run::TestOptions),
    /// Check formatting, clippy (warnings are errors) and the length of product files.
    Lint,
    /// Check the book's links and build it (docs/book) into target/book/html with mdbook.
    Docs,
    /// Set up (with the peers to compare against), build in release, run the benchmarks.
    Bench(run::BenchOptions),
    /// Run each cargo-fuzz target for a while (installs cargo-fuzz if missing).
    Fuzz(fuzz::FuzzOptions),
    /// Build in release and install the binaries, man pages, completions, the book, the default
    /// policy and a systemd unit (`--root` stages them under a directory).
    Install(install::InstallOptions),
    /// Boot Debian's kernels (and the host's) under qemu and run guard's self-test and a few
    /// end-to-end tests in each; one summary line per kernel.
    Vm(vm::VmOptions),
    /// Remove exactly what `install` wrote (a file changed since is kept and named).
    Uninstall(install::UninstallOptions),
}

fn main() -> Result<()> {
    // In a guest of `cargo xtask vm`, this binary is the kernel's first process.
    if std::process::id() == 1 {
        vm::guest::main();
    }
    match Cli::parse().command {
        Command::Setup(opts) => setup::run(&opts),
        Command::Build(opts) => run::build(&opts),
        Command::Run(opts) => run::run(&opts),
        Command::Test(opts) => run::test(&opts),
        Command::Lint => lint::lint(),
        Command::Docs => docs::docs().map(drop),
        Command::Bench(opts) => run::bench(&opts),
        Command::Install(opts) => install::install(&opts),
        Command::Vm(opts) => {
            if !opts.prebuilt {
                setup::run(&setup::Options::default())?;
                run::build(&run::BuildOptions { release: false })?;
            }
            vm::vm(&opts)
        }
        Command::Uninstall(opts) => install::uninstall(&opts),
        Command::Fuzz(opts) => fuzz::fuzz(&repo::root(), &opts),
    }
}
