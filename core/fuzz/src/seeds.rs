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
use gpu_affinity::sources::fixture::{self, Entry};

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
        let mut v = vec![which];
        v.extend_from_slice(bytes);
        self.add("sysfs_attr", &v)
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
        "information" | "current_link_speed" | "max_link_speed" | "state" => {
            c.attr(attr::TEXT, contents)
        }
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

    // Real vendor and hwloc files: each XML target gets all of them (parse_topology
    // takes either format, and each format's parser should refuse the other's cleanly).
    if let Some(dir) = topologies {
        let mut files = Vec::new();
        xml_files(dir, &mut files)?;
        for file in files {
            let text = std::fs::read(&file)?;
            for target in ["topology", "nccl_xml", "hwloc_xml"] {
                c.add(target, &text)?;
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
    Ok(c.written)
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
