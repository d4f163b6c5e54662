//! Cross-check a fixture tree against hwloc's own reading of it (`HWLOC_FSROOT=DIR
//! lstopo --of xml`): every GPU and NIC must sit under the PCIe bridges and the CPU set
//! (NUMA node) the model says.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::model::{Machine, class};
use gpu_affinity::pci::PciAddr;
use gpu_affinity::sources::hwloc_xml::parse_bitmap;

const LSTOPO_TIMEOUT: Duration = Duration::from_secs(60);

/// Run lstopo on the fixture tree in `root` and return its XML.
pub fn lstopo_xml(root: &Path) -> String {
    let out = root.with_extension("hwloc.xml");
    let spawned = Command::new("lstopo")
        .arg("--of")
        .arg("xml")
        .arg("--whole-io")
        .arg("-f")
        .arg(&out)
        .env("HWLOC_FSROOT", root)
        // The x86 backend reads this host's CPUID (its caches), not the fixture.
        .env("HWLOC_COMPONENTS", "-x86")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "lstopo not found: install hwloc (Debian: apt-get install hwloc) to run the hwloc cross-check; CI installs it"
        ),
        Err(e) => panic!("cannot run lstopo: {e}"),
    };
    // Drain stderr while lstopo runs: a full pipe (64 KiB of warnings) would stall it
    // until the timeout.
    let mut stderr_pipe = child.stderr.take().unwrap();
    let stderr_reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr_pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > LSTOPO_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "lstopo on {} did not finish within {LSTOPO_TIMEOUT:?}",
                root.display()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let stderr = stderr_reader.join().unwrap();
    assert!(
        status.success(),
        "lstopo failed on {}: {stderr}",
        root.display()
    );
    assert!(
        !stderr.contains("invalid information"),
        "hwloc rejected part of {}: {stderr}",
        root.display()
    );
    std::fs::read_to_string(&out).unwrap()
}

/// hwloc's bitmap text ("0x000000ff,0xffff0000"), read by core's own parser; an object's
/// cpuset is finite.
fn hwloc_cpuset(text: &str) -> CpuSet {
    let bitmap = parse_bitmap(text).unwrap_or_else(|e| panic!("hwloc cpuset {text:?}: {e}"));
    assert!(!bitmap.infinite, "hwloc cpuset {text:?} is infinite");
    bitmap.set
}

/// Where hwloc puts one PCI function: its bridges (nearest first, host bridge left out)
/// and the CPU set of the first non-I/O object above it.
#[derive(Debug, PartialEq, Eq)]
pub struct Placement {
    pub bridges: Vec<PciAddr>,
    pub cpus: CpuSet,
}

pub fn hwloc_placement(xml: &str, addr: PciAddr) -> Option<Placement> {
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(xml, options).unwrap();
    let node = doc.descendants().find(|n| {
        n.attribute("pci_busid")
            .and_then(|b| b.parse::<PciAddr>().ok())
            == Some(addr)
    })?;
    let mut bridges = Vec::new();
    for a in node
        .ancestors()
        .skip(1)
        .filter(|a| a.has_tag_name("object"))
    {
        match a.attribute("type") {
            Some("Bridge") => bridges.extend(
                a.attribute("pci_busid")
                    .map(|b| b.parse::<PciAddr>().unwrap()),
            ),
            Some("PCIDev") | Some("OSDev") => {}
            _ => {
                let cpus = hwloc_cpuset(a.attribute("cpuset").unwrap());
                return Some(Placement { bridges, cpus });
            }
        }
    }
    None
}

/// Whether hwloc can show this bridge: real PCI bus numbering, i.e. everything below it
/// in its own domain on higher buses. NCCL placeholder switches (ffff:ff:01.0 above
/// 0000:10:1c.0) cannot be, and hwloc leaves them out.
fn representable(m: &Machine, bridge: PciAddr) -> bool {
    let Some(d) = m.pci_device(bridge) else {
        return false;
    };
    class::is_bridge(d.class)
        && m.pci
            .iter()
            .filter(|x| m.ancestors(x.addr).contains(&bridge))
            .all(|x| x.addr.domain == bridge.domain && x.addr.bus > bridge.bus)
}

/// The placement the model implies for a GPU or NIC.
pub fn model_placement(m: &Machine, addr: PciAddr) -> Placement {
    let bridges = m
        .ancestors(addr)
        .into_iter()
        .filter(|b| representable(m, *b))
        .collect();
    let cpus = m
        .numa_of(addr)
        .and_then(|n| m.numa_node(n))
        .map(|n| n.cpus.clone())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| m.cpus());
    Placement { bridges, cpus }
}

/// Write `m` as a fixture, run lstopo on it, and compare every GPU's and NIC's place.
/// Returns how many devices were checked.
pub fn cross_check(m: &Machine) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    gpu_affinity::sources::fixture::write_fixture(m, &root).unwrap();
    let realized = gpu_affinity::sources::fixture::realized(m);
    let xml = lstopo_xml(&root);
    let mut checked = 0;
    let devices = realized
        .gpus
        .iter()
        .map(|g| g.pci)
        .chain(realized.nics.iter().map(|n| n.pci));
    for addr in devices {
        let seen =
            hwloc_placement(&xml, addr).unwrap_or_else(|| panic!("hwloc does not show {addr}"));
        assert_eq!(
            seen,
            model_placement(&realized, addr),
            "hwloc places {addr} elsewhere than the model"
        );
        checked += 1;
    }
    checked
}
