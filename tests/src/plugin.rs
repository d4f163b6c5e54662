//! Building and locating `gpu_affinity.so` for the clusters the harness starts.
//!
//! The tests crate cannot depend on the cdylib (Cargo only links the rlib of a
//! dependency), so the harness runs `cargo build -p gpu-affinity-spank` itself, once per
//! test process and variant; Cargo's own lock and fingerprints keep that cheap.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::error::{Context, HarnessError, Result};
use crate::harness_err;

/// Use this plugin instead of building one (e.g. an installed package's .so).
pub const PLUGIN_ENV: &str = "GPU_AFFINITY_PLUGIN";
/// Use this `panic-test` plugin instead of building one.
pub const PANIC_PLUGIN_ENV: &str = "GPU_AFFINITY_PANIC_PLUGIN";

const PACKAGE: &str = "gpu-affinity-spank";
const LIB_FILE: &str = "libgpu_affinity.so";

/// Which build of the plugin a cluster loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The normal debug build (`target/debug`).
    Debug,
    /// Optimised, as shipped; used by the launch benchmark (`target/release`).
    Release,
    /// Debug build with the `panic-test` feature, which lets plugstack `test_panic=HOOK`
    /// panic inside a hook. Built into its own target dir so it never replaces the
    /// normal build.
    PanicTest,
}

/// The workspace root (the parent of this crate).
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

fn cargo() -> PathBuf {
    std::env::var_os("CARGO")
        .map(PathBuf::from)
        .or_else(|| option_env!("CARGO").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("cargo"))
}

/// How long `scripts/build-plugins` may take for one series (a cold build of every
/// dependency on a 2-core machine included).
const BUILD_PLUGINS_TIMEOUT_S: &str = "1500";

/// The plugin for `variant` built for Slurm `series`: `scripts/build-plugins`'s output
/// for that series (`target/plugins/[debug/|panic-test/]slurm-X.Y/gpu_affinity.so`),
/// rebuilt first so a test never loads a stale library (cargo's fingerprints make that
/// cheap when nothing changed). `GPU_AFFINITY_PLUGIN` still wins.
pub fn plugin_for_series(variant: Variant, series: &str) -> Result<PathBuf> {
    static BUILT: OnceLock<std::sync::RwLock<Vec<(Variant, String, PathBuf)>>> = OnceLock::new();
    let cache = BUILT.get_or_init(Default::default);
    if let Ok(done) = cache.read()
        && let Some((_, _, p)) = done.iter().find(|(v, s, _)| *v == variant && s == series)
    {
        return Ok(p.clone());
    }
    let path = build_for_series(variant, series)?;
    if let Ok(mut done) = cache.write() {
        done.push((variant, series.to_owned(), path.clone()));
    }
    Ok(path)
}

fn build_for_series(variant: Variant, series: &str) -> Result<PathBuf> {
    let override_env = match variant {
        Variant::Debug | Variant::Release => PLUGIN_ENV,
        Variant::PanicTest => PANIC_PLUGIN_ENV,
    };
    if let Some(path) = std::env::var_os(override_env).map(PathBuf::from) {
        return Ok(path);
    }
    let plugins = target_dir().join("plugins");
    let mut cmd = Command::new("timeout");
    cmd.current_dir(workspace_root())
        .args(["-k", "10", BUILD_PLUGINS_TIMEOUT_S])
        .arg(workspace_root().join("scripts/build-plugins"))
        .args(["--series", series]);
    let dir = match variant {
        Variant::Debug => {
            cmd.args(["--profile", "debug"]);
            plugins.join("debug")
        }
        Variant::Release => plugins,
        Variant::PanicTest => {
            cmd.args(["--profile", "debug", "--panic-test"]);
            plugins.join("panic-test")
        }
    };
    let built = dir.join(format!("slurm-{series}")).join("gpu_affinity.so");
    let out = cmd
        .output()
        .context(|| "run scripts/build-plugins".to_owned())?;
    if !out.status.success() {
        return Err(HarnessError(format!(
            "scripts/build-plugins --series {series} ({variant:?}) failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    if !built.is_file() {
        return Err(harness_err!(
            "scripts/build-plugins ran but {} does not exist",
            built.display()
        ));
    }
    Ok(built)
}

/// The plugin for `variant`, built if needed.
pub fn plugin(variant: Variant) -> Result<PathBuf> {
    static DEBUG: OnceLock<Result<PathBuf>> = OnceLock::new();
    static RELEASE: OnceLock<Result<PathBuf>> = OnceLock::new();
    static PANIC: OnceLock<Result<PathBuf>> = OnceLock::new();
    let cell = match variant {
        Variant::Debug => &DEBUG,
        Variant::Release => &RELEASE,
        Variant::PanicTest => &PANIC,
    };
    cell.get_or_init(|| locate_or_build(variant)).clone()
}

fn locate_or_build(variant: Variant) -> Result<PathBuf> {
    let override_env = match variant {
        Variant::Debug | Variant::Release => PLUGIN_ENV,
        Variant::PanicTest => PANIC_PLUGIN_ENV,
    };
    if let Some(path) = std::env::var_os(override_env).map(PathBuf::from) {
        return if path.is_file() {
            Ok(path)
        } else {
            Err(harness_err!(
                "{override_env}={} is not a file",
                path.display()
            ))
        };
    }
    let mut cmd = Command::new(cargo());
    cmd.current_dir(workspace_root())
        .args(["build", "--quiet", "-p", PACKAGE, "--lib"]);
    let built = match variant {
        Variant::Debug => target_dir().join("debug").join(LIB_FILE),
        Variant::Release => {
            cmd.arg("--release");
            target_dir().join("release").join(LIB_FILE)
        }
        Variant::PanicTest => {
            let dir = target_dir().join("panic-test");
            cmd.args(["--features", "panic-test", "--target-dir"])
                .arg(&dir);
            dir.join("debug").join(LIB_FILE)
        }
    };
    run_build(cmd, &format!("the plugin ({variant:?})"), built)
}

/// Run a prepared `cargo build` and return `built`, which it must have produced.
fn run_build(mut cmd: Command, what: &str, built: PathBuf) -> Result<PathBuf> {
    let out = cmd
        .output()
        .context(|| format!("run {:?} to build {what}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(HarnessError(format!(
            "building {what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    if !built.is_file() {
        return Err(harness_err!(
            "cargo built {what} but {} does not exist",
            built.display()
        ));
    }
    Ok(built)
}

/// The admin command `gpu-affinity` (debug build), built like the plugin so a test
/// compares the plugin with the `explain` of the same source.
pub fn admin_cli() -> Result<PathBuf> {
    static CLI: OnceLock<Result<PathBuf>> = OnceLock::new();
    CLI.get_or_init(|| {
        let mut cmd = Command::new(cargo());
        cmd.current_dir(workspace_root()).args([
            "build",
            "--quiet",
            "-p",
            "gpu-affinity-slurm-conf",
            "--bin",
            "gpu-affinity",
        ]);
        run_build(
            cmd,
            "gpu-affinity",
            target_dir().join("debug").join("gpu-affinity"),
        )
    })
    .clone()
}

/// The NVML simulator (`libnvml_sim.so`, a cdylib no crate can depend on), built like
/// the admin command: `--nvml-library` for the commands that read NVML.
pub fn nvml_sim() -> Result<PathBuf> {
    static SIM: OnceLock<Result<PathBuf>> = OnceLock::new();
    SIM.get_or_init(|| {
        let mut cmd = Command::new(cargo());
        cmd.current_dir(workspace_root())
            .args(["build", "--quiet", "-p", "nvml-sim"]);
        run_build(
            cmd,
            "nvml-sim",
            target_dir().join("debug").join("libnvml_sim.so"),
        )
    })
    .clone()
}

/// The health binaries (debug builds of `gpu-affinity-prolog`, `-epilog`, `-health`), built
/// like the plugin so a real-Slurm test never runs a stale one: (prolog, epilog, health).
pub fn health_binaries() -> Result<(PathBuf, PathBuf, PathBuf)> {
    static BINS: OnceLock<Result<(PathBuf, PathBuf, PathBuf)>> = OnceLock::new();
    BINS.get_or_init(|| {
        let debug = target_dir().join("debug");
        let mut cmd = Command::new(cargo());
        cmd.current_dir(workspace_root()).args([
            "build",
            "--quiet",
            "-p",
            "gpu-affinity-node",
            "-p",
            "gpu-affinity-epilog",
            "--bins",
        ]);
        let prolog = run_build(
            cmd,
            "the health binaries",
            debug.join("gpu-affinity-prolog"),
        )?;
        Ok((
            prolog,
            debug.join("gpu-affinity-epilog"),
            debug.join("gpu-affinity-health"),
        ))
    })
    .clone()
}
