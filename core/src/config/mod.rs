//! The admin's TOML config (`/etc/gpu-affinity/config.toml`), shared by every program of
//! the suite so the SPANK plugin and `gpu-affinity explain` read it the same way. One
//! module per concern, each table one struct that is its schema: plugin.rs (`[plugin]`,
//! and [`PluginKey`], shared with plugstack.conf), fabric.rs (`[fabric]`), health.rs
//! (`[gpu]`, `[nvml]`, `[storage]`, `[active]`, `[drain]`, `[slurm]`) and metrics.rs
//! (`[metrics]`); here the top-level keys, the reader and its errors.
//!
//! ```toml
//! root = "/"                    # filesystem root the health checks read (kmsg: ROOT/dev/kmsg)
//! state_dir = "/var/lib/gpu-affinity"  # root-owned state kept between passes, and the lock
//! ```
//!
//! Each key is declared once, as its struct's field (serde's derive, with
//! `deny_unknown_fields`): a typo (`[plugn]`, `enforced`) is an error, never a setting
//! silently not applied. A key's check (absolute path, range, word list) is the
//! `deserialize_with` beside it; a check across keys (`X needs Y`) is its table's
//! `validate`. An absent table or key is `None` / empty: each program applies the
//! default declared beside the key (and its own command-line overrides) on top.
//!
//! Errors are one line naming the line, the key and the value: toml's span of the error,
//! turned into `line N` and `[table] key` by spans.rs. [`parse`] is pure; [`read_trusted`]
//! is the thin reader, through [`crate::trust`] (the ownership rule and the non-blocking
//! open every root-side input shares).

mod fabric;
mod handoff;
mod health;
mod metrics;
mod plugin;
mod spans;
mod value;

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::trust::{TrustError, read_trusted_text};

pub use fabric::FabricConfig;
pub use handoff::HandoffConfig;
pub use health::{
    ActiveConfig, CheckpointConfig, CountersConfig, DEFAULT_ACTIVE_TIMEOUT_S,
    DEFAULT_CHECKPOINT_PROBE_MIB, DrainConfig, GpuConfig, MAX_ACTIVE_TIMEOUT_S,
    MAX_CHECKPOINT_PROBE_MIB, MountConfig, NvmlConfig, SlurmConfig, StorageConfig,
};
pub use metrics::MetricsConfig;
pub use plugin::{Choice, DEFAULT_RUN_DIR, InvalidValue, PluginConfig, PluginKey};

use value::{AFTER_KEY, Problem, abs_dir};

/// Where the config lives unless a program is told otherwise.
pub const DEFAULT_CONFIG: &str = "/etc/gpu-affinity/config.toml";

/// A config is a few lines; anything near this is not one.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The whole config, validated: the top-level keys, then one field per table.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The filesystem root the health checks read (kmsg: ROOT/dev/kmsg); unset: "/".
    #[serde(default, deserialize_with = "abs_dir")]
    pub root: Option<PathBuf>,
    /// Root-owned state kept between health passes, and the lock; unset: the node
    /// programs' default.
    #[serde(default, deserialize_with = "abs_dir")]
    pub state_dir: Option<PathBuf>,
    #[serde(default)]
    pub plugin: PluginConfig,
    #[serde(default)]
    pub fabric: FabricConfig,
    #[serde(default)]
    pub gpu: GpuConfig,
    #[serde(default)]
    pub nvml: NvmlConfig,
    #[serde(default)]
    pub storage: StorageConfig,
    #[serde(default)]
    pub active: ActiveConfig,
    #[serde(default)]
    pub counters: CountersConfig,
    #[serde(default)]
    pub drain: DrainConfig,
    /// `[handoff]`: the Azure and OCI hand-offs' endpoints.
    #[serde(default)]
    pub handoff: HandoffConfig,
    #[serde(default)]
    pub slurm: SlurmConfig,
    #[serde(default)]
    pub metrics: MetricsConfig,
}

impl Config {
    /// The checks across keys, table by table.
    fn validate(&self) -> Result<(), Problem> {
        self.fabric.validate()?;
        self.storage.validate()?;
        self.active.validate()
    }
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

    /// `message` at byte `offset` of `text`.
    fn at(text: &str, offset: usize, message: &str) -> Self {
        ConfigError::At {
            file: None,
            line: text
                .get(..offset)
                .map_or(1, |t| t.matches('\n').count() + 1),
            // The message quotes the file (a value, the source line): a control character
            // there (a lone CR, an escaped "\n" in a TOML string) would break the one line
            // the front ends print into two, in the Slurm log too.
            message: crate::text::printable(message),
        }
    }
}

/// Parse and validate config text. Errors name the line, the key and the value.
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    let config: Config = toml::from_str(text).map_err(|e| from_toml(text, &e))?;
    config.validate().map_err(|problem| {
        let offset = spans::offset_of(text, &problem.path).unwrap_or(0);
        ConfigError::at(text, offset, &problem.message)
    })?;
    Ok(config)
}

/// toml's error as one line: a key's check gets `[table] key` in front, an unknown key
/// names its table and the keys it knows, anything else (TOML syntax, a value's type)
/// keeps toml's message and quotes the source line, which names the key.
fn from_toml(text: &str, e: &toml::de::Error) -> ConfigError {
    let offset = e.span().map_or(0, |s| s.start);
    let message = e.message();
    let found = || spans::at(text, offset);
    if let Some(rest) = message.strip_prefix(AFTER_KEY) {
        let key = found().map(|f| f.named()).unwrap_or_default();
        return ConfigError::at(text, offset, format!("{key} {rest}").trim_start());
    }
    if let Some((key, known)) = unknown_key(message) {
        let table = found()
            .and_then(|f| f.table())
            .map(|t| format!(" in {t}"))
            .unwrap_or_default();
        let message = format!("unknown key '{key}'{table} (known: {known})");
        return ConfigError::at(text, offset, &message);
    }
    let message = one_line(message);
    match source_line(text, offset) {
        "" => ConfigError::at(text, offset, &message),
        source => ConfigError::at(text, offset, &format!("{message} (at `{source}`)")),
    }
}

/// The key and the known keys of serde's `deny_unknown_fields` message ("unknown field
/// `x`, expected one of `a`, `b`", "expected `a` or `b`", "there are no fields").
fn unknown_key(message: &str) -> Option<(&str, String)> {
    let (key, rest) = message.strip_prefix("unknown field `")?.split_once('`')?;
    let known: Vec<&str> = rest
        .strip_prefix(", expected ")
        .unwrap_or_default()
        .split([',', ' '])
        .filter_map(|w| w.strip_prefix('`')?.strip_suffix('`'))
        .collect();
    Some((key, known.join(", ")))
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

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Read and parse the config at `path`, refusing a file `owner` (root) does not fully
/// control.
pub fn read_trusted(path: &Path, owner: u32) -> Result<Config, ConfigError> {
    let text = read_trusted_text(path, "config", owner, MAX_CONFIG_BYTES)?;
    parse(&text).map_err(|e| e.in_file(path))
}

/// The config file a program reads: the one it was told about (missing is then the
/// reader's error), else `default` unless nothing at all is there (built-in defaults).
/// Only a plain "not found" counts as absent: a dangling symlink or a directory the
/// caller cannot search at the default path is read, and refused, rather than taken
/// for "no config", which would silently drop the admin's `enforce`.
pub fn locate(named: Option<&Path>, default: &Path) -> Option<PathBuf> {
    match named {
        Some(p) => Some(p.to_path_buf()),
        None => match std::fs::symlink_metadata(default) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            _ => Some(default.to_path_buf()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solver::Mode;
    use crate::trust::fifo;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

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
    fn counters_set_their_limits_and_refuse_bad_values() {
        let c = parse("[counters]\nwindow_s = 600\nsymbol_error_rise = 5\nnvlink_crc_per_s = 50\n")
            .expect("valid");
        let limits = c.counters.limits();
        assert_eq!(
            (
                limits.window_s,
                limits.symbol_error_rise,
                limits.nvlink_crc_per_s
            ),
            (600, 5, 50.0)
        );
        let d = crate::health::counters::Limits::default();
        assert_eq!(
            limits.retired_pages_max, d.retired_pages_max,
            "unset keys keep their default"
        );
        let e = err("[counters]\nwindow_s = 10\n");
        assert!(e.contains("line 2") && e.contains("60 to 604800"), "{e}");
        let e = err("[counters]\nnvlink_crc_per_s = -1\n");
        assert!(e.contains("a rate above 0"), "{e}");
        let e = err("[counters]\nwindow = 600\n");
        assert!(e.contains("unknown key 'window' in [counters]"), "{e}");
    }

    #[test]
    fn every_key_parses() {
        let c = parse(
            "[plugin]\ndefault = \" prefer\"\nenforce = \"strict\"\nsysfs_root = \"/srv/topo\"\nrun_dir = \"/srv/run\"\n\
             gres_conf = \"/etc/slurm/gres.conf\"\n[fabric]\nforce = [\"NCCL_IB_HCA\", \"NCCL_SOCKET_IFNAME\"]\nprofiles_dir = \"/srv/profiles.d\"\n",
        )
        .expect("valid config");
        assert_eq!(
            c,
            Config {
                plugin: PluginConfig {
                    default: Some(Choice::Prefer),
                    enforce: Some(Mode::Strict),
                    sysfs_root: Some("/srv/topo".into()),
                    run_dir: Some("/srv/run".into()),
                    gres_conf: Some("/etc/slurm/gres.conf".into()),
                    topology: None,
                    switch_level: None,
                },
                fabric: FabricConfig {
                    force: vec!["NCCL_IB_HCA".into(), "NCCL_SOCKET_IFNAME".into()],
                    profiles_dir: Some("/srv/profiles.d".into()),
                    ..FabricConfig::default()
                },
                ..Config::default()
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
                "[fabric]\nforce = [\"CUDA_DEVICE_ORDER\"]\n",
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
            ("[plugin]\nrun_dir = 3\n", 2, "run_dir = '3'"),
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
        // Something is at the default path, if only a dangling symlink: it is read
        // (and refused), never taken for "no config".
        let dangling = dir.path().join("dangling.toml");
        std::os::unix::fs::symlink(dir.path().join("gone.toml"), &dangling).expect("symlink");
        assert_eq!(locate(None, &dangling), Some(dangling.clone()));
        assert!(read_trusted(&dangling, uid()).is_err());
    }

    #[test]
    fn health_keys_parse_and_errors_name_the_line() {
        let c = parse(
            "root = \"/srv/node\"\n[gpu]\nexpected = 8\nnvml = false\nleftover_memory_mib = 512\n[nvml]\nlibrary = \"/opt/lib/libnvidia-ml.so.1\"\n\
             [fabric]\nexpected_nics = 32\nflap_strikes = 2\n[[storage.mount]]\npath = \"/fsx\"\ntype = \"lustre\"\n\
             [drain]\nmax_share = 0.25\nresume_after = 2\nhandoff = \"slurm-gcp\"\n\
             [metrics]\ntextfile = \"/var/lib/ne/ga.prom\"\ndcgm_job_mapping_dir = \"/run/dcgm\"\n",
        )
        .expect("health config");
        let h = &c;
        assert_eq!(h.root.as_deref(), Some(Path::new("/srv/node")));
        assert_eq!(
            (
                h.gpu.expected,
                h.gpu.nvml,
                h.fabric.expected_nics,
                h.fabric.flap_strikes
            ),
            (Some(8), Some(false), Some(32), Some(2))
        );
        assert_eq!(h.gpu.leftover_memory_mib, Some(512));
        assert_eq!(h.storage.checkpoint(), None);
        assert_eq!(h.active, ActiveConfig::default());
        let a = parse(
            "[active]\ndcgmi = \"/usr/bin/dcgmi\"\ndcgm_diag_level = 2\nall_reduce_perf = \"/opt/nccl-tests/all_reduce_perf\"\n\
             all_reduce_floor_gbps = 350\nin_prolog = true\ntimeout_s = 600\n",
        )
        .expect("[active]")
        .active;
        assert_eq!(
            (
                a.dcgm_diag_level,
                a.all_reduce_floor_gbps,
                a.in_prolog,
                a.timeout_s
            ),
            (2, Some(350.0), true, Some(600))
        );
        for (text, error) in [
            (
                "[active]\ndcgm_diag_level = 1\n",
                "config line 2: [active] dcgm_diag_level needs [active] dcgmi",
            ),
            (
                "[active]\ndcgmi = \"/usr/bin/dcgmi\"\ndcgm_diag_level = 5\n",
                "config line 3: [active] dcgm_diag_level = 5 is invalid: expected 0 to 4",
            ),
            (
                "[active]\nall_reduce_floor_gbps = 100.0\n",
                "config line 2: [active] all_reduce_floor_gbps needs [active] all_reduce_perf",
            ),
            (
                "[active]\ndcgmi = \"dcgmi\"\n",
                "config line 2: [active] dcgmi = 'dcgmi' is invalid: expected an absolute path",
            ),
            (
                "[active]\ntimeout_s = 0\n",
                "config line 2: [active] timeout_s = 0 is invalid: expected 1 to 3600",
            ),
        ] {
            assert_eq!(parse(text).expect_err(text).to_string(), error);
        }
        let c = parse("[storage]\ncheckpoint_dir = \"/fsx/ckpt\"\ncheckpoint_floor_mbps = 500\n")
            .expect("[storage] checkpoint");
        assert_eq!(
            c.storage.checkpoint(),
            Some(CheckpointConfig {
                dir: PathBuf::from("/fsx/ckpt"),
                floor_mbps: Some(500.0),
                probe_mib: DEFAULT_CHECKPOINT_PROBE_MIB,
            })
        );
        assert_eq!(h.storage.mount[0].fstype.as_deref(), Some("lustre"));
        assert_eq!(
            (h.drain.max_share, h.drain.resume_after),
            (Some(0.25), Some(2))
        );
        assert_eq!(
            h.drain.handoff,
            Some(crate::health::drain::Handoff::SlurmGcp)
        );
        assert!(
            h.metrics.textfile.is_some()
                && h.metrics.dcgm_job_mapping_dir.is_some()
                && h.nvml.library.is_some()
        );
        let c = parse(
            "[slurm]\nbin_dir = \"/opt/slurm/bin\"\nconf = \"/opt/slurm/etc/slurm.conf\"\n\
             gres_conf = \"/opt/slurm/etc/gres.conf\"\n",
        )
        .expect("[slurm]");
        assert_eq!(
            c.slurm.conf.as_deref(),
            Some(Path::new("/opt/slurm/etc/slurm.conf"))
        );
        assert_eq!(
            c.slurm.gres_conf.as_deref(),
            Some(Path::new("/opt/slurm/etc/gres.conf"))
        );
        for (text, want) in [
            (
                "[slurm]\n\ngres_conf = \"gres.conf\"\n",
                "config line 3: [slurm] gres_conf = 'gres.conf' is invalid: expected an absolute path",
            ),
            (
                "[drain]\nmax_share = 1.5\n",
                "config line 2: [drain] max_share = 1.5 is invalid",
            ),
            (
                "[drain]\n\nhandoff = \"aws\"\n",
                "config line 3: [drain] handoff = 'aws' is invalid: expected drain, hyperpod, slurm-gcp, azure or oci",
            ),
            (
                "[gpu]\nexpected = -1\n",
                "config line 2: [gpu] expected = -1 is invalid",
            ),
            (
                "[gpu]\nexpected = 8\n\nleftover_memory_mib = -5\n",
                "config line 4: [gpu] leftover_memory_mib = -5 is invalid: expected a count of 0 or more",
            ),
            (
                "[storage]\ncheckpoint_floor_mbps = 500\n",
                "config line 2: [storage] checkpoint_floor_mbps needs [storage] checkpoint_dir",
            ),
            (
                "[storage]\ncheckpoint_dir = \"/fsx/ckpt\"\ncheckpoint_probe_mib = 4096\n",
                "config line 3: [storage] checkpoint_probe_mib = 4096 is invalid: expected 1 to 1024",
            ),
            (
                "[storage]\ncheckpoint_dir = \"/fsx/ckpt\"\ncheckpoint_floor_mbps = 10\ncheckpoint_probe_mib = 64\n",
                "config line 4: [storage] checkpoint_probe_mib = 64 cannot finish within the 5000 ms bound at checkpoint_floor_mbps = 10: expected at most 47 MiB",
            ),
            (
                "[storage]\ncheckpoint_dir = \"/fsx/ckpt\"\ncheckpoint_floor_mbps = 2\n",
                "config line 3: [storage] checkpoint_probe_mib = 16 cannot finish within the 5000 ms bound at checkpoint_floor_mbps = 2: expected at most 9 MiB",
            ),
            (
                "[storage]\ncheckpoint_dir = \"/fsx/ckpt\"\ncheckpoint_floor_mbps = -1.0\n",
                "config line 3: [storage] checkpoint_floor_mbps = -1 is invalid",
            ),
            (
                "[storage]\ncheckpoint_dir = \"ckpt\"\n",
                "config line 2: [storage] checkpoint_dir = 'ckpt' is invalid: expected an absolute directory",
            ),
            (
                "[gpu]\nexpect = 8\n",
                "config line 2: unknown key 'expect' in [gpu] (known: expected, nvml, persistence, driver, leftover_memory_mib)",
            ),
            (
                "[drain]\nresume = 2\n",
                "config line 2: unknown key 'resume' in [drain] (known: max_share, resume_after, handoff)",
            ),
            (
                "[[storage.mount]]\npath = \"fsx\"\n",
                "config line 2: [[storage.mount]] path = 'fsx' is invalid",
            ),
            (
                "root = \"relative\"\n",
                "config line 1: root = 'relative' is invalid",
            ),
        ] {
            let e = err(text);
            assert!(e.starts_with(want), "{text}: {e}");
        }
    }

    /// The plugin's keys are one table: each sits in its config table, a key outside the
    /// table is unknown there, and a bad value reads as `PluginKey::set` says (plugstack.conf
    /// prints the same text: spank-plugin settings.rs tests it against this one).
    #[test]
    fn plugin_keys_are_one_table_for_the_file() {
        for key in PluginKey::ALL {
            assert_eq!(PluginKey::find(key.name()), Some(key));
            let good = match key {
                PluginKey::Default | PluginKey::Enforce => "strict",
                PluginKey::SwitchLevel => "1",
                _ => "/abs",
            };
            let text = format!("[{}]\n{} = \"{good}\"\n", key.table(), key.name());
            let parsed = parse(&text).expect(&text);
            let mut want = Config::default();
            key.set(&mut want, good).expect(good);
            assert_eq!(parsed, want, "{text}");
            let bad = format!("[{}]\n{} = \"rel\"\n", key.table(), key.name());
            let message = key
                .set(&mut Config::default(), "rel")
                .expect_err("rel")
                .to_string();
            assert_eq!(
                err(&bad),
                format!("config line 2: [{}] {message}", key.table()),
                "{bad}"
            );
        }
        // The file's [plugin] keys (its struct's fields) are PluginKey's.
        let e = err("[plugin]\nprofiles_dir = \"/p\"\n");
        let known = PluginKey::names_in("plugin");
        assert_eq!(
            known,
            "default, enforce, sysfs_root, run_dir, gres_conf, topology, switch_level"
        );
        assert_eq!(
            e,
            format!("config line 2: unknown key 'profiles_dir' in [plugin] (known: {known})")
        );
        let e = err("[fabric]\nprofile_dir = \"/p\"\n");
        assert!(e.contains(&PluginKey::names_in("fabric")), "{e}");
    }

    #[test]
    fn floor_and_choice_order() {
        assert!(Choice::Off < Choice::Prefer && Choice::Prefer < Choice::Strict);
        assert_eq!(Choice::from(Mode::Strict), Choice::Strict);
        assert_eq!(Choice::parse("prefer"), Some(Choice::Prefer));
        assert_eq!(Choice::parse("off"), Some(Choice::Off));
        assert_eq!(Choice::Prefer.solver_mode(), Some(Mode::Prefer));
        assert_eq!(Choice::Off.solver_mode(), None);
        assert_eq!(Choice::Strict.to_string(), "strict");
    }

    #[test]
    fn the_topology_key_takes_an_absolute_path() {
        let mut c = Config::default();
        let key = PluginKey::find("topology").expect("a plugin key");
        key.set(&mut c, "/etc/slurm/topology.yaml")
            .expect("absolute");
        assert_eq!(
            c.plugin.topology.as_deref(),
            Some(Path::new("/etc/slurm/topology.yaml"))
        );
        let e = key.set(&mut c, "topology.conf").expect_err("relative");
        assert_eq!(
            e.to_string(),
            "topology = 'topology.conf' is invalid: expected an absolute path"
        );
    }

    /// `switch_level` takes a TOML integer or the same digits as text (plugstack.conf
    /// gives text); anything else is refused naming the key.
    #[test]
    fn the_switch_level_key_takes_a_level() {
        let level = |text: &str| parse(text).map(|c| c.plugin.switch_level);
        assert_eq!(level("[plugin]\nswitch_level = 1\n"), Ok(Some(1)));
        assert_eq!(level("[plugin]\nswitch_level = \" 2\"\n"), Ok(Some(2)));
        assert_eq!(level(""), Ok(None));
        for (text, want) in [
            (
                "[plugin]\nswitch_level = -1\n",
                "config line 2: [plugin] switch_level = '-1' is invalid: expected a switch level: 0 (a leaf switch) or more",
            ),
            (
                "[plugin]\nswitch_level = \"leaf\"\n",
                "config line 2: [plugin] switch_level = 'leaf' is invalid: expected a switch level: 0 (a leaf switch) or more",
            ),
            (
                "[plugin]\nswitch_level = 1.5\n",
                "config line 2: [plugin] switch_level is a float, expected an integer",
            ),
            (
                "[plugin]\ndefault = true\n",
                "config line 2: [plugin] default is a boolean, expected a string",
            ),
        ] {
            assert_eq!(err(text), want, "{text}");
        }
        let mut c = Config::default();
        let e = PluginKey::SwitchLevel
            .set(&mut c, "4294967296")
            .expect_err("over u32");
        assert_eq!(e.key, "switch_level");
    }

    #[test]
    fn the_nvml_library_is_absolute_or_a_file_name_the_loader_finds() {
        let lib = |v: &str| parse(&format!("[nvml]\nlibrary = '{v}'\n")).map(|c| c.nvml.library);
        assert_eq!(
            lib("libnvidia-ml.so.1"),
            Ok(Some(PathBuf::from("libnvidia-ml.so.1")))
        );
        assert_eq!(
            lib("/usr/lib64/libnvidia-ml.so.1"),
            Ok(Some(PathBuf::from("/usr/lib64/libnvidia-ml.so.1")))
        );
        for bad in ["lib/libnvidia-ml.so.1", "./libnvidia-ml.so.1", "", ".."] {
            let e = lib(bad).expect_err(bad).to_string();
            assert!(
                e.ends_with(&format!(
                    "[nvml] library = '{bad}' is invalid: expected an absolute path or a library file name"
                )),
                "{e}"
            );
        }
    }
}
