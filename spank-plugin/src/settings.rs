//! Root-side settings: plugstack.conf arguments and the admin's TOML config.
//!
//! Both are written by root. Nothing here ever reads the user's environment: where the
//! topology comes from (`sysfs_root`) and the site's default and floor must not be
//! steerable by the people whose jobs they constrain.

use std::path::{Path, PathBuf};

use gpu_affinity::config::{self, Config, FabricConfig, InvalidValue, PluginConfig, PluginKey};
use gpu_affinity::solver::Mode;

use crate::mode::Choice;

/// Where the admin config lives when plugstack.conf names none.
pub use gpu_affinity::config::DEFAULT_CONFIG;

/// Hooks the `panic-test` feature can make panic (see [`Settings::test_panic`]).
#[cfg(feature = "panic-test")]
pub const PANIC_HOOKS: &[&str] = &[
    "init",
    "init_post_opt",
    "user_init",
    "local_user_init",
    "task_post_fork",
    "task_init",
    "exit",
];

/// The plugstack.conf arguments, as written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Args {
    /// `config=PATH`: the config file itself (the one key the file cannot hold).
    pub config: Option<PathBuf>,
    /// Every other key, in the config file's own struct and through the same check
    /// (core's [`PluginKey`]), so a plugstack key is a config key and the reverse.
    pub given: Config,
    /// `test_panic=HOOK` (builds with the `panic-test` feature only).
    pub test_panic: Option<String>,
}

/// The settings a step runs with: plugstack.conf arguments over the config file over
/// built-in defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub sysfs_root: PathBuf,
    pub default: Choice,
    pub enforce: Option<Mode>,
    /// The config file that was read, if any.
    pub config: Option<PathBuf>,
    /// The admin's fabric profiles (`*.toml`), on top of the built-in ones.
    pub profiles_dir: PathBuf,
    /// Root-owned base of the per-step directories (a generated NCCL topology file).
    pub run_dir: PathBuf,
    /// gres.conf named by `gres_conf` (`None`: next to slurmd's slurm.conf). A named
    /// file that is missing is an error; a discovered one that is missing is not.
    pub gres_conf: Option<PathBuf>,
    /// topology.conf / topology.yaml named by `topology` (`None`: next to slurmd's
    /// slurm.conf, topology.yaml first). A named file that is missing is an error.
    pub topology: Option<PathBuf>,
    /// The tree level a multi-node step may span switches up to (`switch_level`; 0, the
    /// default: one leaf switch), see core's `step_span::span_within`.
    pub switch_level: u32,
    /// Fabric variables exported even when the user set them (`[fabric] force`).
    pub force: Vec<String>,
    /// The uid every root-side file and directory must belong to: root (tests: their own).
    pub owner: u32,
    /// Panic inside this hook of slurmstepd (harness test of the panic guard).
    pub test_panic: Option<String>,
}

/// The built-in settings: each key's default, declared beside the key in core's config
/// (`PluginConfig::*`, `FabricConfig::*`).
impl Default for Settings {
    fn default() -> Self {
        Settings {
            sysfs_root: PathBuf::from(PluginConfig::SYSFS_ROOT),
            default: PluginConfig::DEFAULT,
            enforce: None,
            config: None,
            profiles_dir: PathBuf::from(FabricConfig::PROFILES_DIR),
            run_dir: PathBuf::from(PluginConfig::RUN_DIR),
            gres_conf: None,
            topology: None,
            switch_level: PluginConfig::SWITCH_LEVEL,
            force: Vec::new(),
            owner: 0,
            test_panic: None,
        }
    }
}

impl Settings {
    /// True when the topology is the running kernel's own (`sysfs_root=/`).
    pub fn live(&self) -> bool {
        self.sysfs_root == Path::new("/")
    }
}

/// Parse plugstack.conf arguments strictly: `key=value` only, known keys only, each at
/// most once. The error is one line naming the offending argument; a bad value reads as
/// it would in the config file (core's [`InvalidValue`]).
pub fn parse_args<S: AsRef<str>>(argv: &[S]) -> Result<Args, String> {
    let mut args = Args::default();
    let mut seen: Vec<&str> = Vec::new();
    for raw in argv {
        let raw = raw.as_ref();
        let Some((key, value)) = raw.split_once('=') else {
            return Err(format!(
                "gpu-affinity: plugstack.conf argument '{raw}' is not key=value"
            ));
        };
        if seen.contains(&key) {
            return Err(format!(
                "gpu-affinity: plugstack.conf key '{key}' given twice"
            ));
        }
        seen.push(key);
        let invalid = |e: InvalidValue| format!("gpu-affinity: plugstack.conf: {e}");
        match (key, PluginKey::find(key)) {
            (_, Some(k)) => k.set(&mut args.given, value).map_err(invalid)?,
            ("config", None) => {
                let path = PathBuf::from(value);
                if !path.is_absolute() {
                    return Err(invalid(InvalidValue {
                        key: "config",
                        value: value.to_string(),
                        expected: "an absolute path",
                    }));
                }
                args.config = Some(path);
            }
            #[cfg(feature = "panic-test")]
            ("test_panic", None) => {
                if !PANIC_HOOKS.contains(&value) {
                    return Err(invalid(InvalidValue {
                        key: "test_panic",
                        value: value.to_string(),
                        expected: "a hook name",
                    }));
                }
                args.test_panic = Some(value.to_string());
            }
            _ => {
                let known: Vec<&str> = PluginKey::ALL.into_iter().map(PluginKey::name).collect();
                return Err(format!(
                    "gpu-affinity: unknown plugstack.conf key '{key}' (known: config, {})",
                    known.join(", ")
                ));
            }
        }
    }
    Ok(args)
}

/// Combine the arguments with the config file (format and checks: `gpu_affinity::config`).
/// The file is `args.config`, else [`DEFAULT_CONFIG`] when it exists. `owner` is the uid
/// the file must belong to (root; tests pass their own uid).
pub fn settings(args: &Args, default_config: &Path, owner: u32) -> Result<Settings, String> {
    let path = config::locate(args.config.as_deref(), default_config);
    let Config { plugin, fabric, .. } = match &path {
        Some(p) => config::read_trusted(p, owner).map_err(|e| format!("gpu-affinity: {e}"))?,
        None => Config::default(),
    };
    let given = &args.given;
    let base = Settings::default();
    Ok(Settings {
        sysfs_root: given
            .plugin
            .sysfs_root
            .clone()
            .or(plugin.sysfs_root)
            .unwrap_or(base.sysfs_root),
        default: given
            .plugin
            .default
            .or(plugin.default)
            .unwrap_or(base.default),
        enforce: given.plugin.enforce.or(plugin.enforce),
        config: path,
        profiles_dir: given
            .fabric
            .profiles_dir
            .clone()
            .or(fabric.profiles_dir)
            .unwrap_or(base.profiles_dir),
        run_dir: given
            .plugin
            .run_dir
            .clone()
            .or(plugin.run_dir)
            .unwrap_or(base.run_dir),
        gres_conf: given.plugin.gres_conf.clone().or(plugin.gres_conf),
        topology: given.plugin.topology.clone().or(plugin.topology),
        switch_level: given
            .plugin
            .switch_level
            .or(plugin.switch_level)
            .unwrap_or(base.switch_level),
        force: fabric.force,
        owner,
        test_panic: args.test_panic.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn uid() -> u32 {
        nix::unistd::getuid().as_raw()
    }

    #[test]
    fn known_keys_parse() {
        let a = parse_args(&[
            "config=/etc/x.toml",
            "sysfs_root=/tmp/fx",
            "default=prefer",
            "enforce=strict",
        ])
        .expect("valid args");
        assert_eq!(a.config.as_deref(), Some(Path::new("/etc/x.toml")));
        assert_eq!(
            a.given.plugin.sysfs_root.as_deref(),
            Some(Path::new("/tmp/fx"))
        );
        assert_eq!(a.given.plugin.default, Some(Choice::Prefer));
        assert_eq!(a.given.plugin.enforce, Some(Mode::Strict));
        assert_eq!(parse_args::<&str>(&[]), Ok(Args::default()));
    }

    /// plugstack.conf and the config file take the same keys (`config=` aside: it names
    /// the file) through core's one check: every key is accepted by both with the same
    /// result, a bad value reads the same in both, and a key either lacks is unknown in
    /// the other too.
    #[test]
    fn plugstack_keys_are_the_config_files_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        for key in PluginKey::ALL {
            let good = match key {
                PluginKey::Default | PluginKey::Enforce => "strict",
                PluginKey::SwitchLevel => "1",
                _ => "/abs/dir",
            };
            let name = key.name();
            let from_args = parse_args(&[format!("{name}={good}")]).expect(name);
            let p = write_config(
                dir.path(),
                &format!("[{}]\n{name} = \"{good}\"\n", key.table()),
                0o644,
            );
            let from_file = config::read_trusted(&p, uid()).expect(name);
            assert_eq!(from_args.given, from_file, "{name}");
            assert_eq!(
                settings(&from_args, Path::new("/nonexistent"), uid()),
                settings(&Args::default(), &p, uid()).map(|s| Settings { config: None, ..s }),
                "{name}"
            );
            for bad in ["relative", "sometimes"] {
                let arg_err = parse_args(&[format!("{name}={bad}")]).expect_err(name);
                let p = write_config(
                    dir.path(),
                    &format!("[{}]\n{name} = \"{bad}\"\n", key.table()),
                    0o644,
                );
                let file_err = config::read_trusted(&p, uid()).expect_err(name).to_string();
                let message = format!("{name} = '{bad}' is invalid: expected ");
                let tail = |e: &str| e.split_once(&message).map(|(_, t)| t.to_string());
                assert!(tail(&arg_err).is_some(), "{arg_err}");
                assert_eq!(tail(&arg_err), tail(&file_err), "{arg_err} / {file_err}");
            }
        }
        for unknown in ["enforced", "force", "config"] {
            let arg_err = parse_args(&[format!("{unknown}=x")]);
            let p = write_config(dir.path(), &format!("[plugin]\n{unknown} = \"x\"\n"), 0o644);
            let file_err = config::read_trusted(&p, uid())
                .expect_err(unknown)
                .to_string();
            assert!(
                file_err.contains(&format!("unknown key '{unknown}' in [plugin]")),
                "{file_err}"
            );
            if unknown != "config" {
                let arg_err = arg_err.expect_err(unknown);
                assert!(
                    arg_err.contains(&format!("unknown plugstack.conf key '{unknown}'")),
                    "{arg_err}"
                );
            }
        }
    }

    #[test]
    fn unknown_key_is_an_error_naming_it() {
        let err = parse_args(&["sysfs_root=/x", "sysfsroot=/y"]).expect_err("unknown key");
        assert!(
            err.contains("unknown plugstack.conf key 'sysfsroot'"),
            "{err}"
        );
    }

    #[test]
    fn test_panic_key_exists_only_with_the_feature() {
        let r = parse_args(&["test_panic=task_init"]);
        if cfg!(feature = "panic-test") {
            assert_eq!(r.map(|a| a.test_panic), Ok(Some("task_init".to_string())));
        } else {
            let err = r.expect_err("no feature, no key");
            assert!(err.contains("'test_panic'"), "{err}");
        }
    }

    #[test]
    fn malformed_values_are_errors_naming_key_and_value() {
        for (arg, needle) in [
            ("default=on", "default = 'on'"),
            ("enforce=off", "enforce = 'off'"),
            ("sysfs_root=relative/dir", "sysfs_root = 'relative/dir'"),
            ("config=", "config = ''"),
            ("strict", "'strict' is not key=value"),
        ] {
            let err = parse_args(&[arg]).expect_err(arg);
            assert!(err.contains(needle), "{arg}: {err}");
        }
        let err = parse_args(&["default=off", "default=strict"]).expect_err("twice");
        assert!(err.contains("'default' given twice"), "{err}");
    }

    #[test]
    fn defaults_without_config() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s =
            settings(&Args::default(), &dir.path().join("absent.toml"), uid()).expect("settings");
        assert_eq!(s, Settings::default());
        assert!(s.live());
    }

    /// The shipped sample with every setting uncommented is the built-in defaults.
    #[test]
    fn the_shipped_sample_uncommented_is_the_defaults() {
        use gpu_affinity::sample_config;
        let dir = tempfile::tempdir().expect("tempdir");
        let text = sample_config::uncommented(sample_config::TEXT).expect("sample convention");
        let p = write_config(dir.path(), &text, 0o644);
        let s = settings(&Args::default(), &p, uid()).expect("the uncommented sample is read");
        assert_eq!(
            s,
            Settings {
                config: Some(p),
                ..Settings::default()
            }
        );
    }

    fn write_config(dir: &Path, text: &str, mode: u32) -> PathBuf {
        let p = dir.join("config.toml");
        std::fs::write(&p, text).expect("write config");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        p
    }

    #[test]
    fn config_file_fills_in_and_args_win() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = write_config(
            dir.path(),
            "[plugin]\ndefault = \"prefer\"\nenforce = \"prefer\"\nsysfs_root = \"/srv/topo\"\n",
            0o644,
        );
        // Found at the default location.
        let s = settings(&Args::default(), &p, uid()).expect("settings");
        assert_eq!((s.default, s.enforce), (Choice::Prefer, Some(Mode::Prefer)));
        assert_eq!(s.sysfs_root, Path::new("/srv/topo"));
        assert!(!s.live());
        // Named by config=, overridden by plugstack keys.
        let args = parse_args(&[format!("config={}", p.display()), "enforce=strict".into()])
            .expect("args");
        let s = settings(&args, Path::new("/nonexistent"), uid()).expect("settings");
        assert_eq!((s.default, s.enforce), (Choice::Prefer, Some(Mode::Strict)));
    }

    #[test]
    fn fabric_and_run_dir_keys_from_plugstack_and_config() {
        let d = Settings::default();
        assert_eq!(
            (d.profiles_dir.as_path(), d.run_dir.as_path()),
            (
                Path::new("/etc/gpu-affinity/profiles.d"),
                Path::new("/run/gpu-affinity")
            )
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let p = write_config(
            dir.path(),
            "[plugin]\nrun_dir = \"/srv/run\"\n[fabric]\nforce = [\"NCCL_IB_HCA\", \"NCCL_IB_TC\"]\nprofiles_dir = \"/srv/profiles\"\n",
            0o644,
        );
        let s = settings(&Args::default(), &p, uid()).expect("settings");
        assert_eq!(s.run_dir, Path::new("/srv/run"));
        assert_eq!(s.profiles_dir, Path::new("/srv/profiles"));
        assert_eq!(s.force, ["NCCL_IB_HCA", "NCCL_IB_TC"]);
        assert_eq!(s.owner, uid());
        let args = parse_args(&["profiles_dir=/a/profiles.d", "run_dir=/a/run"]).expect("args");
        let s = settings(&args, &p, uid()).expect("settings");
        assert_eq!(
            (s.profiles_dir.as_path(), s.run_dir.as_path()),
            (Path::new("/a/profiles.d"), Path::new("/a/run"))
        );
        let a = parse_args(&["gres_conf=/etc/slurm/gres.conf"]).expect("gres_conf");
        assert_eq!(
            a.given.plugin.gres_conf.as_deref(),
            Some(Path::new("/etc/slurm/gres.conf"))
        );
        assert!(parse_args(&["gres_conf=gres.conf"]).is_err());
        let err = parse_args(&["run_dir=run"]).expect_err("relative");
        assert!(err.contains("run_dir = 'run'"), "{err}");
    }

    /// The format and the ownership rule are core's (`gpu_affinity::config`, tested
    /// there); here: each kind of failure reaches the load error as one prefixed line.
    #[test]
    fn config_errors_are_one_line_naming_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bad = write_config(dir.path(), "[plugin]\ndefault = \"always\"\n", 0o600);
        let shown = bad.display().to_string();
        let missing = dir.path().join("absent.toml");
        for (path, owner, want) in [
            (
                bad.clone(),
                uid(),
                format!("{shown}:2: [plugin] default = 'always'"),
            ),
            (
                bad.clone(),
                uid() + 1,
                format!("{shown} is owned by uid {}", uid()),
            ),
            (missing.clone(), uid(), format!("{}: ", missing.display())),
        ] {
            let args = parse_args(&[format!("config={}", path.display())]).expect("args");
            let err = settings(&args, Path::new("/x"), owner).expect_err(&want);
            assert!(
                err.starts_with("gpu-affinity: config ") && err.contains(&want),
                "{want}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "{err}");
        }
        std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o664)).expect("chmod");
        let err = settings(&Args::default(), &bad, uid()).expect_err("group-writable");
        assert!(
            err.contains("writable by group or others (mode 0664)"),
            "{err}"
        );
    }
}
