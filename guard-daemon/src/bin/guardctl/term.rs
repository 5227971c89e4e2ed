//! What reaches the admin's terminal. Tool names, sessions, agents, arguments, reasons, paths,
//! programs and hosts come from callers, from tools' output and from audit rows: raw, a
//! carriage return, an escape sequence or a bidi override in one could erase and redraw lines,
//! or make a line read as another (a diverged call as "conformed"). Every line guardctl prints
//! for people goes through [`printable`] (whole, with [`say!`], or field by field where guardctl
//! colours the line itself); `--json` output is JSON, exact, and not passed through it.

pub use guard::client::term::{hidden, printable};

/// Prints one line for people, [`printable`]: what guardctl itself writes in it (words,
/// padding) is left as it is, every character a caller could use to rewrite the terminal is
/// escaped. A line break is one too: print each line with its own `say!`.
macro_rules! say {
    ($($arg:tt)*) => {
        println!("{}", $crate::term::printable(&format!($($arg)*)))
    };
}

/// As [`say!`], on stderr.
macro_rules! say_err {
    ($($arg:tt)*) => {
        eprintln!("{}", $crate::term::printable(&format!($($arg)*)))
    };
}

/// As [`say_err!`], each line of the text its own line: for guard's own multi-line messages
/// (a policy error and the source lines it points at), whose line breaks are guard's, while
/// each line is still escaped.
macro_rules! say_err_lines {
    ($($arg:tt)*) => {
        for line in format!($($arg)*).lines() {
            eprintln!("{}", $crate::term::printable(line))
        }
    };
}

pub(crate) use {say, say_err, say_err_lines};
