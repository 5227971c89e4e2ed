use super::*;

/// `section[.subsection].key=value` of each entry, `key` alone for a boolean.
fn vars(text: &str) -> Vec<String> {
    let parsed = parse(text);
    assert_eq!(parsed.errors, [], "{text:?}");
    parsed.entries.iter().map(shown).collect()
}

fn shown(e: &Entry) -> String {
    let sub = e
        .subsection
        .as_ref()
        .map(|s| format!(".{s}"))
        .unwrap_or_default();
    match &e.value {
        Some(v) => format!("{}{sub}.{}={v}", e.section, e.key),
        None => format!("{}{sub}.{}", e.section, e.key),
    }
}

#[test]
fn comments_after_a_value_are_not_part_of_it_unless_quoted() {
    assert_eq!(
        vars("[core]\n\thooksPath = .githooks ; x\n\teditor = vi # y\n"),
        ["core.hookspath=.githooks", "core.editor=vi"]
    );
    assert_eq!(
        vars("[core]\n# a comment\n; another\n  pager = \"less # not ; a comment\"  \n"),
        ["core.pager=less # not ; a comment"]
    );
    // Blanks inside quotes stay, blanks after the value go, blanks between words stay.
    assert_eq!(
        vars("[a]\nb = \" x \"  \nc = one  two\t \n"),
        ["a.b= x ", "a.c=one  two"]
    );
}

#[test]
fn quotes_and_escapes_are_taken_away_as_git_does() {
    assert_eq!(
        vars("[core]\nhooksPath = \".git\"hooks\\\\x\\\"y\\tz\\n\\b\n"),
        ["core.hookspath=.githooks\\x\"y\tz\n\u{8}"]
    );
    assert_eq!(vars("[a]\nb = \"\"x\n"), ["a.b=x"]);
    let bad = parse("[a]\nb = \\q\nc = \"open\nd = ok\n");
    assert_eq!(bad.errors.len(), 2, "{:?}", bad.errors);
    assert_eq!((bad.errors[0].line, bad.errors[1].line), (2, 3));
    // A line git refuses hides nothing after it.
    assert_eq!(
        bad.entries.iter().map(shown).collect::<Vec<_>>(),
        ["a.d=ok"]
    );
}

#[test]
fn a_variable_may_follow_its_header_on_the_same_line() {
    assert_eq!(
        vars("[core] hooksPath = x\n[include]path=../cfg"),
        ["core.hookspath=x", "include.path=../cfg"]
    );
}

#[test]
fn subsections_are_kept_as_written_and_the_old_form_lowercased() {
    assert_eq!(
        vars("[includeIf \"gitdir:/w/\"]\n path = a\n[diff \"Bin \\\"x\\\\\"]\ntextconv = ./t\n"),
        ["includeif.gitdir:/w/.path=a", "diff.Bin \"x\\.textconv=./t"]
    );
    assert_eq!(vars("[Core.Sub]\nK = v\n"), ["core.sub.k=v"]);
    let e = &parse("[filter.a.b]\nclean = c\n").entries[0];
    assert_eq!(
        (e.section.as_str(), e.subsection.as_deref()),
        ("filter", Some("a.b"))
    );
    for bad in [
        "[core\n",
        "[core sub]\n",
        "[core \"sub\n",
        "[core \"sub\"x\n",
        "[]\n",
        "[a_b]\n",
    ] {
        assert_eq!(parse(bad).errors.len(), 1, "{bad:?}");
    }
}

#[test]
fn a_backslash_at_a_line_s_end_joins_the_next_even_in_quotes() {
    assert_eq!(
        vars("[core]\nhooksPath = .git\\\nhooks\nfsmonitor = \"./a \\\n b\"\n"),
        ["core.hookspath=.githooks", "core.fsmonitor=./a  b"]
    );
    // In a comment, a backslash ends nothing.
    assert_eq!(vars("[a]\nb = c ; d \\\ne = f\n"), ["a.b=c", "a.e=f"]);
    // At the file's end, the value ends.
    assert_eq!(vars("[a]\nb = c\\"), ["a.b=c"]);
}

#[test]
fn names_are_without_case_and_blanks_may_sit_around_them() {
    assert_eq!(
        vars("  [CORE]\n   HooksPATH\t  =   x\r\n\tbare\n\tbare-two   \n"),
        ["core.hookspath=x", "core.bare", "core.bare-two"]
    );
    // A name holds letters, digits and - only, starts with a letter, and is followed by = or
    // the line's end (git refuses `key ; comment`).
    for bad in [
        "[a]\nhooks path = x\n",
        "[a]\n1b = x\n",
        "[a]\nb_c = x\n",
        "[a]\nb ; c\n",
        "b = x\n",
    ] {
        assert_eq!(parse(bad).errors.len(), 1, "{bad:?}");
    }
}

#[test]
fn a_byte_order_mark_and_crlf_lines_are_read() {
    assert_eq!(
        vars("\u{feff}[core]\r\nhooksPath = x \r\n"),
        ["core.hookspath=x"]
    );
}
