//! Reading one TOML table with locations: each key is taken once, as a type that knows how to
//! read itself ([`FromToml`]), and the keys nobody took are reported, so a misspelt key is an
//! error instead of a silently ignored setting.

use std::{borrow::Cow, ops::Range};

use toml::{
    Spanned,
    de::{DeTable, DeValue},
};

use super::source::{Diag, Loc, S};

type Entry<'a, 'i> = (&'a Spanned<Cow<'i, str>>, &'a Spanned<DeValue<'i>>);

/// A value a key can hold. The error is the message reported at the value, under the key.
pub(super) trait FromToml: Sized {
    /// Reads `v`, or says why it cannot be read as this type.
    fn from_toml(v: &DeValue) -> Result<Self, String>;
}

/// A value an array can hold, read item by item with [`Table::list`].
pub(super) trait ListItem: FromToml {
    /// The message for a key that holds something other than an array (`found`).
    fn not_an_array(found: &str) -> String;
}

impl FromToml for String {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        match v {
            DeValue::String(s) => Ok(s.to_string()),
            other => Err(format!("expected a string, found {}", other.type_str())),
        }
    }
}

impl ListItem for String {
    fn not_an_array(found: &str) -> String {
        format!("expected an array of strings, found {found}")
    }
}

impl FromToml for bool {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        match v {
            DeValue::Boolean(b) => Ok(*b),
            other => Err(format!(
                "expected true or false, found {}",
                other.type_str()
            )),
        }
    }
}

impl FromToml for i64 {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        match v {
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
                .map_err(|_| "integer out of range".to_string()),
            other => Err(format!("expected an integer, found {}", other.type_str())),
        }
    }
}

/// A value read as a string and then looked up by name: `unknown` words the error for a
/// string that names nothing (it lists the names a reader may use).
pub(super) fn named<T>(
    v: &DeValue,
    lookup: impl FnOnce(&str) -> Option<T>,
    unknown: impl FnOnce(&str) -> String,
) -> Result<T, String> {
    let s = String::from_toml(v)?;
    lookup(&s).ok_or_else(|| unknown(&s))
}

/// Reads one table: each `take` consumes a key, and `finish` reports the keys nobody took.
pub(super) struct Table<'a, 'i> {
    file: usize,
    /// The dotted key path of this table, the prefix of every key it reports.
    pub path: String,
    /// Where the table is written, for errors about the table as a whole (a missing key).
    pub at: Loc,
    entries: Vec<(Entry<'a, 'i>, bool)>,
}

impl<'a, 'i> Table<'a, 'i> {
    /// A table of file `file`, reported under `path`, written at `span`.
    pub fn new(file: usize, path: String, t: &'a DeTable<'i>, span: Range<usize>) -> Self {
        Self {
            file,
            path,
            at: Loc { file, span },
            entries: t.iter().map(|e| (e, false)).collect(),
        }
    }

    fn loc(&self, span: Range<usize>) -> Loc {
        Loc {
            file: self.file,
            span,
        }
    }

    /// The dotted key path of `k` in this table, as errors name it.
    pub fn key(&self, k: &str) -> String {
        join(&self.path, k)
    }

    /// The value written for `k`, taken or not: for a reader that must know whether a key was
    /// given at all, not just whether it could be read.
    pub fn given(&self, k: &str) -> Option<&'a DeValue<'i>> {
        self.entries
            .iter()
            .find(|((key, _), _)| key.get_ref() == k)
            .map(|((_, v), _)| v.get_ref())
    }

    fn entry(&mut self, k: &str) -> Option<(String, &'a Spanned<DeValue<'i>>)> {
        let key = self.key(k);
        let e = self
            .entries
            .iter_mut()
            .find(|((key, _), _)| key.get_ref() == k)?;
        e.1 = true;
        Some((key, e.0.1))
    }

    /// Reports every key no reader took.
    pub fn finish(self, d: &mut Diag) {
        for ((k, _), used) in &self.entries {
            if !used {
                d.err(&self.loc(k.span()), &self.key(k.get_ref()), "unknown key");
            }
        }
    }

    /// `k` read as `T`; `None` when absent, or (with an error) when it holds something else.
    pub fn take<T: FromToml>(&mut self, d: &mut Diag, k: &str) -> Option<S<T>> {
        let (key, v) = self.entry(k)?;
        let at = self.loc(v.span());
        match T::from_toml(v.get_ref()) {
            Ok(v) => Some(S { v, at }),
            Err(why) => {
                d.err(&at, &key, why);
                None
            }
        }
    }

    /// The items of the array `k` that read as `T`; each other item is an error of its own,
    /// so one bad item does not hide the rest.
    pub fn list<T: ListItem>(&mut self, d: &mut Diag, k: &str) -> Vec<S<T>> {
        let Some((key, v)) = self.entry(k) else {
            return Vec::new();
        };
        let DeValue::Array(items) = v.get_ref() else {
            let why = T::not_an_array(v.get_ref().type_str());
            d.err(&self.loc(v.span()), &key, why);
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let at = self.loc(item.span());
            match T::from_toml(item.get_ref()) {
                Ok(v) => out.push(S { v, at }),
                Err(why) => d.err(&at, &format!("{key}[{i}]"), why),
            }
        }
        out
    }

    /// A sub-table; `None` (with an error) when the key holds something else.
    pub fn table(&mut self, d: &mut Diag, k: &str) -> Option<Table<'a, 'i>> {
        let (key, v) = self.entry(k)?;
        match v.get_ref() {
            DeValue::Table(t) => Some(Table::new(self.file, key, t, v.span())),
            other => {
                let why = format!("expected a table, found {}", other.type_str());
                d.err(&self.loc(v.span()), &key, why);
                None
            }
        }
    }

    /// Every key of this table as a named sub-table (`[tools.<name>]`, `[...args.<name>]`),
    /// each read by `read`; a key holding something else is reported at its name.
    pub fn named_tables<T>(
        mut self,
        d: &mut Diag,
        mut read: impl FnMut(&mut Diag, S<String>, Table<'a, 'i>) -> Option<T>,
    ) -> Vec<T> {
        let mut out = Vec::new();
        for ((k, v), used) in &mut self.entries {
            *used = true;
            let key = join(&self.path, k.get_ref());
            let name_at = Loc {
                file: self.file,
                span: k.span(),
            };
            match v.get_ref() {
                DeValue::Table(t) => {
                    let name = S {
                        v: k.get_ref().to_string(),
                        at: name_at,
                    };
                    out.extend(read(d, name, Table::new(self.file, key, t, v.span())));
                }
                other => d.err(
                    &name_at,
                    &key,
                    format!("expected a table, found {}", other.type_str()),
                ),
            }
        }
        self.finish(d);
        out
    }

    /// Every key of this table with its value read as `T` (`env = { NAME = "value" }`); a
    /// value that does not read is reported at the value.
    pub fn named_values<T: FromToml>(mut self, d: &mut Diag) -> Vec<(S<String>, S<T>)> {
        let mut out = Vec::new();
        for ((k, v), used) in &mut self.entries {
            *used = true;
            let at = Loc {
                file: self.file,
                span: v.span(),
            };
            match T::from_toml(v.get_ref()) {
                Ok(x) => {
                    let name = S {
                        v: k.get_ref().to_string(),
                        at: Loc {
                            file: self.file,
                            span: k.span(),
                        },
                    };
                    out.push((name, S { v: x, at }));
                }
                Err(why) => d.err(&at, &join(&self.path, k.get_ref()), why),
            }
        }
        self.finish(d);
        out
    }

    /// The array of tables `k` (`[[rules]]`, `[[examples]]`, named by `what` in errors) read
    /// item by item with `read`, reporting an array that is something else, or an item that is
    /// not a table, where it was written.
    pub fn tables<T>(
        &mut self,
        d: &mut Diag,
        k: &str,
        what: &str,
        read: impl Fn(&mut Diag, usize, Table<'a, 'i>) -> Option<T>,
    ) -> Vec<T> {
        let Some((key, v)) = self.entry(k) else {
            return Vec::new();
        };
        let DeValue::Array(items) = v.get_ref() else {
            let found = v.get_ref().type_str();
            let why = format!("expected {what}, found {found}");
            d.err(&self.loc(v.span()), &key, why);
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let key = format!("{key}[{i}]");
            match item.get_ref() {
                DeValue::Table(t) => {
                    out.extend(read(d, i, Table::new(self.file, key, t, item.span())));
                }
                other => {
                    let found = other.type_str();
                    let why = format!("expected a table, found {found}");
                    d.err(&self.loc(item.span()), &key, why);
                }
            }
        }
        out
    }
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}
