//! guardctl: the operator's command line for guard.
mod audit;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "guardctl", version, about = "Inspect and operate guard")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The audit log.
    Audit {
        #[command(subcommand)]
        command: audit::AuditCommand,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Audit { command } => audit::run(command),
    }
}
