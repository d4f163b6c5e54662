//! `gpu-affinity install` / `uninstall`: put the plugin build for the running Slurm's series
//! into that Slurm's plugin dir and a plugstack snippet next to its config, the way each
//! cloud lays Slurm out (`/opt/slurm`, a symlinked `/opt/slurm-24.11`, `/usr/local`, `/usr`).
//!
//! Every write is atomic (a temp file renamed into place) and the temp file never lives in
//! an include directory: a stray file in `plugstack.conf.d` once broke every job on a
//! ParallelCluster release (aws/aws-parallelcluster#6459). What install did is kept in a
//! small record next to the plugin link, so uninstall undoes exactly that and no more.
//! The plugin's plugstack line and the "loads pyxis" rule are core's
//! (`slurm::conf_write`), shared with `conf plugstack`; only the include-line handling is
//! this module's own.

use std::fs;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gpu_affinity::atomic;
use gpu_affinity::slurm::{conf_write, read, version};
use gpu_affinity_node::bounded::{self, Keep};
use serde::{Deserialize, Serialize};

use crate::{CliError, emit};

/// `slurmd -V` answers at once; a hung one must not hang a package script.
const SLURMD_TIMEOUT: Duration = Duration::from_secs(10);
const PLUGIN_FILE: &str = "gpu_affinity.so";
const RECORD_FILE: &str = ".gpu-affinity-install.json";
const SNIPPET: &str = "gpu-affinity.conf";
/// Sorts after `pyxis.conf` (and any lowercase name), so SPANK runs this plugin's hooks after
/// pyxis's: pyxis re-imports the container image's environment in its task_init.
const SNIPPET_AFTER_PYXIS: &str = "zz-gpu-affinity.conf";

#[derive(clap::Args)]
pub struct Args {
    /// The Slurm installation prefix (`/opt/slurm`, `/usr/local`, `/usr`); symlinks are followed.
    #[arg(long, value_name = "DIR")]
    slurm_prefix: PathBuf,
    /// The plugstack include directory (default: the directory plugstack.conf already
    /// includes, else `plugstack.conf.d` next to plugstack.conf).
    #[arg(long, value_name = "DIR")]
    plugstack_dir: Option<PathBuf>,
    /// The slurm.conf whose `PlugStackConfig=` names plugstack.conf (default: the one in
    /// Slurm's config dir; without the key, plugstack.conf is next to slurm.conf).
    #[arg(long, value_name = "FILE")]
    slurm_conf: Option<PathBuf>,
    /// Add the include line to a plugstack.conf that `PlugStackConfig=` names: the admin's
    /// own file, which otherwise is left alone and the line to add is printed.
    #[arg(long)]
    force: bool,
    /// Where the per-series builds are (`slurm-<series>/gpu_affinity.so`; default: the package's).
    #[arg(long, value_name = "DIR")]
    plugins_dir: Option<PathBuf>,
    /// Only link the plugin: for configless nodes, whose plugstack.conf and its includes the
    /// controller serves (HyperPod, slurm-gcp compute nodes).
    #[arg(long)]
    link_only: bool,
    /// Print what would be done and change nothing.
    #[arg(long)]
    dry_run: bool,
}

/// What install did, so that uninstall undoes exactly that.
#[derive(Serialize, Deserialize, Debug, Default, PartialEq)]
struct Record {
    series: String,
    plugin_link: PathBuf,
    plugin_target: PathBuf,
    snippet: PathBuf,
    snippet_text: String,
    /// plugstack.conf, with the include line install appended (None: it was included already).
    plugstack_conf: PathBuf,
    include_line: Option<String>,
    plugstack_conf_created: bool,
    created_dirs: Vec<PathBuf>,
}

/// The Slurm install being worked on.
struct Slurm {
    /// As given (the snippet names paths through it, so a flipped HyperPod symlink is seen).
    prefix: PathBuf,
    real_prefix: PathBuf,
    series: String,
    series_from: String,
    plugin_dir: PathBuf,
    plugstack: Plugstack,
}

/// The plugstack.conf Slurm reads.
#[derive(Default)]
struct Plugstack {
    conf: PathBuf,
    /// The slurm.conf whose `PlugStackConfig=` named `conf` (None: Slurm's default place).
    named_by: Option<PathBuf>,
    /// Its text, read before anything changes ("" when it does not exist yet).
    text: String,
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> CliError {
    CliError(format!("{what} {}: {e}", path.display()))
}

/// `PROGRAM FLAG` (`slurmd -V`, `srun --version`) with an argument vector and a bound.
fn run_version(program: &Path, flag: &str) -> Result<String, CliError> {
    let what = format!("{} {flag}", program.display());
    let keep = Keep {
        stdout: 1 << 16,
        stderr: 0,
    };
    let ran = bounded::run(Command::new(program).arg(flag), &what, SLURMD_TIMEOUT, keep)?;
    if !ran.status.success() {
        return Err(CliError(format!("{what}: {}", ran.status)));
    }
    Ok(ran.stdout)
}

/// The Slurm series under a (canonical) prefix and where it was read: `MAJOR.MINOR`.
pub(crate) fn find_series(real_prefix: &Path) -> Result<(String, String), CliError> {
    let header = real_prefix.join("include/slurm/slurm_version.h");
    if let Ok(text) = fs::read_to_string(&header) {
        let series = version::series_of_header(&text).ok_or_else(|| {
            CliError(format!(
                "{}: no SLURM_VERSION_NUMBER line",
                header.display()
            ))
        })?;
        return Ok((series.to_string(), header.display().to_string()));
    }
    // Compute nodes have slurmd; login nodes (which need the plugin too) may have only srun.
    let programs = [("sbin/slurmd", "-V"), ("bin/srun", "--version")];
    let Some((program, flag)) = programs
        .iter()
        .map(|(p, f)| (real_prefix.join(p), *f))
        .find(|(p, _)| p.exists())
    else {
        return Err(CliError(format!(
            "no Slurm at {}: none of include/slurm/slurm_version.h, sbin/slurmd, bin/srun there",
            real_prefix.display()
        )));
    };
    let out = run_version(&program, flag)?;
    let series = version::series_of_version_output(&out).ok_or_else(|| {
        CliError(format!(
            "{} {flag} printed {:?}, not a Slurm version",
            program.display(),
            out.trim()
        ))
    })?;
    Ok((series.to_string(), format!("{} {flag}", program.display())))
}

/// Slurm's plugin dir under a prefix (core's `version::plugin_dirs`, in that order).
fn find_plugin_dir(real_prefix: &Path) -> Result<PathBuf, CliError> {
    let candidates = version::plugin_dirs(version::multiarch());
    candidates
        .iter()
        .map(|c| real_prefix.join(c))
        .find(|d| d.is_dir())
        .ok_or_else(|| {
            CliError(format!(
                "no Slurm plugin dir under {} (looked for {})",
                real_prefix.display(),
                candidates.join(", ")
            ))
        })
}

/// Slurm's config dir: a `/usr` install reads `../etc/slurm` (also true of a `usr` inside
/// a chroot or test root); others `PREFIX/etc` (ParallelCluster, HyperPod) or
/// `PREFIX/etc/slurm` (slurm-gcp's `--sysconfdir=/usr/local/etc/slurm`).
fn find_sysconf_dir(prefix: &Path, real_prefix: &Path) -> Result<PathBuf, CliError> {
    let mut candidates = Vec::new();
    if real_prefix.file_name().is_some_and(|n| n == "usr")
        && let Some(parent) = real_prefix.parent()
    {
        candidates.push(parent.join("etc/slurm"));
        candidates.push(parent.join("etc/slurm-llnl"));
    }
    candidates.push(prefix.join("etc/slurm"));
    candidates.push(prefix.join("etc"));
    candidates
        .iter()
        .find(|d| {
            ["slurm.conf", "plugstack.conf", "plugstack.conf.d"]
                .iter()
                .any(|f| d.join(f).exists())
        })
        .cloned()
        .ok_or_else(|| {
            CliError(format!(
                "no Slurm config dir for {} (no slurm.conf in {}); pass --slurm-conf or --plugstack-dir",
                prefix.display(),
                candidates
                    .iter()
                    .map(|c| c.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// plugstack.conf: where slurm.conf's `PlugStackConfig=` says, else next to slurm.conf
/// (Slurm's default; also when there is no slurm.conf, as on a configless node).
fn find_plugstack(slurm_conf: &Path) -> Result<Plugstack, CliError> {
    // Its includes too (the last PlugStackConfig= wins), each owned by slurm.conf's owner
    // and writable by no one else.
    let owner = match fs::metadata(slurm_conf) {
        Ok(m) => m.uid(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(io_err("cannot read", slurm_conf, e)),
    };
    let named = read::read_slurm_conf(slurm_conf, owner)
        .map_err(CliError)?
        .and_then(|c| c.plug_stack_config);
    let beside = slurm_conf.parent().unwrap_or(Path::new("/"));
    let (conf, named_by) = match named {
        None => (beside.join("plugstack.conf"), None),
        Some(p) if Path::new(&p).is_absolute() => {
            (PathBuf::from(p), Some(slurm_conf.to_path_buf()))
        }
        Some(p) => {
            return Err(CliError(format!(
                "{}: PlugStackConfig={p} is not an absolute path (each Slurm daemon would read it from its own working dir)",
                slurm_conf.display()
            )));
        }
    };
    // Only a missing file is empty: one unreadable or not UTF-8 would be replaced by a
    // lone include line, dropping pyxis and every other SPANK line in it.
    let text = match fs::read_to_string(&conf) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(io_err("cannot read", &conf, e)),
    };
    Ok(Plugstack {
        conf,
        named_by,
        text,
    })
}

fn default_plugins_dir() -> PathBuf {
    let deb = PathBuf::from(format!("/usr/lib/{}/gpu-affinity", version::multiarch()));
    if deb.is_dir() {
        deb
    } else {
        PathBuf::from("/usr/lib64/gpu-affinity")
    }
}

fn available_series(plugins_dir: &Path) -> Vec<String> {
    let mut found: Vec<String> = fs::read_dir(plugins_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let series = name.strip_prefix("slurm-")?.to_owned();
            e.path().join(PLUGIN_FILE).is_file().then_some(series)
        })
        .collect();
    found.sort();
    found
}

fn locate(args: &Args) -> Result<Slurm, CliError> {
    let prefix = args.slurm_prefix.clone();
    if !prefix.is_absolute() {
        return Err(CliError(format!(
            "--slurm-prefix {}: give an absolute path (the snippet must name absolute paths)",
            prefix.display()
        )));
    }
    let real_prefix =
        fs::canonicalize(&prefix).map_err(|e| io_err("--slurm-prefix", &prefix, e))?;
    let (series, series_from) = find_series(&real_prefix)?;
    let plugin_dir = find_plugin_dir(&real_prefix)?;
    let plugstack = if args.link_only {
        // No config on a configless node; nothing there is read.
        Plugstack::default()
    } else {
        let slurm_conf = match (&args.slurm_conf, &args.plugstack_dir) {
            (Some(c), _) => c.clone(),
            (None, Some(d)) => d
                .parent()
                .map(|p| p.join("slurm.conf"))
                .ok_or_else(|| CliError(format!("--plugstack-dir {}: no parent", d.display())))?,
            (None, None) => find_sysconf_dir(&prefix, &real_prefix)?.join("slurm.conf"),
        };
        find_plugstack(&slurm_conf)?
    };
    Ok(Slurm {
        prefix,
        real_prefix,
        series,
        series_from,
        plugin_dir,
        plugstack,
    })
}

/// The path of `file` inside the plugin dir as seen through the prefix the admin gave.
fn through_prefix(slurm: &Slurm, real: &Path) -> PathBuf {
    real.strip_prefix(&slurm.real_prefix)
        .map(|rest| slurm.prefix.join(rest))
        .unwrap_or_else(|_| real.to_path_buf())
}

/// A plugstack file with a line that loads pyxis (core's one rule).
fn mentions_pyxis(text: &str) -> bool {
    text.lines().any(conf_write::loads_pyxis)
}

/// Whether `pattern` (an `include` argument: a path, maybe ending in `*` or `*.conf`) covers `file`.
fn include_covers(pattern: &Path, file: &Path) -> bool {
    if pattern == file {
        return true;
    }
    let (Some(pdir), Some(pname), Some(fdir), Some(fname)) = (
        pattern.parent(),
        pattern.file_name().and_then(|n| n.to_str()),
        file.parent(),
        file.file_name().and_then(|n| n.to_str()),
    ) else {
        return false;
    };
    let same_dir = pdir == fdir
        || matches!((fs::canonicalize(pdir), fs::canonicalize(fdir)), (Ok(a), Ok(b)) if a == b);
    same_dir
        && match pname.split_once('*') {
            Some((head, tail)) if !tail.contains('*') => {
                fname.len() >= head.len() + tail.len()
                    && fname.starts_with(head)
                    && fname.ends_with(tail)
            }
            _ => false,
        }
}

/// The include dir a plugstack.conf's wildcard include already reads, if one covers both
/// snippet names (`DIR/*`, `DIR/*.conf`).
fn included_dir(patterns: &[PathBuf]) -> Option<PathBuf> {
    patterns.iter().find_map(|p| {
        let dir = p.parent()?;
        [SNIPPET, SNIPPET_AFTER_PYXIS]
            .iter()
            .all(|name| include_covers(p, &dir.join(name)))
            .then(|| dir.to_path_buf())
    })
}

/// The include lines of plugstack.conf, relative ones resolved against its directory
/// (as SPANK does).
fn includes(conf_text: &str, conf_dir: &Path) -> Vec<PathBuf> {
    conf_text
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("include")).then(|| w.next()).flatten()
        })
        .map(|p| conf_dir.join(p))
        .collect()
}

/// Replace plugstack.conf; a linked one (shared config trees) is written where it really
/// is, so the link and the share survive.
fn write_conf(conf: &Path, text: &str) -> Result<(), CliError> {
    let real = fs::canonicalize(conf).unwrap_or_else(|_| conf.to_path_buf());
    let dir = real.parent().unwrap_or(Path::new("/"));
    Ok(atomic::write_file(&real, dir, text.as_bytes(), 0o644)?)
}

fn symlink_atomic(link: &Path, target: &Path) -> Result<(), CliError> {
    let dir = link.parent().unwrap_or(Path::new("/"));
    let tmp = dir.join(".gpu_affinity.so.new");
    let _ = fs::remove_file(&tmp);
    symlink(target, &tmp).map_err(|e| io_err("cannot make a link in", dir, e))?;
    fs::rename(&tmp, link).map_err(|e| io_err("cannot replace", link, e))
}

fn read_record(path: &Path) -> Result<Option<Record>, CliError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("cannot read", path, e)),
    };
    // The record steers what uninstall removes: trust it only if it is a plain file owned
    // by the plugin dir's owner (root) and writable by no one else.
    let dir_uid = path
        .parent()
        .and_then(|d| fs::metadata(d).ok())
        .map(|m| m.uid());
    if !meta.is_file() || Some(meta.uid()) != dir_uid || meta.mode() & 0o022 != 0 {
        return Err(CliError(format!(
            "{}: not a plain file owned by the plugin dir's owner and writable only by it; refusing to trust it",
            path.display()
        )));
    }
    let text = fs::read_to_string(path).map_err(|e| io_err("cannot read", path, e))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| CliError(format!("{}: {e}", path.display())))
}

struct Out {
    dry_run: bool,
    lines: Vec<String>,
}

impl Out {
    fn did(&mut self, what: String) {
        let verb = if self.dry_run { "would " } else { "" };
        self.lines.push(format!("{verb}{what}"));
    }
}

pub fn install(args: &Args) -> Result<(), CliError> {
    let slurm = locate(args)?;
    let plugins_dir = args.plugins_dir.clone().unwrap_or_else(default_plugins_dir);
    let build = plugins_dir
        .join(format!("slurm-{}", slurm.series))
        .join(PLUGIN_FILE);
    if !build.is_file() {
        let have = available_series(&plugins_dir);
        return Err(CliError(format!(
            "Slurm {} at {} (from {}) has no gpu-affinity build: {} has {}",
            slurm.series,
            slurm.real_prefix.display(),
            slurm.series_from,
            plugins_dir.display(),
            if have.is_empty() {
                "none".to_owned()
            } else {
                format!("builds for {}", have.join(", "))
            }
        )));
    }
    let build = fs::canonicalize(&build).map_err(|e| io_err("cannot resolve", &build, e))?;
    let mut out = Out {
        dry_run: args.dry_run,
        lines: vec![format!(
            "Slurm {} at {} (from {})",
            slurm.series,
            slurm.real_prefix.display(),
            slurm.series_from
        )],
    };
    let record_path = slurm.plugin_dir.join(RECORD_FILE);
    let previous = read_record(&record_path)?;
    let mut record = Record {
        series: slurm.series.clone(),
        ..Record::default()
    };
    if let Some(prev) = &previous {
        // A rerun keeps what the first run created, so uninstall still removes it.
        record.created_dirs.clone_from(&prev.created_dirs);
        record.include_line.clone_from(&prev.include_line);
        record.plugstack_conf_created = prev.plugstack_conf_created;
    }

    // 1. The plugin link.
    let link = slurm.plugin_dir.join(PLUGIN_FILE);
    match fs::symlink_metadata(&link) {
        Ok(m) if !m.file_type().is_symlink() => {
            return Err(CliError(format!(
                "{} exists and is not a link gpu-affinity made; remove it or install by hand",
                link.display()
            )));
        }
        Ok(_) if fs::read_link(&link).ok().as_deref() == Some(build.as_path()) => {
            out.lines.push(format!(
                "unchanged {} -> {}",
                link.display(),
                build.display()
            ));
        }
        Ok(_) if previous.is_none() => {
            return Err(CliError(format!(
                "{} is a link gpu-affinity did not make (no {}); remove it first",
                link.display(),
                record_path.display()
            )));
        }
        _ => {
            out.did(format!("link {} -> {}", link.display(), build.display()));
            if !args.dry_run {
                symlink_atomic(&link, &build)?;
            }
        }
    }
    record.plugin_link.clone_from(&link);
    record.plugin_target.clone_from(&build);

    if !args.link_only {
        write_plugstack(args, &slurm, previous.as_ref(), &mut record, &mut out)?;
    }

    // 4. The record.
    let record_text = serde_json::to_string_pretty(&record)? + "\n";
    if previous.as_ref() != Some(&record) {
        out.did(format!("record {}", record_path.display()));
        if !args.dry_run {
            atomic::write_file(
                &record_path,
                &slurm.plugin_dir,
                record_text.as_bytes(),
                0o600,
            )?;
        }
    }
    emit(&(out.lines.join("\n") + "\n"))
}

/// Steps 2 and 3: the snippet in the include dir, and plugstack.conf including it.
fn write_plugstack(
    args: &Args,
    slurm: &Slurm,
    previous: Option<&Record>,
    record: &mut Record,
    out: &mut Out,
) -> Result<(), CliError> {
    // 2. The snippet, in the include dir.
    let conf = slurm.plugstack.conf.clone();
    let conf_dir = conf.parent().unwrap_or(Path::new("/"));
    let conf_text = &slurm.plugstack.text;
    let patterns = includes(conf_text, conf_dir);
    let dir = args
        .plugstack_dir
        .clone()
        .or_else(|| included_dir(&patterns))
        .unwrap_or_else(|| conf_dir.join("plugstack.conf.d"));
    let pyxis_in_dir = fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name() != SNIPPET && e.file_name() != SNIPPET_AFTER_PYXIS)
        .any(|e| fs::read_to_string(e.path()).is_ok_and(|t| mentions_pyxis(&t)));
    let name = match previous {
        // Keep the name a first run chose, so a rerun never leaves two snippets.
        Some(prev) if prev.snippet.parent() == Some(dir.as_path()) => prev
            .snippet
            .file_name()
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(SNIPPET)),
        _ if pyxis_in_dir => PathBuf::from(SNIPPET_AFTER_PYXIS),
        _ => PathBuf::from(SNIPPET),
    };
    let snippet = dir.join(name);
    let plugin_path = through_prefix(slurm, &record.plugin_link);
    let line = conf_write::plugstack_line(&plugin_path.to_string_lossy(), &[])
        .map_err(|e| CliError(format!("plugstack line: {e}")))?;
    let text = format!(
        "# Written by `gpu-affinity install` for Slurm {} ({}); `gpu-affinity uninstall` removes it.\n\
         # Absolute paths: configless nodes read this file as it is.\n\
         {line}\n",
        slurm.series,
        slurm.prefix.display(),
    );
    if !dir.is_dir() {
        out.did(format!("create {}", dir.display()));
        if !args.dry_run {
            fs::create_dir_all(&dir).map_err(|e| io_err("cannot create", &dir, e))?;
        }
        record.created_dirs.push(dir.clone());
    }
    if fs::read_to_string(&snippet).ok().as_deref() == Some(text.as_str()) {
        out.lines.push(format!("unchanged {}", snippet.display()));
    } else {
        out.did(format!("write {}", snippet.display()));
        if !args.dry_run {
            // The temp file goes in the include dir's parent, never in the include dir;
            // through a linked config dir (CycleCloud's /etc/slurm -> /sched/<cluster>) that
            // is the real dir's parent, so the rename stays on one filesystem.
            let real_dir = fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
            let temp_dir = real_dir.parent().unwrap_or(Path::new("/"));
            let target = snippet
                .file_name()
                .map_or(snippet.clone(), |n| real_dir.join(n));
            atomic::write_file(&target, temp_dir, text.as_bytes(), 0o644)?;
        }
    }
    record.snippet.clone_from(&snippet);
    record.snippet_text.clone_from(&text);

    // 3. plugstack.conf must include the snippet; an absolute include of the one file (no
    // wildcard) works on configless nodes, which do not expand wildcards (HyperPod).
    record.plugstack_conf.clone_from(&conf);
    let included = patterns.iter().any(|p| include_covers(p, &snippet));
    if included {
        out.lines.push(format!(
            "{} already includes {}",
            conf.display(),
            snippet.display()
        ));
        if mentions_pyxis(conf_text) {
            out.lines.push(format!(
                "note: {} names pyxis itself; keep its line before the include of {}",
                conf.display(),
                dir.display()
            ));
        }
    } else if let (Some(slurm_conf), false) = (&slurm.plugstack.named_by, args.force) {
        // An admin's own file, named in slurm.conf: say the line, change nothing.
        out.lines.push(format!(
            "action needed: add `include {}` to {} (PlugStackConfig= in {}), or rerun with --force to append it",
            snippet.display(),
            conf.display(),
            slurm_conf.display()
        ));
    } else {
        let line = format!("include {}", snippet.display());
        let mut new = conf_text.clone();
        if !new.is_empty() && !new.ends_with('\n') {
            new.push('\n');
        }
        new.push_str(&line);
        new.push('\n');
        out.did(format!("add `{line}` to {}", conf.display()));
        if !conf.exists() {
            record.plugstack_conf_created = true;
        }
        if !args.dry_run {
            write_conf(&conf, &new)?;
        }
        record.include_line = Some(line);
    }
    Ok(())
}

pub fn uninstall(args: &Args) -> Result<(), CliError> {
    let slurm = locate(args)?;
    let record_path = slurm.plugin_dir.join(RECORD_FILE);
    let Some(record) = read_record(&record_path)? else {
        return emit(&format!(
            "nothing to undo: no {} (gpu-affinity install did not run for {})\n",
            record_path.display(),
            slurm.prefix.display()
        ));
    };
    let mut out = Out {
        dry_run: args.dry_run,
        lines: Vec::new(),
    };
    let remove = |out: &mut Out, path: &Path| -> Result<(), CliError> {
        out.did(format!("remove {}", path.display()));
        if !args.dry_run {
            fs::remove_file(path).map_err(|e| io_err("cannot remove", path, e))?;
        }
        Ok(())
    };
    if fs::read_link(&record.plugin_link).ok().as_deref() == Some(record.plugin_target.as_path()) {
        remove(&mut out, &record.plugin_link)?;
    } else if fs::symlink_metadata(&record.plugin_link).is_ok() {
        out.lines.push(format!(
            "kept {}: it changed since install",
            record.plugin_link.display()
        ));
    }
    match fs::read_to_string(&record.snippet) {
        Ok(t) if t == record.snippet_text => remove(&mut out, &record.snippet)?,
        Ok(_) => out.lines.push(format!(
            "kept {}: edited since install",
            record.snippet.display()
        )),
        Err(_) => {}
    }
    if let Some(line) = &record.include_line
        && let Ok(text) = fs::read_to_string(&record.plugstack_conf)
    {
        let kept: Vec<&str> = text.lines().filter(|l| l.trim() != line).collect();
        let conf = &record.plugstack_conf;
        if record.plugstack_conf_created && kept.iter().all(|l| l.trim().is_empty()) {
            remove(&mut out, conf)?;
        } else if kept.len() != text.lines().count() {
            out.did(format!("remove `{line}` from {}", conf.display()));
            if !args.dry_run {
                let mut new = kept.join("\n");
                if !new.is_empty() {
                    new.push('\n');
                }
                write_conf(conf, &new)?;
            }
        }
    }
    for dir in record.created_dirs.iter().rev() {
        let empty = fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none());
        if empty {
            out.did(format!("remove {}", dir.display()));
            if !args.dry_run {
                fs::remove_dir(dir).map_err(|e| io_err("cannot remove", dir, e))?;
            }
        }
    }
    remove(&mut out, &record_path)?;
    emit(&(out.lines.join("\n") + "\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn include_patterns() {
        let f = Path::new("/etc/slurm/plugstack.conf.d/gpu-affinity.conf");
        assert!(include_covers(
            Path::new("/etc/slurm/plugstack.conf.d/*"),
            f
        ));
        assert!(include_covers(
            Path::new("/etc/slurm/plugstack.conf.d/*.conf"),
            f
        ));
        assert!(include_covers(f, f));
        assert!(!include_covers(
            Path::new("/etc/slurm/plugstack.conf.d/*.x"),
            f
        ));
        assert!(!include_covers(Path::new("/etc/slurm/other/*"), f));
    }
}
