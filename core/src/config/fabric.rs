//! `[fabric]`: the vendor fabric environment as the plugin exports it and explain shows
//! it (`force`, `profiles_dir`), and the health programs' fabric expectations.
//!
//! ```toml
//! [fabric]
//! force = ["NCCL_IB_HCA"]       # exported even when the user set them
//! profiles_dir = "/etc/gpu-affinity/profiles.d"
//! expected_nics = 32            # unset: the detected instance type's catalog count, if any
//! port_rate_gbps = 400          # unset: every port at the fastest port's rate
//! flap_strikes = 3              # passes with a rising link_downed before draining; 0: off
//! imex_ctl = "/usr/bin/nvidia-imex-ctl"  # gpu.imex (NVL72 IMEX domain); unset: not checked
//! ```

use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

use super::plugin::{AbsDir, plugin_value};
use super::value::{Problem, abs_path, count, is_invalid, number};

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricConfig {
    /// Variables exported even when the user set them: valid names, each once, none of
    /// the ones the plugin sets per rank (checked in [`FabricConfig::validate`], which
    /// names the entry's line).
    #[serde(default)]
    pub force: Vec<String>,
    /// The admin's fabric profiles, a plugin key (plugstack `profiles_dir=`); unset:
    /// [`FabricConfig::PROFILES_DIR`].
    #[serde(default, deserialize_with = "plugin_value::<_, AbsDir>")]
    pub profiles_dir: Option<PathBuf>,
    /// Fabric NICs this node must show; unset: the detected instance type's catalog
    /// count, if any.
    #[serde(default, deserialize_with = "count")]
    pub expected_nics: Option<u32>,
    /// Each fabric port's rate (Gb/s); unset: every port at the fastest port's rate.
    #[serde(default, deserialize_with = "port_rate")]
    pub port_rate_gbps: Option<f64>,
    /// Passes with a rising link_downed before draining (0: off); unset:
    /// [`FabricConfig::FLAP_STRIKES`].
    #[serde(default, deserialize_with = "count")]
    pub flap_strikes: Option<u32>,
    /// `nvidia-imex-ctl`, absolute (checked root-owned when run), for `gpu.imex`; unset:
    /// not checked. No default even on the catalog's NVL72 machines: a domain that a
    /// prolog rebuilds for each job (slurm-gcp's IMEX prolog) is DOWN between jobs by
    /// design, so only the admin knows whether DOWN here is a fault.
    #[serde(default, deserialize_with = "abs_path")]
    pub imex_ctl: Option<PathBuf>,
}

impl FabricConfig {
    /// `profiles_dir` unset.
    pub const PROFILES_DIR: &'static str = crate::fabric::profiles::DEFAULT_PROFILE_DIR;
    /// `flap_strikes` unset.
    pub const FLAP_STRIKES: u32 = 3;

    /// Each `force` entry: one environment variable a profile could set, listed once.
    pub(super) fn validate(&self) -> Result<(), Problem> {
        for (i, key) in self.force.iter().enumerate() {
            if let Some(expected) = force_problem(key, &self.force[..i]) {
                let message = format!(
                    "[fabric] force {}",
                    is_invalid(format_args!("'{key}'"), expected)
                );
                return Err(Problem::at("fabric", "force", Some(i), message));
            }
        }
        Ok(())
    }
}

/// `port_rate_gbps`: any rate above 0.
fn port_rate<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    number(d, |rate| rate > 0.0, "a rate above 0")
}

/// What a `force` entry should have been, `None` when it is fine.
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::parse;

    #[test]
    fn imex_ctl_is_an_absolute_path_or_a_one_line_error_naming_its_line() {
        let c = parse("[fabric]\nimex_ctl = \"/usr/bin/nvidia-imex-ctl\"\n").expect("parses");
        assert_eq!(
            c.fabric.imex_ctl.as_deref(),
            Some(Path::new("/usr/bin/nvidia-imex-ctl"))
        );
        assert_eq!(parse("[fabric]\n").expect("parses").fabric.imex_ctl, None);
        for (text, want) in [
            (
                "[fabric]\nflap_strikes = 3\nimex_ctl = \"nvidia-imex-ctl\"\n",
                "config line 3: [fabric] imex_ctl = 'nvidia-imex-ctl' is invalid: expected an absolute path",
            ),
            ("[fabric]\nimex_ctl = 1\n", "config line 2: invalid type"),
        ] {
            let e = parse(text).expect_err(text).to_string();
            assert!(e.starts_with(want), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
