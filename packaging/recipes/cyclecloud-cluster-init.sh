#!/usr/bin/env bash
# Azure CycleCloud cluster-init script (specs/default/cluster-init/scripts/10-gpu-affinity.sh
# of a project): packages under /usr, config in /etc/slurm (linked to /sched/<cluster>),
# plugstack.conf = include /etc/slurm/plugstack.conf.d/*, Prolog=/etc/slurm/prolog.d/*.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
. "$(dirname "$0")/common.sh"

prefix=${SLURM_PREFIX:-/usr}
etc=${SLURM_ETC:-/etc/slurm}
libexec=${GPU_AFFINITY_LIBEXEC:-/usr/libexec/gpu-affinity}
install_package
# The package's own script already ran this for /usr; idempotent, and it names what it did.
gpu_affinity install --slurm-prefix "$prefix" --plugstack-dir "$etc/plugstack.conf.d"
mkdir -p "$etc/prolog.d"
ln -sfn "$libexec/gpu-affinity-prolog" "$etc/prolog.d/50-gpu-affinity"
recipe_log "$etc/prolog.d/50-gpu-affinity -> $libexec/gpu-affinity-prolog"
