//! Text shaping for error lines: input quoted in an error must not break it in two.

/// `text` with every control character escaped (`\r`, `\u{1}`), so it prints as one line.
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}
