//! Text shaping for one-line output: input quoted in an error or a log line must not
//! break it in two, nor carry terminal escape sequences. The one escaper of the project:
//! core's error lines and the SPANK plugin's log and stderr lines all go through it.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every control character (C0, DEL, C1: newline, carriage return, escape,
/// NUL, ...) written as a visible escape (`\n`, `\r`, `\t`, `\x1b`), so it prints as one
/// line and cannot move the cursor or clear a terminal. Text without one is returned
/// as it is, uncopied.
pub fn one_line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                // Control characters are all below U+00A0: two hex digits name each.
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// [`one_line`], owned: for error fields that keep their text.
pub(crate) fn printable(text: &str) -> String {
    one_line(text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_visible_escapes_and_the_rest_is_kept() {
        assert_eq!(
            one_line("a\nb\r\u{1b}[2J\0\u{7f}\u{85}\t"),
            "a\\nb\\r\\x1b[2J\\x00\\x7f\\x85\\t"
        );
        assert!(matches!(
            one_line("GPU 0000:18:00.0 (CUDA 0) — ok"),
            Cow::Borrowed(_)
        ));
    }
}
