//! What the four command lines share: shell completions and man pages generated from their
//! clap definitions, so `cargo xtask install` ships pages that cannot drift from `--help`.
//!
//! Completions are clap's dynamic ones (`clap_complete`'s `unstable-dynamic`): the installed
//! script is a stub that, at each Tab, runs the binary with [`COMPLETE_VAR`] set, and the
//! binary completes with clap's own parser. That parser is what knows which word is
//! guard-exec's TOOL after options that take values, in every shell alike; and a value can be
//! completed with what only a running guardd knows, the caller's tools ([`tool_names`]). The
//! feature is marked unstable (its API may change in a minor release); Cargo.lock pins it.

use std::{
    ffi::OsStr,
    io::{self, Write as _},
    time::Duration,
};

use clap_complete::engine::CompletionCandidate;
use clap_mangen::{
    Man,
    roff::{Roff, bold, roman},
};

/// The hidden first argument that asks a binary for its completions or man page
/// (`--generate=bash|zsh|fish|man`); read before anything else, and only as `argv[1]`.
/// Where guard's book is, for each command's `--help` (its man page says the same under SEE
/// ALSO): `cargo xtask install` puts the book's HTML in `share/doc/guard` under its prefix.
pub const BOOK_HELP: &str = "DOCUMENTATION:\n  guard's book (the policy language, agents, operating, the protocol): \
/usr/local/share/doc/guard/index.html,\n  or share/doc/guard under the prefix guard was installed to; \
in a checkout, docs/book (cargo xtask docs builds it)";

pub const GENERATE_FLAG: &str = "--generate=";

/// The variable the installed completion scripts set (to the shell's name) when they run a
/// binary for its completions. Heeded only with `--` as `argv[1]`, as the scripts call it: a
/// stray one in an agent's environment never turns a call into a completion.
pub const COMPLETE_VAR: &str = "GUARD_COMPLETE";

/// The man pages `cargo xtask install` installs, by name and section: the only pages a page
/// refers to.
pub const PAGES: &[(&str, u8)] = &[
    ("guardd", 8),
    ("guardctl", 1),
    ("guard-exec", 1),
    ("guard-mcp", 1),
];

/// How long a completion waits for guardd: a shell's Tab must not hang on a stuck daemon.
const COMPLETION_TIMEOUT: Duration = Duration::from_millis(500);

/// What a binary's man page says beyond its clap definition.
#[derive(Default)]
pub struct Page {
    /// Sections of plain text (a title, paragraphs separated by blank lines), after the
    /// commands.
    pub sections: &'static [(&'static str, &'static str)],
    /// Environment variables no flag reads, and what each does.
    pub environment: &'static [(&'static str, &'static str)],
}

/// If `argv[1]` is `--generate=WHAT`, writes WHAT for `cmd` to stdout and exits; if the shell's
/// completion script is asking, answers it and exits; else returns.
pub fn generate_if_asked(cmd: impl Fn() -> clap::Command) {
    generate_with(cmd, &Page::default());
}

/// [`generate_if_asked`], with what `page` adds to the man page.
pub fn generate_with(cmd: impl Fn() -> clap::Command, page: &Page) {
    let mut args = std::env::args_os().skip(1);
    let first = args.next();
    if first.as_deref() == Some(OsStr::new("--")) && std::env::var_os(COMPLETE_VAR).is_some() {
        clap_complete::CompleteEnv::with_factory(&cmd)
            .var(COMPLETE_VAR)
            .complete();
    }
    let Some(what) = first
        .and_then(|a| a.into_string().ok())
        .and_then(|a| a.strip_prefix(GENERATE_FLAG).map(str::to_owned))
    else {
        return;
    };
    let cmd = cmd();
    let name = cmd.get_name().to_owned();
    // Rendered whole first, so a failed write is one error, not half a file.
    let rendered = match what.as_str() {
        "man" => man(cmd, page),
        shell => registration(&name, shell),
    };
    let mut out = io::stdout().lock();
    let written = rendered
        .and_then(|text| out.write_all(&text))
        .and_then(|()| out.flush());
    let code = match written {
        Ok(()) => 0,
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
            eprintln!("{name}: {e}");
            64
        }
        Err(e) => {
            eprintln!("{name}: writing {what}: {e}");
            74
        }
    };
    std::process::exit(code);
}

/// The completion script for `shell`: it runs `name` (found on PATH) for each completion.
fn registration(name: &str, shell: &str) -> io::Result<Vec<u8>> {
    let shells = clap_complete::env::Shells::builtins();
    let Some(completer) = shells.completer(shell) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("--generate takes bash, zsh, fish, elvish, powershell or man, not {shell:?}"),
        ));
    };
    let mut text = Vec::new();
    completer.write_registration(COMPLETE_VAR, name, name, name, &mut text)?;
    Ok(text)
}

/// The tools guardd lets this caller call, for a shell's completion of a tool name: asked at
/// `GUARD_SOCKET` (else the default socket); none, silently, when guardd does not answer.
pub fn tool_names(current: &OsStr) -> Vec<CompletionCandidate> {
    let Some(current) = current.to_str() else {
        return Vec::new();
    };
    let socket = crate::client::socket_path(std::env::var_os("GUARD_SOCKET").map(Into::into));
    let asked = crate::client::Client::connect(&socket).and_then(|mut client| {
        client.set_timeout(COMPLETION_TIMEOUT)?;
        client.request(&crate::protocol::Request::Tools(Default::default()))
    });
    let Ok(crate::protocol::Reply::Tools(list)) = asked else {
        return Vec::new();
    };
    list.tools
        .into_iter()
        .filter(|t| t.name.starts_with(current))
        .map(|t| {
            // A description goes to the terminal: its control characters do not.
            let help = t.description.map(|d| d.replace(char::is_control, " "));
            CompletionCandidate::new(t.name).help(help.map(Into::into))
        })
        .collect()
}

/// The man page of `cmd`: clap's sections, then each subcommand in full (no page of its own is
/// installed to refer to), `page`'s sections, the environment and the other pages.
fn man(cmd: clap::Command, page: &Page) -> io::Result<Vec<u8>> {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let name = cmd.get_name().to_owned();
    let section = PAGES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(1, |(_, s)| *s);
    let man = Man::new(cmd.clone()).section(section.to_string());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if cmd.has_subcommands() {
        let mut roff = Roff::new();
        roff.control("SH", ["COMMANDS"]);
        roff.to_writer(&mut out)?;
        commands(&cmd, &mut out)?;
    }
    if cmd.get_after_help().is_some() || cmd.get_after_long_help().is_some() {
        let mut extra = Vec::new();
        man.render_extra_section(&mut extra)?;
        out.extend(retitle(&extra, ".SH EXTRA", ".SH NOTES"));
    }
    let mut roff = Roff::new();
    for (title, text) in page.sections {
        roff.control("SH", [*title]);
        for paragraph in text.split("\n\n") {
            roff.control("PP", [])
                .text([roman(paragraph.replace('\n', " "))]);
        }
    }
    environment(&cmd, page, &mut roff);
    roff.control("SH", ["SEE ALSO"]);
    let others = PAGES.iter().filter(|(n, _)| *n != name);
    let mut refs = Vec::new();
    for (i, (other, section)) in others.enumerate() {
        let sep = if i == 0 { "" } else { ", " };
        refs.extend([roman(sep), bold(*other), roman(format!("({section})"))]);
    }
    refs.push(roman(
        ". guard's book describes the policy language, the protocol and the integrations with \
         agents: cargo xtask install puts it in share/doc/guard under its prefix \
         (/usr/local/share/doc/guard/index.html by default); in a checkout it is docs/book.",
    ));
    roff.text(refs);
    roff.to_writer(&mut out)?;
    man.render_version_section(&mut out)?;
    Ok(out)
}

/// Each visible subcommand of `cmd`, nested ones included, under its full name: its synopsis,
/// description and options, as clap renders them for a page of its own.
fn commands(cmd: &clap::Command, out: &mut Vec<u8>) -> io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let full = sub.get_bin_name().unwrap_or(sub.get_name()).to_owned();
        let mut roff = Roff::new();
        roff.control("SS", [full.as_str()]);
        roff.to_writer(&mut *out)?;
        // The top's global flags and each command's --help are said once, above.
        let repeated: Vec<clap::Id> = sub
            .get_arguments()
            .filter(|a| a.is_global_set() || a.get_id() == "help")
            .map(|a| a.get_id().clone())
            .collect();
        let shown = repeated
            .into_iter()
            .fold(sub.clone(), |c, id| c.mut_arg(id, |a| a.hide(true)));
        let man = Man::new(shown);
        let mut text = Vec::new();
        man.render_synopsis_section(&mut text)?;
        man.render_description_section(&mut text)?;
        if sub.get_arguments().any(|a| !a.is_hide_set()) {
            man.render_options_section(&mut text)?;
        }
        // Its own sections become paragraphs of this one's.
        out.extend(retitle(&text, ".SH ", ".PP\n.\\\" "));
        commands(sub, out)?;
    }
    Ok(())
}

/// `text` with each line starting `from` starting `to` instead.
fn retitle(text: &[u8], from: &str, to: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(text);
    let mut out = String::new();
    for line in text.lines() {
        match line.strip_prefix(from) {
            Some(rest) => out.push_str(&format!("{to}{rest}\n")),
            None => out.push_str(&format!("{line}\n")),
        }
    }
    out.into_bytes()
}

/// ENVIRONMENT: each variable a flag of `cmd` (or of a subcommand) reads, and `page`'s.
fn environment(cmd: &clap::Command, page: &Page, roff: &mut Roff) {
    let mut vars: Vec<(String, String)> = Vec::new();
    let mut stack = vec![cmd];
    while let Some(c) = stack.pop() {
        for arg in c.get_arguments() {
            let (Some(var), Some(long)) = (arg.get_env(), arg.get_long()) else {
                continue;
            };
            let var = var.to_string_lossy().into_owned();
            if vars.iter().all(|(v, _)| *v != var) {
                let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                let help = help.trim_end_matches('.');
                vars.push((var, format!("{help}; --{long} overrides it.")));
            }
        }
        stack.extend(c.get_subcommands());
    }
    vars.extend(
        page.environment
            .iter()
            .map(|(v, text)| ((*v).to_owned(), (*text).to_owned())),
    );
    vars.push((
        COMPLETE_VAR.to_owned(),
        "set, to the shell's name, by the installed bash, zsh and fish completion scripts when \
         they run this command for the words to complete (with -- as its first argument); \
         where a tool name is completed, the tools are asked of guardd at GUARD_SOCKET, and \
         none are offered when it does not answer. Not for setting by hand."
            .to_owned(),
    ));
    roff.control("SH", ["ENVIRONMENT"]);
    for (var, text) in vars {
        roff.control("TP", []).text([bold(var)]).text([roman(text)]);
    }
}
