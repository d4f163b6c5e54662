//! The variables the SPANK plugin sets per rank itself: one table, read by every rule
//! that must leave them to the plugin (a profile may not set them, the admin's `force`
//! may not name them) and by the plugin when it sets them.
//!
//! A leaf module, so the admin config and the fabric profiles both check against it
//! without importing each other.

pub const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";
/// `PCI_BUS_ID`: CUDA then numbers devices as the plugin does (see the plugin's step.rs).
pub const CUDA_DEVICE_ORDER: &str = "CUDA_DEVICE_ORDER";
pub const GPU_AFFINITY_MODE: &str = "GPU_AFFINITY_MODE";
pub const GPU_AFFINITY_GPUS: &str = "GPU_AFFINITY_GPUS";
pub const GPU_AFFINITY_NICS: &str = "GPU_AFFINITY_NICS";
pub const GPU_AFFINITY_CPUS: &str = "GPU_AFFINITY_CPUS";
pub const GPU_AFFINITY_MEMS: &str = "GPU_AFFINITY_MEMS";

/// Every variable the plugin exports per rank, besides the profile's.
pub const PLUGIN_VARS: &[&str] = &[
    CUDA_VISIBLE_DEVICES,
    CUDA_DEVICE_ORDER,
    GPU_AFFINITY_MODE,
    GPU_AFFINITY_GPUS,
    GPU_AFFINITY_NICS,
    GPU_AFFINITY_CPUS,
    GPU_AFFINITY_MEMS,
];

/// The plugin's own namespace: reserved whole, so a later variable of the plugin needs
/// no profile or config to change.
pub const PLUGIN_PREFIX: &str = "GPU_AFFINITY_";

/// True for a variable the plugin sets per rank itself (no profile or `force` may).
pub fn plugin_owned(key: &str) -> bool {
    PLUGIN_VARS.contains(&key) || key.starts_with(PLUGIN_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_order_is_the_plugins() {
        // CUDA_DEVICE_ORDER decides which GPU a CUDA_VISIBLE_DEVICES index opens: a
        // profile or `force` that changed it would open another GPU than the planned one.
        assert!(plugin_owned(CUDA_DEVICE_ORDER));
        assert!(plugin_owned("GPU_AFFINITY_ANYTHING"));
        assert!(!plugin_owned("NCCL_IB_HCA"));
        assert!(!plugin_owned("CUDA_VISIBLE_DEVICES_X"));
    }
}
