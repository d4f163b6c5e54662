//! Writes each fuzz target's seed corpus: `seeds OUT_DIR [TOPOLOGIES_DIR]`.
//!
//! Seeds come from what the parsers really meet, generated fresh at fuzz time so nothing
//! is copied into the project: the topology files under TOPOLOGIES_DIR (the project's
//! `../shared/topologies`), the embedded machine catalog and fabric profiles, the NCCL
//! topology files the plugin would generate for each catalog machine, and the sysfs /
//! procfs fixture trees rendered from them (attribute files, link targets, names).
//! Files are named by a hash of their bytes, so rerunning adds nothing twice and a
//! corpus libFuzzer grew in OUT_DIR is kept.
//!
//! Built as a libFuzzer binary that does its work in libFuzzer's init hook and exits
//! before any fuzzing: the sancov flags instrument every crate of the build, and only a
//! binary linked with libFuzzer resolves the coverage callbacks. A plain build would cost
//! CI a second, uninstrumented compile of core and its dependencies.
#![no_main]

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use gpu_affinity::catalog;
use gpu_affinity::fabric::{profiles, topo_xml};
use gpu_affinity::health::xid;
use gpu_affinity::model::Machine;
use gpu_affinity::sources::{
    self,
    fixture::{self, Entry},
};

/// `sysfs_attr` picks its parser with the first byte; these match its `match`.
mod attr {
    pub const PCI_ID: u8 = 0;
    pub const PCI_CLASS: u8 = 1;
    pub const UEVENT: u8 = 2;
    pub const NUMA_NODE: u8 = 3;
    pub const LINK_WIDTH: u8 = 4;
    pub const TEXT: u8 = 5;
    pub const CPUINFO: u8 = 6;
    pub const ROOT_NAME: u8 = 7;
    pub const DEVICE_PATH: u8 = 8;
    pub const RESOLVE: u8 = 9;
    pub const NUMBERED: u8 = 10;
    pub const PCI_ADDR: u8 = 11;
}

/// `health_parse` picks its parser with the first byte.
mod health_pick;
use health_pick as health;

struct Corpus {
    out: PathBuf,
    written: usize,
}

impl Corpus {
    fn add(&mut self, target: &str, bytes: &[u8]) -> std::io::Result<()> {
        let dir = self.out.join(target);
        std::fs::create_dir_all(&dir)?;
        let mut h = DefaultHasher::new();
        bytes.hash(&mut h);
        let path = dir.join(format!("seed-{:016x}", h.finish()));
        if !path.exists() {
            std::fs::write(path, bytes)?;
            self.written += 1;
        }
        Ok(())
    }

    fn attr(&mut self, which: u8, bytes: &[u8]) -> std::io::Result<()> {
        self.picked("sysfs_attr", which, bytes)
    }

    fn health(&mut self, which: u8, bytes: &[u8]) -> std::io::Result<()> {
        self.picked("health_parse", which, bytes)
    }

    /// A seed for a target whose first byte picks the parser.
    fn picked(&mut self, target: &str, which: u8, bytes: &[u8]) -> std::io::Result<()> {
        let mut v = vec![which];
        v.extend_from_slice(bytes);
        self.add(target, &v)
    }

    /// What Slurm and the kernel write about `machine`'s GPUs: its gres.conf lines, the
    /// hostlists in them, SLURM_STEP_GPUS / SLURMD_TRES_BIND values, and an XID record
    /// naming each GPU by the bus id the driver prints.
    fn gpus(&mut self, machine: &Machine) -> std::io::Result<()> {
        let n = machine.gpus.len();
        if n == 0 {
            return Ok(());
        }
        let last = n - 1;
        let files = format!("/dev/nvidia[0-{last}]");
        let minors: Vec<String> = machine
            .gpus
            .iter()
            .filter_map(|g| g.minor)
            .map(|m| m.to_string())
            .collect();
        let written = format!("/dev/nvidia[{}]", minors.join(","));
        for list in [&files, &written, &format!("gpu[01-{n:02}],login1")] {
            self.add("hostlist", list.as_bytes())?;
        }
        for conf in [
            format!("Name=gpu File={files}\n"),
            format!("AutoDetect=nvml\nName=gpu Type=h100 File={written} Cores=0-47\n"),
            format!(
                "NodeName=gpu[01-16] Name=gpu File={files} # {n} GPUs\nNodeName=n1 AutoDetect=nvidia\n"
            ),
            "Name=gpu MultipleFiles=/dev/nvidia[0-1] \\\n  Count=1\n".to_string(),
        ] {
            self.add("gres_conf", conf.as_bytes())?;
        }
        let node = u8::try_from(n).unwrap_or(u8::MAX);
        for (step, bind) in [
            (format!("0-{last}"), None),
            ("0,1".to_string(), Some("gpu:per_task:1")),
            (format!("{last},0"), Some("gpu:map_gpu:1,0*2")),
            (format!("0-{last}"), Some("gpu:verbose,mask_gpu:0x3,0xc")),
            ("1".to_string(), Some("gpu:closest")),
        ] {
            let mut v = vec![node, 0, 1, 0, 0, 0];
            v.extend_from_slice(step.as_bytes());
            if let Some(bind) = bind {
                v.push(0);
                v.extend_from_slice(bind.as_bytes());
            }
            self.add("gpu_ids", &v)?;
        }
        let mut kmsg = String::new();
        for (i, g) in machine.gpus.iter().enumerate() {
            let bus = g.pci.to_string();
            let bus = bus.rsplit_once('.').map_or(bus.as_str(), |(b, _)| b);
            kmsg.push_str(&format!(
                "6,{},5000000,-;NVRM: Xid (PCI:{bus}): 79, pid=1234, name=python, GPU has fallen off the bus.\n SUBSYSTEM=pci\n",
                1200 + i
            ));
        }
        self.add("xid_kmsg", kmsg.as_bytes())
    }
}

/// Every `*.xml` file under `dir`, depth first, sorted (stable seed names).
fn xml_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let path = e.path();
        if e.file_type()?.is_dir() {
            xml_files(&path, out)?;
        } else if path.extension().is_some_and(|x| x == "xml") {
            out.push(path);
        }
    }
    Ok(())
}

/// The parser a fixture file's name says it is read with, if any.
fn fixture_file(c: &mut Corpus, path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    match name {
        "vendor" | "device" | "subsystem_vendor" | "subsystem_device" => {
            c.attr(attr::PCI_ID, contents)
        }
        "class" => c.attr(attr::PCI_CLASS, contents),
        "uevent" => c.attr(attr::UEVENT, contents),
        "numa_node" => c.attr(attr::NUMA_NODE, contents),
        "current_link_width" | "max_link_width" => c.attr(attr::LINK_WIDTH, contents),
        "current_link_speed" | "max_link_speed" => {
            c.health(health::LINK_SPEED, contents)?;
            c.attr(attr::TEXT, contents)
        }
        "state" => {
            c.health(health::PORT_STATE, contents)?;
            c.attr(attr::TEXT, contents)
        }
        "information" => c.attr(attr::TEXT, contents),
        "rate" => c.health(health::PORT_RATE, contents),
        "link_downed" => c.health(health::COUNTER, contents),
        "cpuinfo" => c.attr(attr::CPUINFO, contents),
        "config" => c.add("pci_config", contents),
        "cpumap" | "local_cpus" => c.add("cpumask", contents),
        n if n.ends_with("cpulist") || n.ends_with("_list") || n == "possible" || n == "online" => {
            c.add("cpulist", contents)
        }
        _ => Ok(()),
    }
}

/// Names and link targets of a fixture tree: what the reader hands `root_name`,
/// `device_path`, `resolve`, `numbered` and the PCI address parser.
fn fixture_names(c: &mut Corpus, path: &Path, target: Option<&Path>) -> std::io::Result<()> {
    let text = path.to_string_lossy();
    for part in text.split('/') {
        if part.starts_with("pci") {
            c.attr(attr::ROOT_NAME, part.as_bytes())?;
        } else if part.matches(':').count() == 2 {
            c.attr(attr::PCI_ADDR, part.as_bytes())?;
        } else if let Some(prefix) = ["node", "cpu"].iter().find(|p| part.starts_with(**p)) {
            c.attr(attr::NUMBERED, format!("{part}\0{prefix}").as_bytes())?;
        }
    }
    if let Some(target) = target {
        let target = target.to_string_lossy();
        c.attr(attr::DEVICE_PATH, target.as_bytes())?;
        let dir = path
            .parent()
            .map(|p| p.to_string_lossy())
            .unwrap_or_default();
        c.attr(attr::RESOLVE, format!("{dir}\0{target}").as_bytes())?;
    }
    Ok(())
}

fn run(out: &Path, topologies: Option<&Path>) -> std::io::Result<usize> {
    let mut c = Corpus {
        out: out.to_path_buf(),
        written: 0,
    };

    // Real vendor and hwloc files: each XML target gets all of them (parse_machine_xml
    // takes either format, and each format's parser should refuse the other's cleanly).
    if let Some(dir) = topologies {
        let mut files = Vec::new();
        xml_files(dir, &mut files)?;
        for file in files {
            let text = std::fs::read(&file)?;
            for target in ["topology", "nccl_xml", "hwloc_xml"] {
                c.add(target, &text)?;
            }
            // The GPUs' bus ids as the driver prints them in XIDs, and gres.conf lines.
            if let Ok(Ok(machine)) = std::str::from_utf8(&text).map(sources::parse_machine_xml) {
                c.gpus(&machine)?;
            }
        }
    }

    for name in catalog::names() {
        if let Some(text) = catalog::source(name) {
            c.add("catalog", text.as_bytes())?;
        }
        let Ok(machine) = catalog::machine(name) else {
            continue;
        };
        c.gpus(&machine)?;
        // The NCCL file the plugin generates for this machine.
        let xml = topo_xml::render(&machine, &machine.fabric_nics());
        c.add("topology", xml.as_bytes())?;
        c.add("nccl_xml", xml.as_bytes())?;
        // Its fixture sysfs tree: every attribute the reader parses.
        let Ok(entries) = fixture::render(&machine) else {
            continue;
        };
        for entry in entries {
            match entry {
                Entry::File { path, contents } => {
                    fixture_file(&mut c, &path, &contents)?;
                    fixture_names(&mut c, &path, None)?;
                }
                Entry::Symlink { path, target } => fixture_names(&mut c, &path, Some(&target))?,
                Entry::Dir(path) => fixture_names(&mut c, &path, None)?,
            }
        }
    }
    // A small description that extends a built-in one, as an admin's file would.
    if let Some(first) = catalog::names().first() {
        let text = format!("name = \"mine\"\nextends = \"{first}\"\n");
        c.add("catalog", text.as_bytes())?;
    }

    for (_, text) in profiles::embedded() {
        c.add("profile", text.as_bytes())?;
    }
    c.add("profile", b"NCCL_IB_HCA={rank_nics}")?;

    // The admin config: the documented example, and each key alone.
    let configs = [
        "[plugin]\ndefault = \"prefer\"\nenforce = \"strict\"\nsysfs_root = \"/\"\nrun_dir = \"/run/gpu-affinity\"\n\n[fabric]\nforce = [\"NCCL_IB_HCA\"]\nprofiles_dir = \"/etc/gpu-affinity/profiles.d\"\n",
        "[plugin]\ndefault = \"off\"\n",
        "[fabric]\nforce = []\n",
        "",
    ];
    for text in configs {
        c.add("admin_config", text.as_bytes())?;
    }

    // Forms the trees above do not hold: Slurm's S_STEP_ALLOC_CORES, odd masks.
    for text in ["0-3,8,10-11", "0-47,96-143\n", "", " 5 ", "0,2,4-6"] {
        c.add("cpulist", text.as_bytes())?;
    }
    for text in [
        "ffffffff,00000000",
        "0000ffff\n",
        "0",
        "1,00000000,00000000",
    ] {
        c.add("cpumask", text.as_bytes())?;
        c.add("hwloc_xml", text.as_bytes())?;
    }
    c.add("hwloc_xml", b"0xf...f,0x00000303,,0x03030303")?;
    c.attr(attr::CPUINFO, b"processor\t: 0\nphysical id\t: 0\nsiblings\t: 2\ncore id\t\t: 0\ncpu cores\t: 1\n\nprocessor\t: 1\nphysical id\t: 0\nsiblings\t: 2\ncore id\t\t: 0\ncpu cores\t: 1\n")?;
    c.attr(
        attr::TEXT,
        b"Model: \t\t NVIDIA H100 80GB HBM3\nDevice Minor: \t 0\n",
    )?;
    c.attr(attr::NUMA_NODE, b"-1\n")?;

    // Slurm text the machines above do not give: odd hostlists and range lists, and
    // cgroup.conf (gres_conf also runs constrain_devices).
    for text in [
        "node[01-04],gpu7",
        "r[1-2]n[1-2]",
        "a[007-010]b",
        "n1",
        // Slurm's shapes (issue 18): three brackets, empty pieces and blank separators,
        // text after a bracket, a blank in brackets (refused), an open range.
        "n[1-2]a[3-4]b[5-6]",
        "a,,b ,c\td\ne,",
        "gpu[1-2]-ib,gpu[3,5]x[1-2]-ib",
        "n[1, 3]",
        "n[1-]",
    ] {
        c.add("hostlist", text.as_bytes())?;
    }
    c.add("gres_conf", b"ConstrainDevices=yes\nConstrainCores=no\n")?;
    for text in [
        "ClusterName=c1\nPlugStackConfig=/etc/slurm/spank/plugstack.conf\n",
        "SlurmctldHost=h1 plugstackconfig = \"/a b/p.conf\" # comment\ninclude nodes.conf\n",
        "Key=a\\#b PlugStackConfig=\"unterminated\n",
    ] {
        c.add("slurm_conf", text.as_bytes())?;
    }
    c.add(
        "gres_conf",
        b"AutoDetect=off\nName=gpu Type=\"a 100\" File=/dev/nvidia0\n",
    )?;
    // srun_args: byte 0 the input variables set (bit per variable), then srun's command
    // line NUL-separated as /proc/self/cmdline has it.
    for (vars, line) in [
        (0u8, "srun -N2 --gres=gpu:1 true"),
        (0, "srun -G 2 -n4 python train.py --gpus 8"),
        (
            0,
            "srun --tres-per-task=gres/gpu:h100:1 --ntasks 2 hostname",
        ),
        (0, "srun -Gx --gres none -- nvidia-smi"),
        (1 << 4, "srun -N4 gpu"),
        (1 << 1, "srun -N4 true"),
    ] {
        let mut v = vec![vars];
        v.extend(
            line.split(' ')
                .flat_map(|w| [w.as_bytes(), b"\0"])
                .flatten(),
        );
        c.add("srun_args", &v)?;
    }
    // ranges: max_value 100, max_count 16, allow_empty; then the text.
    for text in ["0-3,8,10-11", "5, 0-2 ,007", "", "1,,2", "0-4294967295"] {
        let mut v = vec![100, 0, 0, 0, 16, 0, 0, 0, 1];
        v.extend_from_slice(text.as_bytes());
        c.add("ranges", &v)?;
    }

    // What the health binaries read from procfs and Slurm.
    c.health(
        health::MOUNTS,
        b"fs-1.fsx:/x /fsx lustre rw,relatime 0 0\n/dev/sda1 / ext4 rw 0 0\nsrv:/a /mnt/my\\040data nfs4 ro,vers=4.2 0 0\n",
    )?;
    c.health(
        health::SINFO,
        b"n1|gpu*|idle|gpu:8|none\nn2|gpu*|drained|gpu:h100:8(S:0-1)|gpu-affinity: GPU_XID_79 gpu=0000:53:00.0\nn3|gpu|drained|(null)|admin: a|b\n",
    )?;
    for gres in [
        "gpu:8",
        "gpu:h100:4(S:0),gpu:a100:4",
        "(null)",
        "gpu:h100:8(S:0-1),nic:1",
    ] {
        c.health(health::GRES, gres.as_bytes())?;
    }
    c.health(health::PORT_RATE, b"400 Gb/sec (4X NDR)\n")?;
    c.health(health::LINK_SPEED, b"16.0 GT/s PCIe\n")?;
    c.health(health::PORT_STATE, b"4: ACTIVE\n")?;
    c.health(health::COUNTER, b"17\n")?;
    // Empty files and output: every reader can meet them.
    for which in 0..health::COUNT {
        c.health(which, b"")?;
    }
    c.add(
        "xid_kmsg",
        b"[  12.3] NVRM: Xid (PCI:0000:9b:00): 48, pid='<unknown>', DBE\n6,7,1,-;NVRM: Xid (0000:1a:00.0): 95, uncontained\ngarbage;;;\n",
    )?;
    // Forged shapes (issue 17): process names in segfault, OOM and trap lines, user-space
    // writes of the driver's text, loose forms the driver never prints.
    c.add(
        "xid_kmsg",
        b"6,10,1,-;NVRM: Xid:79[12483]: segfault at 0 ip 0 sp 0 error 6\n3,11,1,-;Killed process 12483 (NVRM: Xid:79) total-vm:1kB\n6,12,1,-;traps: NVRM: Xid:79[12483] trap int3\n12,13,1,-;NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=x\n6,14,1,-;NVRM: Xid (PCI:0000:53:00): 79, pid=9, name=evil[1]: x\n",
    )?;
    // A driver (re)load between XIDs: the ones before it stop counting.
    c.add(
        "xid_kmsg",
        b"4,10,1,-;NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=x\n6,20,2,-;NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.86.15\n4,30,3,-;NVRM: Xid (PCI:0000:53:00): 48, pid=1, name=x\n",
    )?;
    c.add("xid_policy", xid::EMBEDDED_POLICY.as_bytes())?;
    c.health(health::BOOT_ID, b"0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9\n")?;
    // `dcgmi diag -j` as DCGM 4.x (entity_group / entity_id) and 3.x (gpu_id) write it,
    // and the runtime-error form; nccl-tests' all_reduce_perf table and summary lines.
    c.add(
        "dcgm_diag",
        br#"{"DCGM Diagnostic":{"test_categories":[{"category":"Hardware","tests":[{"name":"memory","results":[{"entity_group":"GPU","entity_group_id":1,"entity_id":0,"status":"Pass"},{"entity_group":"GPU","entity_group_id":1,"entity_id":1,"status":"Fail","warnings":[{"error_category":10,"error_id":65,"error_severity":2,"warning":"memory mismatch"}]}],"test_summary":{"status":"Fail"}}]}]},"metadata":{"version":"4.2.3"}}"#,
    )?;
    c.add(
        "dcgm_diag",
        br#"{"DCGM GPU Diagnostic":{"test_categories":[{"category":"Integration","tests":[{"name":"PCIe","results":[{"gpu_id":"3","status":"Warn","warnings":[{"warning":"slow"}]}]}]}]}}"#,
    )?;
    c.add(
        "dcgm_diag",
        br#"{"DCGM Diagnostic":{"runtime_error":"Unable to connect to host engine"}}"#,
    )?;
    c.add(
        "all_reduce",
        b"# nThread 1 nGpus 8 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n           8             2     float     sum      -1    34.56    0.00    0.00      0    33.21    0.00    0.00      0\n  1073741824     268435456     float     sum      -1   4412.3  243.35  425.86      0   4398.7  244.10  427.18      0\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 212.93 \n#\n",
    )?;
    c.add(
        "all_reduce",
        b" Out of bounds values : 4 FAILED\n Avg bus bandwidth    : 1.5e+02 FAILED\n",
    )?;
    // `nvidia-imex-ctl -q`'s word, `-N -j`'s domain (a member down), and the
    // not-configured message both print.
    c.add("imex", b"READY\n")?;
    c.add(
        "imex",
        br#"{"nodes":{"0":{"status":"READY","host":"10.0.0.1","hostName":"t1","connections":{"0":{"host":"10.0.0.1","status":"CONNECTED","changed":true},"1":{"host":"10.0.0.2","status":"INVALID","changed":true}},"changed":true,"version":"580.95.05"},"1":{"status":"UNAVAILABLE","host":"10.0.0.2","connections":{}}},"timestamp":"9/4/2026 00:37:39.905","status":"DEGRADED"}"#,
    )?;
    c.add(
        "imex",
        b"Failed to read node configuration file /etc/nvidia-imex/nodes_config.cfg\n",
    )?;
    placement_seeds(&mut c)?;
    Ok(c.written)
}

/// The placement sources in the vendors' documented shapes (aws, oci, gcp, nvlink: the
/// `placement` target's first byte), each with its NODEMAP after a NUL; the block and
/// tree topologies core writes from each, as topology.conf and topology.yaml (the
/// `slurm_topology` target's first byte: even conf, odd yaml).
fn placement_seeds(c: &mut Corpus) -> std::io::Result<()> {
    let bad = |e: String| std::io::Error::other(e);
    use gpu_affinity::slurm::{placement, topology};
    let inputs: [(u8, &str, &str); 4] = [
        (
            0,
            r#"{"Instances":[{"InstanceId":"i-1","NetworkNodes":["nn-a","nn-b","nn-c"],"CapacityBlockId":"cr-1"},{"InstanceId":"i-2","NetworkNodes":["nn-a","nn-b","nn-d"]}]}"#,
            "n1 i-1\nn2 i-2\n",
        ),
        (
            1,
            r#"{"ocid1.instance.a":{"customerHPCIslandId":"isl","customerNetworkBlock":"nb","customerLocalBlock":"lb1","customerGpuMemoryFabric":"fab1"},"ocid1.instance.b":{"customerHPCIslandId":"isl","customerNetworkBlock":"nb","customerLocalBlock":"lb2"}}"#,
            "n1 ocid1.instance.a\n# comment\nn2 ocid1.instance.b\n",
        ),
        (
            2,
            r#"{"a4x-1":"/c1/r1/h1","a4x-2":"/c1/r2/h2"}"#,
            "n1 a4x-1\nn2 a4x-2\n",
        ),
        (
            3,
            r#"[{"hostname":"n1","gpus":[{"pci":"0000:1b:00.0","minor":0,"fabric":{"cluster_uuid":"5a1e0c2d-0000-4000-8000-00000000abcd","clique_id":7}}]},{"hostname":"n2","gpus":[{"pci":"0000:1b:00.0","minor":0,"fabric":{"cluster_uuid":"5a1e0c2d-0000-4000-8000-00000000abcd","clique_id":9}}]}]"#,
            "n1 n1\nn2 n2\n",
        ),
    ];
    for (source, file, nodemap) in inputs {
        let mut v = vec![source];
        v.extend_from_slice(file.as_bytes());
        v.push(0);
        v.extend_from_slice(nodemap.as_bytes());
        c.add("placement", &v)?;
        let sources = [
            placement::Source::Aws,
            placement::Source::Oci,
            placement::Source::Gcp,
            placement::Source::Nvlink,
        ];
        let files = [("seed".to_string(), file.to_string())];
        let places = placement::place(sources[usize::from(source)], &files, nodemap)
            .map_err(|e| bad(format!("placement seed {source}: {e}")))?;
        let (blocks, _) = placement::blocks(&places, "block");
        let (tree, _) = placement::tree(&places, "tree");
        let write = |t: &topology::Topology| topology::write_conf(t, "# seed\n");
        for text in [write(&blocks), write(&tree)] {
            let text = text.map_err(|e| bad(e.to_string()))?;
            c.add("slurm_topology", &[&[0u8][..], text.as_bytes()].concat())?;
        }
        let yaml = topology::write_yaml(&[blocks, tree], "").map_err(|e| bad(e.to_string()))?;
        c.add("slurm_topology", &[&[1u8][..], yaml.as_bytes()].concat())?;
    }
    c.add(
        "slurm_topology",
        b"\0BlockName=b1 Nodes=n[1-4]\nBlockSizes=2,4\n",
    )?;
    c.add("hostlist", b"n1\nn2\nn02\nn3\nrack1-n9\nrack1-n10\n")?;
    Ok(())
}

/// Generate, then end the process: libFuzzer must not go on to fuzz.
fn generate() {
    std::process::exit(seeds_main())
}

fn seeds_main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(out) = args.first() else {
        eprintln!("usage: seeds OUT_DIR [TOPOLOGIES_DIR]");
        return 2;
    };
    let topologies = args.get(1).map(Path::new).filter(|p| p.is_dir());
    match run(Path::new(out), topologies) {
        Ok(n) => {
            println!("seeds: {n} new seed files under {out}");
            0
        }
        Err(e) => {
            eprintln!("seeds: {e}");
            1
        }
    }
}

libfuzzer_sys::fuzz_target!(init: generate(), |_data: &[u8]| {});
