//! `health::xid::parse_kmsg`, `KernelLog` and `last_seq`: /dev/kmsg records (and copied
//! dmesg lines) the health binaries scan for NVIDIA XIDs. The driver's text is not the
//! suite's, and a job user's process name and user-space writes reach the same log.
//! Properties: at most one event per line; every event's GPU prints and reparses; no
//! event is later than the log's last sequence number; every event comes from a line
//! that starts (after its header) with the driver's `NVRM: Xid (PCI:` form in a kernel
//! (facility 0) record; and the input's lines forged as a process name would forge them
//! (`<line>[1]: segfault`, `Killed process 1 (<line>)`, `traps: <line>[1]`) or as a
//! user-space write (facility 1) give no event.
#![no_main]

use gpu_affinity::health::xid;
use gpu_affinity::pci::PciAddr;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let events = xid::parse_kmsg(text);
    assert!(events.len() <= text.lines().count());
    let last = xid::last_seq(text);
    for e in &events {
        assert!(last.is_some_and(|l| e.seq <= l), "{} after {last:?}", e.seq);
        let printed = e.gpu.to_string();
        assert_eq!(printed.parse::<PciAddr>().ok(), Some(e.gpu), "{printed}");
    }
    let mut forged = String::new();
    for (i, line) in text.lines().take(64).enumerate() {
        let msg = line.split_once(';').map_or(line, |(_, m)| m);
        let name: String = msg.chars().take(15).collect();
        forged.push_str(&format!(
            "6,{i},1,-;{name}[1]: segfault at 0 ip 0 sp 0 error 6\n"
        ));
        forged.push_str(&format!(
            "3,{i},1,-;Killed process 1 ({name}) total-vm:1kB\n"
        ));
        forged.push_str(&format!("6,{i},1,-;traps: {name}[1] trap int3\n"));
        forged.push_str(&format!("12,{i},1,-;{}\n", msg.replace('\n', " ")));
    }
    let log = xid::KernelLog::of(&forged);
    assert!(
        log.xids.is_empty(),
        "forged: {:?} from {forged:?}",
        log.xids
    );
});
