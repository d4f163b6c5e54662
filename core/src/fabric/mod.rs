//! Fabric: which cloud and instance a node is, and the NCCL / libfabric / UCX
//! environment its vendor publishes for it.
//!
//! Three pure steps (the only I/O is [`profiles`]' reader of the admin's directory):
//! 1. [`detect`] reads the DMI identity and the GPU/NIC PCI ids of a [`Machine`] and names
//!    the vendor, the instance type and the profile to use, with one evidence line per fact.
//! 2. [`profiles`] holds the vendor profiles: TOML data files embedded in the binary,
//!    overridable and extendable by the admin (see `core/profiles/README.md`).
//! 3. [`render_env`] turns a profile into environment variables for one step: node-wide
//!    values (identical on every rank) and per-rank values (from the rank's NICs), each with
//!    its origin. A variable the task's environment already has is left to the user unless
//!    the admin marked it `force`.
//!
//! [`topo`] decides whether a vendor NCCL topology file fits the live node, and
//! [`topo_xml`] writes one from the model when it does not.

pub mod detect;
pub mod profiles;
mod render;
mod step;
pub mod template;
pub mod topo;
pub mod topo_xml;
mod view;

pub use detect::{Detection, Vendor, detect, detect_with};
pub use render::{Env, EnvValue, Origin, render_env};
pub use step::{
    FabricDecision, StepInputs, fabric_nics, fabric_nics_for, step_fabric, step_fabric_for,
};
pub use view::NodeView;
