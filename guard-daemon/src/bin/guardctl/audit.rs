//! `guardctl audit …`: operate on the audit log.

use std::{path::PathBuf, process::ExitCode};

use clap::Subcommand;
use guard::audit;

#[derive(Subcommand)]
pub enum AuditCommand {
    /// Check every hash, every link and seq continuity, across rotated files.
    ///
    /// Exits 0 when the chain holds, 1 naming the first broken row, 2 when the log cannot be
    /// read.
    Verify {
        /// The active log file; rotated files FILE.1, FILE.2, … are found beside it [default:
        /// the one guardd writes, else /var/lib/guard/audit.jsonl]
        file: Option<PathBuf>,
        /// One JSON object: `ok`, and the summary or the error.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(command: AuditCommand, socket: Option<PathBuf>) -> ExitCode {
    match command {
        AuditCommand::Verify { file, json } => verify(&crate::ask::audit_path(socket, file), json),
    }
}

fn verify(file: &std::path::Path, as_json: bool) -> ExitCode {
    let result = audit::verify(file);
    if as_json {
        /// `guardctl audit verify --json`: one line either way.
        #[derive(serde::Serialize)]
        #[serde(untagged)]
        enum Verified<'a> {
            Ok {
                ok: bool,
                #[serde(flatten)]
                summary: &'a audit::VerifySummary,
            },
            Broken {
                ok: bool,
                io: bool,
                error: String,
            },
        }
        let (out, code) = match &result {
            Ok(summary) => (Verified::Ok { ok: true, summary }, 0),
            Err(e) => {
                let (io, error) = (e.is_io(), e.to_string());
                (
                    Verified::Broken {
                        ok: false,
                        io,
                        error,
                    },
                    if io { 2 } else { 1 },
                )
            }
        };
        crate::print_json(&out);
        return ExitCode::from(code);
    }
    match result {
        Ok(summary) => {
            crate::term::say!(
                "ok: {} rows in {} files, last hash {}",
                summary.rows,
                summary.files,
                summary.last_hash
            );
            if summary.torn_bytes > 0 {
                crate::term::say_err!(
                    "note: ignored an unfinished last line of {} bytes (a write in progress, or a \
                     crash guardd cuts at its next start)",
                    summary.torn_bytes
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) if e.is_io() => {
            crate::term::say_err!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            crate::term::say!("broken: {e}");
            ExitCode::from(1)
        }
    }
}
