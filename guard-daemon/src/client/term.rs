//! Text for a person's terminal. Tool names, sessions, agents, arguments, reasons, paths,
//! programs and hosts come from callers, from tools' output and from audit rows: raw, a
//! carriage return, an escape sequence or a bidi override in one could erase and redraw lines,
//! or make a line read as another (a diverged call as "conformed"). guardctl's lines for
//! people and guard-exec's notices go through [`printable`].

use std::borrow::Cow;

/// Whether `c` is shown escaped: C0 controls, DEL and C1 controls (U+0080-U+009F, which a
/// terminal may take for the start of a sequence, U+009B for CSI), the line and paragraph
/// separators, the bidi embeddings, overrides, isolates and marks (which reorder what follows
/// them), and the other invisible format characters and fillers (zero-width spaces and joiners,
/// the word joiner, invisible operators, the byte order mark, variation selectors, tags, Hangul
/// fillers): the characters of Unicode's classes Cc, Cf, Zl and Zp and its default-ignorable
/// ones, none of which shows as itself.
pub fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{0600}'..='\u{0605}'
                | '\u{061C}'
                | '\u{06DD}'
                | '\u{070F}'
                | '\u{0890}'..='\u{0891}'
                | '\u{08E2}'
                | '\u{115F}'..='\u{1160}'
                | '\u{17B4}'..='\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF0}'..='\u{FFFB}'
                | '\u{110BD}'
                | '\u{110CD}'
                | '\u{13430}'..='\u{1343F}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0000}'..='\u{E0FFF}'
        )
}

/// `text` as the admin's terminal may show it: each [`hidden`] character written as a visible
/// escape, `\u{1b}` for ESC, `\u{202e}` for a right-to-left override. The one escape of guard's
/// tools: every line they print for people goes through it.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(hidden) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if hidden(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_character_that_could_rewrite_a_line_is_escaped_and_nothing_else() {
        let cases = [
            ("\x1b[2K\r\n\t", r"\u{1b}[2K\u{d}\u{a}\u{9}"),
            ("a\x7fb", r"a\u{7f}b"),
            ("\u{85}\u{9b}31m\u{9f}", r"\u{85}\u{9b}31m\u{9f}"),
            ("ok\u{202e}dewrevid", r"ok\u{202e}dewrevid"),
            (
                "\u{202a}\u{202b}\u{202c}\u{202d}",
                r"\u{202a}\u{202b}\u{202c}\u{202d}",
            ),
            (
                "\u{2066}x\u{2067}\u{2068}\u{2069}",
                r"\u{2066}x\u{2067}\u{2068}\u{2069}",
            ),
            (
                "zero\u{200b}width\u{200d}\u{feff}",
                r"zero\u{200b}width\u{200d}\u{feff}",
            ),
            (
                "\u{200e}\u{200f}\u{61c}\u{2028}",
                r"\u{200e}\u{200f}\u{61c}\u{2028}",
            ),
            ("tag\u{e0041}", r"tag\u{e0041}"),
        ];
        for (raw, shown) in cases {
            assert_eq!(printable(raw), shown, "{raw:?}");
        }
        // What shows as itself stays as it is, borrowed.
        let plain = "/srv/ws/été/日本 \\u{1b} \"quoted\" ~!";
        assert!(matches!(printable(plain), Cow::Borrowed(p) if p == plain));
    }
}
