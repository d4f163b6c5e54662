//! Topology sources: each is a pure parser over bytes plus (where it reads files) a thin reader.

pub mod fixture;
pub mod hwloc_xml;
pub mod nccl_xml;
pub mod sysfs;
