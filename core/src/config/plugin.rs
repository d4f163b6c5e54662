//! `[plugin]`: the SPANK plugin's settings, and [`PluginKey`], the one schema they share
//! with plugstack.conf's `key=value` arguments.
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
//! ```
//!
//! Each key's value kind ([`KeyKind`]) is its one check: the config file's field reads
//! through it (`deserialize_with = "plugin_value::<_, Kind>"`) and [`PluginKey::set`]
//! (plugstack.conf) calls it, so a key cannot be valid in one and not the other, and a bad
//! value reads the same in both.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

use super::Config;
use super::value::{absolute, after_key, is_invalid};
use crate::solver::Mode;

/// Where the plugin writes per-step files as root (`[plugin] run_dir`, plugstack `run_dir=`).
pub const DEFAULT_RUN_DIR: &str = "/run/gpu-affinity";

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

/// `[plugin]`: the SPANK plugin's settings. `None`: unset here; the plugin applies
/// plugstack.conf's value, else the default beside the key (the `PluginConfig::*`
/// constants).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// The mode without `--gpu-affinity`; unset: [`PluginConfig::DEFAULT`].
    #[serde(default, deserialize_with = "plugin_value::<_, ChoiceWord>")]
    pub default: Option<Choice>,
    /// The admin's floor: users may raise the mode, never lower it below this. Unset:
    /// none (users may choose off).
    #[serde(default, deserialize_with = "plugin_value::<_, ModeWord>")]
    pub enforce: Option<Mode>,
    /// Where the topology is read; unset: [`PluginConfig::SYSFS_ROOT`].
    #[serde(default, deserialize_with = "plugin_value::<_, AbsDir>")]
    pub sysfs_root: Option<PathBuf>,
    /// Per-step files written as root; unset: [`PluginConfig::RUN_DIR`].
    #[serde(default, deserialize_with = "plugin_value::<_, AbsDir>")]
    pub run_dir: Option<PathBuf>,
    /// The gres.conf slurmd reads, where discovery would not find it (unset: next to
    /// slurmd's slurm.conf).
    #[serde(default, deserialize_with = "plugin_value::<_, AbsPath>")]
    pub gres_conf: Option<PathBuf>,
    /// The cluster's topology.conf or topology.yaml (by its extension), for the
    /// placement backstop, where discovery next to slurm.conf would not find it.
    #[serde(default, deserialize_with = "plugin_value::<_, AbsPath>")]
    pub topology: Option<PathBuf>,
    /// The tree level a multi-node step may span switches up to (0: one leaf switch),
    /// for the placement check; blocks have no levels. Unset:
    /// [`PluginConfig::SWITCH_LEVEL`].
    #[serde(default, deserialize_with = "plugin_value::<_, Level>")]
    pub switch_level: Option<u32>,
}

impl PluginConfig {
    /// `default` unset: nothing is bound unless the user asks.
    pub const DEFAULT: Choice = Choice::Off;
    /// `sysfs_root` unset: the running kernel's own topology.
    pub const SYSFS_ROOT: &'static str = "/";
    /// `run_dir` unset.
    pub const RUN_DIR: &'static str = DEFAULT_RUN_DIR;
    /// `switch_level` unset: a multi-node step stays under one leaf switch.
    pub const SWITCH_LEVEL: u32 = 0;
}

/// The kind of value a plugin key takes: its one check, for the file and plugstack.conf.
pub(super) trait KeyKind {
    type Out;
    /// The TOML type the file takes for it, after "expected" (integers also read as text).
    const TOML: &'static str = "a string";
    /// What a refused value should have been, after "expected".
    const EXPECTED: &'static str;
    fn parse(text: &str) -> Option<Self::Out>;
}

/// `off`, `prefer` or `strict` (blanks around it allowed).
pub(super) enum ChoiceWord {}
/// `prefer` or `strict` (blanks around it allowed).
pub(super) enum ModeWord {}
/// An absolute directory.
pub(super) enum AbsDir {}
/// An absolute file path.
pub(super) enum AbsPath {}
/// A switch level: digits (blanks around them allowed).
pub(super) enum Level {}

impl KeyKind for ChoiceWord {
    type Out = Choice;
    const EXPECTED: &'static str = "off, prefer or strict";
    fn parse(text: &str) -> Option<Choice> {
        Choice::parse(text.trim())
    }
}

impl KeyKind for ModeWord {
    type Out = Mode;
    const EXPECTED: &'static str = "prefer or strict";
    fn parse(text: &str) -> Option<Mode> {
        Mode::parse(text.trim())
    }
}

impl KeyKind for AbsDir {
    type Out = PathBuf;
    const EXPECTED: &'static str = "an absolute directory";
    fn parse(text: &str) -> Option<PathBuf> {
        absolute(text)
    }
}

impl KeyKind for AbsPath {
    type Out = PathBuf;
    const EXPECTED: &'static str = "an absolute path";
    fn parse(text: &str) -> Option<PathBuf> {
        absolute(text)
    }
}

impl KeyKind for Level {
    type Out = u32;
    const TOML: &'static str = "an integer";
    const EXPECTED: &'static str = "a switch level: 0 (a leaf switch) or more";
    fn parse(text: &str) -> Option<u32> {
        text.trim().parse().ok()
    }
}

/// A plugin key's value in the file: the text `K` checks, as plugstack.conf gives it; a
/// TOML integer (`switch_level = 1`) is taken as its digits.
pub(super) fn plugin_value<'de, D: Deserializer<'de>, K: KeyKind>(
    d: D,
) -> Result<Option<K::Out>, D::Error> {
    let text = match toml::Value::deserialize(d)? {
        toml::Value::String(s) => s,
        toml::Value::Integer(n) => n.to_string(),
        other => {
            return Err(after_key(format_args!(
                "is a {}, expected {}",
                other.type_str(),
                K::TOML
            )));
        }
    };
    match K::parse(&text) {
        Some(value) => Ok(Some(value)),
        None => Err(after_key(is_invalid(format_args!("'{text}'"), K::EXPECTED))),
    }
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
#[error("{key} {}", is_invalid(format!("'{}'", .value), .expected))]
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

    /// The key's name: its field's in [`PluginConfig`] (or [`super::FabricConfig`]);
    /// core's tests check each against the file's reader.
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
    /// config file and plugstack.conf alike (the file's fields read through the same
    /// [`KeyKind`]). Mode words may carry blanks around them.
    pub fn set(self, config: &mut Config, value: &str) -> Result<(), InvalidValue> {
        fn take<K: KeyKind>(key: PluginKey, value: &str) -> Result<Option<K::Out>, InvalidValue> {
            match K::parse(value) {
                Some(v) => Ok(Some(v)),
                None => Err(InvalidValue {
                    key: key.name(),
                    value: value.to_string(),
                    expected: K::EXPECTED,
                }),
            }
        }
        let plugin = &mut config.plugin;
        match self {
            PluginKey::Default => plugin.default = take::<ChoiceWord>(self, value)?,
            PluginKey::Enforce => plugin.enforce = take::<ModeWord>(self, value)?,
            PluginKey::SysfsRoot => plugin.sysfs_root = take::<AbsDir>(self, value)?,
            PluginKey::RunDir => plugin.run_dir = take::<AbsDir>(self, value)?,
            PluginKey::GresConf => plugin.gres_conf = take::<AbsPath>(self, value)?,
            PluginKey::Topology => plugin.topology = take::<AbsPath>(self, value)?,
            PluginKey::SwitchLevel => plugin.switch_level = take::<Level>(self, value)?,
            PluginKey::ProfilesDir => config.fabric.profiles_dir = take::<AbsDir>(self, value)?,
        }
        Ok(())
    }
}
