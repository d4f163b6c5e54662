//! What the node's model expects where the admin set nothing: the fabric NIC count of the
//! detected instance type's catalog machine. Pure: a machine in, a count and its origin out.

use super::Expect;
use crate::catalog;
use crate::fabric::detect::detect;
use crate::model::Machine;

/// Fill what the admin left unset from the node's model: `[fabric] expected_nics` from the
/// catalog (an admin's value always wins).
pub fn from_model(mut expect: Expect, machine: &Machine) -> Expect {
    if expect.fabric_nics.is_none()
        && let Some((count, from)) = catalog_fabric_nics(machine)
    {
        expect.fabric_nics = Some(count);
        expect.fabric_nics_from = Some(from);
    }
    expect
}

/// The fabric NICs the detected instance type's catalog machine has, and where that came
/// from (for the check's evidence). `None` when the instance cannot be told or the catalog
/// has no such machine: the check then has no expectation, never a guessed one.
pub fn catalog_fabric_nics(machine: &Machine) -> Option<(u32, String)> {
    let detection = detect(machine);
    let instance = detection.instance.as_deref()?;
    let model = catalog::machine(instance).ok()?;
    // The node's own count is `fabric_nics()` too: like is compared with like.
    let count = u32::try_from(model.fabric_nics().len()).ok()?;
    Some((count, format!("catalog {instance}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_catalog_instance_expects_its_fabric_nics() {
        let m = catalog::machine("p5.48xlarge").expect("catalog");
        assert_eq!(
            catalog_fabric_nics(&m),
            Some((32, "catalog p5.48xlarge".into()))
        );
        // A node whose NIC is gone is still told by its DMI, so the expectation stands.
        let mut short = m.clone();
        short.nics.pop();
        assert_eq!(catalog_fabric_nics(&short).map(|e| e.0), Some(32));
        // No instance to tell (no DMI): no expectation.
        let mut unknown = m;
        unknown.dmi = Default::default();
        assert_eq!(catalog_fabric_nics(&unknown), None);
        let admin = Expect {
            fabric_nics: Some(16),
            ..Expect::default()
        };
        let kept = from_model(admin, &short);
        assert_eq!((kept.fabric_nics, kept.fabric_nics_from), (Some(16), None));
        let filled = from_model(Expect::default(), &short);
        assert_eq!(filled.fabric_nics, Some(32));
    }
}
