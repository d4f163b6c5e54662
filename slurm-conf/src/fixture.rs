//! `gpu-affinity fixture`: write a fake sysfs/procfs tree for a machine.

use std::path::PathBuf;

use clap::Args as ClapArgs;
use gpu_affinity::catalog;
use gpu_affinity::model::Dmi;
use gpu_affinity::sources;

use crate::CliError;

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// A machine of the embedded catalog.
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with = "from",
        required_unless_present = "from"
    )]
    machine: Option<String>,
    /// An NCCL topology XML or hwloc v2 XML file.
    #[arg(long, value_name = "FILE.xml")]
    from: Option<PathBuf>,
    /// DMI sys_vendor to write (files carry no DMI; detection needs it).
    #[arg(long, value_name = "S", requires = "from")]
    dmi_vendor: Option<String>,
    /// DMI product_name to write.
    #[arg(long, value_name = "S", requires = "from")]
    dmi_product: Option<String>,
    /// DMI chassis_asset_tag to write.
    #[arg(long, value_name = "S", requires = "from")]
    dmi_asset_tag: Option<String>,
    /// Directory to write the tree into (created; must be empty if it exists). The tree,
    /// this directory included, is made world-readable (dirs 0755, files 0644) whatever
    /// the umask: slurmstepd and job users read it.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

pub fn run(args: &Args) -> Result<(), CliError> {
    let mut machine = match (&args.machine, &args.from) {
        (Some(name), _) => catalog::machine(name)?,
        (None, Some(path)) => sources::read_machine_xml(path)?,
        (None, None) => return Err(CliError("give --machine NAME or --from FILE.xml".into())),
    };
    let overrides = Dmi {
        sys_vendor: args.dmi_vendor.clone(),
        product_name: args.dmi_product.clone(),
        chassis_asset_tag: args.dmi_asset_tag.clone(),
        board_vendor: None,
    };
    merge_dmi(&mut machine.dmi, overrides);
    if args.out.exists() && std::fs::read_dir(&args.out)?.next().is_some() {
        return Err(CliError(format!(
            "{}: directory is not empty",
            args.out.display()
        )));
    }
    sources::fixture::write_fixture(&machine, &args.out)?;
    Ok(())
}

/// Values given on the command line replace those of the source.
fn merge_dmi(dmi: &mut Dmi, given: Dmi) {
    let pairs = [
        (&mut dmi.sys_vendor, given.sys_vendor),
        (&mut dmi.product_name, given.product_name),
        (&mut dmi.chassis_asset_tag, given.chassis_asset_tag),
        (&mut dmi.board_vendor, given.board_vendor),
    ];
    for (slot, value) in pairs {
        if value.is_some() {
            *slot = value;
        }
    }
}
