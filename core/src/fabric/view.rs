//! A node as one step's fabric setup needs it: the machine, the detection over it and
//! every profile, and the one profile detection picked. The plugin keeps it as the
//! node's copy between steps (spank-plugin's `node_view.rs`); a step never needs the
//! profiles detection passed over, and decoding all of them per step was most of the
//! copy's cost (issue 21).

use serde::{Deserialize, Serialize};

use super::detect::{Detection, detect_with};
use super::profiles::Profiles;
use crate::model::Machine;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    pub machine: Machine,
    /// The profile `detection` picked, alone (none when no profile matched).
    pub profiles: Profiles,
    /// Made over the machine and every profile, before they were reduced to one.
    pub detection: Detection,
}

impl NodeView {
    /// Detect over `machine` and `profiles`, and keep the profile picked.
    pub fn detect(machine: Machine, profiles: &Profiles) -> NodeView {
        let detection = detect_with(&machine, profiles);
        NodeView {
            profiles: profiles.only(&detection.profile),
            machine,
            detection,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_keeps_the_picked_profile_and_detects_as_all_profiles_do() {
        let machine = crate::catalog::machine("p5.48xlarge").unwrap();
        let all = Profiles::builtin();
        let view = NodeView::detect(machine.clone(), &all);
        assert_eq!(view.detection, detect_with(&machine, &all));
        assert_eq!(view.machine, machine);
        let kept: Vec<_> = view.profiles.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(kept, [view.detection.profile.as_str()]);
        assert_eq!(
            view.profiles.get(&view.detection.profile),
            all.get(&view.detection.profile)
        );
        // The same detection over the one profile kept.
        assert_eq!(
            detect_with(&machine, &view.profiles).profile,
            view.detection.profile
        );
        // No profile picked: none kept (a step then uses the machine's fabric NICs).
        assert!(all.only("").iter().next().is_none());
    }
}
