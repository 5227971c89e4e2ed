//! The module graph of a crate, read from its sources: which module's code names which other
//! module (`use crate::...`, `super::...`, a path written out in code), and the circles in it.
//! A module naming its own ancestors or descendants is no arrow (a folder's `mod.rs` and its
//! files are one stage); test modules are left out. What `cargo xtask lint` holds the code to:
//! imports go one way, down the stages a call goes through.
//!
//! It reads text, not the compiler's resolution: a macro-made path or a `#[path]` attribute is
//! not followed. What it finds is what a reader of the code sees.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};

/// A module's path in its crate, `[]` for the crate's root.
type Module = Vec<String>;

/// The modules of the crate whose root file is `root`, by path, each with its file.
fn modules(root: &Path) -> Result<BTreeMap<Module, PathBuf>> {
    let mut found = BTreeMap::new();
    let mut todo = vec![(Vec::new(), root.to_owned())];
    while let Some((module, file)) = todo.pop() {
        let text =
            fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        // A root or `mod.rs` keeps its children beside it; `x.rs` keeps them in `x/`.
        let name = file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let dir = match file.parent() {
            Some(p) if module.is_empty() || name == "mod" => p.to_owned(),
            Some(p) => p.join(name),
            None => PathBuf::new(),
        };
        for child in declared(&text) {
            let flat = dir.join(format!("{child}.rs"));
            let nested = dir.join(&child).join("mod.rs");
            let Some(path) = [flat, nested].into_iter().find(|p| p.exists()) else {
                continue;
            };
            let mut m = module.clone();
            m.push(child);
            todo.push((m, path));
        }
        found.insert(module, file);
    }
    Ok(found)
}

/// The `mod NAME;` declarations of a file, but test modules (`tests`, `*_tests`, or after
/// `#[cfg(test)]`).
fn declared(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut test_next = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with("#[cfg(test)]") {
            test_next = true;
            continue;
        }
        let decl = line
            .strip_prefix("pub ")
            .or_else(|| line.strip_prefix("pub(crate) "))
            .or_else(|| line.strip_prefix("pub(super) "))
            .unwrap_or(line);
        if let Some(name) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            let test = test_next || name == "tests" || name.ends_with("_tests");
            if !test {
                out.push(name.trim().to_owned());
            }
        }
        if !line.starts_with("#[") && !line.is_empty() {
            test_next = false;
        }
    }
    out
}

/// The code of a file without its comments, string literals and `#[cfg(test)]` module: what it
/// names as code.
fn code(text: &str) -> String {
    let body = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    let mut out = String::with_capacity(body.len());
    for line in body.lines() {
        let line = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        let mut in_str = false;
        let mut prev = ' ';
        for c in line.chars() {
            if c == '"' && prev != '\\' && prev != '\'' {
                in_str = !in_str;
            } else if !in_str {
                out.push(c);
            }
            prev = c;
        }
        out.push('\n');
    }
    out
}

/// Every path the code names, as written: those of `use` trees expanded, and paths written
/// out in code (`crate::a::b(...)`, `super::x`).
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !(bytes[i - 1].is_alphanumeric() || bytes[i - 1] == '_');
        let rest: String = bytes[i..bytes.len().min(i + 4)].iter().collect();
        if starts_word && rest == "use " {
            let end = (i..bytes.len())
                .find(|&j| bytes[j] == ';')
                .unwrap_or(bytes.len());
            let tree: String = bytes[i + 4..end].iter().collect();
            expand(
                &tree.replace(char::is_whitespace, ""),
                &mut Vec::new(),
                &mut out,
            );
            i = end;
            continue;
        }
        if starts_word && (bytes[i].is_alphabetic() || bytes[i] == '_') {
            let start = i;
            while i < bytes.len() && (bytes[i].is_alphanumeric() || "_:".contains(bytes[i])) {
                i += 1;
            }
            let word: String = bytes[start..i].iter().collect();
            let head = word.split("::").next().unwrap_or_default();
            if word.contains("::") && matches!(head, "crate" | "super" | "self") {
                out.push(word.split("::").map(str::to_owned).collect());
            }
            continue;
        }
        i += 1;
    }
    out
}

/// Expands one `use` tree (whitespace removed) under `prefix` into whole paths.
fn expand(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim_start_matches("::");
    match tree.find('{') {
        Some(open) if tree.ends_with('}') => {
            let head: Vec<String> = tree[..open]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            let depth = prefix.len();
            prefix.extend(head);
            for part in split_top(&tree[open + 1..tree.len() - 1]) {
                expand(part, prefix, out);
            }
            prefix.truncate(depth);
        }
        _ => {
            let path = tree.split(" as ").next().unwrap_or(tree);
            let path = path
                .split("as")
                .next()
                .filter(|_| !path.contains("::as"))
                .unwrap_or(path);
            let mut whole = prefix.clone();
            whole.extend(
                path.split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            );
            out.push(whole);
        }
    }
}

/// The comma-separated parts of a brace's inside, nested braces kept whole.
fn split_top(inside: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in inside.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inside[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inside[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// The module `path`, named in `from`, leads to: the longest known module it starts with.
fn target(path: &[String], from: &[String], known: &BTreeMap<Module, PathBuf>) -> Option<Module> {
    let mut abs: Vec<String> = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("super") | Some("self") => from.to_vec(),
        // A child module named bare (`use keys::Watch;`), or a crate's name: not ours.
        Some(first) => {
            let mut child = from.to_vec();
            child.push(first.to_owned());
            if !known.contains_key(&child) {
                return None;
            }
            from.to_vec()
        }
        None => return None,
    };
    for seg in path {
        match seg.as_str() {
            "crate" | "self" => {}
            "super" => {
                abs.pop();
            }
            s => abs.push(s.to_owned()),
        }
    }
    (0..=abs.len())
        .rev()
        .map(|n| abs[..n].to_vec())
        .find(|m| known.contains_key(m))
}

/// The arrows between modules: `a -> b` when `a`'s code names `b`, neither inside the other,
/// lifted to the two siblings that hold them: a folder is one stage, so a file of `c/` naming
/// `a` is `c -> a`.
fn arrows(known: &BTreeMap<Module, PathBuf>) -> Result<BTreeMap<Module, BTreeSet<Module>>> {
    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in known {
        let text = fs::read_to_string(file)?;
        for path in paths(&code(&text)) {
            let Some(to) = target(&path, module, known) else {
                continue;
            };
            if to.starts_with(module) || module.starts_with(&to) {
                continue;
            }
            let common = module.iter().zip(&to).take_while(|(a, b)| a == b).count();
            let (from, to) = (module[..=common].to_vec(), to[..=common].to_vec());
            graph.entry(from).or_default().insert(to);
        }
    }
    Ok(graph)
}

/// The circles of the crate whose root file is `root`: each a set of modules that name each
/// other round (a strongly connected component of more than one), written `a::b`.
pub fn circles(root: &Path) -> Result<Vec<Vec<String>>> {
    let known = modules(root)?;
    let graph = arrows(&known)?;
    let name = |m: &Module| {
        if m.is_empty() {
            "crate".to_owned()
        } else {
            m.join("::")
        }
    };
    Ok(components(&graph)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| c.iter().map(name).collect())
        .collect())
}

/// Tarjan's strongly connected components.
fn components(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct State<'g> {
        graph: &'g BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'g Module, (usize, usize)>,
        stack: Vec<&'g Module>,
        on_stack: BTreeSet<&'g Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g Module) {
        let n = s.index.len();
        s.index.insert(v, (n, n));
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                let Some((w, _)) = s.graph.get_key_value(w) else {
                    continue;
                };
                visit(s, w);
                let low = s.index[w].1.min(s.index[v].1);
                s.index.entry(v).and_modify(|e| e.1 = low);
            } else if s.on_stack.contains(w) {
                let low = s.index[w].0.min(s.index[v].1);
                s.index.entry(v).and_modify(|e| e.1 = low);
            }
        }
        if s.index[v].0 == s.index[v].1 {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, files: &[(&str, &str)]) {
        for (name, text) in files {
            let path = dir.join(name);
            fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            fs::write(path, text).expect("write");
        }
    }

    #[test]
    fn finds_a_circle_through_grouped_imports_and_not_between_a_folder_and_its_files() {
        let dir = std::env::temp_dir().join(format!("xtask-imports-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        write(
            &dir,
            &[
                (
                    "lib.rs",
                    "pub mod a;\npub mod b;\npub mod c;\n#[cfg(test)]\nmod tests;\n",
                ),
                ("a.rs", "use crate::{b::{self, X}, c};\n"),
                (
                    "b.rs",
                    "// crate::c::Y in a comment\nfn f() { crate::c::g(\"crate::a\") }\n",
                ),
                ("c/mod.rs", "mod inner;\npub use inner::Z;\n"),
                ("c/inner.rs", "use super::super::a::W;\nuse super::Z2;\n"),
                ("tests.rs", "use crate::a;\n"),
            ],
        );
        let found = circles(&dir.join("lib.rs")).expect("read");
        assert_eq!(found.len(), 1, "{found:?}");
        let mut circle = found[0].clone();
        circle.sort();
        assert_eq!(circle, ["a", "b", "c"]);
        // Without the arrow back up from c's file, nothing goes round.
        write(&dir, &[("c/inner.rs", "use super::Z2;\n")]);
        assert!(circles(&dir.join("lib.rs")).expect("read").is_empty());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn use_trees_expand_to_whole_paths() {
        let mut out = Vec::new();
        expand("crate::{a::{self,B},c::D as E}", &mut Vec::new(), &mut out);
        let joined: Vec<String> = out.iter().map(|p| p.join("::")).collect();
        assert_eq!(joined, ["crate::a::self", "crate::a::B", "crate::c::D"]);
    }
}
