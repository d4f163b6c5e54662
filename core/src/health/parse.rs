//! Pure parsers for what the health readers fetch: /proc/mounts, RDMA port attributes,
//! PCIe link speeds, `sinfo` rows, Slurm's gres string. Bytes in, values out; fuzzable.

/// One /proc/mounts line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    pub point: String,
    pub fstype: String,
    pub read_only: bool,
}

/// /proc/mounts (`dev point type opts 0 0`, spaces in names as `\040`). Later lines win
/// for the same mount point (an over-mount hides what is below it).
pub fn mounts(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let _dev = f.next()?;
            let point = unescape_octal(f.next()?);
            let fstype = f.next()?.to_string();
            let opts = f.next().unwrap_or("");
            Some(MountEntry {
                point,
                fstype,
                read_only: opts.split(',').any(|o| o == "ro"),
            })
        })
        .collect()
}

/// The entry that decides what `point` is: the last one mounted there.
pub fn mount_at<'m>(entries: &'m [MountEntry], point: &str) -> Option<&'m MountEntry> {
    let point = point.trim_end_matches('/');
    let point = if point.is_empty() { "/" } else { point };
    entries.iter().rev().find(|e| e.point == point)
}

fn unescape_octal(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        // Three octal digits that fit a byte: the kernel escapes bytes only, so `\400`
        // and above are literal text (and would overflow the u8).
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)))
            .and_then(|d| {
                let v = d.iter().fold(0u32, |v, b| v * 8 + u32::from(b - b'0'));
                u8::try_from(v).ok()
            });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `4: ACTIVE` -> `ACTIVE`.
pub fn port_state(text: &str) -> &str {
    let t = text.trim();
    t.split_once(':').map_or(t, |(_, s)| s.trim())
}

/// `400 Gb/sec (4X NDR)` -> 400.0 (Gb/s).
pub fn port_rate_gbps(text: &str) -> Option<f64> {
    let t = text.trim();
    let (number, unit) = t.split_once(' ')?;
    unit.trim_start()
        .starts_with("Gb/sec")
        .then(|| rate(number))
        .flatten()
}

/// A rate or speed as a number: finite and not negative, or none (a NaN compares false
/// and would pass every "slower than expected" check).
fn rate(text: &str) -> Option<f64> {
    text.parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
}

/// `16.0 GT/s PCIe` -> 16.0 (GT/s). `Unknown` and empty are `None`.
pub fn link_speed_gts(text: &str) -> Option<f64> {
    rate(text.split_whitespace().next()?)
}

/// A decimal counter file (`link_downed`).
pub fn counter(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// One `sinfo -h -N -o %N|%P|%T|%G|%E` row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRow {
    pub name: String,
    /// Without the default partition's trailing `*`.
    pub partition: String,
    /// Long state (`idle`, `drained`, `mixed`, `down*`).
    pub state: String,
    /// `gpu:8`, `gpu:h100:8(S:0-1)`, `(null)`.
    pub gres: String,
    /// `None` when sinfo says `none`.
    pub reason: Option<String>,
}

/// The sinfo format the suite asks for; [`sinfo_rows`] parses it. The reason is last so a
/// `|` inside it stays part of the reason.
pub const SINFO_FORMAT: &str = "%N|%P|%T|%G|%E";

pub fn sinfo_rows(text: &str) -> Vec<NodeRow> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.splitn(5, '|');
            let name = f.next()?.trim().to_string();
            let partition = f.next()?.trim().trim_end_matches('*').to_string();
            let state = f.next()?.trim().to_string();
            let gres = f.next()?.trim().to_string();
            let reason = f.next()?.trim();
            (!name.is_empty()).then(|| NodeRow {
                name,
                partition,
                state,
                gres,
                reason: (!reason.is_empty() && reason != "none").then(|| reason.to_string()),
            })
        })
        .collect()
}

/// GPUs in a Slurm gres string (`gpu:8`, `gpu:h100:4(S:0),gpu:a100:4`). Kept tiny and behind
/// one function: core's gres.conf/hostlist work is to replace it.
pub fn gres_gpu_count(gres: &str) -> Option<u32> {
    let mut total = None;
    for item in gres.split(',') {
        let item = item.split('(').next().unwrap_or("").trim();
        let mut parts = item.split(':');
        if parts.next() != Some("gpu") {
            continue;
        }
        let count = parts.next_back().and_then(|c| c.parse::<u32>().ok())?;
        // A sum past u32 is no node's GPU count: unknown, not a wrapped small number.
        total = Some(total.unwrap_or(0u32).checked_add(count)?);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_mounts() {
        let m = mounts(
            "fs-1.fsx:/x /fsx lustre rw,relatime 0 0\n/dev/sda1 / ext4 rw 0 0\n\
             srv:/a /mnt/my\\040data nfs4 ro,vers=4.2 0 0\nshort line\n",
        );
        assert_eq!(m.len(), 3);
        assert_eq!(
            mount_at(&m, "/fsx/").map(|e| e.fstype.as_str()),
            Some("lustre")
        );
        let d = mount_at(&m, "/mnt/my data").expect("escaped");
        assert!(d.read_only);
        assert!(mount_at(&m, "/scratch").is_none());
    }

    /// Found by the `health_parse` fuzz target: `\\400` overflowed the byte being
    /// unescaped (a panic in debug builds, a wrong name in release).
    #[test]
    fn octal_escapes_above_a_byte_stay_literal() {
        let m = mounts("srv:/a /mnt/my\\400data nfs4 rw 0 0\nsrv:/b /b\\377 nfs4 rw 0 0\n");
        assert_eq!(m[0].point, "/mnt/my\\400data");
        assert_eq!(m[1].point, "/b\u{fffd}");
    }

    /// Found by the `health_parse` fuzz target: `-5`, `NaN`, `inf` parsed as speeds.
    #[test]
    fn speeds_and_rates_are_finite_and_not_negative() {
        for bad in ["-5", "NaN GT/s", "inf", "-0.5 GT/s PCIe"] {
            assert_eq!(link_speed_gts(bad), None, "{bad:?}");
        }
        for bad in ["NaN Gb/sec (4X NDR)", "-400 Gb/sec", "inf Gb/sec"] {
            assert_eq!(port_rate_gbps(bad), None, "{bad:?}");
        }
        assert_eq!(link_speed_gts("2.5 GT/s PCIe"), Some(2.5));
    }

    /// Found by the `health_parse` fuzz target: counts whose sum passes u32 overflowed
    /// (a panic in debug builds, a wrapped count compared with the node's GPUs in release).
    #[test]
    fn gres_counts_past_u32_are_unknown() {
        assert_eq!(gres_gpu_count("gpu:4294967295,gpu:a:1"), None);
        assert_eq!(gres_gpu_count("gpu:4294967294,gpu:a:1"), Some(u32::MAX));
    }

    #[test]
    fn ports_links_counters() {
        assert_eq!(port_state("4: ACTIVE\n"), "ACTIVE");
        assert_eq!(port_state("1: DOWN"), "DOWN");
        assert_eq!(port_rate_gbps("400 Gb/sec (4X NDR)\n"), Some(400.0));
        assert_eq!(port_rate_gbps("12.5 Gb/sec (1X SDR)"), Some(12.5));
        assert_eq!(port_rate_gbps("fast"), None);
        assert_eq!(link_speed_gts("32.0 GT/s PCIe"), Some(32.0));
        assert_eq!(link_speed_gts("Unknown"), None);
        assert_eq!(counter("17\n"), Some(17));
    }

    #[test]
    fn sinfo_and_gres() {
        let rows = sinfo_rows(
            "n1|gpu*|idle|gpu:8|none\nn2|gpu*|drained|gpu:h100:8(S:0-1)|gpu-affinity: GPU_XID_79 gpu=0000:53:00.0\n\
             n3|gpu|drained|(null)|admin: a|b\n",
        );
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].partition, "gpu");
        assert_eq!(rows[0].reason, None);
        assert_eq!(rows[2].reason.as_deref(), Some("admin: a|b"));
        assert_eq!(gres_gpu_count(&rows[0].gres), Some(8));
        assert_eq!(gres_gpu_count(&rows[1].gres), Some(8));
        assert_eq!(gres_gpu_count("gpu:a:4(S:0),gpu:b:2"), Some(6));
        assert_eq!(gres_gpu_count("(null)"), None);
    }
}
