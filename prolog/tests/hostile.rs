//! The root-side attack suite (issue 17): an unprivileged job user (`nobody`, uid 65534)
//! against the real binaries, run as root on this machine. Each attack is played by a
//! child process of this test binary that drops to `nobody` (`HOSTILE_ACT`), and every
//! verdict, drain and file must come out unharmed. Root only: a skip names the reason.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
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
        "fifo" => {
            let p = std::ffi::CString::new(args[0]).expect("path");
            // SAFETY: mkfifo on a NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(p.as_ptr(), 0o666) }, 0, "mkfifo");
        }
        "plant" => {
            // A file at each of the old predictable probe names, and symlinks and FIFOs
            // at names of the new form's prefix.
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
        let bin = match program {
            "health" => env!("CARGO_BIN_EXE_gpu-affinity-health"),
            _ => env!("CARGO_BIN_EXE_gpu-affinity-prolog"),
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
    let st = as_nobody("segfault", &["NVRM: Xid:79"])
        .status()
        .expect("segfault child");
    assert!(!st.success(), "the child segfaulted");
    for text in [
        "NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=x, GPU has fallen off the bus.".to_string(),
        "<3>NVRM: Xid (PCI:0000:53:00): 48, pid=1, name=x".to_string(),
        format!("<0>Killed process 12483 (NVRM: Xid:79) {marker}"),
        format!("traps: NVRM: Xid:79[12483] trap divide error {marker}"),
    ] {
        // One open per write: /dev/kmsg rate-limits per open file.
        let mut k = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/kmsg")
            .expect("kmsg");
        k.write_all(text.as_bytes()).expect("write kmsg");
    }
    let log = read_kmsg(Path::new("/")).expect("read /dev/kmsg");
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
