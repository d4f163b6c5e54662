//! The value checks the tables' keys name in `deserialize_with`: absolute paths, counts,
//! ranges and rates. A failed check's message is the text that follows the key
//! (`= 'run' is invalid: expected an absolute directory`), marked with [`AFTER_KEY`]:
//! the reader puts `[table] key` in front, found from the error's span, so no check has
//! to be told which key it serves and each key is named once, by its field.

use std::fmt::Display;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

/// Starts a check's message: "the key's name goes before this". Never in a TOML message.
pub(super) const AFTER_KEY: char = '\u{1}';

/// A check's error: `rest` follows the key's name.
pub(super) fn after_key<E: serde::de::Error>(rest: impl Display) -> E {
    E::custom(format_args!("{AFTER_KEY}{rest}"))
}

/// `= VALUE is invalid: expected EXPECTED`, the text after a key whose value is refused
/// (the config file and plugstack.conf alike).
pub(super) fn is_invalid(value: impl Display, expected: impl Display) -> String {
    format!("= {value} is invalid: expected {expected}")
}

fn invalid<E: serde::de::Error>(value: impl Display, expected: impl Display) -> E {
    after_key(is_invalid(value, expected))
}

/// An absolute path; `None` otherwise. Every path the config names is absolute: the
/// binaries run from slurmd's cwd.
pub(super) fn absolute(text: &str) -> Option<PathBuf> {
    let path = PathBuf::from(text);
    path.is_absolute().then_some(path)
}

fn absolute_key<'de, D: Deserializer<'de>>(
    d: D,
    expected: &str,
) -> Result<Option<PathBuf>, D::Error> {
    let text = String::deserialize(d)?;
    match absolute(&text) {
        Some(path) => Ok(Some(path)),
        None => Err(invalid(format_args!("'{text}'"), expected)),
    }
}

/// A directory's absolute path.
pub(super) fn abs_dir<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    absolute_key(d, "an absolute directory")
}

/// A file's absolute path.
pub(super) fn abs_path<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    absolute_key(d, "an absolute path")
}

/// A library: an absolute path, or a bare file name the dynamic loader finds in its own
/// root-set search path, as the default `libnvidia-ml.so.1` is found. Never a relative
/// path (it would name a file under slurmd's cwd).
pub(super) fn library<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    let name = String::deserialize(d)?;
    let bare = !name.is_empty() && !name.contains('/') && name != "." && name != "..";
    if bare || Path::new(&name).is_absolute() {
        Ok(Some(PathBuf::from(name)))
    } else {
        Err(invalid(
            format_args!("'{name}'"),
            "an absolute path or a library file name",
        ))
    }
}

/// A count: 0 or more.
pub(super) fn count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let n = i64::deserialize(d)?;
    u32::try_from(n)
        .map(Some)
        .map_err(|_| invalid(n, "a count of 0 or more"))
}

/// An integer from `lo` to `hi`, as `T` (which holds that range).
pub(super) fn in_range<'de, D: Deserializer<'de>, T: TryFrom<i64>>(
    d: D,
    lo: i64,
    hi: i64,
) -> Result<T, D::Error> {
    let n = i64::deserialize(d)?;
    (lo..=hi)
        .contains(&n)
        .then(|| T::try_from(n).ok())
        .flatten()
        .ok_or_else(|| invalid(n, format_args!("{lo} to {hi}")))
}

/// A number `valid` takes (TOML integers count as numbers).
pub(super) fn number<'de, D: Deserializer<'de>>(
    d: D,
    valid: impl Fn(f64) -> bool,
    expected: &str,
) -> Result<Option<f64>, D::Error> {
    let x = f64::deserialize(d)?;
    if valid(x) {
        Ok(Some(x))
    } else {
        Err(invalid(x, expected))
    }
}

/// A rate above 0 (MB/s, Gb/s): a floor or a port's speed.
pub(super) fn rate<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    number(d, |x| x > 0.0 && x.is_finite(), "a rate above 0")
}

/// A word from `parse`'s list, blanks around it allowed.
pub(super) fn word<'de, D: Deserializer<'de>, T>(
    d: D,
    parse: impl Fn(&str) -> Option<T>,
    expected: &str,
) -> Result<Option<T>, D::Error> {
    let text = String::deserialize(d)?;
    match parse(text.trim()) {
        Some(value) => Ok(Some(value)),
        None => Err(invalid(format_args!("'{text}'"), expected)),
    }
}

/// A check that spans keys (`X needs Y`, a duplicate list entry), found after the tables
/// are read: where it is (`path`, for the line) and what is wrong, said in full.
#[derive(Debug)]
pub(super) struct Problem {
    pub path: Vec<Step>,
    pub message: String,
}

/// One step down a document: a key, or an array's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Key(String),
    Item(usize),
}

impl Problem {
    /// A problem at `table`'s `key`, or its entry `item`.
    pub(super) fn at(table: &str, key: &str, item: Option<usize>, message: String) -> Problem {
        let mut path: Vec<Step> = table
            .split('.')
            .chain([key])
            .map(|k| Step::Key(k.to_string()))
            .collect();
        path.extend(item.map(Step::Item));
        Problem { path, message }
    }
}
