//! The sysfs/procfs attribute parsers (`sources::sysfs::parse`) and PCI addresses.
//!
//! One target for the family: the first byte picks the parser, the rest is the file's
//! bytes (or name / link text). Each parser is small, so one binary with a shared corpus
//! finds as much as ten would, for a tenth of the link and CI time.
#![no_main]

use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::pci::PciAddr;
use gpu_affinity::sources::sysfs::{name_order, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(bytes);
    match which % 12 {
        0 => {
            let _ = parse::pci_id(bytes);
        }
        1 => {
            if let Ok(class) = parse::pci_class(bytes) {
                assert!(class <= 0xff_ffff, "class {class:#x} wider than 24 bits");
            }
        }
        2 => {
            let _ = parse::pci_uevent(bytes);
        }
        3 => {
            let _ = parse::numa_node(bytes);
        }
        4 => {
            let _ = parse::link_width(bytes);
        }
        5 => {
            let _ = parse::optional_text(bytes);
            let _ = parse::nvidia_information(bytes);
        }
        6 => {
            if let Some(cores) = parse::cpuinfo_cores(bytes) {
                // Each thread belongs to one core: the cores are disjoint.
                let mut seen = CpuSet::new();
                for core in &cores {
                    assert!(!core.is_empty(), "an empty core");
                    assert!(seen.is_disjoint(core), "a thread in two cores");
                    seen = seen.union(core);
                }
            }
        }
        7 => {
            if let Some((domain, bus)) = parse::root_name(&text) {
                // The name the kernel would write for it parses back the same.
                let name = format!("pci{domain:04x}:{bus:02x}");
                assert_eq!(parse::root_name(&name), Some((domain, bus)), "{name}");
            }
        }
        8 => {
            if let Some(path) = parse::device_path(&text) {
                assert!(!path.chain.is_empty());
                assert!(
                    parse::root_name(&path.root).is_some(),
                    "root {:?}",
                    path.root
                );
            }
        }
        9 => {
            // The directory and the link target, split at the first NUL.
            let (dir, target) = text.split_once('\0').unwrap_or((&text, ""));
            let resolved = parse::resolve(dir, target);
            // Resolution stays under the root: no `..`, `.` or empty component survives.
            // `dir` is one the reader built from names it listed, so only the link
            // target is hostile; a dir with dot components is not a case to check.
            let clean_dir = dir.split('/').all(|p| p != "." && p != "..");
            assert!(
                !clean_dir
                    || resolved.is_empty()
                    || resolved.split('/').all(|p| !matches!(p, "" | "." | "..")),
                "{dir:?} + {target:?} = {resolved:?}"
            );
        }
        10 => {
            let (name, prefix) = text.split_once('\0').unwrap_or((&text, "node"));
            if let Some(n) = parse::numbered(name, prefix) {
                assert_eq!(parse::numbered(&format!("{prefix}{n}"), prefix), Some(n));
            }
            // The device-name order is a total order: swapping the sides reverses it.
            assert_eq!(name_order(name, prefix), name_order(prefix, name).reverse());
        }
        _ => {
            if let Ok(addr) = text.parse::<PciAddr>() {
                let canonical = addr.to_string();
                assert_eq!(canonical.parse::<PciAddr>(), Ok(addr), "{canonical}");
                // Only hex digits and the two separators make an address.
                assert!(
                    text.trim()
                        .bytes()
                        .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.'),
                    "{text:?} parsed as {canonical}"
                );
            }
        }
    }
});
