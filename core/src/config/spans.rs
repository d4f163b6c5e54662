//! From a span to the key it falls on, and from a key back to its span: how the reader
//! names `[table] key` and the line in an error, over toml's spanned document
//! ([`DeTable`]). Only a failed read parses the text this way (a second time).

use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::value::Step;

/// What is at an offset of the document.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Found {
    /// The keys (and array entries) down to it: a key itself (an unknown key) or the
    /// key whose value it is in.
    pub path: Vec<Step>,
}

impl Found {
    /// The table the key sits in, as its header reads: `[gpu]`, `[[storage.mount]]`, or
    /// `None` at the top level.
    pub(super) fn table(&self) -> Option<String> {
        let last_key = self.path.iter().rposition(|s| matches!(s, Step::Key(_)))?;
        let keys = &self.path[..last_key];
        let names: Vec<&str> = keys
            .iter()
            .filter_map(|s| match s {
                Step::Key(k) => Some(k.as_str()),
                Step::Item(_) => None,
            })
            .collect();
        if names.is_empty() {
            return None;
        }
        let joined = names.join(".");
        Some(if matches!(keys.last(), Some(Step::Item(_))) {
            format!("[[{joined}]]")
        } else {
            format!("[{joined}]")
        })
    }

    /// The key's own name (the last key of the path).
    pub(super) fn key(&self) -> Option<&str> {
        self.path.iter().rev().find_map(|s| match s {
            Step::Key(k) => Some(k.as_str()),
            Step::Item(_) => None,
        })
    }

    /// `[table] key`, or `key` at the top level, as errors name a key.
    pub(super) fn named(&self) -> String {
        let key = self.key().unwrap_or_default();
        match self.table() {
            Some(table) => format!("{table} {key}"),
            None => key.to_string(),
        }
    }
}

/// The deepest key or value of `text` that `offset` falls in.
pub(super) fn at(text: &str, offset: usize) -> Option<Found> {
    let doc = DeTable::parse(text).ok()?;
    let mut path = Vec::new();
    in_table(doc.get_ref(), offset, &mut path)?;
    Some(Found { path })
}

/// Where `path`'s value starts in `text`.
pub(super) fn offset_of(text: &str, path: &[Step]) -> Option<usize> {
    let doc = DeTable::parse(text).ok()?;
    let (first, rest) = path.split_first()?;
    let Step::Key(k) = first else { return None };
    let mut value = doc.get_ref().get(k.as_str())?;
    for step in rest {
        value = match (step, value.get_ref()) {
            (Step::Key(k), DeValue::Table(t)) => t.get(k.as_str())?,
            (Step::Item(i), DeValue::Array(a)) => a.get(*i)?,
            _ => return None,
        };
    }
    Some(value.span().start)
}

fn contains(span: Range<usize>, offset: usize) -> bool {
    span.contains(&offset)
}

/// `Some`: `offset` is on a key of `table` or in its value (or below), `path` leads there.
fn in_table(table: &DeTable<'_>, offset: usize, path: &mut Vec<Step>) -> Option<()> {
    for (key, value) in table.iter() {
        path.push(Step::Key(key.get_ref().to_string()));
        if contains(key.span(), offset) || in_value(value, offset, path).is_some() {
            return Some(());
        }
        path.pop();
    }
    None
}

fn in_value(value: &Spanned<DeValue<'_>>, offset: usize, path: &mut Vec<Step>) -> Option<()> {
    let below = match value.get_ref() {
        DeValue::Table(t) => in_table(t, offset, path),
        DeValue::Array(a) => a.iter().enumerate().find_map(|(i, item)| {
            path.push(Step::Item(i));
            let found = in_value(item, offset, path);
            if found.is_none() {
                path.pop();
            }
            found
        }),
        _ => None,
    };
    below.or_else(|| contains(value.span(), offset).then_some(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_name_the_table_and_key() {
        let text = "root = \"/\"\n[gpu]\nexpect = 8\n[[storage.mount]]\npath = \"x\"\n[fabric]\nforce = [\"A\", \"B\"]\n";
        let named = |needle: &str| {
            let offset = text.find(needle).expect(needle);
            at(text, offset).map(|f| f.named())
        };
        assert_eq!(named("\"/\"").as_deref(), Some("root"));
        assert_eq!(named("expect").as_deref(), Some("[gpu] expect"));
        assert_eq!(named("\"x\"").as_deref(), Some("[[storage.mount]] path"));
        let b = text.find("\"B\"").expect("B");
        let path = [
            Step::Key("fabric".into()),
            Step::Key("force".into()),
            Step::Item(1),
        ];
        assert_eq!(offset_of(text, &path), Some(b));
        assert_eq!(
            at(text, b).map(|f| f.path),
            Some(path.to_vec()),
            "an entry of an array"
        );
    }
}
