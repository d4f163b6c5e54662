//! gres.conf, parsed: what Slurm's GPU numbering on a node depends on.
//!
//! Pure: text in, records out, errors with line numbers. Keys are case-insensitive (as
//! Slurm's parser treats them), `#` starts a comment, a trailing `\` continues a line.
//! Only the parts that decide Slurm's GPU ids are interpreted (`AutoDetect`, `Name`,
//! `NodeName`, `File`/`Files`, `MultipleFiles`, `Type`); the other keys Slurm knows are
//! accepted and kept as text, and a key Slurm does not know is an error (slurmd would
//! refuse the file too). [`GresConf::node_gpus`] gives one node's GPU devices in Slurm's
//! order; [`super::gpu_ids`] turns that into the node's GPUs.

use super::hostlist::{self, HostlistError};

/// A gres.conf is a few hundred lines at most; anything near this is not one.
pub const MAX_GRES_CONF_BYTES: u64 = 1 << 20;

/// How slurmd discovers GPUs (`AutoDetect=`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AutoDetect {
    /// `off` (or none given): the `File=` lines alone, in their order.
    Off,
    /// `nvml`: NVML's enumeration, which is PCI bus order.
    Nvml,
    /// `nvidia` (24.11+): /proc/driver/nvidia, numbered by device file (minor) order.
    Nvidia,
    /// Another vendor's (rsmi, oneapi, nrt): not NVIDIA GPUs.
    Other(String),
}

impl AutoDetect {
    fn parse(value: &str) -> Option<AutoDetect> {
        Some(match value.to_ascii_lowercase().as_str() {
            "off" => AutoDetect::Off,
            "nvml" => AutoDetect::Nvml,
            "nvidia" => AutoDetect::Nvidia,
            "rsmi" | "oneapi" | "nrt" => AutoDetect::Other(value.to_ascii_lowercase()),
            _ => return None,
        })
    }
}

/// One `Name=` or `NodeName=` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// 1-based line number (of the line's first physical line).
    pub line: usize,
    /// `NodeName=` as written; `None`: every node.
    pub nodes: Option<String>,
    /// The line began with `NodeName=` (Slurm reads those after all `Name=` lines).
    pub node_line: bool,
    pub name: String,
    pub type_name: Option<String>,
    /// `File=`/`Files=` (or `MultipleFiles=`) expanded, in order.
    pub files: Vec<String>,
    /// `MultipleFiles=`: all files are one device (one GPU id).
    pub multiple_files: bool,
    /// `AutoDetect=` on a `NodeName=` line: that node's own choice.
    pub autodetect: Option<AutoDetect>,
    /// Keys kept as written (`Count`, `Cores`, `CPUs`, `Links`, `Flags`, `UniqueId`).
    pub other: Vec<(String, String)>,
}

/// A parsed gres.conf.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GresConf {
    /// A line of its own `AutoDetect=...`: every node's default.
    pub autodetect: Option<AutoDetect>,
    pub records: Vec<Record>,
}

/// One GPU id's device: the file(s) Slurm confines and names it by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GresDevice {
    pub files: Vec<String>,
    /// Where gres.conf lists it.
    pub line: usize,
}

/// One node's GPU configuration, in Slurm's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeGpus {
    pub autodetect: AutoDetect,
    /// `Name=gpu` devices that apply to the node: `Name=` lines first, then `NodeName=`
    /// lines, each in file order and expanded in written order (measured on 22.05:
    /// `File=nvidia5`, `nvidia4`, `nvidia7`, `nvidia6` give ids 0..3 in that order).
    pub devices: Vec<GresDevice>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GresConfError {
    #[error("line {line}: {message}")]
    At { line: usize, message: String },
}

impl GresConfError {
    fn at(line: usize, message: impl Into<String>) -> Self {
        GresConfError::At {
            line,
            message: message.into(),
        }
    }

    /// The 1-based line the error is on.
    pub fn line(&self) -> usize {
        match self {
            GresConfError::At { line, .. } => *line,
        }
    }
}

/// Keys Slurm's gres.conf parser knows, besides the ones interpreted here.
const KEPT_KEYS: &[&str] = &[
    "count", "cores", "cpus", "links", "link", "flags", "uniqueid",
];

/// Parse gres.conf text.
pub fn parse(text: &str) -> Result<GresConf, GresConfError> {
    let mut conf = GresConf::default();
    for (line_no, line) in logical_lines(text) {
        let tokens = tokens(&line).map_err(|m| GresConfError::at(line_no, m))?;
        let Some((first, _)) = tokens.first() else {
            continue;
        };
        let first = first.to_ascii_lowercase();
        if first == "autodetect" && tokens.len() == 1 {
            let value = &tokens[0].1;
            conf.autodetect = Some(AutoDetect::parse(value).ok_or_else(|| {
                GresConfError::at(line_no, format!("AutoDetect={value:?} is not a known mode"))
            })?);
            continue;
        }
        if first != "name" && first != "nodename" {
            return Err(GresConfError::at(
                line_no,
                format!(
                    "a line must begin with Name= or NodeName=, not {}=",
                    tokens[0].0
                ),
            ));
        }
        conf.records
            .push(record(line_no, &tokens, first == "nodename")?);
    }
    Ok(conf)
}

fn record(
    line: usize,
    tokens: &[(String, String)],
    node_line: bool,
) -> Result<Record, GresConfError> {
    let err = |m: String| GresConfError::at(line, m);
    let hostlist_err = |key: &str, e: HostlistError| err(format!("{key}: {e}"));
    let mut rec = Record {
        line,
        nodes: None,
        node_line,
        name: String::new(),
        type_name: None,
        files: Vec::new(),
        multiple_files: false,
        autodetect: None,
        other: Vec::new(),
    };
    let mut seen: Vec<String> = Vec::new();
    for (key, value) in tokens {
        let lower = key.to_ascii_lowercase();
        // File and Files are one key to Slurm.
        let canonical = if lower == "files" {
            "file".to_string()
        } else {
            lower.clone()
        };
        if seen.contains(&canonical) {
            return Err(err(format!("{key}= given twice")));
        }
        seen.push(canonical.clone());
        match canonical.as_str() {
            "nodename" => {
                hostlist::expand(value).map_err(|e| hostlist_err(key, e))?;
                rec.nodes = Some(value.clone());
            }
            "name" => rec.name = value.clone(),
            "type" => rec.type_name = Some(value.clone()),
            "file" | "multiplefiles" => {
                if !rec.files.is_empty() {
                    return Err(err("File and MultipleFiles are mutually exclusive".into()));
                }
                rec.files = hostlist::expand(value).map_err(|e| hostlist_err(key, e))?;
                rec.multiple_files = canonical == "multiplefiles";
            }
            "autodetect" => {
                rec.autodetect = Some(
                    AutoDetect::parse(value)
                        .ok_or_else(|| err(format!("AutoDetect={value:?} is not a known mode")))?,
                );
            }
            k if KEPT_KEYS.contains(&k) => rec.other.push((key.clone(), value.clone())),
            _ => return Err(err(format!("unknown key {key}="))),
        }
    }
    if rec.name.is_empty() && rec.autodetect.is_none() {
        return Err(err("the line has no Name=".into()));
    }
    Ok(rec)
}

impl GresConf {
    /// The GPU devices gres.conf gives `node`, in Slurm's order, and its AutoDetect.
    pub fn node_gpus(&self, node: &str) -> NodeGpus {
        let applies = |r: &&Record| {
            r.nodes
                .as_deref()
                .is_none_or(|n| hostlist::contains(n, node).unwrap_or(false))
        };
        let mine: Vec<&Record> = self.records.iter().filter(applies).collect();
        // A node's own AutoDetect (on a NodeName line) wins over the file-wide one.
        let autodetect = mine
            .iter()
            .filter(|r| r.nodes.is_some())
            .find_map(|r| r.autodetect.clone())
            .or_else(|| self.autodetect.clone())
            .unwrap_or(AutoDetect::Off);
        let gpu_lines = mine.iter().filter(|r| r.name.eq_ignore_ascii_case("gpu"));
        // Slurm's parser keeps `Name=` and `NodeName=` lines in two arrays and appends the
        // second after the first (gres.c, gres_g_node_config_load, 22.05 to 26.05).
        let ordered = gpu_lines
            .clone()
            .filter(|r| !r.node_line)
            .chain(gpu_lines.filter(|r| r.node_line));
        let mut devices = Vec::new();
        for r in ordered {
            if r.multiple_files {
                devices.push(GresDevice {
                    files: r.files.clone(),
                    line: r.line,
                });
            } else {
                devices.extend(r.files.iter().map(|f| GresDevice {
                    files: vec![f.clone()],
                    line: r.line,
                }));
            }
        }
        NodeGpus {
            autodetect,
            devices,
        }
    }
}

/// cgroup.conf's `ConstrainDevices=yes` (same line syntax as gres.conf; the last
/// setting wins, as in Slurm's parser). Anything unparsable counts as not set.
pub fn constrain_devices(cgroup_conf: &str) -> bool {
    let mut on = false;
    for (_, line) in logical_lines(cgroup_conf) {
        for (key, value) in tokens(&line).unwrap_or_default() {
            if key.eq_ignore_ascii_case("ConstrainDevices") {
                on = value.eq_ignore_ascii_case("yes");
            }
        }
    }
    on
}

/// Physical lines joined at trailing `\`, comments stripped; each with the number of its
/// first physical line. Slurm's config syntax, so slurm.conf's reader uses it too.
pub(super) fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = strip_comment(raw);
        let (continued, body) = match line.trim_end().strip_suffix('\\') {
            Some(b) => (true, b.to_string()),
            None => (false, line.to_string()),
        };
        let entry = pending.get_or_insert_with(|| (i + 1, String::new()));
        entry.1.push(' ');
        entry.1.push_str(&body);
        if !continued && let Some(done) = pending.take() {
            out.push(done);
        }
    }
    out.extend(pending);
    out
}

/// Cut at the first `#` not escaped as `\#` (Slurm's parser rule).
fn strip_comment(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'#') => {
                out.push('#');
                chars.next();
            }
            '#' => break,
            _ => out.push(c),
        }
    }
    out
}

/// `key=value` tokens separated by blanks; a value may be double-quoted.
fn tokens(line: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut rest = line.trim_start();
    while !rest.is_empty() {
        let eq = rest
            .find('=')
            .filter(|&i| !rest[..i].contains(char::is_whitespace))
            .ok_or_else(|| {
                let word = rest.split_whitespace().next().unwrap_or(rest);
                format!("{word:?} is not key=value")
            })?;
        let key = &rest[..eq];
        if key.is_empty() {
            return Err("a value without a key".into());
        }
        let after = &rest[eq + 1..];
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted
                .find('"')
                .ok_or_else(|| format!("{key}= has an unterminated quote"))?;
            (&quoted[..end], &quoted[end + 1..])
        } else {
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        out.push((key.to_string(), value.to_string()));
        rest = next.trim_start();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(n: &NodeGpus) -> Vec<String> {
        n.devices.iter().map(|d| d.files.join("+")).collect()
    }

    #[test]
    fn files_keep_the_written_order_and_node_lines_come_last() {
        let text = "# site gres.conf\n\
                    NodeName=gpu[01-02] Name=gpu File=/dev/nvidia[6-7]\n\
                    name=gpu file=/dev/nvidia5   # every node\n\
                    NodeName=gpu03 Name=gpu File=/dev/nvidia0\n\
                    Name=gpu Type=h100 Files=/dev/nvidia[4,2] Cores=0-3\n";
        let conf = parse(text).expect("valid");
        let g = conf.node_gpus("gpu02");
        assert_eq!(
            files(&g),
            [
                "/dev/nvidia5",
                "/dev/nvidia4",
                "/dev/nvidia2",
                "/dev/nvidia6",
                "/dev/nvidia7"
            ]
        );
        assert_eq!(g.devices[3].line, 2);
        assert_eq!(g.autodetect, AutoDetect::Off);
        assert_eq!(
            files(&conf.node_gpus("gpu03")),
            [
                "/dev/nvidia5",
                "/dev/nvidia4",
                "/dev/nvidia2",
                "/dev/nvidia0"
            ]
        );
        assert_eq!(conf.records[3].other, vec![("Cores".into(), "0-3".into())]);
    }

    #[test]
    fn autodetect_global_and_per_node() {
        let conf = parse("AutoDetect=nvml\nNodeName=a AutoDetect=off Name=gpu File=/dev/nvidia0\n")
            .expect("valid");
        assert_eq!(conf.node_gpus("b").autodetect, AutoDetect::Nvml);
        assert_eq!(conf.node_gpus("a").autodetect, AutoDetect::Off);
        assert!(conf.node_gpus("b").devices.is_empty());
    }

    #[test]
    fn multiple_files_are_one_device_and_continuations_join() {
        let conf = parse(
            "Name=gpu \\\n  MultipleFiles=/dev/nvidia0,/dev/nvidia-caps\nName=mps Count=100\n",
        )
        .expect("valid");
        let g = conf.node_gpus("x");
        assert_eq!(files(&g), ["/dev/nvidia0+/dev/nvidia-caps"]);
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            (
                "Name=gpu File=/dev/nvidia0\nName=gpu Bogus=1\n",
                2,
                "unknown key Bogus=",
            ),
            ("\n\nName=gpu File=/dev/nvidia[0-\n", 3, "File"),
            ("Name=gpu File=a File=b\n", 1, "given twice"),
            ("NodeName=n[1-2 Name=gpu\n", 1, "NodeName"),
            ("AutoDetect=cuda\n", 1, "not a known mode"),
            ("Count=2\n", 1, "must begin with Name="),
            ("Name=gpu junk\n", 1, "not key=value"),
            ("Name=\"gpu\n", 1, "unterminated quote"),
            ("NodeName=a Type=x\n", 1, "no Name="),
        ];
        for (text, line, needle) in cases {
            let e = parse(text).expect_err(text);
            assert_eq!(e.line(), line, "{text:?}: {e}");
            assert!(e.to_string().contains(needle), "{text:?}: {e}");
        }
    }

    /// Found with the `gres_conf` fuzz target (its one-line-error property; the input
    /// written by hand): a quoted value keeps a lone carriage return, which an error
    /// quoting the value printed as a second line in slurmd's log and `explain`.
    #[test]
    fn an_error_quoting_a_value_is_one_line() {
        for text in ["AutoDetect=\"a\rb\"\n", "Name=gpu AutoDetect=\"a\rb\"\n"] {
            let e = parse(text).expect_err(text).to_string();
            assert!(!e.contains(['\n', '\r']), "{e:?}");
            assert!(e.contains(r#"AutoDetect="a\rb""#), "{e:?}");
        }
    }

    #[test]
    fn comments_blank_lines_and_quotes() {
        let conf = parse("\n  # nothing\nName=gpu File=\"/dev/nvidia1\" Flags=nvidia_gpu_env # x\nName=gpu File=/x/a\\#b\n")
            .expect("valid");
        assert_eq!(files(&conf.node_gpus("n")), ["/dev/nvidia1", "/x/a#b"]);
    }
}
