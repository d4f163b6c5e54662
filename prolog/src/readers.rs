//! Thin readers for the health inputs: fetch bytes under the configured root and hand them to
//! core's parsers. Each one is started under its hard bound by [`crate::bounded`].

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{BufRead, ErrorKind, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpu_affinity::config::{CheckpointConfig, MountConfig};
use gpu_affinity::health::counters::{EFA_ERROR_COUNTERS, PortCounters, phys_state_name};
use gpu_affinity::health::parse::{counter, mount_at, mounts};
use gpu_affinity::health::xid::KernelLog;
use gpu_affinity::health::{CheckpointProbe, Gap, Gathered, MountProbe, SysfsData};
use gpu_affinity::safe_dir::{self, ProbeError, Rule};
use gpu_affinity::sources::sysfs;
use gpu_affinity::trust::open_regular;

/// A kmsg fixture or /proc/mounts larger than this is not one.
const MAX_LOG_BYTES: u64 = 32 << 20;

fn under(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// A regular file's bytes (opened non-blocking: a FIFO planted there cannot hang a pass),
/// at most `limit`; `None` when there is nothing at the path.
pub(crate) fn small_file(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, String> {
    let file = match open_regular(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() as u64 > limit {
        return Err(format!("{} is larger than {limit} bytes", path.display()));
    }
    Ok(Some(bytes))
}

/// This boot's id (ROOT/proc/sys/kernel/random/boot_id); `None` when absent or not the
/// kernel's form.
pub fn read_boot_id(root: &Path) -> Gathered<Option<String>> {
    let path = under(root, "/proc/sys/kernel/random/boot_id");
    let bytes = small_file(&path, 64).map_err(Gap::Failed)?;
    Ok(bytes.and_then(|b| gpu_affinity::health::parse::boot_id(&String::from_utf8_lossy(&b))))
}

/// When this boot started (ROOT/proc/stat's `btime`), for repair escalation; `None` when
/// unreadable.
pub fn read_btime(root: &Path) -> Option<u64> {
    let bytes = small_file(&under(root, "/proc/stat"), 1 << 20).ok()??;
    gpu_affinity::health::repair::btime(&String::from_utf8_lossy(&bytes))
}

/// The machine (with PCIe links and port state/rate), GPUs gone from the bus, and the
/// `link_downed` counter of every fabric port.
pub fn read_sysfs(root: &Path) -> Gathered<SysfsData> {
    let machine = sysfs::read_machine(root).map_err(|e| Gap::Failed(e.to_string()))?;
    let mut fallen_off = Vec::new();
    for gpu in &machine.gpus {
        // A GPU that fell off the bus answers config reads with all ones; the first dword
        // (vendor + device id) is enough to tell.
        let path = under(root, &format!("sys/bus/pci/devices/{}/config", gpu.pci));
        if let Ok(Some(bytes)) = small_file(&path, 4096)
            && bytes.len() >= 4
            && bytes[..4] == [0xff; 4]
        {
            fallen_off.push(gpu.pci);
        }
    }
    let mut link_downed = BTreeMap::new();
    let mut ports = BTreeMap::new();
    for nic in machine.fabric_nics() {
        let Some(dev) = &nic.rdma else { continue };
        for port in &nic.ports {
            let dir = under(
                root,
                &format!("sys/class/infiniband/{dev}/ports/{}", port.number),
            );
            let key = format!("{dev}/{}", port.number);
            if let Some(n) = counter_file(&dir.join("counters/link_downed")) {
                link_downed.insert(key.clone(), n);
            }
            ports.insert(key, port_counters(&dir));
        }
    }
    Ok(SysfsData {
        machine,
        fallen_off,
        link_downed,
        ports,
    })
}

/// A decimal counter file; `None` when absent or not a counter.
fn counter_file(path: &Path) -> Option<u64> {
    let bytes = small_file(path, 64).ok()??;
    counter(&String::from_utf8_lossy(&bytes))
}

/// One RDMA port's physical state and error counters (`dir` = its sysfs `ports/N`).
fn port_counters(dir: &Path) -> PortCounters {
    let phys_state = small_file(&dir.join("phys_state"), 64)
        .ok()
        .flatten()
        .and_then(|b| phys_state_name(&String::from_utf8_lossy(&b)));
    let efa_errors = EFA_ERROR_COUNTERS
        .iter()
        .filter_map(|(name, _)| {
            counter_file(&dir.join("hw_counters").join(name)).map(|n| (name.to_string(), n))
        })
        .collect();
    PortCounters {
        phys_state,
        symbol_error: counter_file(&dir.join("counters/symbol_error")),
        link_error_recovery: counter_file(&dir.join("counters/link_error_recovery")),
        port_rcv_errors: counter_file(&dir.join("counters/port_rcv_errors")),
        efa_errors,
    }
}

/// XIDs since boot: `/dev/kmsg` on the live node, `ROOT/dev/kmsg` as a file of records
/// under any other root. Either is streamed through core's scanner a record at a time,
/// so memory stays bounded whatever the log holds. The live read goes on to the newest
/// record; only a flood that refills the buffer as fast as it is read reaches its record
/// cap ([`MAX_KMSG_RECORDS`]), and the records left unread then count as lost. Records
/// the kernel overwrote while the reader read (a flood) are counted as lost (the
/// sequence gap after EPIPE); the check reports the loss as a warning. A fixture larger than
/// [`MAX_LOG_BYTES`] is read from its newest [`MAX_LOG_BYTES`], the lines before counted
/// as lost.
pub fn read_kmsg(root: &Path) -> Gathered<KernelLog> {
    let mut log = KernelLog::default();
    if root != Path::new("/") {
        let path = under(root, "dev/kmsg");
        let fail = |e: std::io::Error| Gap::Failed(format!("{}: {e}", path.display()));
        let mut file = match open_regular(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(log),
            Err(e) => return Err(fail(e)),
        };
        let len = file.metadata().map_err(fail)?.len();
        let mut reader = std::io::BufReader::new(&mut file);
        let mut line = Vec::new();
        if len > MAX_LOG_BYTES {
            // Newest first: count the older lines, then scan the newest MAX_LOG_BYTES.
            let mut skipped = (&mut reader).take(len - MAX_LOG_BYTES);
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                let n = skipped.read(&mut chunk).map_err(fail)?;
                if n == 0 {
                    break;
                }
                log.notes.lost += chunk[..n].iter().filter(|&&b| b == b'\n').count() as u64;
            }
            // The cut line's rest.
            reader.read_until(b'\n', &mut line).map_err(fail)?;
            log.notes.lost += 1;
        }
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line).map_err(fail)? == 0 {
                break;
            }
            log.scan(String::from_utf8_lossy(&line).trim_end_matches('\n'));
        }
        log.finish();
        return Ok(log);
    }
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open("/dev/kmsg")
        .map_err(|e| Gap::Failed(format!("/dev/kmsg: {e}")))?;
    scan_live(&mut file, MAX_KMSG_RECORDS, &mut log)
        .map_err(|e| Gap::Failed(format!("/dev/kmsg: {e}")))?;
    log.finish();
    Ok(log)
}

/// The live read's bound: 4M records, more than the default ring buffers (2^17-2^25
/// bytes, CONFIG_LOG_BUF_SHIFT) hold many times over. A `log_buf_len=` of hundreds of MiB
/// can hold more; then, as under a flood, the records past the bound are counted lost
/// (`KMSG_FLOOD`), never silently skipped.
const MAX_KMSG_RECORDS: usize = 1 << 22;

/// The live log's records from `src` (non-blocking /dev/kmsg, one record per read),
/// oldest first up to the newest, at most `cap` reads. Records the kernel overwrote
/// while they were read (EPIPE, then a sequence gap) count as lost. A read stopped by
/// the cap while records were still there (a flood refilling the buffer as fast as it
/// is read) counts those as lost too, at least the one record past the cap, so the
/// check's `KMSG_FLOOD` says the log was not read to its end; every record read before
/// the cap, the newest among them included, is scanned.
fn scan_live(src: &mut impl Read, cap: usize, log: &mut KernelLog) -> std::io::Result<()> {
    // One record per read; a record is at most about 8 KiB with its dictionary.
    let mut buf = vec![0u8; 16 * 1024];
    let mut overrun = false;
    for _ in 0..cap {
        match src.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                let before = log.last_seq;
                for line in String::from_utf8_lossy(&buf[..n]).lines() {
                    log.scan(line);
                }
                if std::mem::take(&mut overrun)
                    && let (Some(b), Some(now)) = (before, log.last_seq)
                {
                    log.notes.lost += now.saturating_sub(b).saturating_sub(1);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            // EPIPE: records were overwritten while reading; the next read goes on at
            // the oldest one left, and the gap is what the flood took.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => overrun = true,
            Err(e) => return Err(e),
        }
    }
    // At the cap: one more read tells whether the log had more. That record is not
    // scanned (counting it read would make the loss a guess); it and any gap before it
    // are the lost records, a lower bound.
    match src.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => {
            let mut past = KernelLog::default();
            for line in String::from_utf8_lossy(&buf[..n]).lines() {
                past.scan(line);
            }
            let gap = match (log.last_seq, past.last_seq) {
                (Some(b), Some(now)) => now.saturating_sub(b).saturating_sub(1),
                _ => 0,
            };
            log.notes.lost += gap + 1;
        }
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        // Overwritten since the last read: at least one record went unread.
        Err(e) if e.raw_os_error() == Some(libc::EPIPE) => log.notes.lost += 1,
        Err(e) => return Err(e),
    }
    Ok(())
}

/// How a mount is probed; the seam lets tests stand in a mount whose stat never returns.
/// A probe that a job user kept from running (a symlink on the way, names taken, its
/// file renamed away) is `Gap::Interfered`: a warning, never a drain.
pub trait MountProber: Send + Sync + 'static {
    /// stat the mount point.
    fn stat(&self, path: &Path) -> Result<(), String>;
    /// Create and remove a file under it.
    fn write(&self, dir: &Path) -> Gathered<()>;
    /// Write `bytes` into a new file under `dir`, fsync it; the time from the create to
    /// the end of the fsync. The file never has a name a job user could predict.
    fn write_timed(&self, dir: &Path, bytes: u64) -> Gathered<Duration>;
}

/// The probed directory, walked from `/` without symlinks (core's `safe_dir`), and a
/// nameless file in it. A refusal a user can cause is `Gap::Interfered`.
fn probe_file(dir: &Path, what: &str, prefix: &str) -> Gathered<std::fs::File> {
    let dir = safe_dir::open(dir, what, Rule::Probed, crate::state::owner(), None).map_err(
        |e| match e.user_causable() {
            true => Gap::Interfered(format!("{e}; not probed")),
            false => Gap::Failed(e.to_string()),
        },
    )?;
    dir.probe_file(prefix).map_err(|e| match e {
        ProbeError::Interfered(why) => Gap::Interfered(why),
        ProbeError::Io(why) => Gap::Failed(why),
    })
}

/// Bytes storage cannot compress or deduplicate away (xorshift64), one MiB, reused.
fn probe_block() -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..(1 << 20) / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect()
}

pub struct RealProber;

impl MountProber for RealProber {
    fn stat(&self, path: &Path) -> Result<(), String> {
        std::fs::metadata(path)
            .map(|_| ())
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    fn write(&self, dir: &Path) -> Gathered<()> {
        probe_file(dir, "mount", ".gpu-affinity-probe").map(drop)
    }

    fn write_timed(&self, dir: &Path, bytes: u64) -> Gathered<Duration> {
        let block = probe_block();
        let t = Instant::now();
        // Nameless (O_TMPFILE) or unlinked before the first byte and written through the
        // open descriptor: a pass killed at its bound mid-write leaves no file behind.
        let mut f = probe_file(dir, "checkpoint_dir", ".gpu-affinity-bandwidth")?;
        let written = (|| {
            let mut left = bytes;
            while left > 0 {
                let n = left.min(block.len() as u64) as usize;
                f.write_all(&block[..n])?;
                left -= n as u64;
            }
            f.sync_all()
        })();
        written.map_err(|e| Gap::Failed(format!("{}: {e}", dir.display())))?;
        Ok(t.elapsed())
    }
}

/// The checkpoint directory's write bandwidth (`[storage] checkpoint_*`): one probe file of
/// `probe_mib` MiB under ROOT/dir: created, unlinked, then written + fsynced.
pub fn probe_checkpoint(
    root: &Path,
    cfg: &CheckpointConfig,
    prober: &dyn MountProber,
) -> Gathered<CheckpointProbe> {
    let dir = under(root, &cfg.dir.to_string_lossy());
    let bytes = u64::from(cfg.probe_mib) << 20;
    let elapsed = prober.write_timed(&dir, bytes)?;
    Ok(CheckpointProbe {
        dir: cfg.dir.display().to_string(),
        bytes,
        elapsed_us: u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
    })
}

/// Probe every configured mount: present with its type (/proc/mounts), a stat within
/// `bound`, and a create + remove when asked. The probes of all mounts run at once.
pub fn read_mounts(
    root: &Path,
    wanted: &[MountConfig],
    prober: std::sync::Arc<dyn MountProber>,
    bound: std::time::Duration,
) -> Vec<MountProbe> {
    let table = small_file(&under(root, "proc/mounts"), 4 << 20)
        .map(|b| mounts(&String::from_utf8_lossy(&b.unwrap_or_default())));
    let started: Vec<_> = wanted
        .iter()
        .map(|m| {
            let path = under(root, &m.path);
            let p = prober.clone();
            let stat_path = path.clone();
            let latency = crate::bounded::start(bound, move || {
                let t = Instant::now();
                p.stat(&stat_path).map_err(Gap::Failed)?;
                Ok(t.elapsed().as_millis() as u64)
            });
            let writable = m.write.then(|| {
                let p = prober.clone();
                crate::bounded::start(bound, move || match p.write(&path) {
                    Ok(()) => Ok(true),
                    Err(Gap::Failed(_)) => Ok(false),
                    Err(gap) => Err(gap),
                })
            });
            (m, latency, writable)
        })
        .collect();
    started
        .into_iter()
        .map(|(m, latency, writable)| MountProbe {
            path: m.path.clone(),
            want_type: m.fstype.clone(),
            found: match &table {
                Ok(t) => Ok(mount_at(t, &m.path).map(|e| e.fstype.clone())),
                Err(e) => Err(Gap::Failed(e.clone())),
            },
            writable: writable.map_or(Err(Gap::Skipped("write = false".into())), |w| w.wait()),
            latency_ms: latency.wait(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    /// A live /dev/kmsg stand-in: one record per read, seq `next..end`, XID 79 at the
    /// seqs in `xids`, EPIPE once before seq `overwritten.0`, whose records up to
    /// `overwritten.1` the flood took.
    struct Live {
        next: u64,
        end: u64,
        xids: Vec<u64>,
        overwritten: Option<(u64, u64)>,
    }

    impl Read for Live {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if let Some((from, to)) = self.overwritten
                && self.next == from
            {
                self.overwritten = None;
                self.next = to + 1;
                return Err(std::io::Error::from_raw_os_error(libc::EPIPE));
            }
            if self.next >= self.end {
                return Err(ErrorKind::WouldBlock.into());
            }
            let seq = self.next;
            self.next += 1;
            let line = if self.xids.contains(&seq) {
                format!("4,{seq},1,-;NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=x\n")
            } else {
                format!("6,{seq},1,-;flood {seq}\n")
            };
            buf[..line.len()].copy_from_slice(line.as_bytes());
            Ok(line.len())
        }
    }

    fn live(src: &mut Live, cap: usize) -> KernelLog {
        let mut log = KernelLog::default();
        scan_live(src, cap, &mut log).expect("scan");
        log.finish();
        log
    }

    #[test]
    fn the_live_read_counts_what_its_record_cap_left_unread() {
        // Read to the end within the cap: nothing lost, both XIDs counted.
        let mut src = Live {
            next: 1,
            end: 101,
            xids: vec![3, 100],
            overwritten: None,
        };
        let log = live(&mut src, 100);
        assert_eq!(
            (log.xids.len(), log.notes.lost, log.last_seq),
            (2, 0, Some(100))
        );
        // A flood past the cap: the records read up to the cap (through seq 99), an XID
        // an overrun skipped to included, are scanned; what the cap left (seq 100 on) is
        // counted lost.
        let mut src = Live {
            next: 1,
            end: 1000,
            xids: vec![3, 60, 100],
            overwritten: Some((20, 49)),
        };
        let log = live(&mut src, 70);
        // 70 reads: one EPIPE, seqs 1..19 and 50..99 (69 records); 20..49 overwritten.
        assert_eq!(log.last_seq, Some(99));
        assert_eq!(log.xids.iter().map(|x| x.seq).collect::<Vec<_>>(), [3, 60]);
        // 30 overwritten, and at least seq 100 past the cap.
        assert_eq!(log.notes.lost, 31);
        let mut src = Live {
            next: 1,
            end: 1000,
            xids: vec![70],
            overwritten: None,
        };
        let log = live(&mut src, 70);
        assert_eq!(log.xids.iter().map(|x| x.seq).collect::<Vec<_>>(), [70]);
        assert_eq!(log.notes.lost, 1, "the read stopped with records left");
    }

    #[test]
    fn the_boot_id_is_read_under_the_root() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read_boot_id(dir.path()), Ok(None));
        let at = dir.path().join("proc/sys/kernel/random");
        std::fs::create_dir_all(&at).expect("dirs");
        let id = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9";
        std::fs::write(at.join("boot_id"), format!("{id}\n")).expect("boot_id");
        assert_eq!(read_boot_id(dir.path()), Ok(Some(id.to_string())));
        std::fs::write(at.join("boot_id"), "not a uuid\n").expect("boot_id");
        assert_eq!(read_boot_id(dir.path()), Ok(None));
    }

    /// A mount whose stat never returns (a stalled NFS/Lustre server), through the seam: no
    /// FUSE or network mount is available on CI machines.
    struct Stalled;

    impl MountProber for Stalled {
        fn stat(&self, _: &Path) -> Result<(), String> {
            std::thread::sleep(Duration::from_secs(3600));
            Ok(())
        }
        fn write(&self, _: &Path) -> Gathered<()> {
            std::thread::sleep(Duration::from_secs(3600));
            Ok(())
        }
        fn write_timed(&self, _: &Path, _: u64) -> Gathered<Duration> {
            std::thread::sleep(Duration::from_secs(3600));
            Ok(Duration::ZERO)
        }
    }

    #[test]
    fn the_checkpoint_probe_measures_removes_its_file_and_times_out_when_stalled() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("ckpt")).expect("ckpt");
        let cfg = CheckpointConfig {
            dir: "/ckpt".into(),
            floor_mbps: Some(1.0),
            probe_mib: 2,
        };
        let probe = probe_checkpoint(dir.path(), &cfg, &RealProber).expect("probe");
        assert_eq!((probe.dir.as_str(), probe.bytes), ("/ckpt", 2 << 20));
        assert!(probe.elapsed_us > 0);
        let left: Vec<_> = std::fs::read_dir(dir.path().join("ckpt"))
            .expect("dir")
            .collect();
        assert!(left.is_empty(), "probe file left: {left:?}");
        // No such directory: a failure naming it, nothing created.
        let gone = CheckpointConfig {
            dir: "/nowhere".into(),
            ..cfg.clone()
        };
        let e = probe_checkpoint(dir.path(), &gone, &RealProber).expect_err("no dir");
        assert!(
            matches!(&e, Gap::Failed(w) if w.contains("nowhere")),
            "{e:?}"
        );
        // A stalled mount: the bounded reader gives a timeout within its bound.
        let t = Instant::now();
        let root = dir.path().to_path_buf();
        let stalled = crate::bounded::start(Duration::from_millis(200), move || {
            probe_checkpoint(&root, &cfg, &Stalled)
        })
        .wait();
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert_eq!(stalled, Err(Gap::Timeout { after_ms: 200 }));
    }

    #[test]
    fn a_stalled_mount_is_a_timeout_within_its_bound() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("proc")).expect("proc");
        std::fs::write(dir.path().join("proc/mounts"), "srv:/x /fsx nfs4 rw 0 0\n")
            .expect("mounts");
        let wanted = [MountConfig {
            path: "/fsx".into(),
            fstype: Some("nfs4".into()),
            write: true,
        }];
        let t = Instant::now();
        let probes = read_mounts(
            dir.path(),
            &wanted,
            Arc::new(Stalled),
            Duration::from_millis(200),
        );
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert_eq!(probes[0].found, Ok(Some("nfs4".into())));
        assert_eq!(probes[0].latency_ms, Err(Gap::Timeout { after_ms: 200 }));
        assert_eq!(probes[0].writable, Err(Gap::Timeout { after_ms: 200 }));
        let real = read_mounts(
            dir.path(),
            &wanted,
            Arc::new(RealProber),
            Duration::from_secs(2),
        );
        assert!(
            real[0].latency_ms.is_err(),
            "no /fsx under the root: stat fails"
        );
    }
}
