//! Slurm hostlists: `name[1-3,7]suffix` and comma lists of such names, as gres.conf
//! writes node names (`NodeName=gpu[01-16]`) and device files (`File=/dev/nvidia[0-3]`).
//!
//! Expansion keeps the order written (Slurm's hostlist_shift does too; gres.conf's
//! device order is Slurm's GPU numbering) and zero padding (`[01-03]` -> 01, 02, 03).
//! Brackets use core's one range-list rule ([`crate::ranges`]). A [`Hostlist`] keeps a
//! list as its parsed patterns (names made on demand) and an [`Index`] finds a name among
//! many of them: topology files name whole clusters, a step a few of their nodes.

use std::borrow::Cow;
use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;

use crate::ranges::{self, Limits};

/// Most names one hostlist may expand to (a node line, a device list).
pub const MAX_NAMES: u64 = 1 << 16;

/// Most bytes one hostlist's names may hold together: `MAX_NAMES` device paths of 256
/// bytes. The name count alone does not bound memory: a 1 MiB gres.conf line
/// `NodeName=n[0-65535]<1 MiB of suffix>` would ask for 64 GiB.
pub const MAX_BYTES: usize = 1 << 24;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostlistError {
    #[error("unbalanced brackets")]
    Brackets,
    #[error("bad range in brackets: {0}")]
    Range(#[from] ranges::RangeError),
    #[error("expands to more than {0} names")]
    TooMany(u64),
    #[error("expands to more than {MAX_BYTES} bytes of names")]
    TooLong,
    #[error("name {0:?} cannot be written in a hostlist (brackets, commas or blanks)")]
    BadName(String),
    #[error("no names")]
    Empty,
    #[error("blank inside brackets in {0:?} (Slurm reads it as zero padding)")]
    BlankInBrackets(String),
}

/// The characters Slurm separates names with (`hostlist_create`'s delimiters, measured
/// with 22.05's `scontrol show hostnames`): comma, space, tab, newline. A carriage
/// return or vertical tab is part of a name there; here such a name is refused.
fn is_separator(c: char) -> bool {
    matches!(c, ',' | ' ' | '\t' | '\n')
}

/// Expand a hostlist into its names, in Slurm's order, at most [`MAX_NAMES`] of them.
pub fn expand(text: &str) -> Result<Vec<String>, HostlistError> {
    expand_bounded(text, MAX_NAMES)
}

/// One name pattern's brackets: the text before each bracket and its ranges.
type Brackets<'a> = Vec<(&'a str, Vec<ranges::Range>)>;

/// [`expand`] with the caller's bound on the number of names: topology files and the
/// `hostlist` subcommand name whole clusters (100k nodes), gres.conf lines a few devices.
///
/// Slurm's reading (hostlist.c `_push_range_list`, checked against 22.05's scontrol):
/// names are separated by [`is_separator`] outside brackets and empty pieces are skipped;
/// the last bracket varies fastest, and the brackets before it are expanded with the
/// last of them outermost, recursing leftwards, so `n[1-2]a[3-4]b[5-6]` gives n1a3b5
/// n1a3b6 n2a3b5 n2a3b6 n1a4b5 ... Slurm reads a blank inside brackets as a digit of
/// the zero padding (`n[1, 3]` is n1 n03): refused here, with nested or unbalanced
/// brackets, `n[1-]` and numbers past 2^32, which Slurm reads as something else than
/// written. A list of no names at all is [`HostlistError::Empty`].
pub fn expand_bounded(text: &str, max_names: u64) -> Result<Vec<String>, HostlistError> {
    let mut out: Vec<String> = Vec::new();
    // Bytes in `out`, checked against MAX_BYTES as names are made.
    let mut out_bytes = 0usize;
    for item in split_top(text)? {
        if item.is_empty() {
            continue;
        }
        let (brackets, tail, count) = parse_item(item, max_names)?;
        if count.saturating_add(out.len() as u64) > max_names {
            return Err(HostlistError::TooMany(max_names));
        }
        let mut names = Odometer::new(&brackets, tail);
        while let Some(len) = names.next_len() {
            // Counted before the name is made: memory stays within the bound.
            out_bytes += len;
            if out_bytes > MAX_BYTES {
                return Err(HostlistError::TooLong);
            }
            out.extend(names.next());
        }
    }
    if out.is_empty() {
        return Err(HostlistError::Empty);
    }
    Ok(out)
}

/// One non-empty item of a hostlist (a name pattern, between separators): its brackets,
/// the text after the last one and how many names it stands for (saturating).
fn parse_item(item: &str, max_names: u64) -> Result<(Brackets<'_>, &str, u64), HostlistError> {
    if outside_brackets(item).any(char::is_whitespace) {
        return Err(HostlistError::BadName(item.chars().take(80).collect()));
    }
    let mut brackets: Brackets = Vec::new();
    let mut rest = item;
    while let Some(open) = rest.find('[') {
        let close = rest[open..].find(']').ok_or(HostlistError::Brackets)? + open;
        let inside = &rest[open + 1..close];
        if inside.chars().any(char::is_whitespace) {
            return Err(HostlistError::BlankInBrackets(
                item.chars().take(80).collect(),
            ));
        }
        let limits = Limits {
            max_value: u32::MAX,
            max_count: max_names,
        };
        brackets.push((&rest[..open], ranges::parse(inside, limits, false)?));
        rest = &rest[close + 1..];
    }
    if rest.contains(']') {
        return Err(HostlistError::Brackets);
    }
    let count = brackets.iter().fold(1u64, |acc, (_, parts)| {
        acc.saturating_mul(parts.iter().map(ranges::Range::len).sum())
    });
    Ok((brackets, rest, count))
}

/// The names of one pattern (`brackets`, then `tail`) in Slurm's order: an odometer
/// whose fastest digit is the last bracket, then the first, second, ... So each name
/// is written once at its final size.
struct Odometer<'b, P> {
    brackets: &'b [(P, Vec<ranges::Range>)],
    tail: &'b str,
    /// Per bracket: (part index, value) now; `None` once every name was given.
    at: Option<Vec<(usize, u32)>>,
    /// Bytes every name has: the prefixes and the tail.
    fixed: usize,
}

impl<'b, P: AsRef<str>> Odometer<'b, P> {
    fn new(brackets: &'b [(P, Vec<ranges::Range>)], tail: &'b str) -> Self {
        let at = brackets
            .iter()
            .map(|(_, parts)| (0, parts.first().map_or(0, |r| r.lo)))
            .collect();
        let fixed = brackets
            .iter()
            .map(|(p, _)| p.as_ref().len())
            .sum::<usize>()
            + tail.len();
        Odometer {
            brackets,
            tail,
            at: Some(at),
            fixed,
        }
    }

    /// The length of the next name, if there is one.
    fn next_len(&self) -> Option<usize> {
        let at = self.at.as_ref()?;
        Some(
            self.fixed
                + self
                    .brackets
                    .iter()
                    .zip(at)
                    .map(|((_, parts), &(i, v))| written_as(v, parts[i].width))
                    .sum::<usize>(),
        )
    }
}

impl<P: AsRef<str>> Iterator for Odometer<'_, P> {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let len = self.next_len()?;
        let at = self.at.as_mut()?;
        let mut name = String::with_capacity(len);
        for ((prefix, parts), &(i, v)) in self.brackets.iter().zip(at.iter()) {
            name.push_str(prefix.as_ref());
            push_padded(&mut name, v, written_as(v, parts[i].width));
        }
        name.push_str(self.tail);
        // Advance: the last bracket fastest, then the first, second, ...
        let last = self.brackets.len().checked_sub(1);
        let order = last.into_iter().chain(0..last.unwrap_or(0));
        let mut carried = true;
        for b in order {
            let parts = &self.brackets[b].1;
            let (i, v) = &mut at[b];
            if *v < parts[*i].hi {
                *v += 1;
                carried = false;
                break;
            }
            if *i + 1 < parts.len() {
                *i += 1;
                *v = parts[*i].lo;
                carried = false;
                break;
            }
            *i = 0;
            *v = parts[0].lo;
        }
        if carried {
            self.at = None;
        }
        Some(name)
    }
}

/// Write `value` zero-padded to `digits` characters ([`written_as`]'s count): what
/// `format!("{value:0width$}")` writes, without the formatting machinery per name.
fn push_padded(out: &mut String, value: u32, digits: usize) {
    let mut buf = [b'0'; 10];
    let mut v = value;
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let natural = buf.len() - i;
    for _ in natural..digits {
        out.push('0');
    }
    // ASCII digits: always a valid str.
    out.push_str(std::str::from_utf8(&buf[i..]).unwrap_or_default());
}

/// Compress names into a hostlist, the inverse of [`expand`]: `expand(compress(names))`
/// gives back `names` exactly, in the same order, duplicates included. So, as Slurm's
/// own `hostlist_ranged_string` does, only names next to each other in the list merge:
/// a name joins the bracket group before it when it differs only in its last number,
/// and a number joins the range before it when it is the next value written with the
/// same zero padding (`n08`,`n09`,`n10` -> `n[08-10]`; `n1`,`n02` stay two parts).
/// Callers that want one group per prefix sort first ([`compress_sorted`]).
///
/// This writes the form every series reads ([`Form::ANY_SERIES`]); [`compress_for`]
/// writes one series' form.
pub fn compress<S: AsRef<str>>(names: &[S]) -> Result<String, HostlistError> {
    compress_for(names, Form::ANY_SERIES)
}

/// Which hostlists a Slurm series reads back as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// 22.05-23.02: a bracket only at a name's end; `gpu[1-2]-ib` is "Invalid hostlist"
    /// (measured with 22.05's scontrol), so such names stay whole (`gpu1-ib,gpu2-ib`),
    /// as Slurm's own `hostlist_ranged_string` writes them there.
    NumberLast,
    /// 23.11+: text may follow the last bracket (`gpu[1-2]-ib`).
    TextAfterBracket,
}

impl Form {
    /// The form every series reads, for a target series nobody could tell.
    pub const ANY_SERIES: Form = Form::NumberLast;

    pub fn for_series(major: u32, minor: u32) -> Form {
        if (major, minor) >= (23, 11) {
            Form::TextAfterBracket
        } else {
            Form::NumberLast
        }
    }
}

/// [`compress`] in `form`: only what that series reads back as the same names.
pub fn compress_for<S: AsRef<str>>(names: &[S], form: Form) -> Result<String, HostlistError> {
    let mut out = String::new();
    let mut group: Option<Group> = None;
    for name in names {
        let name = name.as_ref();
        // Whitespace as `expand` trims it (Unicode's, so a vertical tab too): a name
        // holding any would not come back as written.
        if name.is_empty()
            || name
                .chars()
                .any(|c| matches!(c, '[' | ']' | ',') || c.is_whitespace())
        {
            return Err(HostlistError::BadName(name.chars().take(80).collect()));
        }
        let Some((prefix, digits, suffix)) = last_number(name)
            .filter(|(_, _, suffix)| suffix.is_empty() || form == Form::TextAfterBracket)
        else {
            flush(&mut out, group.take());
            push_part(&mut out, name);
            continue;
        };
        // Numbers too large for u32 are not ranges: keep the name as written.
        let Ok(value) = digits.parse::<u32>() else {
            flush(&mut out, group.take());
            push_part(&mut out, name);
            continue;
        };
        let width = digits.len();
        if let Some((p, s, ranges)) = group.as_mut()
            && *p == prefix
            && *s == suffix
        {
            if let Some(last) = ranges.last_mut()
                && last.1.checked_add(1) == Some(value)
                && written_as(value, last.2) == digits.len()
            {
                last.1 = value;
            } else {
                ranges.push((value, value, width));
            }
            continue;
        }
        flush(&mut out, group.take());
        group = Some((prefix, suffix, vec![(value, value, width)]));
    }
    flush(&mut out, group);
    Ok(out)
}

/// [`compress`] over the names sorted (by prefix, suffix, then number) and deduplicated:
/// the shortest form of a set of names, as `scontrol show hostlist` gives for sorted input.
pub fn compress_sorted<S: AsRef<str>>(names: &[S]) -> Result<String, HostlistError> {
    compress_sorted_for(names, Form::ANY_SERIES)
}

/// [`compress_sorted`] in `form`.
pub fn compress_sorted_for<S: AsRef<str>>(
    names: &[S],
    form: Form,
) -> Result<String, HostlistError> {
    compress_for(&sorted_set(names), form)
}

/// The names in natural order (prefix, suffix, then number as a value, then its width,
/// so `n9` < `n10` < `n010`), each once. Names are bucketed by (prefix, suffix) and each
/// bucket sorted by its numbers alone: clusters name nodes in a few such groups, and
/// lists come grouped, so the bucket is found by comparing with the last name's and
/// only a change of group costs a map look-up. Measured on bench-hostlist's 100k names:
/// 3-4x faster than sorting whole (prefix, suffix, number, width, name) keys.
fn sorted_set<S: AsRef<str>>(names: &[S]) -> Vec<&str> {
    /// A name's number (as a value, then width; a name without one is 0 of width 0, so
    /// it sorts first in the bucket it names) and the name.
    type Numbered<'a> = (u64, usize, &'a str);
    let mut buckets: BTreeMap<(&str, &str), Vec<Numbered<'_>>> = BTreeMap::new();
    let mut last: Option<((&str, &str), &mut Vec<Numbered<'_>>)> = None;
    for name in names {
        let name = name.as_ref();
        let (group, numbered) = match last_number(name) {
            // Digit runs past u64 sort last; they are never ranges anyway.
            Some((p, d, s)) => ((p, s), (d.parse().unwrap_or(u64::MAX), d.len(), name)),
            None => ((name, ""), (0, 0, name)),
        };
        match &mut last {
            Some((g, bucket)) if *g == group => bucket.push(numbered),
            _ => {
                let bucket = buckets.entry(group).or_default();
                bucket.push(numbered);
                last = Some((group, bucket));
            }
        }
    }
    let mut sorted = Vec::with_capacity(names.len());
    for bucket in buckets.values_mut() {
        // Equal value and width in one bucket is the same name, except for numbers past
        // u64 (all u64::MAX): the name breaks those ties.
        bucket.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)).then_with(|| a.2.cmp(b.2)));
        sorted.extend(bucket.iter().map(|n| n.2));
    }
    sorted.dedup();
    sorted
}

/// How many digits `value` takes when printed zero-padded to `width`. `digits` (which
/// parses to `value`) is that printing exactly when its length is this: the same value
/// with as many leading zeros. Saves formatting a string per name.
fn written_as(value: u32, width: usize) -> usize {
    let natural = value.checked_ilog10().map_or(1, |l| l as usize + 1);
    natural.max(width)
}

/// Split a name at its last run of digits: (prefix, digits, suffix).
fn last_number(name: &str) -> Option<(&str, &str, &str)> {
    // Bytes: digits are ASCII, and the byte before a digit run is a character's last
    // byte, so both cuts fall on character boundaries (`rfind` on chars gives the
    // non-digit's first byte, and one past it can be inside a multi-byte character).
    let bytes = name.as_bytes();
    let end = bytes.iter().rposition(u8::is_ascii_digit)? + 1;
    let start = bytes[..end]
        .iter()
        .rposition(|b| !b.is_ascii_digit())
        .map_or(0, |i| i + 1);
    Some((&name[..start], &name[start..end], &name[end..]))
}

fn push_part(out: &mut String, part: &str) {
    if !out.is_empty() {
        out.push(',');
    }
    out.push_str(part);
}

/// An open bracket group: prefix, suffix and its ranges (lo, hi, zero-padded width).
type Group<'a> = (&'a str, &'a str, Vec<(u32, u32, usize)>);

fn flush(out: &mut String, group: Option<Group>) {
    use std::fmt::Write;
    let Some((prefix, suffix, ranges)) = group else {
        return;
    };
    if !out.is_empty() {
        out.push(',');
    }
    out.push_str(prefix);
    // One plain name stays plain (`login1`, not `login[1]`), as Slurm writes it.
    if let [(lo, hi, w)] = ranges[..]
        && lo == hi
    {
        let _ = write!(out, "{lo:0w$}");
    } else {
        out.push('[');
        for (i, (lo, hi, w)) in ranges.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            if lo == hi {
                let _ = write!(out, "{lo:0w$}");
            } else {
                let _ = write!(out, "{lo:0w$}-{hi:0w$}");
            }
        }
        out.push(']');
    }
    out.push_str(suffix);
}

/// A hostlist as parsed: its name patterns (brackets and text), the names made only on
/// demand. Same syntax, bounds and errors as [`expand_bounded`]; what it gives is what
/// `expand` gives. Topology files name whole clusters (16k nodes in 900 blocks): the
/// placement check finds the step's few nodes in it ([`Index`]) without making the rest.
#[derive(Clone, Default)]
pub struct Hostlist {
    patterns: Vec<Pattern>,
    /// Names in all, repeats counted.
    len: usize,
}

#[derive(Clone)]
struct Pattern {
    /// Text before each bracket, and its ranges; none for one plain name.
    brackets: Vec<(String, Vec<ranges::Range>)>,
    /// The text after the last bracket (the whole name when there are none).
    tail: String,
}

impl Hostlist {
    /// [`expand_bounded`]'s reading, kept as patterns.
    pub fn parse_bounded(text: &str, max_names: u64) -> Result<Hostlist, HostlistError> {
        let mut patterns = Vec::new();
        let (mut count, mut bytes) = (0u64, 0u128);
        for item in split_top(text)? {
            if item.is_empty() {
                continue;
            }
            let (brackets, tail, n) = parse_item(item, max_names)?;
            count = count.saturating_add(n);
            if count > max_names {
                return Err(HostlistError::TooMany(max_names));
            }
            bytes += pattern_bytes(&brackets, tail, n);
            if bytes > MAX_BYTES as u128 {
                return Err(HostlistError::TooLong);
            }
            patterns.push(Pattern {
                brackets: brackets
                    .into_iter()
                    .map(|(prefix, parts)| (prefix.to_string(), parts))
                    .collect(),
                tail: tail.to_string(),
            });
        }
        if patterns.is_empty() {
            return Err(HostlistError::Empty);
        }
        Ok(Hostlist {
            patterns,
            // At most max_names (a u64 bound the caller could only reach in memory).
            len: usize::try_from(count).unwrap_or(usize::MAX),
        })
    }

    /// The names, in [`expand`]'s order; a plain name is borrowed.
    pub fn names(&self) -> impl Iterator<Item = Cow<'_, str>> {
        self.patterns.iter().flat_map(|p| {
            let plain = p
                .brackets
                .is_empty()
                .then_some(Cow::Borrowed(p.tail.as_str()));
            let made = (!p.brackets.is_empty())
                .then(|| Odometer::new(&p.brackets, &p.tail).map(Cow::Owned));
            plain.into_iter().chain(made.into_iter().flatten())
        })
    }

    pub fn to_vec(&self) -> Vec<String> {
        self.names().map(Cow::into_owned).collect()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Add one name, as written (not read as a pattern).
    pub fn push(&mut self, name: String) {
        self.patterns.push(Pattern {
            brackets: Vec::new(),
            tail: name,
        });
        self.len += 1;
    }

    /// Add `other`'s names after these.
    pub fn append(&mut self, other: Hostlist) {
        self.patterns.extend(other.patterns);
        self.len = self.len.saturating_add(other.len);
    }
}

/// Bytes of the `count` names of one pattern (what [`expand_bounded`] counts against
/// [`MAX_BYTES`]), without making them: each bracket's digits are written once for
/// every combination of the other brackets.
fn pattern_bytes(brackets: &Brackets, tail: &str, count: u64) -> u128 {
    let fixed = brackets.iter().map(|(p, _)| p.len()).sum::<usize>() + tail.len();
    let mut total = u128::from(count) * fixed as u128;
    for (_, parts) in brackets {
        let values: u64 = parts.iter().map(ranges::Range::len).sum();
        let digits: u128 = parts
            .iter()
            .flat_map(|r| bands(*r))
            .map(|(lo, hi, len)| u128::from(hi - lo + 1) * len as u128)
            .sum();
        total += digits * u128::from(count / values.max(1));
    }
    total
}

/// A range cut where the written length changes: (lo, hi, digits), each value in lo..=hi
/// written zero-padded to the range's width with exactly `digits` digits.
fn bands(r: ranges::Range) -> impl Iterator<Item = (u32, u32, usize)> {
    let mut next = Some(r.lo);
    std::iter::from_fn(move || {
        let lo = next?;
        let len = written_as(lo, r.width);
        // The largest value of `len` digits (all of u32's past ten).
        let top = u32::try_from(len)
            .ok()
            .and_then(|l| 10u64.checked_pow(l))
            .map_or(u64::MAX, |p| p - 1);
        let hi = u32::try_from(u64::from(r.hi).min(top)).unwrap_or(r.hi);
        next = (hi < r.hi).then(|| hi + 1);
        Some((lo, hi, len))
    })
}

impl From<Vec<String>> for Hostlist {
    /// The names as given, each one plain.
    fn from(names: Vec<String>) -> Hostlist {
        let len = names.len();
        let patterns = names
            .into_iter()
            .map(|tail| Pattern {
                brackets: Vec::new(),
                tail,
            })
            .collect();
        Hostlist { patterns, len }
    }
}

impl FromIterator<String> for Hostlist {
    fn from_iter<I: IntoIterator<Item = String>>(names: I) -> Hostlist {
        Hostlist::from(names.into_iter().collect::<Vec<_>>())
    }
}

/// Equal when they name the same names in the same order, however written.
impl PartialEq for Hostlist {
    fn eq(&self, other: &Hostlist) -> bool {
        self.len == other.len && self.names().eq(other.names())
    }
}

impl Eq for Hostlist {}

impl<S: AsRef<str>> PartialEq<Vec<S>> for Hostlist {
    fn eq(&self, other: &Vec<S>) -> bool {
        self.len == other.len() && self.names().zip(other).all(|(a, b)| a == b.as_ref())
    }
}

impl std::fmt::Debug for Hostlist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

/// Which of several hostlists (units: blocks, leaf switches) holds a name, without
/// making their names: each number run is kept per (text before it, text after it,
/// digits written) and sorted, so a look-up is one split of the name and a binary
/// search. Names of patterns that are not one such run (several brackets, digits next
/// to the bracket) are made and kept whole.
pub struct Index<'h> {
    units: Vec<&'h Hostlist>,
    /// (prefix, suffix, digits) -> its runs in `runs`.
    keys: HashMap<RunKey<'h>, usize>,
    runs: Vec<Vec<Run>>,
    /// Names with no number a run can hold, and the names of other patterns.
    whole: HashMap<Cow<'h, str>, usize>,
    repeats: bool,
}

/// The text before a run's number, the text after it, and the digits it is written with.
type RunKey<'h> = (&'h str, &'h str, usize);

/// Values lo..=hi of one group, in `unit`.
#[derive(Clone, Copy)]
struct Run {
    lo: u32,
    hi: u32,
    unit: usize,
}

impl<'h> Index<'h> {
    pub fn new(units: impl IntoIterator<Item = &'h Hostlist>) -> Index<'h> {
        let mut index = Index {
            units: units.into_iter().collect(),
            keys: HashMap::default(),
            runs: Vec::new(),
            whole: HashMap::default(),
            repeats: false,
        };
        // Lists come grouped: the group of the last run is tried before the map.
        let mut last: Option<(RunKey, usize)> = None;
        let units = index.units.clone();
        for (unit, list) in units.into_iter().enumerate() {
            for p in &list.patterns {
                match &p.brackets[..] {
                    [] => {
                        let numbered = last_number(&p.tail).and_then(|(prefix, digits, suffix)| {
                            Some(((prefix, suffix, digits.len()), digits.parse::<u32>().ok()?))
                        });
                        match numbered {
                            Some((key, v)) => {
                                index.add_run(&mut last, key, Run { lo: v, hi: v, unit });
                            }
                            None => index.add_whole(Cow::Borrowed(p.tail.as_str()), unit),
                        }
                    }
                    [(prefix, parts)]
                        if !prefix.ends_with(|c: char| c.is_ascii_digit())
                            && !p.tail.bytes().any(|b| b.is_ascii_digit()) =>
                    {
                        for (lo, hi, len) in parts.iter().flat_map(|r| bands(*r)) {
                            let key = (prefix.as_str(), p.tail.as_str(), len);
                            index.add_run(&mut last, key, Run { lo, hi, unit });
                        }
                    }
                    _ => {
                        for name in Odometer::new(&p.brackets, &p.tail) {
                            index.add_whole(Cow::Owned(name), unit);
                        }
                    }
                }
            }
        }
        for group in &mut index.runs {
            group.sort_unstable_by_key(|r| r.lo);
            let mut top: Option<u32> = None;
            for r in group.iter() {
                if top.is_some_and(|t| r.lo <= t) {
                    index.repeats = true;
                }
                top = Some(top.map_or(r.hi, |t| t.max(r.hi)));
            }
        }
        if !index.repeats {
            index.repeats = index.whole.keys().any(|n| index.in_runs(n).is_some());
        }
        index
    }

    /// Add a run to its group, merged with the group's last run where it continues it.
    fn add_run(&mut self, last: &mut Option<(RunKey<'h>, usize)>, key: RunKey<'h>, run: Run) {
        let at = match *last {
            Some((k, at)) if k == key => at,
            _ => *self.keys.entry(key).or_insert_with(|| {
                self.runs.push(Vec::new());
                self.runs.len() - 1
            }),
        };
        *last = Some((key, at));
        let group = &mut self.runs[at];
        match group.last_mut() {
            Some(l) if l.unit == run.unit && l.hi.checked_add(1) == Some(run.lo) => l.hi = run.hi,
            _ => group.push(run),
        }
    }

    fn add_whole(&mut self, name: Cow<'h, str>, unit: usize) {
        if self.whole.insert(name, unit).is_some() {
            self.repeats = true;
        }
    }

    /// Whether some name is in two units, or twice in one.
    pub fn has_repeats(&self) -> bool {
        self.repeats
    }

    /// The unit holding `name` (the first one, when names repeat).
    pub fn find(&self, name: &str) -> Option<usize> {
        if self.repeats {
            return self.units.iter().position(|u| u.names().any(|n| n == name));
        }
        self.in_runs(name).or_else(|| self.whole.get(name).copied())
    }

    fn in_runs(&self, name: &str) -> Option<usize> {
        let (prefix, digits, suffix) = last_number(name)?;
        let v: u32 = digits.parse().ok()?;
        let runs = &self.runs[*self.keys.get(&(prefix, suffix, digits.len()))?];
        let at = runs.partition_point(|r| r.hi < v);
        runs.get(at).filter(|r| r.lo <= v).map(|r| r.unit)
    }
}

/// Whether `name` is one of the hostlist's names.
pub fn contains(text: &str, name: &str) -> Result<bool, HostlistError> {
    Ok(expand(text)?.iter().any(|n| n == name))
}

/// The characters of `item` outside its brackets.
fn outside_brackets(item: &str) -> impl Iterator<Item = char> + '_ {
    let mut depth = 0u32;
    item.chars().filter(move |&c| {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            _ => return depth == 0,
        }
        false
    })
}

/// Split at separators ([`is_separator`]) outside brackets.
fn split_top(text: &str) -> Result<Vec<&str>, HostlistError> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0u32, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '[' => {
                if depth > 0 {
                    return Err(HostlistError::Brackets);
                }
                depth = 1;
            }
            ']' => {
                if depth == 0 {
                    return Err(HostlistError::Brackets);
                }
                depth = 0;
            }
            c if depth == 0 && is_separator(c) => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(HostlistError::Brackets);
    }
    out.push(&text[start..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `hostlist` fuzz target: a multi-byte character before the last digit
    /// run cut a name inside that character (a panic in `conf topology` for an admin's
    /// NODEMAP name).
    #[test]
    fn names_with_multibyte_characters_before_digits_compress() {
        let names = ["Rack1-k\u{3d1}066", "Rack1-k\u{3d1}067", "\u{451}1"];
        let text = compress(&names).expect("valid names");
        assert_eq!(text, "Rack1-k\u{3d1}[066-067],\u{451}1");
        assert_eq!(expand(&text).expect("round trip"), names);
        assert!(compress_sorted(&names).is_ok());
    }

    /// Found by the `slurm_topology` fuzz target: `nodes: a b` in topology.yaml read as
    /// one name with a blank. Slurm separates names by space, tab and newline as by
    /// commas (22.05's scontrol): read so now; other blanks in a name are refused.
    #[test]
    fn blanks_between_names_separate_them() {
        assert_eq!(expand("a b").expect("valid"), ["a", "b"]);
        assert_eq!(
            expand("n[1-2]\tx\ny").expect("valid"),
            ["n1", "n2", "x", "y"]
        );
        assert_eq!(expand(" n1, ,n2 ").expect("valid"), ["n1", "n2"]);
        for bad in ["a\rb", "a\u{b}b", "a\u{a0}b"] {
            assert!(
                matches!(expand(bad), Err(HostlistError::BadName(_))),
                "{bad:?}"
            );
        }
    }

    /// Slurm reads a blank in brackets as zero padding (`n[1, 3]` is n1 n03, `n[ 1-3]`
    /// n01-n03 on 22.05): refused, never read as other names.
    #[test]
    fn blanks_inside_brackets_are_refused() {
        for bad in ["n[1, 3]", "n[ 1-3]", "n[1 -3]", "n[1- 3]", "n[1\t]"] {
            assert!(
                matches!(expand(bad), Err(HostlistError::BlankInBrackets(_))),
                "{bad:?}"
            );
        }
    }

    /// Slurm's order for several brackets (22.05's `scontrol show hostnames`): the last
    /// varies fastest, then the first, second, ...
    #[test]
    fn several_brackets_expand_in_slurms_order() {
        let words = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        assert_eq!(
            expand("n[1-2]a[3-4]b[5-6]").expect("valid"),
            words("n1a3b5 n1a3b6 n2a3b5 n2a3b6 n1a4b5 n1a4b6 n2a4b5 n2a4b6")
        );
        assert_eq!(
            expand("n[1-3]a[1-2]b[1-2]c[1-2]").expect("valid"),
            words(
                "n1a1b1c1 n1a1b1c2 n2a1b1c1 n2a1b1c2 n3a1b1c1 n3a1b1c2 n1a2b1c1 n1a2b1c2 \
                 n2a2b1c1 n2a2b1c2 n3a2b1c1 n3a2b1c2 n1a1b2c1 n1a1b2c2 n2a1b2c1 n2a1b2c2 \
                 n3a1b2c1 n3a1b2c2 n1a2b2c1 n1a2b2c2 n2a2b2c1 n2a2b2c2 n3a2b2c1 n3a2b2c2"
            )
            .into_iter()
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
        );
        assert_eq!(
            expand("n[1-2][3-4]").expect("valid"),
            words("n13 n14 n23 n24")
        );
        assert_eq!(expand("[1-2]").expect("valid"), words("1 2"));
    }

    /// Found by the `hostlist` fuzz target: a vertical tab is whitespace to `expand`'s
    /// trim but was not to `compress`, so `ra\x0b` came back as `ra`.
    #[test]
    fn names_with_any_whitespace_do_not_compress() {
        for name in ["ra\u{b}", "a\u{a0}b", "x y"] {
            assert!(compress(&[name]).is_err(), "{name:?}");
        }
    }

    #[test]
    fn expands_in_written_order_with_padding() {
        assert_eq!(
            expand("/dev/nvidia[3,1-2]").expect("valid"),
            vec!["/dev/nvidia3", "/dev/nvidia1", "/dev/nvidia2"]
        );
        assert_eq!(
            expand("gpu[08-10],login1").expect("valid"),
            vec!["gpu08", "gpu09", "gpu10", "login1"]
        );
        assert_eq!(
            expand("r[1-2]n[1-2]").expect("valid"),
            vec!["r1n1", "r1n2", "r2n1", "r2n2"]
        );
        assert!(contains("node[1-4]", "node3").expect("valid"));
        assert!(!contains("node[1-4]", "node5").expect("valid"));
    }

    #[test]
    fn bad_lists_are_errors_and_bounded() {
        for bad in [
            "n[1-2", "n1-2]", "n[[1]]", "n[2-1]", "n[x]", "n[1-]", "n[]", "", " ,\t",
        ] {
            assert!(expand(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            expand("n[0-4294967295]"),
            Err(HostlistError::Range(ranges::RangeError::TooMany {
                max: MAX_NAMES
            }))
        );
        assert_eq!(
            expand("a[0-999]b[0-999]"),
            Err(HostlistError::TooMany(MAX_NAMES))
        );
        assert!(expand_bounded("n[1-200000]", 1 << 20).is_ok());
    }

    #[test]
    fn compress_writes_slurm_forms() {
        let c = |names: &[&str]| compress(names).expect("valid");
        assert_eq!(
            c(&[
                "gpu-st-p5-001",
                "gpu-st-p5-002",
                "gpu-st-p5-003",
                "gpu-st-p5-600"
            ]),
            "gpu-st-p5-[001-003,600]"
        );
        assert_eq!(c(&["n08", "n09", "n10", "n11"]), "n[08-11]");
        assert_eq!(c(&["n9", "n10"]), "n[9-10]");
        assert_eq!(c(&["n1", "n02"]), "n[1,02]");
        assert_eq!(c(&["login1"]), "login1");
        assert_eq!(c(&["head", "n1", "n2", "m3"]), "head,n[1-2],m3");
        assert_eq!(c(&["r1n1", "r1n2", "r2n1"]), "r1n[1-2],r2n1");
        assert_eq!(c(&["gpu1-ib", "gpu2-ib"]), "gpu1-ib,gpu2-ib");
        assert_eq!(
            compress_for(&["gpu1-ib", "gpu2-ib", "gpu3"], Form::TextAfterBracket).expect("valid"),
            "gpu[1-2]-ib,gpu3"
        );
        assert_eq!(Form::for_series(22, 5), Form::NumberLast);
        assert_eq!(Form::for_series(23, 2), Form::NumberLast);
        assert_eq!(Form::for_series(23, 11), Form::TextAfterBracket);
        assert_eq!(c(&["n3", "n1", "n2"]), "n[3,1-2]");
        assert_eq!(c(&["n1", "n1"]), "n[1,1]");
        assert_eq!(c(&["n99999999999"]), "n99999999999");
        assert_eq!(c(&[]), "");
        assert_eq!(
            compress_sorted(&["n10", "n9", "m1", "n9", "n008"]).expect("valid"),
            "m1,n[008,9-10]"
        );
        for bad in ["a,b", "a[1]", "a b", ""] {
            assert!(compress(&[bad]).is_err(), "{bad:?}");
        }
    }

    /// A small deterministic generator (xorshift), so no test dependency: `next(n)` is
    /// below `n`.
    fn generator(mut seed: u64) -> impl FnMut(u64) -> u64 {
        move |n| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        }
    }

    /// Property: expand(compress(x)) == x over generated lists (a small deterministic
    /// generator, so no test dependency): prefixes, padding, suffixes, repeats, order.
    #[test]
    fn compress_round_trips() {
        let mut next = generator(0x9e37_79b9_7f4a_7c15);
        let prefixes = ["n", "gpu-st-p5-", "r1n", "", "a-b"];
        let suffixes = ["", "-ib", "x"];
        for _ in 0..2000 {
            let len = next(12) as usize;
            let names: Vec<String> = (0..len)
                .map(|_| {
                    let p = prefixes[next(5) as usize];
                    let s = suffixes[next(3) as usize];
                    let w = next(4) as usize;
                    let v = next(25);
                    if next(10) == 0 {
                        format!("{p}host{s}")
                    } else {
                        format!("{p}{v:0w$}{s}")
                    }
                })
                .filter(|n| !n.is_empty())
                .collect();
            for form in [Form::NumberLast, Form::TextAfterBracket] {
                let text = compress_for(&names, form).expect("valid names");
                if names.is_empty() {
                    assert_eq!(text, "");
                    continue;
                }
                if form == Form::NumberLast {
                    // Nothing after a bracket: what 22.05 reads.
                    assert!(!text.contains("]x") && !text.contains("]-"), "{text}");
                }
                assert_eq!(
                    expand_bounded(&text, 1 << 20).expect(&text),
                    names,
                    "{text}"
                );
            }
        }
    }

    /// Property: the bucketed sort gives what sorting whole (prefix, suffix, number,
    /// width, name) keys gives, deduplicated, over generated lists with interleaved
    /// groups, names without numbers, and numbers past u64.
    #[test]
    fn sorted_set_is_the_natural_order() {
        fn key(name: &str) -> (&str, &str, u64, usize, &str) {
            match last_number(name) {
                Some((p, d, s)) => (p, s, d.parse().unwrap_or(u64::MAX), d.len(), name),
                None => (name, "", 0, 0, name),
            }
        }
        let mut next = generator(0x2545_f491_4f6c_dd1d);
        let prefixes = ["n", "gpu-st-p5-", "r1n", "", "n1x"];
        let suffixes = ["", "-ib", "x"];
        for _ in 0..2000 {
            let names: Vec<String> = (0..next(40))
                .map(|_| {
                    let p = prefixes[next(5) as usize];
                    let s = suffixes[next(3) as usize];
                    match next(12) {
                        0 => format!("{p}host{s}"),
                        1 => format!(
                            "{p}{}{s}",
                            99_999_999_999_999_999_990u128 + u128::from(next(3))
                        ),
                        _ => format!("{p}{:0w$}{s}", next(30), w = next(4) as usize),
                    }
                })
                .filter(|n| !n.is_empty())
                .collect();
            let mut want: Vec<&str> = names.iter().map(String::as_str).collect();
            want.sort_by_key(|n| key(n));
            want.dedup();
            assert_eq!(sorted_set(&names), want, "{names:?}");
        }
    }

    /// Property: a [`Hostlist`] gives what `expand` gives (names, count, the same error),
    /// and its [`Index`] finds what a search of the lists in order finds, repeats
    /// included, over generated lists: several brackets, digits next to brackets,
    /// padding that changes the width, plain names, repeats inside and across lists.
    #[test]
    fn hostlists_and_their_index_agree_with_expand() {
        let mut next = generator(0x51_7cc1_b727_220a);
        let prefixes = ["n", "gpu-", "r1n", "", "a9", "x"];
        let tails = ["", "-ib", "x3", "0"];
        let item = |next: &mut dyn FnMut(u64) -> u64| -> String {
            let p = prefixes[next(6) as usize];
            let t = tails[next(4) as usize];
            let lo = next(30);
            let w = next(4) as usize;
            let range = |next: &mut dyn FnMut(u64) -> u64| match next(3) {
                0 => format!("{lo:0w$}"),
                _ => format!("{lo:0w$}-{}", lo + next(12)),
            };
            match next(6) {
                0 => format!("{p}{lo:0w$}{t}"),
                1 => format!("{p}host{t}"),
                2 => format!("{p}[{},{}]{t}", range(next), range(next)),
                3 => format!("{p}[{}]a[{}]{t}", range(next), range(next)),
                _ => format!("{p}[{}]{t}", range(next)),
            }
        };
        let mut kinds = [0; 2];
        for round in 0..1500 {
            let lists: Vec<String> = (0..1 + next(4))
                .map(|_| {
                    let items: Vec<String> = (0..1 + next(3)).map(|_| item(&mut next)).collect();
                    items.join(",")
                })
                .collect();
            let mut parsed = Vec::new();
            for text in &lists {
                let bound = if round % 7 == 0 { 20 } else { MAX_NAMES };
                let want = expand_bounded(text, bound);
                let got = Hostlist::parse_bounded(text, bound);
                match (&want, &got) {
                    (Ok(names), Ok(h)) => {
                        assert_eq!(h.to_vec(), *names, "{text}");
                        assert_eq!(h.len(), names.len(), "{text}");
                        assert_eq!(h, names, "{text}");
                        parsed.push(h.clone());
                    }
                    (Err(a), Err(b)) => assert_eq!(a, b, "{text}"),
                    _ => panic!("{text}: expand {want:?}, hostlist {got:?}"),
                }
            }
            let index = Index::new(&parsed);
            let all: Vec<Vec<String>> = parsed.iter().map(Hostlist::to_vec).collect();
            let mut seen = std::collections::HashSet::new();
            let repeats = all.iter().flatten().any(|n| !seen.insert(n));
            assert_eq!(index.has_repeats(), repeats, "{lists:?}");
            kinds[usize::from(repeats)] += 1;
            let mut first = std::collections::HashMap::new();
            for (unit, names) in all.iter().enumerate() {
                for n in names {
                    first.entry(n.as_str()).or_insert(unit);
                }
            }
            let names: Vec<&String> = all.iter().flatten().collect();
            let mut probes: Vec<String> = (0..60)
                .filter_map(|_| names.get(next(names.len() as u64 + 1) as usize))
                .flat_map(|n| [n.to_string(), format!("{n}0"), format!("0{n}")])
                .collect();
            probes.extend(
                ["n5", "n05", "gpu-7", "host", "nhost", "x", "n4294967296"].map(String::from),
            );
            for name in &probes {
                assert_eq!(
                    index.find(name),
                    first.get(name.as_str()).copied(),
                    "{name} in {lists:?}"
                );
            }
        }
        assert!(kinds.iter().all(|&k| k > 200), "{kinds:?}");
    }

    #[test]
    fn bands_cut_where_the_written_length_changes() {
        let r = |lo, hi, width| ranges::Range { lo, hi, width };
        assert_eq!(
            bands(r(8, 120, 1)).collect::<Vec<_>>(),
            [(8, 9, 1), (10, 99, 2), (100, 120, 3)]
        );
        assert_eq!(bands(r(8, 120, 3)).collect::<Vec<_>>(), [(8, 120, 3)]);
        assert_eq!(
            bands(r(0, u32::MAX, 12)).collect::<Vec<_>>(),
            [(0, u32::MAX, 12)]
        );
        assert_eq!(
            bands(r(999_999_999, u32::MAX, 1)).collect::<Vec<_>>(),
            [(999_999_999, 999_999_999, 9), (1_000_000_000, u32::MAX, 10)]
        );
        let h = Hostlist::parse_bounded(&format!("n[0-65535]{}", "t".repeat(300)), MAX_NAMES);
        assert_eq!(h.map(|h| h.len()), Err(HostlistError::TooLong));
    }

    /// Found while writing the `hostlist` fuzz target's bounded-output property: the
    /// name count was bounded, the bytes were not (a long suffix or zero padding on every
    /// one of 65536 names).
    #[test]
    fn the_names_bytes_are_bounded() {
        let suffix = "x".repeat(1 << 20);
        assert_eq!(
            expand(&format!("n[0-65535]{suffix}")),
            Err(HostlistError::TooLong)
        );
        // Too many names is still the error when the tail would also be too long.
        assert_eq!(
            expand(&format!("a[0-999]b[0-999]{suffix}")),
            Err(HostlistError::TooMany(MAX_NAMES))
        );
        let tail = "t".repeat(200);
        let names = expand(&format!("n[0-65535]{tail}")).expect("13 MiB of names");
        assert_eq!(names.len(), 65536);
        assert_eq!(names[65535], format!("n65535{tail}"));
        let padded = format!("n[{}-65535]", "0".repeat(1000));
        assert_eq!(expand(&padded), Err(HostlistError::TooLong));
        let long = format!("{}[0-255]", "p".repeat(255));
        assert_eq!(expand(&long).map(|n| n.len()), Ok(256));
    }
}
