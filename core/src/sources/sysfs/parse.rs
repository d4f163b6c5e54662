//! Pure parsers over the bytes the sysfs/procfs reader returns. No I/O here.

use std::collections::BTreeMap;

use crate::cpuset::CpuSet;
use crate::pci::PciAddr;

/// What a value should have looked like; the caller adds the file it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad value {value:?}: expected {expected}")]
pub struct ParseError {
    pub value: String,
    pub expected: &'static str,
}

fn bad(text: &str, expected: &'static str) -> ParseError {
    ParseError {
        value: text.to_string(),
        expected,
    }
}

/// The attribute's text without the kernel's trailing newline; invalid UTF-8 is replaced
/// so an odd byte still shows in an error message.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

/// Free text (DMI strings, link speeds, port state): trimmed, empty = unknown.
pub fn optional_text(bytes: &[u8]) -> Option<String> {
    Some(text(bytes)).filter(|t| !t.is_empty())
}

fn hex(text: &str, expected: &'static str) -> Result<u32, ParseError> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    if digits.is_empty() || digits.len() > 8 {
        return Err(bad(text, expected));
    }
    u32::from_str_radix(digits, 16).map_err(|_| bad(text, expected))
}

/// A PCI `vendor` / `device` attribute: "0x10de".
pub fn pci_id(bytes: &[u8]) -> Result<u16, ParseError> {
    let t = text(bytes);
    const EXPECTED: &str = "a 16-bit hex id such as 0x10de";
    let v = hex(&t, EXPECTED)?;
    u16::try_from(v).map_err(|_| bad(&t, EXPECTED))
}

/// A PCI `class` attribute: "0x030200" (24 bits).
pub fn pci_class(bytes: &[u8]) -> Result<u32, ParseError> {
    let t = text(bytes);
    const EXPECTED: &str = "a 24-bit hex class such as 0x030200";
    let v = hex(&t, EXPECTED)?;
    if v > 0xff_ffff {
        return Err(bad(&t, EXPECTED));
    }
    Ok(v)
}

/// A PCI function's identity: class, vendor and device ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PciIds {
    pub class: u32,
    pub vendor: u16,
    pub device: u16,
}

/// A PCI function's `uevent` ("PCI_CLASS=30200", "PCI_ID=10DE:2330"): class and ids in
/// one read instead of three. `None` when the keys are not there.
pub fn pci_uevent(bytes: &[u8]) -> Result<Option<PciIds>, ParseError> {
    let content = String::from_utf8_lossy(bytes);
    let (mut class, mut id) = (None, None);
    for line in content.lines() {
        if let Some(v) = line.strip_prefix("PCI_CLASS=") {
            class = Some(v.trim());
        } else if let Some(v) = line.strip_prefix("PCI_ID=") {
            id = Some(v.trim());
        }
    }
    let (Some(class), Some(id)) = (class, id) else {
        return Ok(None);
    };
    let class = pci_class(class.as_bytes())?;
    const EXPECTED: &str = "PCI_ID=VVVV:DDDD in hex";
    let (v, d) = id.split_once(':').ok_or_else(|| bad(id, EXPECTED))?;
    let hex16 = |t: &str| {
        if t.is_empty() || t.len() > 4 {
            return Err(bad(id, EXPECTED));
        }
        u16::from_str_radix(t, 16).map_err(|_| bad(id, EXPECTED))
    };
    Ok(Some(PciIds {
        class,
        vendor: hex16(v)?,
        device: hex16(d)?,
    }))
}

/// A NUMA node's `distance` row: space-separated distances, one per node in id order.
/// `None` when it is empty or not all numbers.
pub fn distance_row(bytes: &[u8]) -> Option<Vec<u32>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let row: Option<Vec<u32>> = text.split_whitespace().map(|d| d.parse().ok()).collect();
    row.filter(|r| !r.is_empty())
}

/// A `numa_node` attribute: a node id, or -1 when the platform does not say (VMs).
pub fn numa_node(bytes: &[u8]) -> Result<Option<u32>, ParseError> {
    let t = text(bytes);
    if t == "-1" {
        return Ok(None);
    }
    t.parse()
        .map(Some)
        .map_err(|_| bad(&t, "a NUMA node id or -1"))
}

/// A `current_link_width` / `max_link_width` attribute: lanes as a decimal number.
pub fn link_width(bytes: &[u8]) -> Result<Option<u8>, ParseError> {
    let t = text(bytes);
    if t.is_empty() {
        return Ok(None);
    }
    t.parse()
        .map(Some)
        .map_err(|_| bad(&t, "a link width in lanes, e.g. 16"))
}

/// A host bridge (root complex) directory name, "pci0000:10" or "pci10000:e0"
/// (VMD and Hyper-V domains are wider than four digits).
pub fn root_name(name: &str) -> Option<(u32, u8)> {
    let rest = name.strip_prefix("pci")?;
    let (domain, bus) = rest.split_once(':')?;
    if domain.len() < 4 || domain.len() > 8 || bus.len() != 2 {
        return None;
    }
    let domain = u32::from_str_radix(domain, 16).ok()?;
    let bus = u8::from_str_radix(bus, 16).ok()?;
    Some((domain, bus))
}

/// Where a device sits, from its resolved /sys/devices path: the root complex and the PCI
/// functions from the root bus down to the device itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevicePath {
    /// "pci0000:10"
    pub root: String,
    /// Root-bus function first, the device itself last (never empty).
    pub chain: Vec<PciAddr>,
}

/// Parse a link such as `../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0` (or
/// `.../pci0000:00/0000:00:03.0/virtio2/net/eth0`): the last root complex on the path,
/// then the run of PCI functions below it. The text is parsed, not resolved, so it works
/// the same under any root directory. `None` when the path holds no PCI function
/// (virtual devices such as `lo`).
pub fn device_path(link: &str) -> Option<DevicePath> {
    let mut root: Option<&str> = None;
    let mut chain = Vec::new();
    let mut ended = false;
    for part in link.split('/') {
        if root_name(part).is_some() {
            // A nested host bridge (VMD, Hyper-V vPCI) starts a new hierarchy.
            root = Some(part);
            chain.clear();
            ended = false;
        } else if root.is_some() && !ended {
            match part.parse::<PciAddr>() {
                // Only the full dddd:bb:dd.f form names a PCI function in sysfs.
                Ok(addr) if part.matches(':').count() == 2 => chain.push(addr),
                _ => ended = !chain.is_empty(),
            }
        }
    }
    let root = root?;
    (!chain.is_empty()).then(|| DevicePath {
        root: root.to_string(),
        chain,
    })
}

/// Where a relative symlink found in directory `dir` leads, as a path under the same
/// root ("sys/bus/pci/devices" + "../../../devices/pci0000:10/0000:10:1c.0" =
/// "sys/devices/pci0000:10/0000:10:1c.0"). An absolute target starts from the root.
pub fn resolve(dir: &str, target: &str) -> String {
    let mut parts: Vec<&str> = if target.starts_with('/') {
        Vec::new()
    } else {
        dir.split('/').filter(|p| !p.is_empty()).collect()
    };
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// The facts in /proc/driver/nvidia/gpus/ADDR/information.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NvidiaInfo {
    pub model: Option<String>,
    pub minor: Option<u32>,
}

/// Parse the NVIDIA driver's `information` file ("Model: \t\t NVIDIA H100 80GB HBM3",
/// "Device Minor: \t 0"). Missing lines are unknown; a non-numeric minor is an error.
pub fn nvidia_information(bytes: &[u8]) -> Result<NvidiaInfo, ParseError> {
    let content = String::from_utf8_lossy(bytes);
    let mut info = NvidiaInfo::default();
    for line in content.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "Model" => info.model = Some(value.to_string()).filter(|v| !v.is_empty()),
            "Device Minor" => {
                info.minor = Some(
                    value
                        .parse()
                        .map_err(|_| bad(value, "a device minor number, e.g. 0"))?,
                );
            }
            _ => {}
        }
    }
    Ok(info)
}

/// Physical cores from /proc/cpuinfo: the threads that share a `physical id` and `core id`.
///
/// One read instead of one `thread_siblings_list` per core. `None` whenever cpuinfo cannot
/// vouch for the grouping, and the caller reads sysfs instead: no `processor` records, a
/// record without `physical id` / `core id` (ARM, s390), a number that does not parse,
/// or a package whose thread and core counts disagree with its own `siblings` and
/// `cpu cores` lines (core ids that repeat inside a package, as on some multi-die parts),
/// or a `processor` number listed twice (it would put one thread in two cores).
pub fn cpuinfo_cores(bytes: &[u8]) -> Option<Vec<CpuSet>> {
    #[derive(Default)]
    struct Record {
        cpu: Option<u32>,
        package: Option<u32>,
        core: Option<u32>,
        siblings: Option<u32>,
        cores: Option<u32>,
    }
    let mut records: Vec<Record> = Vec::new();
    // Bytes, not text: the file is long (a ~1 KiB `flags` line per CPU on x86) and only
    // five short keys matter, all starting with 'p', 'c' or 's'.
    for line in bytes.split(|&b| b == b'\n') {
        if !matches!(line.first(), Some(b'p' | b'c' | b's')) {
            continue;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let key = line[..colon].trim_ascii_end();
        let value = &line[colon + 1..];
        let number = || {
            std::str::from_utf8(value.trim_ascii())
                .ok()?
                .parse::<u32>()
                .ok()
        };
        if key == b"processor" {
            records.push(Record {
                cpu: Some(number()?),
                ..Record::default()
            });
            continue;
        }
        let Some(record) = records.last_mut() else {
            continue;
        };
        match key {
            b"physical id" => record.package = Some(number()?),
            b"core id" => record.core = Some(number()?),
            b"siblings" => record.siblings = Some(number()?),
            b"cpu cores" => record.cores = Some(number()?),
            _ => {}
        }
    }
    if records.is_empty() {
        return None;
    }
    // (package, core) -> threads; package -> (threads, cores) as cpuinfo claims them.
    let mut cores: BTreeMap<(u32, u32), CpuSet> = BTreeMap::new();
    let mut claimed: BTreeMap<u32, (u32, u32)> = BTreeMap::new();
    let mut threads = CpuSet::new();
    for r in &records {
        let (cpu, package, core) = (r.cpu?, r.package?, r.core?);
        if !threads.insert(cpu) {
            return None;
        }
        let claim = (r.siblings?, r.cores?);
        if *claimed.entry(package).or_insert(claim) != claim {
            return None;
        }
        cores.entry((package, core)).or_default().insert(cpu);
    }
    for (package, (threads, core_count)) in claimed {
        let mine = cores.range((package, 0)..=(package, u32::MAX));
        let (mut seen_cores, mut seen_threads) = (0u32, 0u32);
        for (_, set) in mine {
            seen_cores += 1;
            seen_threads += set.len() as u32;
        }
        if (seen_threads, seen_cores) != (threads, core_count) {
            return None;
        }
    }
    Some(cores.into_values().collect())
}

/// The number in a directory name such as "node1" or "cpu17"; `None` for other names
/// ("cpufreq", "possible").
pub fn numbered(name: &str, prefix: &str) -> Option<u32> {
    let digits = name.strip_prefix(prefix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes() {
        assert_eq!(pci_id(b"0x10de\n"), Ok(0x10de));
        assert!(pci_id(b"0x110de\n").is_err());
        assert!(pci_id(b"").is_err());
        assert_eq!(pci_class(b"0x030200\n"), Ok(0x030200));
        assert!(pci_class(b"0x1030200").is_err());
        assert_eq!(distance_row(b"10 20 80\n"), Some(vec![10, 20, 80]));
        assert_eq!(distance_row(b"\n"), None);
        assert_eq!(distance_row(b"10 x\n"), None);
        assert_eq!(numa_node(b"-1\n"), Ok(None));
        assert_eq!(numa_node(b"1\n"), Ok(Some(1)));
        assert!(numa_node(b"abc\n").is_err());
        assert!(numa_node(b"-2\n").is_err());
        assert_eq!(link_width(b"16\n"), Ok(Some(16)));
        assert!(link_width(b"x16").is_err());
        assert_eq!(optional_text(b"  \n"), None);
        assert_eq!(
            optional_text(b"32.0 GT/s PCIe\n").as_deref(),
            Some("32.0 GT/s PCIe")
        );
    }

    #[test]
    fn uevent() {
        let ids = pci_uevent(
            b"DRIVER=nvidia\nPCI_CLASS=30200\nPCI_ID=10DE:2330\nPCI_SLOT_NAME=0000:53:00.0\n",
        )
        .expect("valid")
        .expect("has ids");
        assert_eq!(
            ids,
            PciIds {
                class: 0x030200,
                vendor: 0x10de,
                device: 0x2330
            }
        );
        assert_eq!(pci_uevent(b"DRIVER=x\n"), Ok(None));
        assert!(pci_uevent(b"PCI_CLASS=30200\nPCI_ID=10DE\n").is_err());
        assert!(pci_uevent(b"PCI_CLASS=zz\nPCI_ID=10DE:2330\n").is_err());
    }

    #[test]
    fn device_paths() {
        let p = device_path("../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0").expect("pci");
        assert_eq!(p.root, "pci0000:00");
        assert_eq!(p.chain.len(), 2);
        assert_eq!(p.chain[1].to_string(), "0000:01:00.0");
        let virtio =
            device_path("../../devices/pci0000:00/0000:00:03.0/virtio2/net/eth0").expect("virtio");
        assert_eq!(virtio.chain, vec!["0000:00:03.0".parse().expect("addr")]);
        assert_eq!(device_path("../../devices/virtual/net/lo"), None);
        let hyperv = device_path(
            "../../devices/LNXSYSTM:00/LNXSYBUS:00/VMBUS:00/abc-def/pci0001:00/0001:00:00.0/infiniband/mlx5_0",
        )
        .expect("hyper-v");
        assert_eq!(hyperv.root, "pci0001:00");
        let vmd = device_path(
            "/sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:01.0/10000:e1:00.0",
        )
        .expect("vmd");
        assert_eq!(vmd.root, "pci10000:e0");
        assert_eq!(vmd.chain.len(), 2);
    }

    #[test]
    fn resolves_links() {
        assert_eq!(
            resolve(
                "sys/bus/pci/devices",
                "../../../devices/pci0000:10/0000:10:1c.0"
            ),
            "sys/devices/pci0000:10/0000:10:1c.0"
        );
        assert_eq!(
            resolve("sys/class/net", "/sys/devices/virtual/net/lo"),
            "sys/devices/virtual/net/lo"
        );
    }

    #[test]
    fn nvidia() {
        let info = nvidia_information(
            b"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 17\nBus Location: \t 0000:53:00.0\nDevice Minor: \t 3\n",
        )
        .expect("valid");
        assert_eq!(info.model.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(info.minor, Some(3));
        assert!(nvidia_information(b"Device Minor: \t x\n").is_err());
        assert_eq!(
            nvidia_information(b"").expect("empty"),
            NvidiaInfo::default()
        );
    }

    #[test]
    fn cores_from_cpuinfo() {
        let rec = |cpu: u32, pkg: u32, core: u32| {
            format!(
                "processor\t: {cpu}\nvendor_id\t: GenuineIntel\nphysical id\t: {pkg}\nsiblings\t: 4\ncore id\t\t: {core}\ncpu cores\t: 2\nflags\t\t: fpu vme\n\n"
            )
        };
        let text: String = [
            (0, 0, 0),
            (1, 0, 1),
            (2, 1, 0),
            (3, 1, 1),
            (4, 0, 0),
            (5, 0, 1),
        ]
        .iter()
        .chain(&[(6, 1, 0), (7, 1, 1)])
        .map(|&(c, p, k)| rec(c, p, k))
        .collect();
        let cores = cpuinfo_cores(text.as_bytes()).expect("x86 cpuinfo");
        let shown: Vec<String> = cores.iter().map(|c| c.to_string()).collect();
        assert_eq!(shown, ["0,4", "1,5", "2,6", "3,7"]);
        // Core ids repeating inside a package (more threads per core than cpuinfo's own
        // counts allow): not trusted.
        let repeated: String = (0..4).map(|c| rec(c, 0, 0)).collect::<String>() + &rec(4, 1, 0);
        assert_eq!(cpuinfo_cores(repeated.as_bytes()), None);
        // ARM: no physical id / core id.
        assert_eq!(
            cpuinfo_cores(b"processor\t: 0\nBogoMIPS\t: 50.00\n\nprocessor\t: 1\n"),
            None
        );
        assert_eq!(cpuinfo_cores(b""), None);
        assert_eq!(cpuinfo_cores(b"processor\t: x\n"), None);
        assert_eq!(cpuinfo_cores(&[0xff, 0xfe]), None);
    }

    /// Found by the `sysfs_attr` fuzz target (reduced by hand from its input): the same
    /// `processor` twice, under two core ids, with counts that still add up, made CPU 52
    /// a thread of two cores.
    #[test]
    fn cpuinfo_with_a_repeated_processor_is_not_trusted() {
        let text = b"processor\t: 52\nphysical id\t: 2\nsiblings\t: 2\ncore id\t\t: 52\ncpu cores\t: 2\n\n\
                     processor\t: 52\nphysical id\t: 2\nsiblings\t: 2\ncore id\t\t: 53\ncpu cores\t: 2\n";
        assert_eq!(cpuinfo_cores(text), None);
    }
}
