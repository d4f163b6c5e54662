//! The admin's TOML config (`/etc/gpu-affinity/config.toml`), shared by every program of
//! the suite so the SPANK plugin and `gpu-affinity explain` read it the same way.
//!
//! ```toml
//! [plugin]
//! default = "prefer"            # off | prefer | strict: the mode without --gpu-affinity
//! enforce = "strict"            # prefer | strict: the floor a user cannot go below
//! sysfs_root = "/"              # where the topology is read (tests, replayed dumps)
//! run_dir = "/run/gpu-affinity" # per-step files written as root
//!
//! [fabric]
//! force = ["NCCL_IB_HCA"]       # exported even when the user set them
//! profiles_dir = "/etc/gpu-affinity/profiles.d"
//! ```
//!
//! Every table and key is known: a typo (`[plugn]`, `enforced`) is an error, never a
//! setting silently not applied. [`parse`] is pure; [`read_trusted`] is the thin reader,
//! and [`check_trusted`] the one ownership rule for every root-side input (Invariant 2):
//! the config, the profiles directory and its files, the plugin's run directory.

use std::fmt;
use std::fs::Metadata;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::solver::Mode;

/// Where the config lives unless a program is told otherwise.
/// Where the plugin writes per-step files as root (`[plugin] run_dir`, plugstack `run_dir=`).
pub const DEFAULT_RUN_DIR: &str = "/run/gpu-affinity";
pub const DEFAULT_CONFIG: &str = "/etc/gpu-affinity/config.toml";

/// The uid every root-side input must belong to outside tests.
pub const ROOT: u32 = 0;

/// A config is a few lines; anything near this is not one.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// How much binding a step gets (`[plugin] default`, the user's `--gpu-affinity`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Choice {
    /// Do nothing at all (no discovery).
    Off,
    /// Apply the best plan, warn about problems.
    Prefer,
    /// Refuse a task whose binding has a problem.
    Strict,
}

impl Choice {
    pub fn parse(word: &str) -> Option<Choice> {
        match word {
            "off" => Some(Choice::Off),
            "prefer" => Some(Choice::Prefer),
            "strict" => Some(Choice::Strict),
            _ => None,
        }
    }

    /// The solver's mode; `None` for off (the solver never runs then).
    pub fn solver_mode(self) -> Option<Mode> {
        match self {
            Choice::Off => None,
            Choice::Prefer => Some(Mode::Prefer),
            Choice::Strict => Some(Mode::Strict),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Choice::Off => "off",
            Choice::Prefer => "prefer",
            Choice::Strict => "strict",
        }
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The admin's floor (`enforce`): users may raise the mode, never lower it below this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Floor {
    Prefer,
    Strict,
}

impl Floor {
    pub fn parse(word: &str) -> Option<Floor> {
        match word {
            "prefer" => Some(Floor::Prefer),
            "strict" => Some(Floor::Strict),
            _ => None,
        }
    }

    /// The lowest mode a step may run with.
    pub fn choice(self) -> Choice {
        match self {
            Floor::Prefer => Choice::Prefer,
            Floor::Strict => Choice::Strict,
        }
    }
}

/// The whole config, validated. An absent table or key is `None` / empty: each program
/// applies its own default (and its own command-line overrides) on top.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pub plugin: PluginConfig,
    pub fabric: FabricConfig,
}

/// `[plugin]`: the SPANK plugin's settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PluginConfig {
    pub default: Option<Choice>,
    pub enforce: Option<Floor>,
    /// Absolute.
    pub sysfs_root: Option<PathBuf>,
    /// Absolute.
    pub run_dir: Option<PathBuf>,
}

/// `[fabric]`: the vendor fabric environment, as the plugin exports it and explain shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FabricConfig {
    /// Variables exported even when the user set them: valid names, each once, none of
    /// the ones the plugin sets per rank.
    pub force: Vec<String>,
    /// Absolute.
    pub profiles_dir: Option<PathBuf>,
}

/// A root-side input that is unreadable or that someone other than root could change.
/// One line naming the input and its path, without a program prefix, so it can also
/// serve as a refusal reason.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TrustError {
    #[error("{what} {path}: {message}")]
    Io {
        what: String,
        path: String,
        message: String,
    },
    #[error("{what} {path} is owned by uid {uid}, not root; refusing it")]
    Owner {
        what: String,
        path: String,
        uid: u32,
    },
    #[error("{what} {path} is writable by group or others (mode {mode:04o}); refusing it")]
    Writable {
        what: String,
        path: String,
        mode: u32,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A problem at a known line; `file` is set once the text is known to come from one.
    #[error("config {}{line}: {message}", in_file(file))]
    At {
        file: Option<String>,
        line: usize,
        message: String,
    },
    #[error(transparent)]
    Trust(#[from] TrustError),
}

fn in_file(file: &Option<String>) -> String {
    match file {
        Some(f) => format!("{f}:"),
        None => "line ".to_string(),
    }
}

impl ConfigError {
    /// Name the file the text came from.
    fn in_file(self, path: &Path) -> Self {
        match self {
            ConfigError::At { line, message, .. } => ConfigError::At {
                file: Some(path.display().to_string()),
                line,
                message,
            },
            other => other,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ConfigDoc {
    #[serde(default)]
    plugin: PluginDoc,
    #[serde(default)]
    fabric: FabricDoc,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PluginDoc {
    default: Option<Spanned<String>>,
    enforce: Option<Spanned<String>>,
    sysfs_root: Option<Spanned<String>>,
    run_dir: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FabricDoc {
    #[serde(default)]
    force: Vec<Spanned<String>>,
    profiles_dir: Option<Spanned<String>>,
}

/// Parse and validate config text. Errors name the line, the key and the value.
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    let at = |offset: usize, message: String| ConfigError::At {
        file: None,
        line: text
            .get(..offset)
            .map_or(1, |t| t.matches('\n').count() + 1),
        // The message quotes the file (a value, the source line): a control character
        // there (a lone CR, an escaped "\n" in a TOML string) would break the one line
        // the front ends print into two, in the Slurm log too.
        message: printable(&message),
    };
    let doc: ConfigDoc = toml::from_str(text).map_err(|e| {
        let offset = e.span().map_or(0, |s| s.start);
        // The TOML message says what was wrong, the source line names the key.
        let message = one_line(e.message());
        match source_line(text, offset) {
            "" => at(offset, message),
            source => at(offset, format!("{message} (at `{source}`)")),
        }
    })?;
    let bad = |key: &str, value: &Spanned<String>, expected: &str| {
        at(
            value.span().start,
            format!(
                "{key} = '{}' is invalid: expected {expected}",
                value.get_ref()
            ),
        )
    };
    let default = doc
        .plugin
        .default
        .as_ref()
        .map(|v| {
            word(v, Choice::parse)
                .ok_or_else(|| bad("[plugin] default", v, "off, prefer or strict"))
        })
        .transpose()?;
    let enforce = doc
        .plugin
        .enforce
        .as_ref()
        .map(|v| {
            word(v, Floor::parse).ok_or_else(|| bad("[plugin] enforce", v, "prefer or strict"))
        })
        .transpose()?;
    let dir = |key: &str, value: &Option<Spanned<String>>| {
        value
            .as_ref()
            .map(|v| {
                let path = PathBuf::from(v.get_ref());
                if path.is_absolute() {
                    Ok(path)
                } else {
                    Err(bad(key, v, "an absolute directory"))
                }
            })
            .transpose()
    };
    let sysfs_root = dir("[plugin] sysfs_root", &doc.plugin.sysfs_root)?;
    let run_dir = dir("[plugin] run_dir", &doc.plugin.run_dir)?;
    let profiles_dir = dir("[fabric] profiles_dir", &doc.fabric.profiles_dir)?;
    let mut force: Vec<String> = Vec::new();
    for entry in &doc.fabric.force {
        let key = entry.get_ref();
        if let Some(expected) = force_problem(key, &force) {
            return Err(bad("[fabric] force", entry, expected));
        }
        force.push(key.clone());
    }
    Ok(Config {
        plugin: PluginConfig {
            default,
            enforce,
            sysfs_root,
            run_dir,
        },
        fabric: FabricConfig {
            force,
            profiles_dir,
        },
    })
}

/// What a `force` entry should have been, `None` when it is fine: one environment
/// variable a profile could set, listed once.
fn force_problem(key: &str, earlier: &[String]) -> Option<&'static str> {
    let name_ok = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !name_ok {
        Some("an environment variable name such as NCCL_IB_HCA")
    } else if crate::fabric::profiles::plugin_owned(key) {
        Some("a fabric variable; the plugin always sets this one per rank")
    } else if earlier.iter().any(|k| k == key) {
        Some("each variable listed once")
    } else {
        None
    }
}

/// A mode word, blanks around it tolerated.
fn word<T>(value: &Spanned<String>, parse: fn(&str) -> Option<T>) -> Option<T> {
    parse(value.get_ref().trim())
}

/// The trimmed source line around `offset`.
fn source_line(text: &str, offset: usize) -> &str {
    // Spans fall on character boundaries; stay safe if one ever does not.
    let offset = (0..=offset.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    text[start..end].trim()
}

/// `text` with every control character escaped (`\r`, `\u{1}`), so it prints as one line.
fn printable(text: &str) -> String {
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

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The one check for every root-side input: owned by `owner` (root; tests pass their
/// own uid) and not writable by group or others, so no job user can steer what runs as
/// root. `what` names the input in the error ("config", "profiles directory").
pub fn check_trusted(
    meta: &Metadata,
    what: &str,
    path: &Path,
    owner: u32,
) -> Result<(), TrustError> {
    if meta.uid() != owner {
        return Err(TrustError::Owner {
            what: what.to_string(),
            path: path.display().to_string(),
            uid: meta.uid(),
        });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(TrustError::Writable {
            what: what.to_string(),
            path: path.display().to_string(),
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(())
}

/// Open `path` and check the opened file (not the name, which could be swapped after
/// the check) before its bytes are read. At most `limit` bytes.
pub(crate) fn read_trusted_text(
    path: &Path,
    what: &str,
    owner: u32,
    limit: u64,
) -> Result<String, TrustError> {
    let io = |e: std::io::Error| TrustError::Io {
        what: what.to_string(),
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let file = open_regular(path).map_err(io)?;
    check_trusted(&file.metadata().map_err(io)?, what, path, owner)?;
    read_bounded_text(file, limit).map_err(io)
}

/// Open `path` for reading without blocking and refuse anything but a regular file.
///
/// A plain open(2) of a FIFO waits for a writer, which would hang a prolog or a step's
/// launch (Invariant 4); with O_NONBLOCK it returns at once, and the type check on the
/// opened handle then refuses it (and character devices, sockets) before any read.
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("not a regular file ({})", file_kind(&kind)),
        ));
    }
    Ok(file)
}

fn file_kind(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

/// The text of an open file, at most `limit` bytes (more is an error, not a truncation).
pub fn read_bounded_text(file: std::fs::File, limit: u64) -> std::io::Result<String> {
    let mut text = String::new();
    file.take(limit + 1).read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {limit} bytes"),
        ));
    }
    Ok(text)
}

/// Read and parse the config at `path`, refusing a file `owner` (root) does not fully
/// control.
pub fn read_trusted(path: &Path, owner: u32) -> Result<Config, ConfigError> {
    let text = read_trusted_text(path, "config", owner, MAX_CONFIG_BYTES)?;
    parse(&text).map_err(|e| e.in_file(path))
}

/// The config file a program reads: the one it was told about, else `default` when
/// that exists (no file at all means built-in defaults).
pub fn locate(named: Option<&Path>, default: &Path) -> Option<PathBuf> {
    match named {
        Some(p) => Some(p.to_path_buf()),
        None => default.exists().then(|| default.to_path_buf()),
    }
}

/// A FIFO for the tests of every reader that must not block on one.
#[cfg(test)]
pub(crate) mod fifo {
    use std::path::Path;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Make a FIFO at `path`.
    pub fn make(path: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .expect("mkfifo");
    }

    /// Run `read` (which opens the FIFO at `path`) on its own thread and return what it
    /// returned; a read still blocked after 5 s fails the test (after releasing the
    /// thread by opening the FIFO for writing) instead of hanging it.
    pub fn returns<T: Send + 'static>(path: &Path, read: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(read());
        });
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(v) => v,
            Err(_) => {
                let _ = std::fs::OpenOptions::new().write(true).open(path);
                panic!("reading the FIFO {} blocked", path.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn err(text: &str) -> String {
        parse(text).expect_err(text).to_string()
    }

    #[test]
    fn a_fifo_or_device_is_refused_without_blocking() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("config.toml");
        fifo::make(&path);
        let p = path.clone();
        let err =
            fifo::returns(&path, move || read_trusted(&p, 0)).expect_err("a FIFO is no config");
        assert!(
            err.to_string().contains("not a regular file (a FIFO)"),
            "{err}"
        );
        let err = read_trusted(Path::new("/dev/zero"), 0).expect_err("a device is no config");
        assert!(err.to_string().contains("a character device"), "{err}");
    }

    #[test]
    fn every_key_parses() {
        let c = parse(
            "[plugin]\ndefault = \" prefer\"\nenforce = \"strict\"\nsysfs_root = \"/srv/topo\"\nrun_dir = \"/srv/run\"\n\
             [fabric]\nforce = [\"NCCL_IB_HCA\", \"NCCL_SOCKET_IFNAME\"]\nprofiles_dir = \"/srv/profiles.d\"\n",
        )
        .expect("valid config");
        assert_eq!(
            c,
            Config {
                plugin: PluginConfig {
                    default: Some(Choice::Prefer),
                    enforce: Some(Floor::Strict),
                    sysfs_root: Some("/srv/topo".into()),
                    run_dir: Some("/srv/run".into()),
                },
                fabric: FabricConfig {
                    force: vec!["NCCL_IB_HCA".into(), "NCCL_SOCKET_IFNAME".into()],
                    profiles_dir: Some("/srv/profiles.d".into()),
                },
            }
        );
        assert_eq!(parse(""), Ok(Config::default()));
        assert_eq!(parse("[fabric]\n"), Ok(Config::default()));
    }

    #[test]
    fn bad_values_name_line_key_and_value() {
        for (text, want) in [
            (
                "[plugin]\ndefault = \"always\"\n",
                "config line 2: [plugin] default = 'always' is invalid: expected off, prefer or strict",
            ),
            (
                "[plugin]\n\nenforce = \"off\"\n",
                "config line 3: [plugin] enforce = 'off' is invalid: expected prefer or strict",
            ),
            (
                "[plugin]\nrun_dir = \"run\"\n",
                "config line 2: [plugin] run_dir = 'run' is invalid: expected an absolute directory",
            ),
            (
                "[plugin]\nsysfs_root = \"\"\n",
                "config line 2: [plugin] sysfs_root = '' is invalid",
            ),
            (
                "[fabric]\nprofiles_dir = \"p.d\"\n",
                "config line 2: [fabric] profiles_dir = 'p.d' is invalid",
            ),
            (
                "[fabric]\nforce = [\n  \"NCCL_IB_HCA\",\n  \"1NCCL\",\n]\n",
                "config line 4: [fabric] force = '1NCCL' is invalid: expected an environment variable name",
            ),
            (
                "[fabric]\nforce = [\"NCCL IB\"]\n",
                "[fabric] force = 'NCCL IB' is invalid",
            ),
            (
                "[fabric]\nforce = [\"GPU_AFFINITY_CPUS\"]\n",
                "[fabric] force = 'GPU_AFFINITY_CPUS' is invalid: expected a fabric variable; the plugin always sets this one per rank",
            ),
            (
                "[fabric]\nforce = [\"CUDA_VISIBLE_DEVICES\"]\n",
                "the plugin always sets this one",
            ),
            (
                "[fabric]\nforce = [\"NCCL_IB_HCA\", \"NCCL_IB_HCA\"]\n",
                "[fabric] force = 'NCCL_IB_HCA' is invalid: expected each variable listed once",
            ),
        ] {
            let e = err(text);
            assert!(e.starts_with(want) || e.contains(want), "{text}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    #[test]
    fn unknown_tables_keys_and_wrong_types_name_the_line_and_key() {
        for (text, line, key) in [
            ("[plugin]\nenforced = \"strict\"\n", 2, "enforced"),
            ("[fabric]\nforced = []\n", 2, "forced"),
            ("[fabric]\nforce = \"NCCL_IB_HCA\"\n", 2, "force ="),
            ("[plugn]\ndefault = \"strict\"\n", 1, "plugn"),
            ("[plugin]\ndefault = strict\n", 2, "default = strict"),
            ("[plugin]\nrun_dir = 3\n", 2, "run_dir = 3"),
        ] {
            let e = err(text);
            assert!(
                e.starts_with(&format!("config line {line}: ")) && e.contains(key),
                "{text}: {e}"
            );
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    /// Found by the `admin_config` fuzz target: the source line quoted in the error kept
    /// its lone CR, so the "one line" printed as two. Its input, and a value with an
    /// escaped newline, which the value echo quoted raw.
    #[test]
    fn errors_quoting_control_characters_stay_one_line() {
        for text in ["f\r\u{1}", "[plugin]\ndefault = \"str\\nict\"\n"] {
            let e = err(text);
            assert!(!e.contains(['\n', '\r']), "{e:?}");
            assert!(
                e.contains("\\r") || e.contains("\\n"),
                "the character is shown: {e:?}"
            );
        }
    }

    /// The uid files created by this test process get.
    fn uid() -> u32 {
        let probe = tempfile::NamedTempFile::new().expect("probe file");
        probe.as_file().metadata().expect("probe metadata").uid()
    }

    fn write(dir: &Path, text: &str, mode: u32) -> PathBuf {
        let p = dir.join("config.toml");
        std::fs::write(&p, text).expect("write config");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        p
    }

    #[test]
    fn read_trusted_names_the_file_and_refuses_what_others_can_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = write(dir.path(), "[plugin]\ndefault = \"strict\"\n", 0o644);
        let c = read_trusted(&p, uid()).expect("trusted");
        assert_eq!(c.plugin.default, Some(Choice::Strict));

        let shown = p.display().to_string();
        let p = write(dir.path(), "\n[plugin]\ndefault = \"on\"\n", 0o600);
        let e = read_trusted(&p, uid()).expect_err("bad value").to_string();
        assert!(
            e.starts_with(&format!("config {shown}:3: [plugin] default = 'on'")),
            "{e}"
        );

        for mode in [0o664, 0o646, 0o666] {
            let p = write(dir.path(), "", mode);
            let e = read_trusted(&p, uid()).expect_err("writable").to_string();
            assert_eq!(
                e,
                format!(
                    "config {shown} is writable by group or others (mode {mode:04o}); refusing it"
                )
            );
        }
        let p = write(dir.path(), "", 0o644);
        let e = read_trusted(&p, uid() + 1).expect_err("owner").to_string();
        assert_eq!(
            e,
            format!(
                "config {shown} is owned by uid {}, not root; refusing it",
                uid()
            )
        );
        let missing = dir.path().join("absent.toml");
        let e = read_trusted(&missing, uid()).expect_err("missing");
        assert!(
            matches!(&e, ConfigError::Trust(TrustError::Io { path, .. }) if *path == missing.display().to_string()),
            "{e}"
        );
    }

    #[test]
    fn locate_prefers_the_named_file_then_an_existing_default() {
        let dir = tempfile::tempdir().expect("tempdir");
        let named = Path::new("/nonexistent/named.toml");
        let absent = dir.path().join("absent.toml");
        assert_eq!(locate(Some(named), &absent).as_deref(), Some(named));
        assert_eq!(locate(None, &absent), None);
        let present = write(dir.path(), "", 0o644);
        assert_eq!(locate(None, &present), Some(present.clone()));
    }

    #[test]
    fn floor_and_choice_order() {
        assert!(Choice::Off < Choice::Prefer && Choice::Prefer < Choice::Strict);
        assert_eq!(Floor::Strict.choice(), Choice::Strict);
        assert_eq!(Choice::Prefer.solver_mode(), Some(Mode::Prefer));
        assert_eq!(Choice::Off.solver_mode(), None);
        assert_eq!(Choice::Strict.to_string(), "strict");
    }
}
