//! A PCI function's config space (the sysfs `config` file): ids, class and the PCI Express
//! link. The fixture writes it (hwloc reads the link from it) and the tests check that
//! what it wrote decodes to the model; discovery does not read it, because on real
//! hardware every byte is a config-space access (see the [`super`] module docs).
//!
//! Pure. Unprivileged readers get only the 64-byte header (the kernel hides the rest),
//! which holds the ids but not the capability list; [`pci_config`] then returns no link.
//!
//! The link is decoded the way the kernel decodes it for `current_link_speed` and friends:
//! speed codes become the kernel's text ("32.0 GT/s PCIe", "Unknown" for code 0), widths
//! the lane count, and the maximum speed prefers the Supported Link Speeds vector of Link
//! Capabilities 2, bounded by the Max Link Speed of Link Capabilities, as
//! `pcie_get_speed_cap()` does (Linux 6.13+).

use super::parse::PciIds;
use crate::model::PciLink;

/// How many bytes of config space discovery reads: the standard header plus the
/// capability area where the PCI Express capability lives.
pub const CONFIG_READ_BYTES: usize = 256;

/// The identity and (when the bytes hold it) the PCI Express link of one function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciConfig {
    pub ids: PciIds,
    /// `None` when the bytes hold no PCI Express capability (an unprivileged read, a
    /// conventional PCI function) or it carries a speed code the kernel's table may name
    /// differently: the caller then reads the link attributes.
    pub link: Option<PciLink>,
}

const VENDOR: usize = 0x00;
const DEVICE: usize = 0x02;
const STATUS: usize = 0x06;
const CLASS: usize = 0x09;
const CAPABILITY_POINTER: usize = 0x34;
/// Status register bit: the function has a capability list.
const STATUS_CAP_LIST: u16 = 1 << 4;
/// The standard header ends here; capabilities live between it and 0x100.
const HEADER_BYTES: usize = 0x40;
/// Each capability is at least 4 bytes, so a list longer than this has a loop.
const MAX_CAPABILITIES: usize = (CONFIG_READ_BYTES - HEADER_BYTES) / 4;

/// PCI Express capability: its id, and where its link registers sit inside it.
pub const CAP_ID_EXPRESS: u8 = 0x10;
pub const LINK_CAPABILITIES: usize = 0x0c;
pub const LINK_STATUS: usize = 0x12;
pub const LINK_CAPABILITIES_2: usize = 0x2c;
/// The PCI Express capability up to and including Link Capabilities 2.
pub const EXPRESS_CAP_BYTES: usize = LINK_CAPABILITIES_2 + 4;

/// The kernel's text for each link speed code (`pci_speed_string()`); code 0 (no link,
/// or a function that does not report one, e.g. an SR-IOV VF) reads "Unknown".
const SPEEDS: [&str; 7] = [
    "Unknown",
    "2.5 GT/s PCIe",
    "5.0 GT/s PCIe",
    "8.0 GT/s PCIe",
    "16.0 GT/s PCIe",
    "32.0 GT/s PCIe",
    "64.0 GT/s PCIe",
];

/// The kernel's text for a speed code; `None` for codes newer than this table.
pub fn speed_text(code: u8) -> Option<&'static str> {
    SPEEDS.get(usize::from(code)).copied()
}

/// The speed code for the kernel's text, the inverse of [`speed_text`].
pub fn speed_code(text: &str) -> Option<u8> {
    SPEEDS.iter().position(|s| *s == text).map(|i| i as u8)
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes([*bytes.get(at)?, *bytes.get(at + 1)?]))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes([
        *bytes.get(at)?,
        *bytes.get(at + 1)?,
        *bytes.get(at + 2)?,
        *bytes.get(at + 3)?,
    ]))
}

/// Decode config space. `None` when the bytes are too short for the ids or read as an
/// absent function (vendor 0xffff): the caller then falls back to `uevent`.
pub fn pci_config(bytes: &[u8]) -> Option<PciConfig> {
    let vendor = u16_at(bytes, VENDOR)?;
    let device = u16_at(bytes, DEVICE)?;
    if vendor == 0xffff || vendor == 0 {
        return None;
    }
    let class = u32::from(*bytes.get(CLASS)?)
        | u32::from(*bytes.get(CLASS + 1)?) << 8
        | u32::from(*bytes.get(CLASS + 2)?) << 16;
    let link = express_capability(bytes).and_then(|cap| express_link(bytes, cap));
    Some(PciConfig {
        ids: PciIds {
            class,
            vendor,
            device,
        },
        link,
    })
}

/// Where the PCI Express capability starts, following the capability list from 0x34.
/// The walk is bounded and never leaves the bytes it was given: a pointer into the header,
/// past the end, or back onto itself ends it.
pub fn express_capability(bytes: &[u8]) -> Option<usize> {
    let status = u16_at(bytes, STATUS)?;
    if status & STATUS_CAP_LIST == 0 {
        return None;
    }
    // The low two bits of every capability pointer are reserved.
    let mut at = usize::from(*bytes.get(CAPABILITY_POINTER)? & !0x3);
    for _ in 0..MAX_CAPABILITIES {
        if at < HEADER_BYTES {
            return None;
        }
        let id = *bytes.get(at)?;
        if id == CAP_ID_EXPRESS {
            return Some(at);
        }
        at = usize::from(*bytes.get(at + 1)? & !0x3);
    }
    None
}

/// The link registers of the PCI Express capability at `cap`.
fn express_link(bytes: &[u8], cap: usize) -> Option<PciLink> {
    let capabilities = u32_at(bytes, cap + LINK_CAPABILITIES)?;
    let status = u16_at(bytes, cap + LINK_STATUS)?;
    // A version 1 capability ends before Link Capabilities 2, which the kernel then
    // reads as 0; a version 2 one cut short by the read cannot say.
    let version = *bytes.get(cap + 2)? & 0xf;
    let capabilities_2 = if version >= 2 {
        u32_at(bytes, cap + LINK_CAPABILITIES_2)?
    } else {
        0
    };
    // Speeds above Max Link Speed are ignored; without any left, only the two speeds
    // Max Link Speed can name on its own (pre-3.0 functions) count.
    let max_code = (capabilities & 0xf) as u8;
    let vector = (capabilities_2 >> 1) & 0x7f & ((1u32 << max_code) - 1);
    let max_speed = match vector {
        0 if max_code <= 2 => max_code,
        0 => 0,
        v => (32 - v.leading_zeros()) as u8,
    };
    Some(PciLink {
        current_speed: Some(speed_text((status & 0xf) as u8)?.to_string()),
        current_width: Some(((status >> 4) & 0x3f) as u8),
        max_speed: Some(speed_text(max_speed)?.to_string()),
        max_width: Some(((capabilities >> 4) & 0x3f) as u8),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header with the given ids and, when `cap` is set, a PCI Express capability there.
    fn header(cap: Option<usize>) -> Vec<u8> {
        let mut c = vec![0u8; CONFIG_READ_BYTES];
        c[0..2].copy_from_slice(&0x10deu16.to_le_bytes());
        c[2..4].copy_from_slice(&0x2330u16.to_le_bytes());
        c[9..12].copy_from_slice(&[0x00, 0x02, 0x03]);
        if let Some(at) = cap {
            c[STATUS] = STATUS_CAP_LIST as u8;
            c[CAPABILITY_POINTER] = at as u8;
            c[at] = CAP_ID_EXPRESS;
            c[at + 2] = 2;
        }
        c
    }

    fn set_link(c: &mut [u8], cap: usize, max: (u8, u8), cur: (u8, u8), vector: u32) {
        let lnkcap = u32::from(max.0) | u32::from(max.1) << 4;
        c[cap + LINK_CAPABILITIES..][..4].copy_from_slice(&lnkcap.to_le_bytes());
        let lnksta = u16::from(cur.0) | u16::from(cur.1) << 4;
        c[cap + LINK_STATUS..][..2].copy_from_slice(&lnksta.to_le_bytes());
        let at = cap + LINK_CAPABILITIES_2;
        if let Some(dst) = c.get_mut(at..at + 4) {
            dst.copy_from_slice(&(vector << 1).to_le_bytes());
        }
    }

    #[test]
    fn ids_from_the_header_alone() {
        let c = header(None);
        let got = pci_config(&c[..64]).expect("ids");
        assert_eq!(
            got.ids,
            PciIds {
                class: 0x030200,
                vendor: 0x10de,
                device: 0x2330
            }
        );
        assert_eq!(got.link, None);
        // An unprivileged read: the capability is there but past the 64 bytes we got.
        let c = header(Some(0x40));
        assert_eq!(pci_config(&c[..64]).expect("ids").link, None);
    }

    #[test]
    fn short_or_absent_functions_fall_back() {
        assert_eq!(pci_config(&[]), None);
        assert_eq!(pci_config(&[0xde, 0x10, 0x30]), None);
        assert_eq!(pci_config(&header(None)[..11]), None);
        assert_eq!(pci_config(&[0xff; 64]), None);
    }

    #[test]
    fn link_from_the_express_capability() {
        let mut c = header(Some(0x60));
        // A switch capability first, pointing on to the PCIe one.
        c[0x34] = 0x40;
        c[0x40] = 0x01;
        c[0x41] = 0x60;
        set_link(&mut c, 0x60, (5, 16), (4, 8), 0b1_1111);
        let link = pci_config(&c).expect("ids").link.expect("link");
        assert_eq!(link.max_speed.as_deref(), Some("32.0 GT/s PCIe"));
        assert_eq!(link.max_width, Some(16));
        assert_eq!(link.current_speed.as_deref(), Some("16.0 GT/s PCIe"));
        assert_eq!(link.current_width, Some(8));
    }

    #[test]
    fn max_speed_as_the_kernel_computes_it() {
        let max_of = |lnkcap: u8, vector: u32| {
            let mut c = header(Some(0x40));
            set_link(&mut c, 0x40, (lnkcap, 16), (1, 16), vector);
            pci_config(&c).expect("ids").link.expect("link").max_speed
        };
        // No Link Capabilities 2: Max Link Speed itself.
        assert_eq!(max_of(2, 0).as_deref(), Some("5.0 GT/s PCIe"));
        // The vector's highest speed, bounded by Max Link Speed.
        assert_eq!(max_of(4, 0b1_1111).as_deref(), Some("16.0 GT/s PCIe"));
        // Max Link Speed 0 (a VF) leaves no speed: the kernel's "Unknown".
        assert_eq!(max_of(0, 0b111).as_deref(), Some("Unknown"));
        assert_eq!(max_of(0, 0).as_deref(), Some("Unknown"));
        // Without the vector, Max Link Speed alone names only 2.5 and 5.0 GT/s.
        assert_eq!(max_of(3, 0).as_deref(), Some("Unknown"));
        // A code newer than the table: no link from config, the attributes decide.
        let mut c = header(Some(0x40));
        set_link(&mut c, 0x40, (7, 16), (7, 16), 0);
        assert_eq!(pci_config(&c).expect("ids").link, None);
    }

    #[test]
    fn capability_walk_is_bounded_and_stays_inside() {
        // A loop: the capability points at itself.
        let mut c = header(Some(0x40));
        c[0x40] = 0x09;
        c[0x41] = 0x40;
        assert_eq!(express_capability(&c), None);
        // A two-entry loop.
        c[0x41] = 0x50;
        c[0x50] = 0x05;
        c[0x51] = 0x40;
        assert_eq!(express_capability(&c), None);
        // Pointers into the header or past the bytes read.
        let mut c = header(Some(0x40));
        c[0x40] = 0x09;
        c[0x41] = 0x10;
        assert_eq!(express_capability(&c), None);
        let mut c = header(Some(0xfc));
        c[0xfc] = 0x09;
        c[0xfd] = 0xfc;
        assert_eq!(express_capability(&c), None);
        assert_eq!(pci_config(&c[..0x80]).expect("ids").link, None);
        // The capability found, but its registers cut off: no link, no panic.
        let c = header(Some(0xf8));
        assert_eq!(express_capability(&c), Some(0xf8));
        assert_eq!(pci_config(&c).expect("ids").link, None);
        // Version 2 needs Link Capabilities 2 inside the bytes; version 1 has none.
        let mut c = header(Some(0xd8));
        set_link(&mut c, 0xd8, (2, 4), (2, 4), 0);
        assert_eq!(pci_config(&c).expect("ids").link, None);
        c[0xda] = 1;
        let link = pci_config(&c).expect("ids").link.expect("v1 link");
        assert_eq!(link.max_speed.as_deref(), Some("5.0 GT/s PCIe"));
        // No capability list bit: the pointer is not followed.
        let mut c = header(Some(0x40));
        c[STATUS] = 0;
        assert_eq!(express_capability(&c), None);
    }

    #[test]
    fn every_byte_pattern_is_safe() {
        // Garbage everywhere: any answer is fine, a panic or endless walk is not.
        let mut seed = 0x2545_f491_u32;
        for len in [0, 1, 12, 63, 64, 65, 0x80, 0xff, 0x100] {
            for _ in 0..200 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 17;
                        seed ^= seed << 5;
                        seed as u8
                    })
                    .collect();
                let _ = pci_config(&bytes);
            }
        }
    }

    #[test]
    fn speed_names_round_trip() {
        for code in 0..=6 {
            let text = speed_text(code).expect("known");
            assert_eq!(speed_code(text), Some(code));
        }
        assert_eq!(speed_text(7), None);
        assert_eq!(speed_code("16 GT/s"), None);
    }
}
