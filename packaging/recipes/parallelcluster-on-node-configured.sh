#!/usr/bin/env bash
# AWS ParallelCluster custom action (OnNodeConfigured), head and compute nodes:
#   CustomActions: OnNodeConfigured: Script: s3://.../parallelcluster-on-node-configured.sh
#
# Slurm is built with --prefix=/opt/slurm and /opt/slurm (config in /opt/slurm/etc) is
# shared from the head node, so the head node links the plugin and writes the snippet into
# /opt/slurm/etc/plugstack.conf.d; compute nodes only need the package.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
. "$(dirname "$0")/common.sh"

prefix=${SLURM_PREFIX:-/opt/slurm}
cfnconfig=${PCLUSTER_CFNCONFIG:-/etc/parallelcluster/cfnconfig}
node_type=$(sed -n 's/^cfn_node_type=//p' "$cfnconfig" 2>/dev/null || true)
install_package
if [[ $node_type == HeadNode ]]; then
  gpu_affinity install --slurm-prefix "$prefix"
else
  recipe_log "node type ${node_type:-unknown}: package only ($prefix is the head node's)"
fi
