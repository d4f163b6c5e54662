//! The root-side attack suite (issue 17): an unprivileged job user (`nobody`, uid 65534)
//! against the real binaries, run as root on this machine. Each attack is played by a
//! child process of this test binary that drops to `nobody` (`HOSTILE_ACT`), and every
//! verdict, drain and file must come out unharmed. Root only: a skip names the reason.

use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use gpu_affinity_node::readers::read_kmsg;

const NOBODY: u32 = 65534;

fn is_root() -> bool {
    rustix_free_euid() == 0
}

fn rustix_free_euid() -> u32 {
    std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
}

/// The attacker's side: this same test binary, as `nobody`, doing one thing.
fn as_nobody(act: &str, args: &[&str]) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("exe"));
    c.args(["--exact", "attacker", "--nocapture"])
        .env("HOSTILE_ACT", act)
        .env("HOSTILE_ARGS", args.join("\u{1f}"))
        .uid(NOBODY)
        .gid(NOBODY);
    c
}

/// Runs only as the attacker child (HOSTILE_ACT set); a no-op test otherwise.
#[test]
fn attacker() {
    let Ok(act) = std::env::var("HOSTILE_ACT") else {
        return;
    };
    let joined = std::env::var("HOSTILE_ARGS").unwrap_or_default();
    let args: Vec<&str> = joined.split('\u{1f}').collect();
    match act.as_str() {
        // prctl(PR_SET_NAME) to a forged XID and a real segfault: the kernel logs
        // `NAME[PID]: segfault at 0 ...` as a kernel (facility 0) record.
        "segfault" => {
            let name = std::ffi::CString::new(args[0]).expect("name");
            // SAFETY: PR_SET_NAME reads a NUL-terminated string; then a deliberate fault.
            unsafe {
                libc::prctl(libc::PR_SET_NAME, name.as_ptr());
                std::ptr::read_volatile(std::ptr::null::<u8>());
            }
        }
        "symlink" => {
            for pair in args.chunks(2) {
                std::os::unix::fs::symlink(pair[0], pair[1]).expect("plant symlink");
            }
        }
        "fifo" => mkfifo(Path::new(args[0]), 0o666),
        "plant" => {
            // A file at each of the old predictable probe names, and symlinks at names
            // of the new form's prefix (FIFOs: `plant-fifos`).
            let dir = Path::new(args[0]);
            for pid in 1..=2000 {
                for kind in ["bandwidth", "probe"] {
                    let _ = std::fs::write(dir.join(format!(".gpu-affinity-{kind}.n1.{pid}")), "");
                }
                let _ = std::os::unix::fs::symlink(
                    "/etc/shadow",
                    dir.join(format!(".gpu-affinity-bandwidth.{pid:016x}")),
                );
            }
        }
        "plant-fifos" => {
            // FIFOs at the old predictable names and at names of the new form's prefix:
            // an open that waited on one would hang the pass.
            let dir = Path::new(args[0]);
            for pid in 1..=2000u32 {
                for name in [
                    format!(".gpu-affinity-bandwidth.n1.{pid}"),
                    format!(".gpu-affinity-probe.n1.{pid}"),
                    format!(".gpu-affinity-bandwidth.{pid:016x}"),
                    format!(".gpu-affinity-probe.{pid:016x}"),
                ] {
                    mkfifo(&dir.join(name), 0o666);
                }
            }
        }
        "rename-loop" => {
            // Until killed: every entry that is not the attacker's own is renamed to an
            // attacker name (stealing it) and replaced by a file of the attacker's.
            let dir = Path::new(args[0]);
            println!("ready");
            let mut n = 0u64;
            loop {
                let Ok(entries) = std::fs::read_dir(dir) else {
                    continue;
                };
                for e in entries.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if name.starts_with("stolen.") || name.starts_with("decoy.") {
                        continue;
                    }
                    n += 1;
                    if std::fs::rename(e.path(), dir.join(format!("stolen.{n}"))).is_ok() {
                        let _ = std::fs::write(dir.join(format!("decoy.{name}")), "");
                    }
                }
            }
        }
        "swap-loop" => {
            // Until killed: `args[0]` is by turns the attacker's own directory and the
            // attacker's symlink to `args[1]`.
            let (at, target) = (Path::new(args[0]), args[1]);
            println!("ready");
            loop {
                let _ = std::fs::remove_file(at);
                let _ = std::fs::remove_dir(at);
                let _ = std::fs::create_dir(at);
                let _ = std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o777));
                std::thread::yield_now();
                let _ = std::fs::remove_dir(at);
                let _ = std::os::unix::fs::symlink(target, at);
                std::thread::yield_now();
            }
        }
        "hold-lock" => {
            let f = std::fs::File::open(args[0]).expect("open lock read-only");
            // SAFETY: flock on an open descriptor.
            assert_eq!(
                unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&f), libc::LOCK_EX) },
                0
            );
            println!("held");
            std::thread::sleep(Duration::from_secs(60));
        }
        other => panic!("unknown act {other}"),
    }
}

fn mkfifo(path: &Path, mode: libc::mode_t) {
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("path");
    // SAFETY: mkfifo on a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(p.as_ptr(), mode) }, 0, "mkfifo");
}

fn run_ok(mut c: Command) {
    let out = c.output().expect("attacker");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

struct Node {
    dir: tempfile::TempDir,
    root: PathBuf,
}

impl Node {
    fn new(kmsg: &str) -> Node {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let root = dir.path().join("root");
        let m = gpu_affinity::catalog::machine("p5.48xlarge").expect("catalog");
        gpu_affinity::sources::fixture::write_fixture(&m, &root).expect("fixture");
        for d in ["dev", "proc", "bin"] {
            std::fs::create_dir_all(root.join(d)).expect("dirs");
        }
        std::fs::write(root.join("dev/kmsg"), kmsg).expect("kmsg");
        std::fs::write(root.join("proc/mounts"), "/dev/sda1 / ext4 rw 0 0\n").expect("mounts");
        Node { dir, root }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// Run `program` with this node's config plus `extra`; `--json`, not a dry run.
    fn run(&self, program: &str, extra: &str, env: &[(&str, &str)]) -> (Output, serde_json::Value) {
        let cfg = self.path("config.toml");
        let text = format!(
            "root = \"{}\"\nstate_dir = \"{}\"\n[gpu]\nexpected = 8\nnvml = false\n[fabric]\nexpected_nics = 32\n\
             [slurm]\nbin_dir = \"{}\"\n{extra}",
            self.root.display(),
            self.path("state").display(),
            self.root.join("bin").display(),
        );
        std::fs::write(&cfg, text).expect("config");
        let epilog;
        let bin = match program {
            "health" => Path::new(env!("CARGO_BIN_EXE_gpu-affinity-health")),
            "epilog" => {
                epilog = epilog_binary();
                epilog.as_path()
            }
            _ => Path::new(env!("CARGO_BIN_EXE_gpu-affinity-prolog")),
        };
        let out = Command::new(bin)
            .args(["--json", "--config"])
            .arg(&cfg)
            .env_clear()
            .env("SLURMD_NODENAME", "n1")
            .envs(env.iter().copied())
            .output()
            .expect("run");
        let json = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        (out, json)
    }
}

impl Node {
    /// Fake `sinfo` (prints `$FAKE_SINFO`) and `scontrol` (appends its arguments to
    /// `$FAKE_SCONTROL_LOG`) in the config's bin_dir, as the fault matrix's clients do.
    fn fake_slurm(&self) {
        for (name, body) in [
            ("sinfo", "printf '%s' \"$FAKE_SINFO\"\n"),
            ("scontrol", "echo \"$*\" >> \"$FAKE_SCONTROL_LOG\"\n"),
        ] {
            let path = self.root.join("bin").join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}")).expect("fake client");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
    }

    /// `program` on node `name` with the fakes answering `sinfo` rows; what scontrol was
    /// asked (empty when nothing).
    fn run_on(
        &self,
        program: &str,
        name: &str,
        extra: &str,
        sinfo: &str,
    ) -> (Output, serde_json::Value, String) {
        let log = self.path("scontrol.log");
        let _ = std::fs::remove_file(&log);
        let log_s = log.display().to_string();
        let (out, json) = self.run(
            program,
            extra,
            &[
                ("SLURMD_NODENAME", name),
                ("SLURM_JOB_ID", "42"),
                ("FAKE_SINFO", sinfo),
                ("FAKE_SCONTROL_LOG", &log_s),
            ],
        );
        (out, json, std::fs::read_to_string(&log).unwrap_or_default())
    }
}

/// `cargo build -p gpu-affinity-epilog` (another package) once; its path in this
/// test's target dir.
fn epilog_binary() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let target = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent()?.parent().map(Path::to_path_buf))
            .expect("target dir");
        let path = target.join("gpu-affinity-epilog");
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "-q", "-p", "gpu-affinity-epilog"])
            .status()
            .expect("cargo build gpu-affinity-epilog");
        assert!(status.success() && path.exists(), "{}", path.display());
        path
    })
    .clone()
}

/// `nobody` names itself `name` (prctl) and segfaults: the kernel logs
/// `NAME[PID]: segfault at 0 ...`.
fn segfault_as_nobody(name: &str) {
    let st = as_nobody("segfault", &[name])
        .status()
        .expect("segfault child");
    assert!(!st.success(), "the child segfaulted");
}

/// One record written to /dev/kmsg as root (opened per write: /dev/kmsg rate-limits per
/// open file).
fn write_kmsg(text: &str) {
    let mut k = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/kmsg")
        .expect("kmsg");
    k.write_all(text.as_bytes()).expect("write kmsg");
}

/// The whole live kernel log as /dev/kmsg records, oldest first.
fn real_kernel_log() -> String {
    let mut kmsg = String::new();
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags_nonblock()
        .open("/dev/kmsg")
        .expect("kmsg");
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = std::io::Read::read(&mut f, &mut buf) {
        if n == 0 {
            break;
        }
        kmsg.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    kmsg
}

/// The real kernel log after `nobody` set its name to `NVRM: Xid:79` and segfaulted, and
/// root staged the OOM-killer shape quoting that name: forged XIDs only.
fn forged_kernel_log() -> String {
    segfault_as_nobody("NVRM: Xid:79");
    let marker = format!("hostile-{}", std::process::id());
    // The newline ends the record: without it the kernel holds the record open for a
    // continuation and readers do not see it yet.
    write_kmsg(&format!(
        "<0>Killed process 12483 (NVRM: Xid:79) {marker}\n"
    ));
    let kmsg = real_kernel_log();
    assert!(
        kmsg.lines()
            .any(|l| l.contains(";NVRM: Xid:79[") && l.contains("segfault")),
        "the kernel logged the segfault (debug.exception-trace = 1)"
    );
    assert!(kmsg.contains(&marker), "the staged OOM-killer line");
    kmsg
}

/// sinfo rows of a four-node partition, `drained` naming nodes the suite drained.
fn fleet(drained: &[&str]) -> String {
    ["n1", "n2", "n3", "n4"]
        .iter()
        .map(|n| match drained.contains(n) {
            true => format!("{n}|gpu*|drained|gpu:8|gpu-affinity: GPU_XID_79 gpu=0000:53:00.0\n"),
            false => format!("{n}|gpu*|idle|gpu:8|none\n"),
        })
        .collect()
}

fn check<'j>(json: &'j serde_json::Value, id: &str) -> &'j serde_json::Value {
    json["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["id"] == id))
        .unwrap_or(&serde_json::Value::Null)
}

const REAL_XID: &str =
    "4,900,1,-;NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=x, GPU has fallen off the bus.\n";

/// Attack 1: a forged XID through a process name in a real segfault record, and the
/// driver's exact text written to /dev/kmsg by user space (staged as root: only root may
/// write there), read from the real kernel log.
#[test]
fn forged_xids_in_the_real_kernel_log_are_not_counted() {
    if !is_root() {
        eprintln!("skipped: needs root (a real segfault record as nobody, /dev/kmsg writes)");
        return;
    }
    let marker = format!("hostile-{}", std::process::id());
    segfault_as_nobody("NVRM: Xid:79");
    for text in [
        "NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=x, GPU has fallen off the bus.".to_string(),
        "<3>NVRM: Xid (PCI:0000:53:00): 48, pid=1, name=x".to_string(),
        format!("<0>Killed process 12483 (NVRM: Xid:79) {marker}"),
        format!("traps: NVRM: Xid:79[12483] trap divide error {marker}"),
    ] {
        write_kmsg(&text);
    }
    let log = read_kmsg(Path::new("/")).expect("read /dev/kmsg");
    let kmsg = real_kernel_log();
    let segv = kmsg
        .lines()
        .find(|l| l.contains(";NVRM: Xid:79[") && l.contains("segfault"));
    let segv = segv.expect("the kernel logged the segfault (debug.exception-trace = 1)");
    assert!(
        segv.starts_with(|c: char| c.is_ascii_digit())
            && segv
                .split(',')
                .next()
                .is_some_and(|p| p.parse::<u32>().is_ok_and(|p| p >> 3 == 0)),
        "a kernel record: {segv}"
    );
    assert!(
        log.xids.is_empty(),
        "no GPU on this machine, no XID: {:?}",
        log.xids
    );
    // The segfault and at least the two driver-text writes (/dev/kmsg rate-limits user
    // writes, so a later one may be dropped).
    assert!(log.notes.lookalikes >= 3, "{:?}", log.notes);
    let user = kmsg
        .lines()
        .find(|l| {
            l.ends_with(
                ";NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=x, GPU has fallen off the bus.",
            )
        })
        .expect("the staged user write");
    assert!(
        user.split(',')
            .next()
            .is_some_and(|p| p.parse::<u32>().is_ok_and(|p| p >> 3 == 1)),
        "LOG_USER: {user}"
    );
    // The whole health program over a copy of the real log, with one real XID: one drain
    // for that XID, the forgeries a warning.
    let node = Node::new(&format!("{kmsg}{REAL_XID}"));
    let (out, json) = node.run("health", "", &[]);
    let xid = check(&json, "gpu.xid");
    assert_eq!(
        json["verdict"],
        "drain",
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(json["reason"], "gpu-affinity: GPU_XID_79 gpu=0000:53:00.0");
    let evidence = xid["evidence"].as_str().unwrap_or_default();
    assert_eq!(evidence.matches("XID 79 on").count(), 1, "{evidence}");
    assert!(
        evidence.contains("quote an XID but are not the driver's"),
        "{evidence}"
    );
    let node = Node::new(&kmsg);
    let (_, json) = node.run("health", "", &[]);
    assert_ne!(json["verdict"], "drain", "{json}");
    assert_eq!(check(&json, "gpu.xid")["class"], "warn", "{json}");
}

trait NonBlock {
    fn custom_flags_nonblock(&mut self) -> &mut Self;
}

impl NonBlock for std::fs::OpenOptions {
    fn custom_flags_nonblock(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::custom_flags(self, libc::O_NONBLOCK)
    }
}

/// Attack 2: planted probe names (files at the old pid names, symlinks at the new
/// prefix) in a world-writable checkpoint dir and mount, and checkpoint_dir itself a
/// user's symlink: never a drain, no root file left behind.
#[test]
fn planted_probe_names_and_a_symlinked_checkpoint_dir_never_drain() {
    if !is_root() {
        eprintln!("skipped: needs root (the attacker runs as nobody)");
        return;
    }
    let node = Node::new("6,1,1,-;Linux version 6.1\n");
    std::fs::write(
        node.root.join("proc/mounts"),
        "/dev/sda1 /fsx ext4 rw 0 0\n",
    )
    .expect("mounts");
    for (d, mode) in [("fsx", 0o777), ("shared", 0o1777), ("shared/ckpt", 0o777)] {
        let d = node.root.join(d);
        std::fs::create_dir(&d).expect("dir");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).expect("mode");
        run_ok(as_nobody("plant", &[&d.display().to_string()]));
    }
    let extra = "[[storage.mount]]\npath = \"/fsx\"\nwrite = true\n[storage]\ncheckpoint_dir = \"/shared/ckpt\"\n\
                 checkpoint_floor_mbps = 1\ncheckpoint_probe_mib = 1\n";
    let ckpt = node.root.join("shared/ckpt");
    let before = std::fs::read_dir(&ckpt).expect("list").count();
    let (out, json) = node.run("health", extra, &[]);
    let c = check(&json, "storage.checkpoint_bandwidth");
    assert_eq!(
        c["status"],
        "pass",
        "{c} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(check(&json, "storage.writable")["status"], "pass", "{json}");
    let after = std::fs::read_dir(&ckpt).expect("list").count();
    assert_eq!(before, after, "no probe file left");
    // checkpoint_dir replaced by a user's symlink to another directory: refused, a warning.
    std::fs::rename(&ckpt, node.path("elsewhere")).expect("move away");
    run_ok(as_nobody(
        "symlink",
        &[
            &node.path("elsewhere").display().to_string(),
            &ckpt.display().to_string(),
        ],
    ));
    let (_, json) = node.run("health", extra, &[]);
    let c = check(&json, "storage.checkpoint_bandwidth");
    assert_eq!(c["class"], "warn", "{c}");
    assert!(
        c["evidence"]
            .as_str()
            .unwrap_or_default()
            .contains("is a symlink or not a directory"),
        "{c}"
    );
    assert_ne!(json["verdict"], "drain", "{json}");
}

/// Attack 3: a 1777 dcgm mapping dir with `nobody`'s symlinks 0..7 at a root-only file:
/// refused with one line naming the dir; the file keeps its bytes and mode.
#[test]
fn a_world_writable_mapping_dir_with_symlinks_is_refused() {
    if !is_root() {
        eprintln!("skipped: needs root (the attacker runs as nobody)");
        return;
    }
    let node = Node::new("6,1,1,-;Linux version 6.1\n");
    let secret = node.path("secret");
    std::fs::write(&secret, "root only\n").expect("secret");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("0600");
    let map = node.path("map");
    std::fs::create_dir(&map).expect("map");
    std::fs::set_permissions(&map, std::fs::Permissions::from_mode(0o1777)).expect("1777");
    let mut pairs = Vec::new();
    for i in 0..8 {
        pairs.push(secret.display().to_string());
        pairs.push(map.join(i.to_string()).display().to_string());
    }
    let refs: Vec<&str> = pairs.iter().map(String::as_str).collect();
    run_ok(as_nobody("symlink", &refs));
    let extra = format!("[metrics]\ndcgm_job_mapping_dir = \"{}\"\n", map.display());
    let (out, _) = node.run(
        "prolog",
        &extra,
        &[("SLURM_JOB_ID", "42"), ("SLURM_JOB_GPUS", "0")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "dcgm job mapping dir {} is writable by group or others (mode 1777); refusing it",
            map.display()
        )),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&secret).expect("secret"),
        "root only\n"
    );
    let meta = std::fs::metadata(&secret).expect("meta");
    assert_eq!((meta.mode() & 0o7777, meta.uid()), (0o600, 0));
}

/// Attack 4: a FIFO at the lock in a 1777 state dir, and a lock `nobody` holds: the pass
/// runs its checks within its bound (the real XID 79 still drains), saying why.
#[test]
fn a_fifo_or_a_held_lock_never_means_healthy() {
    if !is_root() {
        eprintln!("skipped: needs root (the attacker runs as nobody)");
        return;
    }
    let node = Node::new(REAL_XID);
    let state = node.path("state");
    std::fs::create_dir(&state).expect("state");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o1777)).expect("1777");
    run_ok(as_nobody(
        "fifo",
        &[&state.join("health.lock").display().to_string()],
    ));
    let t = Instant::now();
    let (out, json) = node.run("prolog", "", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert_eq!(json["verdict"], "drain", "{stderr}");
    assert!(
        stderr.contains("refusing it; running the checks without the shared state"),
        "{stderr}"
    );
    // A trusted state dir whose lock file someone made readable: nobody holds it.
    std::fs::remove_file(state.join("health.lock")).expect("rm fifo");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).expect("0755");
    std::fs::write(state.join("health.lock"), "").expect("lock");
    std::fs::set_permissions(
        state.join("health.lock"),
        std::fs::Permissions::from_mode(0o644),
    )
    .expect("0644");
    let mut holder = as_nobody(
        "hold-lock",
        &[&state.join("health.lock").display().to_string()],
    )
    .stdout(std::process::Stdio::piped())
    .spawn()
    .expect("holder");
    // Wait for "held" (libtest prints its own lines first); keep the pipe open.
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        holder.stdout.take().expect("stdout"),
    ));
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.trim() == "held")),
        "the holder took the lock"
    );
    let (out, json) = node.run("prolog", "", &[]);
    let _ = holder.kill();
    let _ = holder.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(json["verdict"], "drain", "{stderr}");
    assert!(stderr.contains("another process holds"), "{stderr}");
    let mode = std::fs::metadata(state.join("health.lock"))
        .expect("meta")
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the lock is made root's alone again");
}

/// SLURMD_NODENAME goes into no name unchecked.
#[test]
fn a_node_name_with_a_path_in_it_is_refused() {
    let node = Node::new("6,1,1,-;Linux version 6.1\n");
    let (out, _) = node.run("prolog", "", &[("SLURMD_NODENAME", "../../etc/x")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is not a Slurm node name"), "{stderr}");
}

/// Attack 1 through the epilog and `handoff = "hyperpod"`: forged process-name XIDs in
/// the real kernel log (a segfault record, the OOM-killer shape) never drain and never
/// ask for `Action:Reboot`; a real XID through the same path does.
#[test]
fn forged_xids_never_drain_through_the_epilog_or_hyperpod() {
    if !is_root() {
        eprintln!("skipped: needs root (a real segfault record as nobody, /dev/kmsg writes)");
        return;
    }
    let kmsg = forged_kernel_log();
    let node = Node::new(&kmsg);
    node.fake_slurm();
    for (program, extra) in [
        ("epilog", ""),
        ("epilog", "[drain]\nhandoff = \"hyperpod\"\n"),
        ("health", "[drain]\nhandoff = \"hyperpod\"\n"),
        ("prolog", "[drain]\nhandoff = \"hyperpod\"\n"),
    ] {
        let (out, json, asked) = node.run_on(program, "n1", extra, &fleet(&[]));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(
            json["verdict"], "drain",
            "{program} {extra}: {json} {stderr}"
        );
        assert_eq!(
            check(&json, "gpu.xid")["class"],
            "warn",
            "{program}: {json}"
        );
        assert_eq!(asked, "", "{program} {extra}: scontrol was asked");
        assert_eq!(out.status.code(), Some(0), "{program}: {stderr}");
    }
    let node = Node::new(&format!("{kmsg}{REAL_XID}"));
    node.fake_slurm();
    for program in ["epilog", "health"] {
        let (_, json, asked) = node.run_on(
            program,
            "n1",
            "[drain]\nhandoff = \"hyperpod\"\n",
            &fleet(&[]),
        );
        assert_eq!(json["verdict"], "drain", "{program}: {json}");
        assert!(
            asked.starts_with("update nodename=n1 state=fail reason=Action:Reboot"),
            "{program}: {asked}"
        );
    }
}

/// A forged drain would spend the circuit breaker's share: with `max_share` set so that
/// one drained node of four holds back the next, a forged XID on n1 drains nothing, so
/// a real XID on n2 still drains (and would be held back had n1 been drained).
#[test]
fn a_forged_xid_cannot_spend_the_circuit_breakers_share() {
    if !is_root() {
        eprintln!("skipped: needs root (a real segfault record as nobody, /dev/kmsg writes)");
        return;
    }
    let breaker = "[drain]\nmax_share = 0.25\n";
    let forged = forged_kernel_log();
    let a = Node::new(&forged);
    a.fake_slurm();
    let (_, json, asked) = a.run_on("health", "n1", breaker, &fleet(&[]));
    assert_ne!(json["verdict"], "drain", "{json}");
    assert_eq!(asked, "", "n1 was not drained");
    let b = Node::new(&format!("{forged}{REAL_XID}"));
    b.fake_slurm();
    let (_, json, asked) = b.run_on("health", "n2", breaker, &fleet(&[]));
    assert_eq!(json["verdict"], "drain", "{json}");
    assert!(
        asked.starts_with("update nodename=n2 state=drain reason=gpu-affinity: GPU_XID_79"),
        "{asked}"
    );
    // The breaker is that tight: had n1 been drained, n2's drain would be held back.
    let (_, json, asked) = b.run_on("health", "n2", breaker, &fleet(&["n1"]));
    assert_eq!(asked, "", "held back");
    assert!(json.to_string().contains("circuit breaker"), "{json}");
}

fn probed_node(modes: &[(&str, u32)]) -> Node {
    let node = Node::new("6,1,1,-;Linux version 6.1\n");
    std::fs::write(
        node.root.join("proc/mounts"),
        "/dev/sda1 /fsx ext4 rw 0 0\n",
    )
    .expect("mounts");
    for (d, mode) in modes {
        let d = node.root.join(d);
        std::fs::create_dir(&d).expect("dir");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(*mode)).expect("mode");
    }
    node
}

const PROBED: &str = "[[storage.mount]]\npath = \"/fsx\"\nwrite = true\n[storage]\ncheckpoint_dir = \"/shared/ckpt\"\n\
                      checkpoint_floor_mbps = 1\ncheckpoint_probe_mib = 1\n";

/// Attack 2 with FIFOs: planted at the old and the new probe names in a world-writable
/// checkpoint dir and mount, they neither hang nor fail a probe.
#[test]
fn fifos_at_the_probe_names_never_hang_or_drain() {
    if !is_root() {
        eprintln!("skipped: needs root (the attacker runs as nobody)");
        return;
    }
    let node = probed_node(&[("fsx", 0o777), ("shared", 0o1777), ("shared/ckpt", 0o777)]);
    for d in ["fsx", "shared/ckpt"] {
        run_ok(as_nobody(
            "plant-fifos",
            &[&node.root.join(d).display().to_string()],
        ));
    }
    let listing = |d: &str| {
        let mut v: Vec<_> = std::fs::read_dir(node.root.join(d))
            .expect("list")
            .map(|e| {
                let e = e.expect("entry");
                let m = e.metadata().expect("meta");
                (e.file_name(), m.uid(), m.file_type().is_fifo())
            })
            .collect();
        v.sort();
        v
    };
    let before = (listing("fsx"), listing("shared/ckpt"));
    assert!(
        before
            .0
            .iter()
            .all(|(_, uid, fifo)| *uid == NOBODY && *fifo)
    );
    let t = Instant::now();
    let (out, json) = node.run("health", PROBED, &[]);
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for id in ["storage.checkpoint_bandwidth", "storage.writable"] {
        assert_eq!(check(&json, id)["status"], "pass", "{id}: {json} {stderr}");
    }
    assert_ne!(json["verdict"], "drain", "{json}");
    assert_eq!((listing("fsx"), listing("shared/ckpt")), before);
}

/// The rename race in a NON-sticky 0777 checkpoint dir and mount: `nobody` renames away
/// and replaces every entry it did not make, over and over, while passes run. No pass
/// drains and no file of root's is left behind (the probe file never has a name).
#[test]
fn a_rename_race_in_a_non_sticky_dir_leaves_no_root_file_and_never_drains() {
    if !is_root() {
        eprintln!("skipped: needs root (the attacker runs as nobody)");
        return;
    }
    let node = probed_node(&[("fsx", 0o777), ("shared", 0o1777), ("shared/ckpt", 0o777)]);
    let mut racers = Vec::new();
    for d in ["fsx", "shared/ckpt"] {
        let mut racer = as_nobody("rename-loop", &[&node.root.join(d).display().to_string()])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("racer");
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
            racer.stdout.take().expect("stdout"),
        ));
        assert!(
            lines.any(|l| l.is_ok_and(|l| l.trim() == "ready")),
            "the racer runs"
        );
        racers.push((racer, lines));
    }
    let mut results = Vec::new();
    for _ in 0..3 {
        results.push(node.run("health", PROBED, &[]));
    }
    for (mut r, _) in racers {
        let _ = r.kill();
        let _ = r.wait();
    }
    for (out, json) in &results {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(json["verdict"], "drain", "{json} {stderr}");
        for id in ["storage.checkpoint_bandwidth", "storage.writable"] {
            assert_ne!(check(json, id)["status"], "fail", "{id}: {json}");
        }
    }
    for d in ["fsx", "shared/ckpt"] {
        for e in std::fs::read_dir(node.root.join(d)).expect("list") {
            let e = e.expect("entry");
            let m = e.metadata().expect("meta");
            assert_eq!(
                m.uid(),
                NOBODY,
                "a file of root's left: {}",
                e.path().display()
            );
        }
    }
}

/// A node with a 1777 dir `parent` (where `nobody` plants) and a root dir `victim`
/// (where root must never write through a plant).
fn sticky_parent_and_victim(parent: &str) -> (Node, PathBuf, PathBuf) {
    let node = Node::new("6,1,1,-;Linux version 6.1\n");
    let parent = node.path(parent);
    std::fs::create_dir(&parent).expect("parent");
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o1777)).expect("1777");
    let victim = node.path("victim");
    std::fs::create_dir(&victim).expect("victim");
    (node, parent, victim)
}

/// Attack 3 under a 1777 parent: the mapping dir is `nobody`'s symlink to a root
/// directory, `nobody`'s own directory, and by turns each of them while prologs run.
/// Root never writes a mapping file anywhere but its own dir.
#[test]
fn a_mapping_dir_swapped_under_a_sticky_parent_is_never_written_through() {
    if !is_root() {
        eprintln!("skipped: needs root (the attacker runs as nobody)");
        return;
    }
    let (node, parent, victim) = sticky_parent_and_victim("run");
    let map = parent.join("map");
    let extra = format!("[metrics]\ndcgm_job_mapping_dir = \"{}\"\n", map.display());
    let job = [("SLURM_JOB_ID", "42"), ("SLURM_JOB_GPUS", "0")];
    let (map_s, victim_s) = (map.display().to_string(), victim.display().to_string());
    run_ok(as_nobody("symlink", &[&victim_s, &map_s]));
    let (out, _) = node.run("prolog", &extra, &job);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "dcgm job mapping dir {map_s} is a symlink or not a directory; refusing it"
        )),
        "{stderr}"
    );
    std::fs::remove_file(&map).expect("rm link");
    let mut racer = as_nobody("swap-loop", &[&map_s, &victim_s])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("racer");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        racer.stdout.take().expect("stdout"),
    ));
    assert!(lines.any(|l| l.is_ok_and(|l| l.trim() == "ready")));
    let mut refusals = Vec::new();
    for _ in 0..5 {
        let (out, _) = node.run("prolog", &extra, &job);
        refusals.push(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let _ = racer.kill();
    let _ = racer.wait();
    assert_eq!(
        std::fs::read_dir(&victim).expect("victim").count(),
        0,
        "nothing written into another directory"
    );
    // Each prolog found a symlink, nobody's directory or, mid-swap, nothing: each time
    // one line naming the dir, never a mapping written.
    for stderr in &refusals {
        assert!(
            stderr.contains(&format!(
                "gpu-affinity-prolog: dcgm job mapping: dcgm job mapping dir {map_s}"
            )),
            "{stderr}"
        );
    }
    // nobody's own directory there: refused by its owner, nothing written in it.
    let _ = std::fs::remove_file(&map);
    let _ = std::fs::remove_dir_all(&map);
    run_ok({
        let mut c = Command::new("/bin/mkdir");
        c.arg(&map).uid(NOBODY).gid(NOBODY);
        c
    });
    let (out, _) = node.run("prolog", &extra, &job);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "dcgm job mapping dir {map_s} is owned by uid {NOBODY}, not root; refusing it"
        )),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(&map).expect("map").count(), 0);
    // Root's own mapping dir under the sticky parent (nobody cannot rename it): used.
    std::fs::remove_dir(&map).expect("rm");
    std::fs::create_dir(&map).expect("root's map");
    std::fs::set_permissions(&map, std::fs::Permissions::from_mode(0o755)).expect("0755");
    let (out, _) = node.run("prolog", &extra, &job);
    assert!(
        map.join("0").exists(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The metrics textfile's dir world-writable, or `nobody`'s symlink to a root dir under a
/// 1777 parent: refused with one line naming the dir; no file written through it.
#[test]
fn a_world_writable_or_symlinked_textfile_dir_is_refused() {
    if !is_root() {
        eprintln!("skipped: needs root (the attacker runs as nobody)");
        return;
    }
    let (node, parent, victim) = sticky_parent_and_victim("metrics");
    for (dir, plant) in [("open", 0o777), ("sticky", 0o1777), ("link", 0)] {
        let at = parent.join(dir);
        let at_s = at.display().to_string();
        let want = match plant {
            0 => {
                run_ok(as_nobody(
                    "symlink",
                    &[&victim.display().to_string(), &at_s],
                ));
                format!("metrics: textfile dir {at_s} is a symlink or not a directory; refusing it")
            }
            mode => {
                std::fs::create_dir(&at).expect("dir");
                std::fs::set_permissions(&at, std::fs::Permissions::from_mode(mode)).expect("mode");
                format!(
                    "metrics: textfile dir {at_s} is writable by group or others (mode {mode:04o}); refusing it"
                )
            }
        };
        let extra = format!("[metrics]\ntextfile = \"{at_s}/gpu.prom\"\n");
        let (out, _) = node.run("health", &extra, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.lines().filter(|l| l.contains(&want)).count(),
            1,
            "{want}: {stderr}"
        );
        assert!(!at.join("gpu.prom").exists(), "{dir}: written through");
        assert_eq!(std::fs::read_dir(&victim).expect("victim").count(), 0);
    }
}

/// A FIFO at `state_dir/health.lock` in a TRUSTED state dir (root's, 0755; root stages
/// the FIFO, as only root can there): the lock-open code itself refuses it without
/// waiting, and the pass runs its checks without the shared state (the real XID drains).
#[test]
fn a_fifo_lock_in_a_trusted_state_dir_is_refused_and_the_checks_run() {
    if !is_root() {
        eprintln!("skipped: needs root (a root-owned state dir)");
        return;
    }
    let node = Node::new(REAL_XID);
    let state = node.path("state");
    std::fs::create_dir(&state).expect("state");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).expect("0755");
    let lock = state.join("health.lock");
    mkfifo(&lock, 0o600);
    for program in ["prolog", "health"] {
        let t = Instant::now();
        let (out, json) = node.run(program, "", &[]);
        assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(json["verdict"], "drain", "{program}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "lock {} is not a regular file owned by uid 0; refusing it; running the checks without the shared state",
                lock.display()
            )),
            "{program}: {stderr}"
        );
        assert!(
            std::fs::metadata(&lock)
                .expect("meta")
                .file_type()
                .is_fifo()
        );
        assert!(!state.join("health-state.json").exists(), "nothing saved");
    }
}
