//! PCI addresses in their canonical form `dddd:bb:dd.f`.

use std::fmt;
use std::str::FromStr;

/// A PCI function address. Displays canonical lowercase `dddd:bb:dd.f`
/// (wider domains, as on Azure VMs or behind VMD, print all their digits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddr {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad PCI address {0:?}: expected dddd:bb:dd.f, e.g. 0000:53:00.0")]
pub struct PciAddrError(pub String);

impl PciAddr {
    pub const fn new(domain: u32, bus: u8, device: u8, function: u8) -> Self {
        Self {
            domain,
            bus,
            device,
            function,
        }
    }
}

impl FromStr for PciAddr {
    type Err = PciAddrError;

    /// Accepts `dddd:bb:dd.f`, `bb:dd.f` (domain 0), any case, and the
    /// eight-digit domain NVML prints (`00000000:53:00.0`).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || PciAddrError(text.to_string());
        let t = text.trim();
        let (rest, function) = t.rsplit_once('.').ok_or_else(bad)?;
        let mut parts: Vec<&str> = rest.split(':').collect();
        if parts.len() == 2 {
            parts.insert(0, "0");
        }
        let [domain, bus, device] = parts.as_slice() else {
            return Err(bad());
        };
        let hex = |s: &str, max_len: usize| -> Result<u32, PciAddrError> {
            // from_str_radix alone also takes a leading '+' ("0000:+5:00.0").
            if s.is_empty() || s.len() > max_len || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad());
            }
            u32::from_str_radix(s, 16).map_err(|_| bad())
        };
        let domain = hex(domain, 8)?;
        let bus = hex(bus, 2)?;
        let device = hex(device, 2)?;
        let function = hex(function, 1)?;
        if device > 0x1f || function > 7 {
            return Err(bad());
        }
        Ok(Self::new(domain, bus as u8, device as u8, function as u8))
    }
}

impl fmt::Display for PciAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl serde::Serialize for PciAddr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Parsed from the text as the reader holds it: a node copy has a few hundred
/// addresses, and an owned copy of each cost about 8 % of decoding it.
impl<'de> serde::Deserialize<'de> for PciAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = PciAddr;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a PCI address such as 0000:4f:00.0")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<PciAddr, E> {
                text.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(Text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_from_json_text_escaped_or_not_and_a_bad_one_named() {
        let plain: PciAddr = serde_json::from_str("\"0000:4f:00.0\"").expect("plain");
        let escaped: PciAddr = serde_json::from_str("\"\\u0030000:4f:00.0\"").expect("escaped");
        assert_eq!(plain, escaped);
        assert_eq!(plain.to_string(), "0000:4f:00.0");
        let bad = serde_json::from_str::<PciAddr>("\"0000:4f\"").unwrap_err();
        assert!(bad.to_string().contains("0000:4f"), "{bad}");
        let number = serde_json::from_str::<PciAddr>("17").unwrap_err();
        assert!(
            number.to_string().contains("expected a PCI address"),
            "{number}"
        );
    }

    #[test]
    fn canonical_form() {
        let a: PciAddr = "0000:4F:00.0".parse().expect("valid");
        assert_eq!(a.to_string(), "0000:4f:00.0");
        let b: PciAddr = "00000001:00:00.0".parse().expect("nvml form");
        assert_eq!(b.to_string(), "0001:00:00.0");
        let c: PciAddr = "53:00.1".parse().expect("short form");
        assert_eq!(c.to_string(), "0000:53:00.1");
        let d: PciAddr = "10000:e1:00.0".parse().expect("vmd domain");
        assert_eq!(d.to_string(), "10000:e1:00.0");
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "0000:53:00",
            "zz:00.0",
            "0000:153:00.0",
            "0000:53:20.0",
            "0000:53:00.8",
        ] {
            assert!(bad.parse::<PciAddr>().is_err(), "{bad}");
        }
    }

    /// Found by the `sysfs_attr` fuzz target's address property ("+000:00:0.0", its
    /// input): `from_str_radix` takes a sign, so it read as 0000:00:00.0, and sysfs
    /// names such as "+000:00:01.0" counted as PCI functions in `device_path`.
    #[test]
    fn rejects_a_sign() {
        for bad in [
            "+000:00:0.0",
            "0000:+5:00.0",
            "+000:05:00.0",
            "0000:05:+0.0",
            "0000:05:00.+",
            "+5:00.0",
        ] {
            assert!(bad.parse::<PciAddr>().is_err(), "{bad}");
        }
    }
}
