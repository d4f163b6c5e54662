//! The Azure and OCI hand-offs, whole process: the health program with an XID 79 in the
//! kernel log, real curl against an HTTP server this test runs (std's TcpListener), the
//! OCI record in a temporary directory. A plain main (harness = false): the binary also
//! plays `sinfo` and `scontrol` by argv[0], as fault_matrix's does.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NODE: &str = "n1";
const SUB: &str = "8d10da13-8125-4ba9-a717-bf7490507b3d";
const TOKEN: &str = "eyJ0eXAi.eyJhdWQi.c2ln-_";

fn main() {
    let argv0 = std::env::args().next().unwrap_or_default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = Path::new(&argv0).file_name().and_then(|n| n.to_str());
    if name == Some("sinfo") {
        print!("{}", std::env::var("FAKE_SINFO").unwrap_or_default());
        return;
    }
    if name == Some("scontrol") {
        let log = std::env::var("FAKE_SCONTROL_LOG").expect("log path");
        std::fs::write(log, args.join(" ")).expect("scontrol log");
        return;
    }
    // nextest's listing (`--list --format terse [--ignored]`): one test, never ignored.
    if args.iter().any(|a| a == "--list") {
        let ignored = args.iter().any(|a| a == "--ignored");
        print!("{}", if ignored { "" } else { "handoff: test\n" });
        return;
    }
    if !Path::new("/usr/bin/curl").exists() {
        println!("SKIPPED handoff: no /usr/bin/curl on this machine (install curl)");
        return;
    }
    let failed = [azure(), azure_hung(), oci(), bad_config()]
        .iter()
        .filter(|ok| !**ok)
        .count();
    if failed > 0 {
        eprintln!("{failed} hand-off case(s) failed");
        std::process::exit(1);
    }
}

fn check(name: &str, ok: bool, detail: impl std::fmt::Display) -> bool {
    println!("{} {name}: {detail}", if ok { "ok  " } else { "FAIL" });
    ok
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    body: String,
}

/// An HTTP/1.1 server on 127.0.0.1 answering as IMDS and ARM do (`hang`: accepting and
/// never answering); what it saw, in order.
fn server(hang: bool) -> (u16, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            if hang {
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_secs(3600));
                    drop(stream);
                });
                continue;
            }
            if let Some(s) = serve(stream) {
                log.lock().expect("log").push(s);
            }
        }
    });
    (port, seen)
}

fn serve(mut stream: TcpStream) -> Option<Seen> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    if headers.get("expect").is_some_and(|e| e == "100-continue") {
        stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").ok()?;
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).ok()?;
    let (status, answer) = if path.starts_with("/metadata/identity/oauth2/token?") {
        (
            "200 OK",
            format!(r#"{{"access_token":"{TOKEN}","expires_in":"3599"}}"#),
        )
    } else if path.starts_with("/metadata/instance/compute?") {
        (
            "200 OK",
            format!(
                r#"{{"subscriptionId":"{SUB}","resourceId":"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/{NODE}"}}"#
            ),
        )
    } else if method == "PUT" {
        ("201 Created", "{}".to_string())
    } else {
        ("404 Not Found", "{}".to_string())
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
        answer.len()
    );
    stream.write_all(reply.as_bytes()).ok()?;
    Some(Seen {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// A p5.48xlarge fixture tree with an XID 79 on its first GPU (NVML off: the kernel log
/// is the finding), fake Slurm clients, and a config ending in `extra`.
struct Node {
    dir: tempfile::TempDir,
    cfg: PathBuf,
    bin: PathBuf,
}

fn node(extra: &str) -> Node {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    let m = gpu_affinity::catalog::machine("p5.48xlarge").expect("catalog");
    gpu_affinity::sources::fixture::write_fixture(&m, &root).expect("fixture");
    for d in ["dev", "proc"] {
        std::fs::create_dir_all(root.join(d)).expect("dirs");
    }
    let bus = m.gpus[0].pci.to_string();
    std::fs::write(
        root.join("dev/kmsg"),
        format!(
            "6,1,100,-;Linux version 6.1\n4,2,200,-;NVRM: Xid (PCI:{}): 79, pid=77, name=python\n",
            &bus[..bus.len() - 2]
        ),
    )
    .expect("kmsg");
    std::fs::write(root.join("proc/mounts"), "/dev/sda1 / ext4 rw 0 0\n").expect("mounts");
    // The fake Slurm clients: this very binary under their names.
    let bin = dir.path().join("bin");
    let me = std::env::current_exe().expect("exe");
    std::fs::create_dir_all(&bin)
        .and_then(|()| std::os::unix::fs::symlink(&me, bin.join("sinfo")))
        .and_then(|()| std::os::unix::fs::symlink(&me, bin.join("scontrol")))
        .expect("fake clients");
    let text = format!(
        "root = \"{}\"\nstate_dir = \"{}\"\n[gpu]\nexpected = 8\nnvml = false\n[slurm]\nbin_dir = \"{}\"\n{extra}",
        root.display(),
        dir.path().join("state").display(),
        bin.display()
    );
    let cfg = dir.path().join("config.toml");
    std::fs::write(&cfg, text).expect("config");
    Node { dir, cfg, bin }
}

struct Ran {
    json: serde_json::Value,
    stderr: String,
    scontrol: String,
    elapsed: Duration,
}

/// The health program once, sinfo showing the node `state` with `reason`.
fn health(n: &Node, state: &str, reason: &str) -> Ran {
    let log = n.bin.join("scontrol.log");
    let _ = std::fs::remove_file(&log);
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-affinity-health"))
        .args(["--json", "--config"])
        .arg(&n.cfg)
        .env("SLURMD_NODENAME", NODE)
        .env(
            "FAKE_SINFO",
            format!("{NODE}|gpu*|{state}|gpu:8|{reason}\n"),
        )
        .env("FAKE_SCONTROL_LOG", &log)
        .output()
        .expect("run health");
    Ran {
        json: serde_json::from_slice(&out.stdout).unwrap_or_default(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        scontrol: std::fs::read_to_string(&log).unwrap_or_default(),
        elapsed: t.elapsed(),
    }
}

fn azure_config(port: u16) -> String {
    format!(
        "[drain]\nhandoff = \"azure\"\n[handoff]\nazure_imds = \"http://127.0.0.1:{port}\"\n\
         azure_arm = \"http://127.0.0.1:{port}/arm\"\ntimeout_s = 2\n"
    )
}

const DRAIN: &str = "state=drain reason=gpu-affinity: GPU_XID_79 gpu=";

fn azure() -> bool {
    let (port, seen) = server(false);
    let n = node(&azure_config(port));
    let r = health(&n, "idle", "none");
    let got = seen.lock().expect("seen").clone();
    let mut ok = check(
        "azure: the drain keeps the suite's reason",
        r.scontrol.contains(DRAIN) && r.json["verdict"] == "drain",
        &r.scontrol,
    );
    let token = got.first();
    ok &= check(
        "azure: IMDS token, Metadata header",
        token.is_some_and(|s| {
            s.method == "GET"
                && s.path.starts_with("/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https%3A%2F%2Fmanagement.azure.com%2F")
                && s.headers.get("metadata").is_some_and(|v| v == "true")
                && !s.headers.contains_key("authorization")
        }),
        format!("{token:?}"),
    );
    let compute = got.get(1);
    ok &= check(
        "azure: IMDS compute, Metadata header",
        compute.is_some_and(|s| {
            s.path == "/metadata/instance/compute?api-version=2021-01-01&format=json"
                && s.headers.get("metadata").is_some_and(|v| v == "true")
        }),
        format!("{compute:?}"),
    );
    let put = got.get(2);
    let body: serde_json::Value = put
        .and_then(|p| serde_json::from_str(&p.body).ok())
        .unwrap_or_default();
    let prefix = format!("/arm/subscriptions/{SUB}/providers/Microsoft.Impact/workloadImpacts/");
    ok &= check(
        "azure: ARM PUT with the bearer token and the category",
        put.is_some_and(|s| {
            s.method == "PUT"
                && s.path.starts_with(&prefix)
                && s.path.ends_with("?api-version=2023-02-01-preview")
                && s.path.len() == prefix.len() + 36 + "?api-version=2023-02-01-preview".len()
                && s.headers.get("authorization") == Some(&format!("Bearer {TOKEN}"))
                && s.headers
                    .get("content-type")
                    .is_some_and(|c| c == "application/json")
                && !s.headers.contains_key("metadata")
        }) && body["properties"]["impactCategory"] == "Resource.Hpc.Unhealthy.XID79FallenOffBus"
            && body["properties"]["impactDescription"]
                .as_str()
                .is_some_and(|d| d.starts_with("gpu-affinity: GPU_XID_79 gpu="))
            && body["properties"]["impactedResourceId"]
                .as_str()
                .is_some_and(|d| d.ends_with("/virtualMachines/n1")),
        format!("{put:?}"),
    );
    ok &= check(
        "azure: one log line says so",
        r.stderr
            .contains("azure: impact Resource.Hpc.Unhealthy.XID79FallenOffBus reported for gpu-affinity: GPU_XID_79"),
        r.stderr.trim(),
    );
    // The next pass finds its own drain: nothing is reported twice.
    let reason = r.scontrol.split("reason=").nth(1).unwrap_or("").to_string();
    let again = health(&n, "drained", &reason);
    let count = seen.lock().expect("seen").len();
    ok &= check(
        "azure: each drain reported once",
        count == 3 && again.scontrol.is_empty() && again.json["verdict"] == "drain",
        format!("{count} requests"),
    );
    // Resumed by hand, drained again: a new drain, reported again.
    let _ = health(&n, "idle", "none");
    let count = seen.lock().expect("seen").len();
    ok &= check(
        "azure: a new drain is reported again",
        count == 6,
        format!("{count} requests"),
    );
    ok
}

fn azure_hung() -> bool {
    let (port, _) = server(true);
    let n = node(&azure_config(port));
    let r = health(&n, "idle", "none");
    check(
        "azure: a hung endpoint is bounded and logged, the drain stands",
        r.scontrol.contains(DRAIN)
            && r.elapsed < Duration::from_secs(15)
            && r.stderr
                .lines()
                .filter(|l| l.contains("azure: impact report failed"))
                .count()
                == 1,
        format!("{} ms: {}", r.elapsed.as_millis(), r.stderr.trim()),
    )
}

fn oci() -> bool {
    let probe = node("");
    let dir = probe.dir.path().join("oci");
    std::fs::create_dir(&dir).expect("oci dir");
    let file = dir.join("healthchecks");
    std::fs::write(&file, r#"{"active_healthcheck_recommendation": "Healthy"}"#).expect("seed");
    let n = node(&format!(
        "[drain]\nhandoff = \"oci\"\n[handoff]\noci_file = \"{}\"\n",
        file.display()
    ));
    let r = health(&n, "idle", "none");
    let v: serde_json::Value = std::fs::read(&file)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let mut ok = check(
        "oci: the record says what to do, other keys kept",
        r.scontrol.contains(DRAIN)
            && v["passive_healthcheck_recommendation"] == "Reboot"
            && v["passive_healthcheck_status"][0] == "Xid Error"
            && v["passive_healthcheck_logs"]
                .as_str()
                .is_some_and(|l| l.starts_with("gpu-affinity: GPU_XID_79 gpu="))
            && v["passive_healthcheck_time"]
                .as_str()
                .is_some_and(|t| t.len() == 19)
            && v["active_healthcheck_recommendation"] == "Healthy",
        &v,
    );
    // Healthy again (the XID gone): the record says so.
    let root = n.dir.path().join("root");
    std::fs::write(root.join("dev/kmsg"), "6,1,100,-;Linux version 6.1\n").expect("kmsg");
    let _ = health(&n, "idle", "none");
    let v: serde_json::Value = std::fs::read(&file)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    ok &= check(
        "oci: healthy again",
        v["passive_healthcheck_recommendation"] == "Healthy"
            && v["passive_healthcheck_status"] == "Healthy",
        &v,
    );
    ok
}

fn bad_config() -> bool {
    let n = node("[handoff]\ntimeout_s = 0\n");
    let r = health(&n, "idle", "none");
    let lines: Vec<&str> = r.stderr.lines().collect();
    check(
        "a bad [handoff] value: one line naming the key, nothing changed",
        lines.len() == 1
            && lines[0].contains("[handoff] timeout_s = 0 is invalid")
            && r.scontrol.is_empty(),
        r.stderr.trim(),
    )
}
