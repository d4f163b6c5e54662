//! The sample config the package installs as /etc/gpu-affinity/config.toml
//! (packaging/config.toml), and its one convention: a line `#key = value` (or `#[table]`,
//! no blank after the `#`) is a setting at its built-in default; `# ...` and `#` alone
//! are prose. [`uncommented`] turns every setting on, so tests can read the result with
//! the real reader and check that each value shown is the default the programs apply.

/// packaging/config.toml, as shipped.
pub const TEXT: &str = include_str!("../../packaging/config.toml");

/// `text` with every setting line's `#` removed. Every other line must be blank or a
/// comment; an error names the first line that is neither, or prose that reads like a
/// setting (`# key = value`, `# [table]`: a blank after the `#` would hide it from this).
pub fn uncommented(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    for (n, line) in text.lines().enumerate() {
        let at = |why: &str| format!("sample config line {}: {why}: {line}", n + 1);
        let trimmed = line.trim_start();
        if trimmed.is_empty() {
            out.push('\n');
            continue;
        }
        if trimmed.len() != line.len() {
            // An indented line continues the comment of the line above.
            if !trimmed.starts_with('#') {
                return Err(at("an indented line that is not a comment"));
            }
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let Some(rest) = line.strip_prefix('#') else {
            return Err(at("a setting that is not commented out"));
        };
        if rest.is_empty() || rest.starts_with(' ') {
            if looks_like_setting(rest.trim_start()) && !rest.starts_with("   ") {
                return Err(at(
                    "prose that reads like a setting (write it #key = value)",
                ));
            }
            out.push_str(line);
        } else {
            out.push_str(rest);
        }
        out.push('\n');
    }
    Ok(out)
}

/// `key = ...` or `[table]` at the start of a comment's text.
fn looks_like_setting(text: &str) -> bool {
    if text.starts_with('[') {
        return true;
    }
    let key: String = text
        .chars()
        .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
        .collect();
    !key.is_empty() && text[key.len()..].trim_start().starts_with('=')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{
        self, DEFAULT_ACTIVE_TIMEOUT_S, DEFAULT_CHECKPOINT_PROBE_MIB, FabricConfig, PluginConfig,
    };
    use crate::health::drain::DrainPolicy;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::{Path, PathBuf};

    #[test]
    fn the_convention_is_checked() {
        assert_eq!(
            uncommented("# prose\n#\n#[plugin]\n#default = \"off\"\n   # more\n\n"),
            Ok("# prose\n#\n[plugin]\ndefault = \"off\"\n   # more\n\n".into())
        );
        for bad in [
            "default = \"off\"",
            "# default = \"off\"",
            "# [plugin]",
            "  x = 1",
        ] {
            assert!(uncommented(bad).is_err(), "{bad}");
        }
        // An example indented inside prose is prose.
        assert!(uncommented("# Example:\n#   path = \"/fsx\"\n").is_ok());
    }

    /// Every line of the shipped file uncommented, read by the reader the programs use:
    /// accepted, and every value it then sets is the default core applies.
    #[test]
    fn the_shipped_sample_uncommented_is_valid_and_shows_the_defaults() {
        let text = uncommented(TEXT).expect("the sample keeps its convention");
        assert_ne!(text, TEXT, "the sample shows settings");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.toml");
        std::fs::write(&path, &text).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("mode");
        let owner = std::fs::metadata(&path).expect("stat").uid();
        let c = config::read_trusted(&path, owner).expect("the uncommented sample is accepted");
        assert_eq!(config::parse(TEXT), Ok(config::Config::default()));

        let p = &c.plugin;
        assert_eq!(p.default, Some(PluginConfig::DEFAULT));
        assert_eq!(p.enforce, None);
        assert_eq!(
            p.sysfs_root.as_deref(),
            Some(Path::new(PluginConfig::SYSFS_ROOT))
        );
        assert_eq!(p.run_dir, Some(PathBuf::from(PluginConfig::RUN_DIR)));
        assert_eq!((&p.gres_conf, &p.topology), (&None, &None));
        assert_eq!(p.switch_level, Some(PluginConfig::SWITCH_LEVEL));
        let f = &c.fabric;
        assert!(f.force.is_empty());
        assert_eq!(
            f.profiles_dir,
            Some(PathBuf::from(FabricConfig::PROFILES_DIR))
        );
        assert_eq!(f.flap_strikes, Some(FabricConfig::FLAP_STRIKES));
        assert_eq!(f.imex_ctl, None, "gpu.imex: off unless named");

        // `[counters]`: every limit shown is the one applied.
        assert_eq!(
            c.counters.limits(),
            crate::health::counters::Limits::default()
        );
        assert!(c.counters.window_s.is_some() && c.counters.link_error_recovery_rise.is_some());
        let drain = DrainPolicy::default();
        assert_eq!(c.drain.max_share, Some(drain.max_share));
        assert_eq!(c.drain.resume_after, Some(drain.resume_after));
        assert_eq!(c.drain.handoff, Some(drain.handoff));
        assert_eq!(
            c.gpu.leftover_memory_mib.map(u64::from),
            Some(crate::health::DEFAULT_LEFTOVER_MEMORY_MIB)
        );
        assert_eq!(c.gpu.nvml, Some(true));
        // No checkpoint probe by default, so its size is prose; the prose says the default.
        assert_eq!(c.storage.checkpoint(), None);
        assert!(TEXT.contains(&format!("default {DEFAULT_CHECKPOINT_PROBE_MIB})")));
        // `[active]`: off; the bound shown is the one applied.
        let a = &c.active;
        assert_eq!((a.dcgm_diag_level, a.in_prolog), (0, false));
        assert_eq!(a.timeout_s, Some(DEFAULT_ACTIVE_TIMEOUT_S));
        assert_eq!((&a.dcgmi, &a.all_reduce_perf), (&None, &None));
        // The keys without a default stay unset.
        assert_eq!(
            (c.gpu.expected, f.expected_nics, f.port_rate_gbps),
            (None, None, None)
        );
        assert_eq!((&c.gpu.persistence, &c.gpu.driver), (&None, &None));
        assert!(c.storage.mount.is_empty());
        assert_eq!(c.slurm, config::SlurmConfig::default());
        assert_eq!(c.metrics, config::MetricsConfig::default());
        // root, state_dir and the NVML library are the node programs' defaults:
        // gpu_affinity_node's own test compares them.
        assert!(c.root.is_some() && c.state_dir.is_some() && c.nvml.library.is_some());
    }
}
