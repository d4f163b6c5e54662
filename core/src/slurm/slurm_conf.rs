//! slurm.conf's `Key=Value` lines, read the way Slurm's own parser reads them: keys are
//! letters and digits, matched case-insensitively; a line holds several pairs, with
//! spaces allowed around `=`; a value is one word or a double-quoted string; `#` starts a
//! comment and `\#` is a literal `#`; a key set twice takes its last value (Slurm logs
//! "specified more than once, latest value used"); a trailing `\` continues a line.
//! `include` lines are not followed. Lines and comments are gres.conf's rule (the same
//! parser in Slurm); the pairs are read leniently, since slurm.conf holds words such as
//! `include FILE` that gres.conf's strict tokens refuse.

use super::gres_conf::logical_lines;

/// The value slurm.conf `text` gives `key` (`PlugStackConfig`, ...), if any.
pub fn value(text: &str, key: &str) -> Option<String> {
    logical_lines(text)
        .iter()
        .flat_map(|(_, line)| pairs(line))
        .filter(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v)
        .next_back()
}

/// The `Key=Value` pairs of one logical line; words that are not pairs are skipped.
fn pairs(line: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = line.trim_start();
    while !rest.is_empty() {
        let key_len = rest
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(rest.len());
        let (key, after) = rest.split_at(key_len);
        let after = after.trim_start();
        match after.strip_prefix('=') {
            Some(value) if !key.is_empty() => {
                let value = value.trim_start();
                let (value, next) = match value.strip_prefix('"') {
                    Some(quoted) => match quoted.split_once('"') {
                        Some((v, next)) => (v, next),
                        None => (quoted, ""),
                    },
                    None => value.split_at(value.find(char::is_whitespace).unwrap_or(value.len())),
                };
                found.push((key.to_owned(), value.to_owned()));
                rest = next.trim_start();
            }
            // Not a pair: skip the word (`include FILE`, stray text).
            _ => {
                let word = rest.find(char::is_whitespace).unwrap_or(rest.len());
                rest = rest[word..].trim_start();
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_value_case_insensitive() {
        let text = "ClusterName=c1\nplugstackconfig=/a/plugstack.conf\n\
                    SlurmctldHost=h1 PlugStackConfig = /b/plugstack.conf # not /c\n";
        assert_eq!(
            value(text, "PlugStackConfig").as_deref(),
            Some("/b/plugstack.conf")
        );
        assert_eq!(value(text, "ClusterName").as_deref(), Some("c1"));
        assert_eq!(value(text, "PluginDir"), None);
    }

    #[test]
    fn comments_quotes_and_words_that_are_not_pairs() {
        let text = "# PlugStackConfig=/commented\n\
                    include /etc/slurm/nodes.conf\n\
                    PlugStackConfig=\"/etc/slurm/with space/plugstack.conf\" Other=1\n\
                    SlurmctldParameters=a\\#b\n";
        assert_eq!(
            value(text, "PlugStackConfig").as_deref(),
            Some("/etc/slurm/with space/plugstack.conf")
        );
        assert_eq!(value(text, "Other").as_deref(), Some("1"));
        assert_eq!(value(text, "SlurmctldParameters").as_deref(), Some("a#b"));
        assert_eq!(value(text, "include"), None);
        assert_eq!(
            value("Key=\"unterminated", "Key").as_deref(),
            Some("unterminated")
        );
        assert_eq!(value("=x Key=", "Key").as_deref(), Some(""));
        assert_eq!(
            value("A=1 \\\n  Key=continued\n", "Key").as_deref(),
            Some("continued")
        );
    }
}
