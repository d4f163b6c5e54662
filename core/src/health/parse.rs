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

/// /proc/sys/kernel/random/boot_id: the kernel's random UUID for this boot
/// (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, lowercase hex), else `None`.
pub fn boot_id(text: &str) -> Option<String> {
    let t = text.trim();
    let groups: Vec<&str> = t.split('-').collect();
    let lens = [8, 4, 4, 4, 12];
    let ok = groups.len() == lens.len()
        && groups.iter().zip(lens).all(|(g, n)| {
            g.len() == n
                && g.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        });
    ok.then(|| t.to_string())
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

/// The longest gres string [`gres_gpu_count`] reads; sinfo's %G and scontrol's `Gres=`
/// are a few hundred bytes on real nodes, and a longer one is not trusted to count.
pub const MAX_GRES_BYTES: usize = 4096;

/// GPUs in a Slurm gres string, as `sinfo -o %G` and `scontrol show node`'s `Gres=` print
/// it (Slurm's gres_node_state `gres_str`, `name[:type]:count[(S:sockets)]` items joined by
/// commas): `gpu:8`, `gpu:h100:8(S:0-1)`, `gpu:a:4(S:0,2),gpu:b:2,nic:2`. Commas inside the
/// parentheses (a socket list such as `S:0,2`) are not item separators. A count may carry
/// Slurm's K/M/G suffix (powers of 1024) and a bare `gpu` is one GPU. `None`: the node has
/// no GPU gres (`(null)`, empty, only other gres), or the string is not one Slurm prints
/// (then the gres count check does not run rather than compare against a guess).
pub fn gres_gpu_count(gres: &str) -> Option<u32> {
    if gres.len() > MAX_GRES_BYTES {
        return None;
    }
    let gres = gres.trim();
    let mut total: Option<u32> = None;
    for item in split_outside_parens(gres)? {
        let item = item.trim();
        // Drop the `(S:...)` / `(IDX:...)` tail; it must close the item.
        let head = match item.find('(') {
            Some(i) if item.ends_with(')') => &item[..i],
            Some(_) => return None,
            None => item,
        };
        if head.is_empty() || head == "(null)" {
            continue;
        }
        let mut parts = head.split(':');
        if parts.next() != Some("gpu") {
            continue;
        }
        let rest: Vec<&str> = parts.collect();
        let count = match rest.as_slice() {
            [] => 1,
            // `gpu:8` or `gpu:h100` (a typed gres without a count is one).
            [one] => match gres_count(one) {
                Some(n) => n,
                None if is_type(one) => 1,
                None => return None,
            },
            [ty, n] if is_type(ty) => gres_count(n)?,
            _ => return None,
        };
        // A sum past u32 is no node's GPU count: unknown, not a wrapped small number.
        total = Some(total.unwrap_or(0).checked_add(count)?);
    }
    total
}

/// Split on commas at parenthesis depth 0; `None` for unbalanced parentheses.
fn split_outside_parens(s: &str) -> Option<Vec<&str>> {
    let mut out = Vec::new();
    let (mut depth, mut from) = (0u32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1)?,
            ',' if depth == 0 => {
                out.push(&s[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    (depth == 0).then(|| {
        out.push(&s[from..]);
        out
    })
}

/// A gres type name as sites write them (`h100`, `a100_80gb`, `rtx-6000`): a letter, then
/// letters, digits and `_-.`.
fn is_type(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// A gres count: decimal with an optional K/M/G suffix (Slurm's suffix_mult, x1024).
fn gres_count(s: &str) -> Option<u32> {
    let (digits, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1024u64),
        b'm' | b'M' => (&s[..s.len() - 1], 1024 * 1024),
        b'g' | b'G' => (&s[..s.len() - 1], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    u32::try_from(n.checked_mul(mult)?).ok()
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

    #[test]
    fn gres_strings_as_slurm_prints_them() {
        // sinfo %G / scontrol Gres= forms.
        assert_eq!(gres_gpu_count("gpu:8"), Some(8));
        assert_eq!(gres_gpu_count("gpu:h100:8(S:0-1)"), Some(8));
        assert_eq!(gres_gpu_count("gpu:h100:8(S:0-1)\n"), Some(8));
        // A socket list with a comma stays inside its item.
        assert_eq!(gres_gpu_count("gpu:a100:4(S:0,2),gpu:v100:2(S:1)"), Some(6));
        assert_eq!(gres_gpu_count("gpu:a100_80gb:4,nic:2,gpu:l4:1"), Some(5));
        assert_eq!(gres_gpu_count("nic:2,gpu:2(IDX:0-1)"), Some(2));
        assert_eq!(gres_gpu_count("gpu"), Some(1));
        assert_eq!(gres_gpu_count("gpu:h100"), Some(1));
        assert_eq!(gres_gpu_count("gpu:0"), Some(0));
        assert_eq!(gres_gpu_count("gpu:1K"), Some(1024));
        // No GPU gres at all.
        assert_eq!(gres_gpu_count("(null)"), None);
        assert_eq!(gres_gpu_count(""), None);
        assert_eq!(gres_gpu_count("nic:2,mps:100"), None);
        // Not what Slurm prints: no count rather than a guess.
        assert_eq!(gres_gpu_count("gpu:h100:8(S:0-1"), None);
        assert_eq!(gres_gpu_count("gpu:8)"), None);
        assert_eq!(gres_gpu_count("gpu:a:b:4"), None);
        assert_eq!(gres_gpu_count("gpu:-3"), None);
        assert_eq!(gres_gpu_count("gpu:4G,gpu:4G"), None);
        assert_eq!(gres_gpu_count("gpu:99999999999"), None);
        assert_eq!(gres_gpu_count(&"gpu:1,".repeat(1000)), None);
        // Not a GPU gres that merely starts with the letters.
        assert_eq!(gres_gpu_count("gpus:4"), None);
    }
}
