#!/usr/bin/env bash
# SageMaker HyperPod lifecycle step (Ubuntu 22.04 DLAMI), run on every node from
# on_create.sh:  hyperpod-lifecycle.sh controller|compute|login
#
# /opt/slurm is a symlink to /opt/slurm-24.11 or /opt/slurm-25.11; install follows it and
# links that series' build. Compute nodes run configless (slurmd --conf-server): they get
# the plugin only, and the controller's plugstack.conf names the snippet with an absolute
# include, which configless nodes read as it is. Drains hand off to HyperPod's agent.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
. "$(dirname "$0")/common.sh"

role=${1:?say controller, compute or login}
prefix=${SLURM_PREFIX:-/opt/slurm}
install_package
set_drain_handoff hyperpod
case "$role" in
  controller | login) gpu_affinity install --slurm-prefix "$prefix" ;;
  compute) gpu_affinity install --slurm-prefix "$prefix" --link-only ;;
  *) recipe_log "unknown role $role"; exit 2 ;;
esac
