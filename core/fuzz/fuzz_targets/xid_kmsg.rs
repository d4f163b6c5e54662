//! `health::xid::parse_kmsg` and `last_seq`: /dev/kmsg records (and copied dmesg lines)
//! the health binaries scan for NVIDIA XIDs. The driver's text is not the suite's, and a
//! user's process name is part of an XID line. Properties: at most one event per line; an
//! event with a GPU names a canonical function-0 or written address that prints and
//! reparses; no event is later than the log's last sequence number.
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
        if let Some(gpu) = e.gpu {
            let printed = gpu.to_string();
            assert_eq!(printed.parse::<PciAddr>().ok(), Some(gpu), "{printed}");
        }
    }
});
