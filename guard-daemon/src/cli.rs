//! What the three command lines share: shell completions and man pages generated from their
//! clap definitions, so `cargo xtask install` ships pages that cannot drift from `--help`.

use std::io::{self, Write as _};

/// The hidden first argument that asks a binary for its completions or man page
/// (`--generate=bash|zsh|fish|man`); read before anything else, and only as `argv[1]`.
pub const GENERATE_FLAG: &str = "--generate=";

/// If `argv[1]` is `--generate=WHAT`, writes WHAT for `cmd` to stdout and exits; else returns.
pub fn generate_if_asked(cmd: impl FnOnce() -> clap::Command) {
    let Some(what) = std::env::args()
        .nth(1)
        .and_then(|a| a.strip_prefix(GENERATE_FLAG).map(str::to_owned))
    else {
        return;
    };
    let mut cmd = cmd();
    let name = cmd.get_name().to_owned();
    // Rendered whole first: clap_complete panics on a failed write (a closed pipe).
    let mut text = Vec::new();
    let rendered = match what.as_str() {
        "man" => clap_mangen::Man::new(cmd).render(&mut text),
        shell => match shell.parse::<clap_complete::Shell>() {
            Ok(shell) => {
                clap_complete::generate(shell, &mut cmd, name.as_str(), &mut text);
                Ok(())
            }
            Err(_) => {
                eprintln!("{name}: --generate takes bash, zsh, fish or man, not {shell:?}");
                std::process::exit(64);
            }
        },
    };
    let mut out = io::stdout().lock();
    let written = rendered
        .and_then(|()| out.write_all(&text))
        .and_then(|()| out.flush());
    let code = match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{name}: writing {what}: {e}");
            74
        }
    };
    std::process::exit(code);
}
