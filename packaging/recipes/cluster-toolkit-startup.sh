#!/usr/bin/env bash
# Google Cluster Toolkit / slurm-gcp v6 startup script (a `startup_script` runner on the
# controller, login and nodeset modules):  cluster-toolkit-startup.sh controller|login|compute
#
# Slurm is built with --prefix=/usr/local --sysconfdir=/usr/local/etc/slurm (/etc/slurm a
# link to it); compute and login nodes are configless.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
. "$(dirname "$0")/common.sh"

role=${1:?say controller, login or compute}
prefix=${SLURM_PREFIX:-/usr/local}
install_package
set_drain_handoff slurm-gcp
case "$role" in
  controller) gpu_affinity install --slurm-prefix "$prefix" ;;
  login | compute) gpu_affinity install --slurm-prefix "$prefix" --link-only ;;
  *) recipe_log "unknown role $role"; exit 2 ;;
esac
