//! Writers for the Slurm files an install needs besides the topology: gres.conf GPU lines
//! from a node's discovered machine, and plugstack.conf with the plugin's line.
//! Pure: machine or text in, text out.

use crate::cpuset::CpuSet;
use crate::model::Machine;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfWriteError {
    #[error("GPU {0} has no /dev/nvidiaN minor number; gres.conf cannot name its device")]
    NoMinor(String),
    #[error("the plugin path {0:?} is not absolute (configless nodes resolve nothing else)")]
    RelativePlugin(String),
    #[error("plugstack argument {0:?} is not key=value without blanks")]
    BadArgument(String),
}

/// The machine's cores in Slurm's numbering (slurmd's block map over hwloc): package by
/// package (a NUMA node stands for a package, ordered by first CPU, as hwloc orders
/// them), then by first CPU within it. Core `i` of gres.conf's `Cores=` is entry `i`.
/// The plugin's S_STEP_ALLOC_CORES mapping uses the same order (spank-plugin step.rs,
/// which should call this one once the plugin restructuring lands).
pub fn slurm_core_order(machine: &Machine) -> Vec<CpuSet> {
    let cores: Vec<CpuSet> = if machine.cores.is_empty() {
        machine
            .cpus()
            .iter()
            .map(|c| [c].into_iter().collect())
            .collect()
    } else {
        machine.cores.clone()
    };
    let mut packages: Vec<&CpuSet> = machine
        .numa_nodes
        .iter()
        .map(|n| &n.cpus)
        .filter(|c| !c.is_empty())
        .collect();
    packages.sort_by_key(|c| c.first());
    let mut keyed: Vec<((usize, Option<u32>), CpuSet)> = cores
        .into_iter()
        .map(|c| {
            let package = c
                .first()
                .and_then(|cpu| packages.iter().position(|p| p.contains(cpu)))
                .unwrap_or(usize::MAX);
            ((package, c.first()), c)
        })
        .collect();
    keyed.sort_by_key(|(k, _)| *k);
    keyed.into_iter().map(|(_, c)| c).collect()
}

/// gres.conf GPU lines: one `Name=gpu File=<dev_prefix>/nvidiaN Cores=<ids>` per GPU in
/// Slurm's order, `Cores=` being the Slurm core ids of the GPU's NUMA node (its CPU node
/// on Grace). Never `CPUs=` with hyperthread lists, which slurmd rejects. A GPU whose
/// NUMA node is unknown gets no `Cores=` and a comment saying why (no guess).
pub fn gres_conf(
    machine: &Machine,
    dev_prefix: &str,
    header: &str,
) -> Result<String, ConfWriteError> {
    let order = slurm_core_order(machine);
    let prefix = dev_prefix.trim_end_matches('/');
    let mut out = String::from(header);
    for gpu in machine.gpus_in_slurm_order() {
        let minor = gpu
            .minor
            .ok_or_else(|| ConfWriteError::NoMinor(gpu.pci.to_string()))?;
        let cpus = machine
            .cpu_numa_of(gpu.pci)
            .and_then(|n| machine.numa_node(n))
            .map(|n| &n.cpus);
        let ids: CpuSet = match cpus {
            Some(cpus) => order
                .iter()
                .enumerate()
                .filter(|(_, core)| core.first().is_some_and(|c| cpus.contains(c)))
                .map(|(i, _)| i as u32)
                .collect(),
            None => CpuSet::new(),
        };
        if ids.is_empty() {
            out.push_str(&format!(
                "# GPU {}: NUMA node unknown, no Cores= written\nName=gpu File={prefix}/nvidia{minor}\n",
                gpu.pci
            ));
        } else {
            out.push_str(&format!(
                "Name=gpu File={prefix}/nvidia{minor} Cores={ids}\n"
            ));
        }
    }
    Ok(out)
}

/// The plugin's plugstack line: `required /abs/gpu_affinity.so key=value ...`. Absolute,
/// since configless nodes get plugstack.conf without its include directory's context.
pub fn plugstack_line(plugin: &str, args: &[String]) -> Result<String, ConfWriteError> {
    if !plugin.starts_with('/') || plugin.chars().any(char::is_whitespace) {
        return Err(ConfWriteError::RelativePlugin(plugin.to_string()));
    }
    let mut line = format!("required {plugin}");
    for a in args {
        if !a.contains('=') || a.chars().any(char::is_whitespace) {
            return Err(ConfWriteError::BadArgument(a.clone()));
        }
        line.push(' ');
        line.push_str(a);
    }
    Ok(line)
}

/// Put `line` into plugstack.conf text `existing`: an old gpu_affinity line is replaced;
/// otherwise the line goes right after the last pyxis line (pyxis re-imports the image's
/// environment in its task_init, so the plugin's exports must come after it), else at
/// the end. Other lines are kept byte for byte.
pub fn plugstack_conf(existing: &str, line: &str) -> String {
    let is_ours = |l: &str| {
        let l = l.trim_start();
        !l.starts_with('#')
            && l.split_whitespace()
                .nth(1)
                .is_some_and(|p| p.ends_with("/gpu_affinity.so"))
    };
    let is_pyxis = |l: &str| {
        let l = l.trim_start();
        !l.starts_with('#')
            && l.split_whitespace()
                .nth(1)
                .is_some_and(|p| p.contains("spank_pyxis"))
    };
    let lines: Vec<&str> = existing.lines().filter(|l| !is_ours(l)).collect();
    let at = lines
        .iter()
        .rposition(|l| is_pyxis(l))
        .map_or(lines.len(), |i| i + 1);
    let mut out = String::new();
    for (i, l) in lines.iter().enumerate() {
        if i == at {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str(l);
        out.push('\n');
    }
    if at == lines.len() {
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    #[test]
    fn gres_lines_name_numa_cores() {
        let m = catalog::machine("p5.48xlarge").expect("catalog has p5");
        let text = gres_conf(&m, "/dev/", "# marker\n").expect("writes");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "# marker");
        assert_eq!(lines.len(), 9, "{text}");
        assert!(
            lines[1].starts_with("Name=gpu File=/dev/nvidia0 Cores=0-"),
            "{text}"
        );
        assert!(!text.contains("CPUs="));
        // Two sockets: the first four GPUs on one, the last four on the other, disjoint.
        assert_ne!(
            lines[1].split("Cores=").nth(1),
            lines[8].split("Cores=").nth(1)
        );
    }

    #[test]
    fn plugstack_goes_after_pyxis_and_replaces_ours() {
        let line = plugstack_line("/usr/lib/slurm/gpu_affinity.so", &["mode=prefer".into()])
            .expect("valid");
        assert_eq!(line, "required /usr/lib/slurm/gpu_affinity.so mode=prefer");
        let existing = "# head\nrequired /usr/lib/slurm/spank_pyxis.so\noptional /x/other.so\nrequired /old/gpu_affinity.so\n";
        assert_eq!(
            plugstack_conf(existing, &line),
            "# head\nrequired /usr/lib/slurm/spank_pyxis.so\nrequired /usr/lib/slurm/gpu_affinity.so mode=prefer\noptional /x/other.so\n"
        );
        assert_eq!(plugstack_conf("", &line), format!("{line}\n"));
        assert!(plugstack_line("gpu_affinity.so", &[]).is_err());
        assert!(plugstack_line("/a/gpu_affinity.so", &["mode".into()]).is_err());
    }
}
