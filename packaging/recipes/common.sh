# shellcheck shell=bash
# Shared by the recipes: put the package on the node, then run gpu-affinity install.
#
#   GPU_AFFINITY_PACKAGE_DIR  where slurm-gpu-affinity's .rpm / .deb are (default: next to
#                             the recipe)
#   GPU_AFFINITY_SKIP_PACKAGE=1  the package is already there (baked images, tests)
#   GPU_AFFINITY_BIN          the command (default /usr/bin/gpu-affinity)
#   GPU_AFFINITY_PLUGINS_DIR  builds to install from (default: the package's)
#   GPU_AFFINITY_CONFIG       the admin config a recipe adds settings to
#                             (default /etc/gpu-affinity/config.toml)

recipe_log() { echo "gpu-affinity recipe: $*" >&2; }

install_package() {
  [[ ${GPU_AFFINITY_SKIP_PACKAGE:-0} == 1 ]] && return 0
  local dir=${GPU_AFFINITY_PACKAGE_DIR:-$(dirname "${BASH_SOURCE[1]}")} pkg
  if command -v dpkg >/dev/null && pkg=$(compgen -G "$dir/slurm-gpu-affinity_*.deb" | head -n1); then
    timeout 600 apt-get install -y "$pkg"
  elif command -v rpm >/dev/null && pkg=$(compgen -G "$dir/slurm-gpu-affinity-*.rpm" | head -n1); then
    timeout 600 dnf install -y "$pkg"
  else
    recipe_log "no slurm-gpu-affinity package for this OS in $dir"
    return 1
  fi
}

gpu_affinity() {
  local extra=()
  [[ -n ${GPU_AFFINITY_PLUGINS_DIR:-} && $1 == install ]] && extra=(--plugins-dir "$GPU_AFFINITY_PLUGINS_DIR")
  timeout 60 "${GPU_AFFINITY_BIN:-/usr/bin/gpu-affinity}" "$@" "${extra[@]}"
}

# Add a [drain] handoff to the config unless the admin set a [drain] table already.
set_drain_handoff() {
  local conf=${GPU_AFFINITY_CONFIG:-/etc/gpu-affinity/config.toml} handoff=$1
  if grep -q '^\[drain\]' "$conf" 2>/dev/null; then
    recipe_log "$conf has a [drain] table; handoff left as it is"
    return 0
  fi
  printf '\n# Added by the gpu-affinity recipe.\n[drain]\nhandoff = "%s"\n' "$handoff" >>"$conf"
  recipe_log "$conf: [drain] handoff = \"$handoff\""
}
