//! The live sysfs/procfs source: discover a [`Machine`] under a filesystem root.
//!
//! Reads only what placement needs, never a walk of all of /sys, and as few files as it
//! can (discovery runs once per job step, so its system calls are the cost that counts):
//! - `/sys/bus/pci/devices/*`: the link (root complex and bridge chain) and the ids of
//!   every function (`class`, `vendor`, `device`, all three from `uevent` in one read when
//!   it has them); `numa_node` and the four `*_link_*` attributes only for GPUs, NICs and
//!   the bridges above them;
//! - `/sys/class/infiniband/*` (device link, `ports/*/{state,rate,link_layer}`) and
//!   `/sys/class/net/*` (device link) to find the NICs;
//! - `/sys/devices/system/node/node*/cpulist`;
//! - cores from `/proc/cpuinfo` in one read (`physical id` + `core id`, checked against
//!   its `siblings` / `cpu cores`), else `/sys/devices/system/cpu/cpu*/topology/
//!   thread_siblings_list`, one read per core; packages from `core_siblings_list`, one
//!   read per package (kept only where they are not the NUMA nodes: `Machine::packages`);
//! - `/sys/class/dmi/id/{sys_vendor,product_name,chassis_asset_tag,board_vendor}`;
//! - `/proc/driver/nvidia/gpus/*/information` (model and device minor).
//!
//! Discovery never reads `config`, although one read would give ids and link together
//! ([`config_space`] decodes it, for the fixture): `uevent` and the link attributes come from
//! what the kernel already holds, while every byte of `config` is a config-space access
//! of the hardware, which a VM traps. Measured on a Firecracker VM: 6 functions' `config`
//! took 18 ms for 256 bytes, 4.8 ms for 64, against 36 us for their `uevent`.
//!
//! [`Detail::Placement`] reads less: what the solver and the fabric environment
//! (`fabric::step_fabric`) use, for the SPANK plugin, which discovers once per step on the
//! launch path. It leaves out the four PCIe link attributes of every kept function (and
//! the directory open that serves them: five of the seven opens per function) and the
//! RDMA ports' `state` and `rate`, so `PciDevice::link` stays default and
//! `RdmaPort::{state, rate}` stay `None`; on a p5.48xlarge tree that is 278 opens instead
//! of 822. On a real node the saving is larger than the opens: the kernel answers
//! `current_link_speed` and `current_link_width` from the device's config space (the
//! Link Status register), the access a VM traps (see `config` below). Nothing placement computes reads those fields, with one exception: the NCCL
//! topology file `step_fabric` generates when the vendor's file does not fit the node
//! carries link speed and width. [`read_pci_links`] adds them afterwards, for that rare
//! step only. The test `placement_detail` checks, for every catalog machine, that
//! placement and fabric environment come out the same from both details.
//!
//! Missing files are unknowns (`None`, empty lists); a value that is there but malformed
//! is an error naming the file. Parsing lives in [`parse`] and [`config_space`], reading in
//! [`reader`].

pub mod config_space;
pub mod parse;
pub mod reader;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::cpuset::{CpuSet, CpuSetError};
use crate::model::{
    Dmi, Gpu, Machine, ModelError, Nic, NumaDistance, NumaNode, PciDevice, PciLink, RdmaPort,
    class, classify_nic, vendor,
};
use crate::pci::PciAddr;

pub use parse::{ParseError, PciIds};
pub use reader::{EntryFiles, FsReader, MAX_FILE_BYTES, RootDir};

/// Largest /proc/cpuinfo read: about 2 KiB per CPU, so room for 4096 CPUs.
pub const MAX_CPUINFO_BYTES: u64 = 8 * 1024 * 1024;

/// Why discovery failed. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is larger than {limit} bytes")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{path}: {source}")]
    Malformed { path: PathBuf, source: ParseError },
    #[error("{path}: {source}")]
    BadCpuList { path: PathBuf, source: CpuSetError },
    #[error("{path}: link {target:?} does not lead to PCI function {name}")]
    BadLink {
        path: PathBuf,
        target: String,
        name: String,
    },
    #[error("the PCI tree under {root} does not fit together: {source}")]
    Model { root: PathBuf, source: ModelError },
}

/// How much of the machine discovery reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Detail {
    /// Everything the model holds (`explain`, fixtures, health checks).
    #[default]
    Full,
    /// What placement uses (the solver and `fabric::step_fabric`): no PCIe link
    /// attributes (`PciDevice::link` stays default) and no RDMA port `state` or `rate`
    /// (`None`). Ports keep their number and link layer, which the NIC's kind and the
    /// fabric environment need.
    Placement,
}

/// Discover the machine under `root` (`/` for the live node, or a fixture tree).
pub fn read_machine(root: &Path) -> Result<Machine, SysfsError> {
    read_machine_with(root, Detail::Full)
}

/// Discover the machine under `root`, reading as much as `detail` asks for.
pub fn read_machine_with(root: &Path, detail: Detail) -> Result<Machine, SysfsError> {
    read_machine_from_with(&RootDir::open(root)?, detail)
}

/// Discover the machine through any [`FsReader`].
pub fn read_machine_from<R: FsReader + ?Sized>(fs: &R) -> Result<Machine, SysfsError> {
    read_machine_from_with(fs, Detail::Full)
}

/// Add the PCIe link attributes a [`Detail::Placement`] read left out: for every PCI
/// function of `machine`, what a [`Detail::Full`] read of `root` would have given.
pub fn read_pci_links(root: &Path, machine: &mut Machine) -> Result<(), SysfsError> {
    read_pci_links_from(&RootDir::open(root)?, machine)
}

/// [`read_pci_links`] through any [`FsReader`].
pub fn read_pci_links_from<R: FsReader + ?Sized>(
    fs: &R,
    machine: &mut Machine,
) -> Result<(), SysfsError> {
    let d = Discovery { fs };
    for device in &mut machine.pci {
        // The bus link leads to the function's directory; opening through it spares the
        // readlink and path walk discovery did.
        device.link = d.link_attributes(&format!("sys/bus/pci/devices/{}", device.addr))?;
    }
    Ok(())
}

/// Discover the machine through any [`FsReader`], reading as much as `detail` asks for.
pub fn read_machine_from_with<R: FsReader + ?Sized>(
    fs: &R,
    detail: Detail,
) -> Result<Machine, SysfsError> {
    let d = Discovery { fs };
    let mut machine = Machine {
        dmi: d.dmi()?,
        cores: d.cores()?,
        ..Machine::default()
    };
    (machine.numa_nodes, machine.numa_distances) = d.numa_nodes()?;
    machine.set_packages(d.packages()?);
    let paths = d.pci_paths()?;
    let mut ids: HashMap<PciAddr, PciIds> = HashMap::new();
    let mut gpus = Vec::new();
    for (addr, located) in &paths {
        let i = d.pci_ids(&located.dir)?;
        ids.insert(*addr, i);
        if class::is_gpu(i.class) && i.vendor == vendor::NVIDIA {
            gpus.push(*addr);
        }
    }
    let info = d.nvidia_info()?;
    machine.gpus = gpus
        .iter()
        .map(|addr| {
            let i = info.get(addr).cloned().unwrap_or_default();
            Gpu {
                pci: *addr,
                minor: i.minor,
                model: i.model,
            }
        })
        .collect();

    let rdma = d.rdma_devices(detail)?;
    let netdevs = d.netdevs()?;
    // Per network function: its RDMA devices and netdevs, each in name order.
    let mut functions: BTreeMap<PciAddr, FunctionNames> = BTreeMap::new();
    let is_nic = |addr: &PciAddr| ids.get(addr).is_some_and(|i| class::is_network(i.class));
    for (name, addr, ports) in rdma {
        if is_nic(&addr) {
            functions.entry(addr).or_default().0.push((name, ports));
        }
    }
    for (name, addr) in netdevs {
        if is_nic(&addr) {
            functions.entry(addr).or_default().1.push(name);
        }
    }

    let mut wanted: BTreeSet<PciAddr> = gpus.iter().copied().collect();
    wanted.extend(functions.keys().copied());
    let mut kept = BTreeSet::new();
    for addr in &wanted {
        if let Some(located) = paths.get(addr) {
            kept.extend(located.path.chain.iter().copied());
        }
    }
    for addr in &kept {
        let Some(Located { path, dir }) = paths.get(addr) else {
            continue;
        };
        let Some(i) = ids.get(addr).copied() else {
            continue;
        };
        let numa_node = d.numa_node(dir)?;
        let link = match detail {
            Detail::Full => d.link_attributes(dir)?,
            Detail::Placement => PciLink::default(),
        };
        let position = path.chain.len() - 1;
        machine.pci.push(PciDevice {
            addr: *addr,
            parent: position.checked_sub(1).map(|i| path.chain[i]),
            root: Some(path.root.clone()),
            vendor: i.vendor,
            device: i.device,
            class: i.class,
            numa_node,
            link,
        });
    }

    for (addr, (mut rdmas, mut nets)) in functions {
        rdmas.sort_by(|a, b| name_order(&a.0, &b.0));
        nets.sort_by(|a, b| name_order(a, b));
        let (vendor_id, device_id) = ids.get(&addr).map_or((0, 0), |i| (i.vendor, i.device));
        if rdmas.is_empty() {
            machine.nics.push(Nic {
                pci: addr,
                kind: classify_nic(vendor_id, device_id, false, None),
                rdma: None,
                netdev: nets.first().cloned(),
                ports: Vec::new(),
            });
        }
        for (i, (name, ports)) in rdmas.into_iter().enumerate() {
            let link_layer = ports.first().and_then(|p| p.link_layer.as_deref());
            machine.nics.push(Nic {
                pci: addr,
                kind: classify_nic(vendor_id, device_id, true, link_layer),
                rdma: Some(name),
                netdev: nets.get(i).cloned(),
                ports,
            });
        }
    }
    machine.normalize();
    machine.validate().map_err(|source| SysfsError::Model {
        root: fs.display(""),
        source,
    })?;
    Ok(machine)
}

/// The RDMA devices (with their ports) and netdevs found on one PCI function.
type FunctionNames = (Vec<(String, Vec<RdmaPort>)>, Vec<String>);

/// How device names pair up on one PCI function: shorter names first ("ib0" before
/// "ib0.8001", "mlx5_2" before "mlx5_10"), then alphabetical. The fixture writer and
/// `realized()` use the same order.
pub fn name_order(a: &str, b: &str) -> std::cmp::Ordering {
    (a.len(), a).cmp(&(b.len(), b))
}

/// A PCI function's place in the tree and its directory under the root.
struct Located {
    path: parse::DevicePath,
    /// "sys/devices/pci0000:10/0000:10:01.0/0000:11:00.0"
    dir: String,
}

struct Discovery<'a, R: FsReader + ?Sized> {
    fs: &'a R,
}

impl<R: FsReader + ?Sized> Discovery<'_, R> {
    fn read(&self, path: &str) -> Result<Option<Vec<u8>>, SysfsError> {
        self.fs.read(path, MAX_FILE_BYTES)
    }

    /// Read and parse one file; `None` when it is missing.
    fn parsed<T>(
        &self,
        path: &str,
        parse: impl Fn(&[u8]) -> Result<T, ParseError>,
    ) -> Result<Option<T>, SysfsError> {
        match self.read(path)? {
            None => Ok(None),
            Some(bytes) => parse(&bytes)
                .map(Some)
                .map_err(|source| SysfsError::Malformed {
                    path: self.fs.display(path),
                    source,
                }),
        }
    }

    fn cpulist(&self, path: &str) -> Result<Option<CpuSet>, SysfsError> {
        match self.read(path)? {
            None => Ok(None),
            Some(bytes) => CpuSet::parse_list(&parse::text(&bytes))
                .map(Some)
                .map_err(|source| SysfsError::BadCpuList {
                    path: self.fs.display(path),
                    source,
                }),
        }
    }

    fn dmi(&self) -> Result<Dmi, SysfsError> {
        let [sys_vendor, product_name, chassis_asset_tag, board_vendor] = self
            .read_attrs(
                "sys/class/dmi/id",
                [
                    "sys_vendor",
                    "product_name",
                    "chassis_asset_tag",
                    "board_vendor",
                ],
            )?
            .map(|bytes| bytes.and_then(|b| parse::optional_text(&b)));
        Ok(Dmi {
            sys_vendor,
            product_name,
            chassis_asset_tag,
            board_vendor,
        })
    }

    /// The NUMA nodes and, only where some node has no CPUs (Grace GPU memory without
    /// CDMM), the kernel's distance rows of those nodes: each `distance` file lists the
    /// distances to every node in id order. Other machines need no table, so they cost
    /// no extra read; a row that does not parse or line up is dropped, not an error.
    fn numa_nodes(&self) -> Result<(Vec<NumaNode>, Vec<NumaDistance>), SysfsError> {
        const DIR: &str = "sys/devices/system/node";
        let is_node = |name: &str| parse::numbered(name, "node").is_some();
        let mut nodes = Vec::new();
        for (name, files) in self
            .fs
            .read_entries(DIR, &is_node, &["cpulist"], MAX_FILE_BYTES)?
        {
            let Some(id) = parse::numbered(&name, "node") else {
                continue;
            };
            let cpus = match files.into_iter().next().flatten() {
                None => CpuSet::new(),
                Some(bytes) => CpuSet::parse_list(&parse::text(&bytes)).map_err(|source| {
                    SysfsError::BadCpuList {
                        path: self.fs.display(&format!("{DIR}/{name}/cpulist")),
                        source,
                    }
                })?,
            };
            nodes.push(NumaNode { id, cpus });
        }
        let mut distances = Vec::new();
        if !nodes.iter().any(|n| !n.cpus.is_empty()) {
            return Ok((nodes, distances));
        }
        let mut ids: Vec<u32> = nodes.iter().map(|n| n.id).collect();
        ids.sort_unstable();
        for node in nodes.iter().filter(|n| n.cpus.is_empty()) {
            let path = format!("{DIR}/node{}/distance", node.id);
            let Some(row) = self
                .fs
                .read(&path, MAX_FILE_BYTES)?
                .and_then(|bytes| parse::distance_row(&bytes))
                .filter(|row| row.len() == ids.len())
            else {
                continue;
            };
            distances.extend(ids.iter().zip(row).map(|(&to, distance)| NumaDistance {
                from: node.id,
                to,
                distance,
            }));
        }
        Ok((nodes, distances))
    }

    /// Physical cores: from /proc/cpuinfo when it vouches for them, else from sysfs.
    fn cores(&self) -> Result<Vec<CpuSet>, SysfsError> {
        let cpuinfo = self.fs.read("proc/cpuinfo", MAX_CPUINFO_BYTES)?;
        if let Some(cores) = cpuinfo.as_deref().and_then(parse::cpuinfo_cores) {
            return Ok(cores);
        }
        self.sibling_cores()
    }

    /// Physical cores from thread_siblings_list, reading one thread per core.
    fn sibling_cores(&self) -> Result<Vec<CpuSet>, SysfsError> {
        self.cpu_groups("thread_siblings_list")
    }

    /// CPU packages from core_siblings_list (the kernel's threads of one
    /// physical_package_id; present under this name on every kernel, package_cpus_list
    /// only from 5.x), one read per package.
    fn packages(&self) -> Result<Vec<CpuSet>, SysfsError> {
        self.cpu_groups("core_siblings_list")
    }

    /// The groups a per-CPU topology list attribute names, reading one CPU per group: a
    /// CPU already seen in a group needs no read of its own.
    fn cpu_groups(&self, attribute: &str) -> Result<Vec<CpuSet>, SysfsError> {
        const DIR: &str = "sys/devices/system/cpu";
        let mut cpus: Vec<u32> = self
            .fs
            .list(DIR)?
            .iter()
            .filter_map(|n| parse::numbered(n, "cpu"))
            .collect();
        cpus.sort_unstable();
        let mut seen = CpuSet::new();
        let mut groups = Vec::new();
        for cpu in cpus {
            if seen.contains(cpu) {
                continue;
            }
            let path = format!("{DIR}/cpu{cpu}/topology/{attribute}");
            // No topology directory: an offline CPU, which no task can use.
            let Some(mut group) = self.cpulist(&path)? else {
                continue;
            };
            group.insert(cpu);
            for member in group.iter() {
                seen.insert(member);
            }
            groups.push(group);
        }
        Ok(groups)
    }

    /// Every PCI function and where it sits, from the /sys/bus/pci/devices links.
    fn pci_paths(&self) -> Result<BTreeMap<PciAddr, Located>, SysfsError> {
        const DIR: &str = "sys/bus/pci/devices";
        let mut out = BTreeMap::new();
        for name in self.fs.list(DIR)? {
            let Ok(addr) = name.parse::<PciAddr>() else {
                continue;
            };
            let path = format!("{DIR}/{name}");
            let Some(target) = self.fs.read_link(&path)? else {
                continue;
            };
            let bad = || SysfsError::BadLink {
                path: self.fs.display(&path),
                target: target.clone(),
                name: name.clone(),
            };
            let located = parse::device_path(&target).ok_or_else(bad)?;
            if located.chain.last() != Some(&addr) {
                return Err(bad());
            }
            let dir = parse::resolve(DIR, &target);
            out.insert(addr, Located { path: located, dir });
        }
        Ok(out)
    }

    /// Class, vendor and device ids: from `uevent` (one read), else from the `class`,
    /// `vendor` and `device` attributes; missing ones read as 0 (unknown).
    fn pci_ids(&self, dir: &str) -> Result<PciIds, SysfsError> {
        if let Some(ids) = self
            .parsed(&format!("{dir}/uevent"), parse::pci_uevent)?
            .flatten()
        {
            return Ok(ids);
        }
        let [class, vendor, device] = self.read_attrs(dir, ["class", "vendor", "device"])?;
        Ok(PciIds {
            class: self
                .parse_attr(dir, "class", class, parse::pci_class)?
                .unwrap_or(0),
            vendor: self
                .parse_attr(dir, "vendor", vendor, parse::pci_id)?
                .unwrap_or(0),
            device: self
                .parse_attr(dir, "device", device, parse::pci_id)?
                .unwrap_or(0),
        })
    }

    /// Several attributes of one directory.
    fn read_attrs<const N: usize>(
        &self,
        dir: &str,
        names: [&str; N],
    ) -> Result<[Option<Vec<u8>>; N], SysfsError> {
        let mut read = self.fs.read_in(dir, &names, MAX_FILE_BYTES)?.into_iter();
        Ok(names.map(|_| read.next().flatten()))
    }

    /// Parse an attribute read by `read_attrs`; the path is built only for an error.
    fn parse_attr<T>(
        &self,
        dir: &str,
        name: &str,
        bytes: Option<Vec<u8>>,
        parse: impl Fn(&[u8]) -> Result<T, ParseError>,
    ) -> Result<Option<T>, SysfsError> {
        bytes
            .map(|b| {
                parse(&b).map_err(|source| SysfsError::Malformed {
                    path: self.fs.display(&format!("{dir}/{name}")),
                    source,
                })
            })
            .transpose()
    }

    /// A PCI function's `numa_node`.
    fn numa_node(&self, dir: &str) -> Result<Option<u32>, SysfsError> {
        Ok(self
            .parsed(&format!("{dir}/numa_node"), parse::numa_node)?
            .flatten())
    }

    /// The link attributes of a PCI function.
    fn link_attributes(&self, dir: &str) -> Result<PciLink, SysfsError> {
        let [cur_speed, cur_width, max_speed, max_width] = self.read_attrs(
            dir,
            [
                "current_link_speed",
                "current_link_width",
                "max_link_speed",
                "max_link_width",
            ],
        )?;
        let width = |name, bytes| {
            Ok::<_, SysfsError>(
                self.parse_attr(dir, name, bytes, parse::link_width)?
                    .flatten(),
            )
        };
        let text = |bytes: Option<Vec<u8>>| bytes.and_then(|b| parse::optional_text(&b));
        Ok(PciLink {
            current_speed: text(cur_speed),
            current_width: width("current_link_width", cur_width)?,
            max_speed: text(max_speed),
            max_width: width("max_link_width", max_width)?,
        })
    }

    /// The PCI function a class entry (/sys/class/net/eth0) belongs to: the last PCI
    /// function on its own link (which also covers virtio netdevs, whose `device` is the
    /// virtio device), else its `device` link.
    fn class_device(&self, entry: &str) -> Result<Option<PciAddr>, SysfsError> {
        if let Some(path) = self
            .fs
            .read_link(entry)?
            .as_deref()
            .and_then(parse::device_path)
        {
            return Ok(path.chain.last().copied());
        }
        let device = self.fs.read_link(&format!("{entry}/device"))?;
        Ok(device
            .as_deref()
            .and_then(|t| t.rsplit('/').next())
            .and_then(|last| last.parse().ok()))
    }

    fn rdma_devices(
        &self,
        detail: Detail,
    ) -> Result<Vec<(String, PciAddr, Vec<RdmaPort>)>, SysfsError> {
        const DIR: &str = "sys/class/infiniband";
        // The link layer decides the NIC's kind; state and rate only inform people.
        let port_files: &[&str] = match detail {
            Detail::Full => &["link_layer", "state", "rate"],
            Detail::Placement => &["link_layer"],
        };
        let mut out = Vec::new();
        for name in self.fs.list(DIR)? {
            let entry = format!("{DIR}/{name}");
            let Some(addr) = self.class_device(&entry)? else {
                continue;
            };
            let is_port = |name: &str| parse::numbered(name, "").is_some();
            let mut ports = Vec::new();
            for (port, files) in self.fs.read_entries(
                &format!("{entry}/ports"),
                &is_port,
                port_files,
                MAX_FILE_BYTES,
            )? {
                let Some(number) = parse::numbered(&port, "") else {
                    continue;
                };
                let mut text = files
                    .into_iter()
                    .map(|bytes| bytes.and_then(|b| parse::optional_text(&b)));
                ports.push(RdmaPort {
                    number,
                    link_layer: text.next().flatten(),
                    state: text.next().flatten(),
                    rate: text.next().flatten(),
                });
            }
            ports.sort_by_key(|p| p.number);
            out.push((name, addr, ports));
        }
        Ok(out)
    }

    fn netdevs(&self) -> Result<Vec<(String, PciAddr)>, SysfsError> {
        const DIR: &str = "sys/class/net";
        let mut out = Vec::new();
        for name in self.fs.list(DIR)? {
            if let Some(addr) = self.class_device(&format!("{DIR}/{name}"))? {
                out.push((name, addr));
            }
        }
        Ok(out)
    }

    fn nvidia_info(&self) -> Result<HashMap<PciAddr, parse::NvidiaInfo>, SysfsError> {
        const DIR: &str = "proc/driver/nvidia/gpus";
        let is_gpu = |name: &str| name.parse::<PciAddr>().is_ok();
        let mut out = HashMap::new();
        for (name, files) in self
            .fs
            .read_entries(DIR, &is_gpu, &["information"], MAX_FILE_BYTES)?
        {
            let (Ok(addr), Some(bytes)) =
                (name.parse::<PciAddr>(), files.into_iter().next().flatten())
            else {
                continue;
            };
            let info =
                parse::nvidia_information(&bytes).map_err(|source| SysfsError::Malformed {
                    path: self.fs.display(&format!("{DIR}/{name}/information")),
                    source,
                })?;
            out.insert(addr, info);
        }
        Ok(out)
    }
}
