//! `sources::sysfs::config_space::pci_config`: raw PCI config space (the sysfs `config` file),
//! including the capability-list walk, which must stay inside the given bytes and end
//! on a looping list.
#![no_main]

use gpu_affinity::sources::sysfs::config_space::{
    LINK_STATUS, express_capability, pci_config, speed_code,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(at) = express_capability(data) {
        assert!(
            at < data.len(),
            "capability offset {at} past {} bytes",
            data.len()
        );
        assert_eq!(
            data[at], 0x10,
            "offset {at} is not the PCI Express capability"
        );
    }
    if let Some(config) = pci_config(data) {
        assert!(config.ids.vendor != 0 && config.ids.vendor != 0xffff);
        assert!(config.ids.class <= 0xff_ffff, "class wider than 24 bits");
        if let Some(link) = config.link {
            // The link registers were read from inside the bytes, never past them.
            let at = express_capability(data).expect("a link without a capability");
            assert!(
                at + LINK_STATUS + 2 <= data.len(),
                "link read past the bytes"
            );
            // Speeds are the kernel's own texts, which map back to a code.
            for speed in [&link.current_speed, &link.max_speed].into_iter().flatten() {
                assert!(
                    speed_code(speed).is_some(),
                    "speed {speed:?} is not a kernel text"
                );
            }
        }
    }
});
