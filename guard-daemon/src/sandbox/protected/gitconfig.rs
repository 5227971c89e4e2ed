//! Git's config syntax, read as git reads it (`config.c`'s `git_parse_source`), so that what a
//! repository's config hands to files in its worktree is seen whatever the file's layout:
//! `[section]`, `[section "subsection"]` (the subsection as written, `\` escaping the next
//! character), the deprecated `[section.subsection]` (lowercased), a variable on the header's
//! own line, names without case, a variable without `=` (a boolean true), and values with `"`
//! quoting, the escapes `\\ \" \n \t \b`, `;` and `#` comments outside quotes, trailing blanks
//! dropped, and `\` at a line's end joining the next. Git refuses a file with a bad line
//! whole; the parser notes the line and goes on with the next, so a line it reads otherwise
//! than git hides nothing after it.

/// One variable of a config file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The section, lowercased.
    pub section: String,
    /// The subsection: as written in `[section "subsection"]`, lowercased in the deprecated
    /// `[section.subsection]`.
    pub subsection: Option<String>,
    /// The name, lowercased.
    pub key: String,
    /// `None` for a variable without `=` (a boolean true).
    pub value: Option<String>,
    /// Its 1-based line.
    pub line: usize,
}

/// A line git would refuse, with the reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{column}: {message}")]
pub struct SyntaxError {
    pub line: usize,
    pub column: usize,
    pub message: &'static str,
}

/// A file's variables, in order, and the lines git would refuse.
#[derive(Debug, Default)]
pub struct Parsed {
    pub entries: Vec<Entry>,
    pub errors: Vec<SyntaxError>,
}

/// The variables of the config `text`.
pub fn parse(text: &str) -> Parsed {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut p = Parser {
        at: Cursor {
            chars: text.chars().peekable(),
            line: 1,
            column: 0,
            eol: false,
            eof: false,
        },
        section: None,
        out: Parsed::default(),
    };
    loop {
        let c = p.at.next();
        if c == '\n' {
            if p.at.eof {
                return p.out;
            }
            continue;
        }
        let step = match c {
            c if space(c) => Ok(()),
            '#' | ';' => {
                p.at.skip_line();
                Ok(())
            }
            '[' => p.header(),
            c if c.is_ascii_alphabetic() => p.variable(c),
            _ => Err("a line starts with neither [, a name nor a comment"),
        };
        if let Err(message) = step {
            p.out.errors.push(SyntaxError {
                line: p.at.line,
                column: p.at.column,
                message,
            });
            p.at.skip_line();
        }
    }
}

/// Git's `isspace`: ASCII blank, tab, line feed and carriage return only.
fn space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// Git's `iskeychar`.
fn key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

/// The characters of a file as git's `get_next_char` gives them: `\r\n` as `\n`, and `\n`
/// again and again at its end.
struct Cursor<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
    column: usize,
    /// The last character given ended a line.
    eol: bool,
    eof: bool,
}

impl Cursor<'_> {
    fn next(&mut self) -> char {
        if self.eol {
            self.line += 1;
            self.column = 0;
        }
        let c = match self.chars.next() {
            None => {
                self.eof = true;
                '\n'
            }
            Some('\r') if self.chars.peek() == Some(&'\n') => {
                self.chars.next();
                '\n'
            }
            Some(c) => c,
        };
        self.eol = c == '\n' && !self.eof;
        self.column += 1;
        c
    }

    /// Past the end of the line the last character given is on.
    fn skip_line(&mut self) {
        while !self.eol && !self.eof {
            self.next();
        }
    }
}

struct Parser<'a> {
    at: Cursor<'a>,
    /// The section and subsection of the last header.
    section: Option<(String, Option<String>)>,
    out: Parsed,
}

impl Parser<'_> {
    /// A header, after its `[`.
    fn header(&mut self) -> Result<(), &'static str> {
        self.section = None;
        let mut name = String::new();
        loop {
            let c = self.at.next();
            if self.at.eof {
                return Err("a section header without its ]");
            }
            if c == ']' {
                break;
            }
            if space(c) {
                let sub = self.subsection(c)?;
                self.section = Some((name, Some(sub)));
                return Ok(());
            }
            if !key_char(c) && c != '.' {
                return Err("a section name of letters, digits, - and . only");
            }
            name.push(c.to_ascii_lowercase());
        }
        if name.is_empty() {
            return Err("a section header without a name");
        }
        // The deprecated `[section.subsection]`: git splits the whole name at its first dot.
        self.section = Some(match name.split_once('.') {
            Some((section, sub)) => (section.to_owned(), Some(sub.to_owned())),
            None => (name, None),
        });
        Ok(())
    }

    /// `"subsection"]`, after the blank `c` that follows the section's name.
    fn subsection(&mut self, mut c: char) -> Result<String, &'static str> {
        let incomplete = "a section header that ends before its ]";
        while space(c) {
            if c == '\n' {
                return Err(incomplete);
            }
            c = self.at.next();
        }
        if c != '"' {
            return Err("a subsection is quoted: [section \"subsection\"]");
        }
        let mut sub = String::new();
        loop {
            let mut c = self.at.next();
            if c == '\n' {
                return Err(incomplete);
            }
            if c == '"' {
                break;
            }
            if c == '\\' {
                c = self.at.next();
                if c == '\n' {
                    return Err(incomplete);
                }
            }
            sub.push(c);
        }
        if self.at.next() != ']' {
            return Err("a subsection's closing quote is followed by ]");
        }
        Ok(sub)
    }

    /// A variable, from its first letter `first`.
    fn variable(&mut self, first: char) -> Result<(), &'static str> {
        let line = self.at.line;
        let mut key = String::from(first.to_ascii_lowercase());
        let mut c;
        loop {
            c = self.at.next();
            if self.at.eof || !key_char(c) {
                break;
            }
            key.push(c.to_ascii_lowercase());
        }
        while c == ' ' || c == '\t' {
            c = self.at.next();
        }
        let value = match c {
            '\n' => None,
            '=' => Some(self.value()?),
            _ => return Err("a name of letters, digits and - followed by = or the line's end"),
        };
        let Some((section, subsection)) = self.section.clone() else {
            return Err("a variable outside any section");
        };
        self.out.entries.push(Entry {
            section,
            subsection,
            key,
            value,
            line,
        });
        Ok(())
    }

    /// A value, after its `=` (git's `parse_value`).
    fn value(&mut self) -> Result<String, &'static str> {
        let mut out = String::new();
        let (mut quote, mut comment) = (false, false);
        // Where blanks outside quotes began, to drop them if nothing follows.
        let mut trim: Option<usize> = None;
        loop {
            let c = self.at.next();
            if c == '\n' {
                if quote {
                    return Err("a value's quote is not closed on its line");
                }
                if let Some(t) = trim {
                    out.truncate(t);
                }
                return Ok(out);
            }
            if comment {
                continue;
            }
            if space(c) && !quote {
                trim.get_or_insert(out.len());
                if !out.is_empty() {
                    out.push(c);
                }
                continue;
            }
            if !quote && (c == ';' || c == '#') {
                comment = true;
                continue;
            }
            trim = None;
            match c {
                '\\' => match self.at.next() {
                    '\n' => {}
                    't' => out.push('\t'),
                    'b' => out.push('\u{8}'),
                    'n' => out.push('\n'),
                    e @ ('\\' | '"') => out.push(e),
                    _ => return Err("an escape other than \\\\ \\\" \\n \\t \\b in a value"),
                },
                '"' => quote = !quote,
                c => out.push(c),
            }
        }
    }
}

#[cfg(test)]
mod tests;
