//! guardctl: the operator's command line for guard.
mod policy;

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "guardctl", version, about = "Inspect and operate guard")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Work with policy files.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Decide one tool call against a policy without running anything.
    Check {
        /// Policy file or directory [default: /etc/guard/policy.toml, else /etc/guard/policies/]
        #[arg(long)]
        policy: Option<PathBuf>,
        /// The tool's name.
        tool: String,
        /// The call's arguments as a JSON object.
        #[arg(long)]
        args: Option<String>,
        /// Print the decision row (and plan, if any) as one JSON line.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Check a policy file or directory, printing every error.
    Check { path: PathBuf },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Policy {
            command: PolicyCommand::Check { path },
        } => policy::check_policy(&path),
        Command::Check {
            policy: p,
            tool,
            args,
            json,
        } => {
            let p = p.unwrap_or_else(policy::default_policy_path);
            match policy::check_call(&p, &tool, args.as_deref(), json) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("guardctl: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
