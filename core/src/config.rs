//! The admin's TOML config (`/etc/gpu-affinity/config.toml`), shared by every program of
//! the suite so the SPANK plugin and `gpu-affinity explain` read it the same way.
//!
//! ```toml
//! [plugin]
//! default = "prefer"            # off | prefer | strict: the mode without --gpu-affinity
//! enforce = "strict"            # prefer | strict: the floor a user cannot go below
//! sysfs_root = "/"              # where the topology is read (tests, replayed dumps)
//! run_dir = "/run/gpu-affinity" # per-step files written as root
//! gres_conf = "/etc/slurm/gres.conf"  # unset: next to slurmd's own slurm.conf
//! topology = "/etc/slurm/topology.conf"  # unset: topology.yaml / topology.conf next to slurm.conf
//! switch_level = 0              # placement: a step may span switches up to this tree level
//!
//! [fabric]
//! force = ["NCCL_IB_HCA"]       # exported even when the user set them
//! profiles_dir = "/etc/gpu-affinity/profiles.d"
//! ```
//!
//! [health]-side tables, read by gpu-affinity-prolog, -epilog and -health (examples; the
//! defaults are in packaging/config.toml, checked by `sample_config`'s tests):
//!
//! ```toml
//! root = "/"                    # filesystem root the health checks read (kmsg: ROOT/dev/kmsg)
//! state_dir = "/var/lib/gpu-affinity"  # root-owned state kept between passes, and the lock
//!
//! [gpu]
//! expected = 8                  # GPUs this node must show (unset: compare PCI, NVML, gres only)
//! nvml = true                   # false: skip NVML-based checks, keep sysfs and kernel-log ones
//! persistence = true            # unset: not checked
//! driver = "550.54.15"          # unset: not checked
//! leftover_memory_mib = 1024    # epilog: MiB a GPU may hold with no process left (warn above)
//!
//! [nvml]
//! library = "libnvidia-ml.so.1" # loaded at run time: an absolute path, or a file name
//!                               # the dynamic loader finds
//!
//! [fabric]
//! expected_nics = 32            # unset: the detected instance type's catalog count, if any
//! port_rate_gbps = 400          # unset: every port at the fastest port's rate
//! flap_strikes = 3              # passes with a rising link_downed before draining; 0: off
//!
//! [[storage.mount]]
//! path = "/fsx"
//! type = "lustre"               # unset: any type
//! write = false                 # true: a create + remove probe
//!
//! [storage]
//! checkpoint_dir = "/fsx/checkpoints"  # unset: no bandwidth probe
//! checkpoint_floor_mbps = 500   # health pass: drain below this write rate (MB/s)
//! checkpoint_probe_mib = 16     # the probe file, written + fsynced + removed (1..=1024)
//!
//! [drain]
//! max_share = 0.1               # circuit breaker: share of the partition already drained
//! resume_after = 3              # clean health passes before the suite resumes its own drain
//! handoff = "drain"             # drain | hyperpod | slurm-gcp
//!
//! [slurm]
//! bin_dir = "/usr/bin"          # where scontrol and sinfo are (unset: the usual prefixes)
//! conf = "/etc/slurm/slurm.conf" # SLURM_CONF for sinfo/scontrol (unset: the environment's;
//!                               # slurmd gives HealthCheckProgram none)
//! gres_conf = "/etc/slurm/gres.conf" # numbers SLURM_JOB_GPUS (unset: next to slurm.conf)
//!
//! [metrics]
//! textfile = "/var/lib/node_exporter/gpu_affinity.prom"
//! dcgm_job_mapping_dir = "/var/lib/dcgm-exporter/job-mapping"
//! ```
//!
//! Every table and key is known: a typo (`[plugn]`, `enforced`) is an error, never a
//! setting silently not applied. The plugin's settings ([`PluginKey`]: `[plugin]` and
//! `[fabric] profiles_dir`) are also its plugstack.conf `key=value` arguments: one table
//! of keys and one check ([`PluginKey::set`]) serve both, so a key cannot be valid in one
//! and not the other, and a bad value reads the same in both. [`parse`] is pure; [`read_trusted`] is the thin reader,
//! through [`crate::trust`] (the ownership rule and the non-blocking open every root-side
//! input shares).

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::health::STORAGE_BOUND_MS;
use crate::solver::Mode;
use crate::trust::{TrustError, read_trusted_text};

/// Where the config lives unless a program is told otherwise.
/// Where the plugin writes per-step files as root (`[plugin] run_dir`, plugstack `run_dir=`).
pub const DEFAULT_RUN_DIR: &str = "/run/gpu-affinity";
pub const DEFAULT_CONFIG: &str = "/etc/gpu-affinity/config.toml";

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
            word => Mode::parse(word).map(Choice::from),
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

/// A solver mode as a choice; for `enforce`, the lowest choice a step may run with.
impl From<Mode> for Choice {
    fn from(mode: Mode) -> Choice {
        match mode {
            Mode::Prefer => Choice::Prefer,
            Mode::Strict => Choice::Strict,
        }
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The whole config, validated. An absent table or key is `None` / empty: each program
/// applies its own default (and its own command-line overrides) on top.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    pub plugin: PluginConfig,
    pub fabric: FabricConfig,
    pub health: HealthConfig,
}

/// The health programs' part: `root`, `state_dir` and the `[gpu]`, `[nvml]`, `[storage]`,
/// `[drain]`, `[slurm]`, `[metrics]` tables (plus `[fabric]`'s health keys).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HealthConfig {
    /// Absolute; `None`: "/".
    pub root: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
    pub gpu_expected: Option<u32>,
    /// `[gpu] nvml`; default true.
    pub nvml: Option<bool>,
    pub persistence: Option<bool>,
    pub driver: Option<String>,
    /// `[gpu] leftover_memory_mib`; `None`: core's default.
    pub leftover_memory_mib: Option<u32>,
    pub nvml_library: Option<PathBuf>,
    pub expected_nics: Option<u32>,
    pub port_rate_gbps: Option<f64>,
    pub flap_strikes: Option<u32>,
    pub mounts: Vec<MountConfig>,
    pub checkpoint: Option<CheckpointConfig>,
    pub max_share: Option<f64>,
    pub resume_after: Option<u32>,
    pub handoff: Option<crate::health::drain::Handoff>,
    pub slurm_bin_dir: Option<PathBuf>,
    /// `[slurm] conf`: slurm.conf for the clients (`SLURM_CONF`).
    pub slurm_conf: Option<PathBuf>,
    /// `[slurm] gres_conf`: the gres.conf slurmd reads, for Slurm's GPU ids.
    pub gres_conf: Option<PathBuf>,
    pub textfile: Option<PathBuf>,
    pub dcgm_job_mapping_dir: Option<PathBuf>,
    /// `[active]`: DCGM diagnostics and the one-node all-reduce floor.
    pub active: ActiveConfig,
}

/// `[active]`: opt-in active tests, run by the health program on an idle node and by the
/// prolog only with `in_prolog = true`, each under `timeout_s`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ActiveConfig {
    /// `dcgmi`'s absolute path (checked root-owned when run).
    pub dcgmi: Option<PathBuf>,
    /// `dcgmi diag -r LEVEL`: 0 (default) is off, 1-4 DCGM's suites.
    pub dcgm_diag_level: u8,
    /// nccl-tests' `all_reduce_perf`, absolute (checked root-owned when run).
    pub all_reduce_perf: Option<PathBuf>,
    /// GB/s; `None`: measured and reported, drains only on wrong values.
    pub all_reduce_floor_gbps: Option<f64>,
    /// The prolog runs them too (before every job: they cost the job's start time).
    pub in_prolog: bool,
    /// Each test's hard bound, seconds; `None`: [`DEFAULT_ACTIVE_TIMEOUT_S`].
    pub timeout_s: Option<u32>,
}

/// `[active] timeout_s` unset: core's `ACTIVE_BOUND_MS`.
pub const DEFAULT_ACTIVE_TIMEOUT_S: u32 = (crate::health::ACTIVE_BOUND_MS / 1000) as u32;
/// `[active] timeout_s` at most: an hour (DCGM's level 4 runs about that).
pub const MAX_ACTIVE_TIMEOUT_S: u32 = 3600;

/// `[storage] checkpoint_*`: the checkpoint directory's write-bandwidth probe.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointConfig {
    pub dir: PathBuf,
    /// MB/s; `None`: measured and reported, never drains (a probe that fails only warns).
    pub floor_mbps: Option<f64>,
    pub probe_mib: u32,
}

/// `[storage] checkpoint_probe_mib` unset: big enough to pass the page cache's write-back
/// start, small enough to cost well under the storage bound on a healthy mount.
pub const DEFAULT_CHECKPOINT_PROBE_MIB: u32 = 16;
/// The probe never writes more than this (a typo must not fill a filesystem).
pub const MAX_CHECKPOINT_PROBE_MIB: u32 = 1024;

/// One `[[storage.mount]]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountConfig {
    pub path: String,
    pub fstype: Option<String>,
    pub write: bool,
}

/// `[plugin]`: the SPANK plugin's settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PluginConfig {
    pub default: Option<Choice>,
    /// The admin's floor: users may raise the mode, never lower it below this.
    pub enforce: Option<Mode>,
    /// Absolute.
    pub sysfs_root: Option<PathBuf>,
    /// Absolute.
    pub run_dir: Option<PathBuf>,
    /// Absolute: the gres.conf slurmd reads, where discovery would not find it.
    pub gres_conf: Option<PathBuf>,
    /// Absolute: the cluster's topology.conf or topology.yaml (by its extension), for the
    /// placement backstop, where discovery next to slurm.conf would not find it.
    pub topology: Option<PathBuf>,
    /// The tree level a multi-node step may span switches up to (0: one leaf switch),
    /// for the placement check; blocks have no levels.
    pub switch_level: Option<u32>,
}

/// One setting of the SPANK plugin: the same key in plugstack.conf (`key=value`) and in
/// the config file (in [`PluginKey::table`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PluginKey {
    Default,
    Enforce,
    SysfsRoot,
    RunDir,
    GresConf,
    ProfilesDir,
    Topology,
    SwitchLevel,
}

/// A plugin setting's value that is not what the key takes. Its text is the one both
/// front ends print, behind where the value came from (a config line, plugstack.conf).
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("{key} = '{value}' is invalid: expected {expected}")]
pub struct InvalidValue {
    pub key: &'static str,
    pub value: String,
    pub expected: &'static str,
}

impl PluginKey {
    pub const ALL: [PluginKey; 8] = [
        PluginKey::Default,
        PluginKey::Enforce,
        PluginKey::SysfsRoot,
        PluginKey::RunDir,
        PluginKey::GresConf,
        PluginKey::ProfilesDir,
        PluginKey::Topology,
        PluginKey::SwitchLevel,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PluginKey::Default => "default",
            PluginKey::Enforce => "enforce",
            PluginKey::SysfsRoot => "sysfs_root",
            PluginKey::RunDir => "run_dir",
            PluginKey::GresConf => "gres_conf",
            PluginKey::ProfilesDir => "profiles_dir",
            PluginKey::Topology => "topology",
            PluginKey::SwitchLevel => "switch_level",
        }
    }

    /// The config table the key sits in: profiles are the fabric's, shared with explain.
    pub fn table(self) -> &'static str {
        match self {
            PluginKey::ProfilesDir => "fabric",
            _ => "plugin",
        }
    }

    pub fn find(name: &str) -> Option<PluginKey> {
        PluginKey::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The keys of `table`, for an unknown-key message.
    pub fn names_in(table: &str) -> String {
        let names: Vec<&str> = PluginKey::ALL
            .into_iter()
            .filter(|k| k.table() == table)
            .map(PluginKey::name)
            .collect();
        names.join(", ")
    }

    /// Check `value` and store it in `config`: the one check of a plugin setting, for the
    /// config file and plugstack.conf alike. Mode words may carry blanks around them.
    pub fn set(self, config: &mut Config, value: &str) -> Result<(), InvalidValue> {
        let invalid = |expected| InvalidValue {
            key: self.name(),
            value: value.to_string(),
            expected,
        };
        let absolute = |expected| {
            let path = PathBuf::from(value);
            if path.is_absolute() {
                Ok(Some(path))
            } else {
                Err(invalid(expected))
            }
        };
        let plugin = &mut config.plugin;
        match self {
            PluginKey::Default => {
                plugin.default = Some(
                    Choice::parse(value.trim()).ok_or_else(|| invalid("off, prefer or strict"))?,
                );
            }
            PluginKey::Enforce => {
                plugin.enforce =
                    Some(Mode::parse(value.trim()).ok_or_else(|| invalid("prefer or strict"))?);
            }
            PluginKey::SysfsRoot => plugin.sysfs_root = absolute("an absolute directory")?,
            PluginKey::RunDir => plugin.run_dir = absolute("an absolute directory")?,
            PluginKey::GresConf => plugin.gres_conf = absolute("an absolute path")?,
            PluginKey::Topology => plugin.topology = absolute("an absolute path")?,
            PluginKey::SwitchLevel => {
                let level = value.trim().parse::<u32>();
                plugin.switch_level =
                    Some(level.map_err(|_| invalid("a switch level: 0 (a leaf switch) or more"))?);
            }
            PluginKey::ProfilesDir => {
                config.fabric.profiles_dir = absolute("an absolute directory")?;
            }
        }
        Ok(())
    }
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
    root: Option<Spanned<String>>,
    state_dir: Option<Spanned<String>>,
    #[serde(default)]
    plugin: PluginDoc,
    #[serde(default)]
    fabric: FabricDoc,
    #[serde(default)]
    gpu: GpuDoc,
    #[serde(default)]
    nvml: NvmlDoc,
    #[serde(default)]
    storage: StorageDoc,
    #[serde(default)]
    drain: DrainDoc,
    #[serde(default)]
    slurm: SlurmDoc,
    #[serde(default)]
    metrics: MetricsDoc,
    #[serde(default)]
    active: ActiveDoc,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ActiveDoc {
    dcgmi: Option<Spanned<String>>,
    dcgm_diag_level: Option<Spanned<i64>>,
    all_reduce_perf: Option<Spanned<String>>,
    all_reduce_floor_gbps: Option<Spanned<f64>>,
    in_prolog: Option<bool>,
    timeout_s: Option<Spanned<i64>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct GpuDoc {
    expected: Option<Spanned<i64>>,
    nvml: Option<bool>,
    persistence: Option<bool>,
    driver: Option<String>,
    leftover_memory_mib: Option<Spanned<i64>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct NvmlDoc {
    library: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct StorageDoc {
    #[serde(default)]
    mount: Vec<MountDoc>,
    checkpoint_dir: Option<Spanned<String>>,
    checkpoint_floor_mbps: Option<Spanned<f64>>,
    checkpoint_probe_mib: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MountDoc {
    path: Spanned<String>,
    #[serde(rename = "type")]
    fstype: Option<String>,
    #[serde(default)]
    write: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DrainDoc {
    max_share: Option<Spanned<f64>>,
    resume_after: Option<Spanned<i64>>,
    handoff: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SlurmDoc {
    bin_dir: Option<Spanned<String>>,
    conf: Option<Spanned<String>>,
    gres_conf: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct MetricsDoc {
    textfile: Option<Spanned<String>>,
    dcgm_job_mapping_dir: Option<Spanned<String>>,
}

/// `[plugin]`: key by key, each checked against [`PluginKey`] (unknown keys included).
type PluginDoc = std::collections::BTreeMap<Spanned<String>, Spanned<toml::Value>>;

/// A `[plugin]` value as the text [`PluginKey::set`] checks: keys take text, as
/// plugstack.conf gives it; a TOML integer (`switch_level = 1`) is taken as its digits.
fn plugin_text(key: PluginKey, value: &toml::Value) -> Result<String, String> {
    let expected = match key {
        PluginKey::SwitchLevel => "an integer",
        _ => "a string",
    };
    match value {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(n) => Ok(n.to_string()),
        other => Err(format!("is a {}, expected {expected}", other.type_str())),
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FabricDoc {
    #[serde(default)]
    force: Vec<Spanned<String>>,
    profiles_dir: Option<Spanned<String>>,
    expected_nics: Option<Spanned<i64>>,
    port_rate_gbps: Option<Spanned<f64>>,
    flap_strikes: Option<Spanned<i64>>,
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
        message: crate::text::printable(&message),
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
    // Every path the config names is absolute: the binaries run from slurmd's cwd.
    let absolute = |key: &str, value: &Option<Spanned<String>>, what: &str| {
        value
            .as_ref()
            .map(|v| {
                let path = PathBuf::from(v.get_ref());
                if path.is_absolute() {
                    Ok(path)
                } else {
                    Err(bad(key, v, what))
                }
            })
            .transpose()
    };
    let dir =
        |key: &str, value: &Option<Spanned<String>>| absolute(key, value, "an absolute directory");
    // The plugin's settings, through the check plugstack.conf arguments take too.
    let mut settings = Config::default();
    let mut set = |key: PluginKey, value: &str, offset: usize| {
        key.set(&mut settings, value)
            .map_err(|e| at(offset, format!("[{}] {e}", key.table())))
    };
    for (key, value) in &doc.plugin {
        match PluginKey::find(key.get_ref()).filter(|k| k.table() == "plugin") {
            Some(k) => {
                let text = plugin_text(k, value.get_ref())
                    .map_err(|e| at(value.span().start, format!("[plugin] {} {e}", k.name())))?;
                set(k, &text, value.span().start)?;
            }
            None => {
                return Err(at(
                    key.span().start,
                    format!(
                        "unknown key '{}' in [plugin] (known: {})",
                        key.get_ref(),
                        PluginKey::names_in("plugin")
                    ),
                ));
            }
        }
    }
    if let Some(value) = &doc.fabric.profiles_dir {
        set(PluginKey::ProfilesDir, value.get_ref(), value.span().start)?;
    }
    let mut force: Vec<String> = Vec::new();
    for entry in &doc.fabric.force {
        let key = entry.get_ref();
        if let Some(expected) = force_problem(key, &force) {
            return Err(bad("[fabric] force", entry, expected));
        }
        force.push(key.clone());
    }
    let count = |key: &str, value: &Option<Spanned<i64>>| {
        value
            .as_ref()
            .map(|v| {
                u32::try_from(*v.get_ref()).map_err(|_| {
                    at(
                        v.span().start,
                        format!(
                            "{key} = {} is invalid: expected a count of 0 or more",
                            v.get_ref()
                        ),
                    )
                })
            })
            .transpose()
    };
    let path =
        |key: &str, value: &Option<Spanned<String>>| absolute(key, value, "an absolute path");
    // A library: an absolute path, or a bare file name the dynamic loader finds in its
    // own root-set search path, as the default `libnvidia-ml.so.1` is found. Never a
    // relative path (it would name a file under slurmd's cwd).
    let library = |key: &str, value: &Option<Spanned<String>>| {
        value
            .as_ref()
            .map(|v| {
                let name = v.get_ref();
                let bare = !name.is_empty() && !name.contains('/') && name != "." && name != "..";
                if bare || Path::new(name).is_absolute() {
                    Ok(PathBuf::from(name))
                } else {
                    Err(bad(key, v, "an absolute path or a library file name"))
                }
            })
            .transpose()
    };
    let max_share = checked_float(
        &at,
        "[drain] max_share",
        &doc.drain.max_share,
        |share| (0.0..=1.0).contains(&share),
        "a fraction from 0 to 1",
    )?;
    let port_rate_gbps = checked_float(
        &at,
        "[fabric] port_rate_gbps",
        &doc.fabric.port_rate_gbps,
        |rate| rate > 0.0,
        "a rate above 0",
    )?;
    let handoff = doc
        .drain
        .handoff
        .as_ref()
        .map(|v| {
            crate::health::drain::Handoff::parse(v.get_ref().trim())
                .ok_or_else(|| bad("[drain] handoff", v, "drain, hyperpod or slurm-gcp"))
        })
        .transpose()?;
    let checkpoint = checkpoint(&doc.storage, &at, &dir)?;
    let active = active(&doc.active, &at, &path)?;
    let mut mounts = Vec::new();
    for m in doc.storage.mount {
        if !m.path.get_ref().starts_with('/') {
            return Err(bad("[[storage.mount]] path", &m.path, "an absolute path"));
        }
        mounts.push(MountConfig {
            path: m.path.get_ref().clone(),
            fstype: m.fstype,
            write: m.write,
        });
    }
    let health = HealthConfig {
        root: dir("root", &doc.root)?,
        state_dir: dir("state_dir", &doc.state_dir)?,
        gpu_expected: count("[gpu] expected", &doc.gpu.expected)?,
        nvml: doc.gpu.nvml,
        persistence: doc.gpu.persistence,
        driver: doc.gpu.driver,
        leftover_memory_mib: count("[gpu] leftover_memory_mib", &doc.gpu.leftover_memory_mib)?,
        nvml_library: library("[nvml] library", &doc.nvml.library)?,
        expected_nics: count("[fabric] expected_nics", &doc.fabric.expected_nics)?,
        port_rate_gbps,
        flap_strikes: count("[fabric] flap_strikes", &doc.fabric.flap_strikes)?,
        mounts,
        checkpoint,
        max_share,
        resume_after: count("[drain] resume_after", &doc.drain.resume_after)?,
        handoff,
        slurm_bin_dir: dir("[slurm] bin_dir", &doc.slurm.bin_dir)?,
        slurm_conf: path("[slurm] conf", &doc.slurm.conf)?,
        gres_conf: path("[slurm] gres_conf", &doc.slurm.gres_conf)?,
        textfile: path("[metrics] textfile", &doc.metrics.textfile)?,
        dcgm_job_mapping_dir: dir(
            "[metrics] dcgm_job_mapping_dir",
            &doc.metrics.dcgm_job_mapping_dir,
        )?,
        active,
    };
    Ok(Config {
        health,
        plugin: settings.plugin,
        fabric: FabricConfig {
            force,
            profiles_dir: settings.fabric.profiles_dir,
        },
    })
}

/// A float key's value when `valid` takes it; else an error naming the key, value and line.
fn checked_float(
    at: &impl Fn(usize, String) -> ConfigError,
    key: &str,
    value: &Option<Spanned<f64>>,
    valid: impl Fn(f64) -> bool,
    expected: &str,
) -> Result<Option<f64>, ConfigError> {
    value
        .as_ref()
        .map(|v| {
            let x = *v.get_ref();
            if valid(x) {
                Ok(x)
            } else {
                Err(at(
                    v.span().start,
                    format!("{key} = {x} is invalid: expected {expected}"),
                ))
            }
        })
        .transpose()
}

/// `[active]`: a level without `dcgmi`, or a floor without `all_reduce_perf`, is a mistake.
fn active(
    doc: &ActiveDoc,
    at: &impl Fn(usize, String) -> ConfigError,
    path: &impl Fn(&str, &Option<Spanned<String>>) -> Result<Option<PathBuf>, ConfigError>,
) -> Result<ActiveConfig, ConfigError> {
    let ranged = |key: &str, value: &Option<Spanned<i64>>, lo: i64, hi: i64| {
        value
            .as_ref()
            .map(|v| {
                let n = *v.get_ref();
                if (lo..=hi).contains(&n) {
                    Ok(n)
                } else {
                    Err(at(
                        v.span().start,
                        format!("{key} = {n} is invalid: expected {lo} to {hi}"),
                    ))
                }
            })
            .transpose()
    };
    let level = ranged("[active] dcgm_diag_level", &doc.dcgm_diag_level, 0, 4)?;
    let timeout = ranged(
        "[active] timeout_s",
        &doc.timeout_s,
        1,
        i64::from(MAX_ACTIVE_TIMEOUT_S),
    )?;
    let floor = checked_float(
        at,
        "[active] all_reduce_floor_gbps",
        &doc.all_reduce_floor_gbps,
        |f| f.is_finite() && f > 0.0,
        "a bandwidth above 0 (GB/s)",
    )?;
    let dcgmi = path("[active] dcgmi", &doc.dcgmi)?;
    let all_reduce_perf = path("[active] all_reduce_perf", &doc.all_reduce_perf)?;
    if let (Some(v), None) = (&doc.dcgm_diag_level, &dcgmi)
        && *v.get_ref() > 0
    {
        return Err(at(
            v.span().start,
            "[active] dcgm_diag_level needs [active] dcgmi".into(),
        ));
    }
    if let (Some(v), None) = (&doc.all_reduce_floor_gbps, &all_reduce_perf) {
        return Err(at(
            v.span().start,
            "[active] all_reduce_floor_gbps needs [active] all_reduce_perf".into(),
        ));
    }
    Ok(ActiveConfig {
        dcgmi,
        dcgm_diag_level: level.and_then(|l| u8::try_from(l).ok()).unwrap_or(0),
        all_reduce_perf,
        all_reduce_floor_gbps: floor,
        in_prolog: doc.in_prolog.unwrap_or(false),
        timeout_s: timeout.and_then(|t| u32::try_from(t).ok()),
    })
}

/// `[storage] checkpoint_dir`, `checkpoint_floor_mbps`, `checkpoint_probe_mib`: a floor or
/// a size without a directory is a mistake, said as one.
fn checkpoint(
    storage: &StorageDoc,
    at: &impl Fn(usize, String) -> ConfigError,
    dir: &impl Fn(&str, &Option<Spanned<String>>) -> Result<Option<PathBuf>, ConfigError>,
) -> Result<Option<CheckpointConfig>, ConfigError> {
    let floor_mbps = checked_float(
        at,
        "[storage] checkpoint_floor_mbps",
        &storage.checkpoint_floor_mbps,
        |floor| floor > 0.0 && floor.is_finite(),
        "a rate above 0",
    )?;
    let probe_mib = storage
        .checkpoint_probe_mib
        .as_ref()
        .map(|v| {
            u32::try_from(*v.get_ref())
                .ok()
                .filter(|n| (1..=MAX_CHECKPOINT_PROBE_MIB).contains(n))
                .ok_or_else(|| {
                    at(
                        v.span().start,
                        format!(
                            "[storage] checkpoint_probe_mib = {} is invalid: expected 1 to {MAX_CHECKPOINT_PROBE_MIB}",
                            v.get_ref()
                        ),
                    )
                })
        })
        .transpose()?;
    let Some(path) = dir("[storage] checkpoint_dir", &storage.checkpoint_dir)? else {
        let stray = [
            storage
                .checkpoint_floor_mbps
                .as_ref()
                .map(|v| ("checkpoint_floor_mbps", v.span().start)),
            storage
                .checkpoint_probe_mib
                .as_ref()
                .map(|v| ("checkpoint_probe_mib", v.span().start)),
        ];
        return match stray.into_iter().flatten().next() {
            Some((key, offset)) => Err(at(
                offset,
                format!("[storage] {key} needs [storage] checkpoint_dir"),
            )),
            None => Ok(None),
        };
    };
    let probe_mib = probe_mib.unwrap_or(DEFAULT_CHECKPOINT_PROBE_MIB);
    // A probe that cannot finish within the bound at the floor rate would time out (and
    // drain) on a mount that meets the floor.
    if let (Some(floor), Some(floor_at)) = (floor_mbps, &storage.checkpoint_floor_mbps) {
        let bound_s = STORAGE_BOUND_MS as f64 / 1000.0;
        let fits_mib = (floor * 1e6 * bound_s / f64::from(1u32 << 20)).floor();
        if f64::from(probe_mib) > fits_mib {
            let offset = storage
                .checkpoint_probe_mib
                .as_ref()
                .map_or(floor_at.span().start, |v| v.span().start);
            return Err(at(
                offset,
                format!(
                    "[storage] checkpoint_probe_mib = {probe_mib} cannot finish within the {STORAGE_BOUND_MS} ms bound at checkpoint_floor_mbps = {floor}: expected at most {fits_mib} MiB"
                ),
            ));
        }
    }
    Ok(Some(CheckpointConfig {
        dir: path,
        floor_mbps,
        probe_mib,
    }))
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
    } else if crate::plugin_env::plugin_owned(key) {
        Some("a fabric variable; the plugin always sets this one per rank")
    } else if earlier.iter().any(|k| k == key) {
        Some("each variable listed once")
    } else {
        None
    }
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
                },
                health: HealthConfig::default(),
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
        let h = &c.health;
        assert_eq!(h.root.as_deref(), Some(Path::new("/srv/node")));
        assert_eq!(
            (h.gpu_expected, h.nvml, h.expected_nics, h.flap_strikes),
            (Some(8), Some(false), Some(32), Some(2))
        );
        assert_eq!(h.leftover_memory_mib, Some(512));
        assert_eq!(h.checkpoint, None);
        assert_eq!(h.active, ActiveConfig::default());
        let a = parse(
            "[active]\ndcgmi = \"/usr/bin/dcgmi\"\ndcgm_diag_level = 2\nall_reduce_perf = \"/opt/nccl-tests/all_reduce_perf\"\n\
             all_reduce_floor_gbps = 350\nin_prolog = true\ntimeout_s = 600\n",
        )
        .expect("[active]")
        .health
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
            c.health.checkpoint,
            Some(CheckpointConfig {
                dir: PathBuf::from("/fsx/ckpt"),
                floor_mbps: Some(500.0),
                probe_mib: DEFAULT_CHECKPOINT_PROBE_MIB,
            })
        );
        assert_eq!(h.mounts[0].fstype.as_deref(), Some("lustre"));
        assert_eq!((h.max_share, h.resume_after), (Some(0.25), Some(2)));
        assert_eq!(h.handoff, Some(crate::health::drain::Handoff::SlurmGcp));
        assert!(
            h.textfile.is_some() && h.dcgm_job_mapping_dir.is_some() && h.nvml_library.is_some()
        );
        let c = parse(
            "[slurm]\nbin_dir = \"/opt/slurm/bin\"\nconf = \"/opt/slurm/etc/slurm.conf\"\n\
             gres_conf = \"/opt/slurm/etc/gres.conf\"\n",
        )
        .expect("[slurm]");
        assert_eq!(
            c.health.slurm_conf.as_deref(),
            Some(Path::new("/opt/slurm/etc/slurm.conf"))
        );
        assert_eq!(
            c.health.gres_conf.as_deref(),
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
                "config line 3: [drain] handoff = 'aws' is invalid: expected drain, hyperpod or slurm-gcp",
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
                "config line 2: unknown field `expect`",
            ),
            (
                "[drain]\nresume = 2\n",
                "config line 2: unknown field `resume`",
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
        let e = err("[plugin]\nprofiles_dir = \"/p\"\n");
        assert!(
            e.contains("unknown key 'profiles_dir' in [plugin] (known: default, enforce, sysfs_root, run_dir, gres_conf, topology, switch_level)"),
            "{e}"
        );
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
        let lib =
            |v: &str| parse(&format!("[nvml]\nlibrary = '{v}'\n")).map(|c| c.health.nvml_library);
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
