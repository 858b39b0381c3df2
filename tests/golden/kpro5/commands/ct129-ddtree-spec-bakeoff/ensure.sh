# managed by gpuhosts — unit ct129-ddtree-spec-bakeoff; generated from templates/, do not edit on the host.
# Runs the script below inside container 129 (pct exec).
set -euo pipefail
vmid=129
# node_name — the name Proxmox files this node under: the kernel's host name cut at the first dot, as
# PVE::INotify::nodename does (`hostname` may print an FQDN).
node_name() {
  local name
  name="$(hostname)"
  printf '%s\n' "${name%%.*}"
}

# ct_status VMID — the container's status from the API, running or stopped (GET
# /nodes/{node}/lxc/{vmid}/status/current: pve-container src/PVE/API2/LXC/Status.pm `vm_status`, which loads the
# config first); fails, printing nothing, when there is no such container.
ct_status() {
  local answer
  answer="$(pvesh get "/nodes/$(node_name)/lxc/$1/status/current" --output-format json)" || return 1
  python3 -I -c 'import json, sys; print(json.load(sys.stdin)["status"])' <<<"$answer"
}
status="$(ct_status "$vmid" 2>/dev/null)" || true
if [ "$status" != running ]; then
  printf '%s: refused: container %s is %s; start it (pct start %s) and run again\n' ct129-ddtree-spec-bakeoff "$vmid" \
    "${status:-missing}" "$vmid" >&2
  exit 1
fi
script="$(cat <<'GPUHOSTS_INNER'
# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-ddtree-spec-bakeoff]
# Inside container 129: https://github.com/liranringel/ddtree at c96427a185677bf4133ed865dd1626a5041aef9b with stacks/patches/ddtree-gdn-hybrid.patch applied, for benchmark spec-bakeoff.
repository=https://github.com/liranringel/ddtree
commit=c96427a185677bf4133ed865dd1626a5041aef9b
checkout=/opt/gpuhosts/ddtree/spec-bakeoff/c96427a185677bf4133ed865dd1626a5041aef9b
patch=/opt/gpuhosts/ddtree/spec-bakeoff/c96427a185677bf4133ed865dd1626a5041aef9b.patch
patch_name=stacks/patches/ddtree-gdn-hybrid.patch
wanted_marker='c96427a185677bf4133ed865dd1626a5041aef9b patch:6da4b32f36ba1ec11a90739b4177b04b4c1291fb05388006c1295446bb6c9754'
marker="$root$checkout/.gpuhosts-checkout"
# Written right after `git init`: a checkout cut off before its marker is still known as ours (teardown, retry).
made="$root$checkout/.git/gpuhosts-made"

# --- git ----------------------------------------------------------------------------------------------------
# dpkg's view, not PATH: the package is what apt-get installs, and dpkg-query answers without changing anything.
ensure_git() {
  if [ "$(dpkg-query -W -f='${db:Status-Abbrev}' git 2>/dev/null)" != "ii " ]; then
    say "installing git"
    # A container made from a template may have no package lists yet.
    env DEBIAN_FRONTEND=noninteractive apt-get update -q
    env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends git ca-certificates
    note_change "installed git"
  fi
}
with_lock dpkg ensure_git
command -v git >/dev/null || refuse "git is not on PATH after installing it"
gitc() { git -C "$root$checkout" "$@"; }

# --- the patch, as a file beside the checkout --------------------------------------------------------------------
install_file /opt/gpuhosts/ddtree/spec-bakeoff/c96427a185677bf4133ed865dd1626a5041aef9b.patch 0644 <<'GPUHOSTS_EOF'
# [content: containers/129/opt/gpuhosts/ddtree/spec-bakeoff/c96427a185677bf4133ed865dd1626a5041aef9b.patch.sha256 sha256:6da4b32f36ba1ec1]
GPUHOSTS_EOF

# --- the checkout ---------------------------------------------------------------------------------------------
# In the declared state when the marker names this commit and patch, HEAD is the commit, and the patch is applied.
in_place() {
  [ "$(cat "$marker" 2>/dev/null)" = "$wanted_marker" ] || return 1
  [ "$(gitc rev-parse HEAD 2>/dev/null)" = "$commit" ] || return 1
  gitc apply --reverse --check "$root$patch" >/dev/null 2>&1
}
if ! in_place; then
  if [ -e "$root$checkout" ] && [ ! -f "$marker" ] && [ ! -f "$made" ]; then
    refuse "$checkout exists and was not made by gpuhosts; move it away"
  fi
  if [ -e "$root$checkout" ]; then
    rm -rf "$root$checkout"
    say "removed the earlier checkout $checkout ($(cat "$marker" 2>/dev/null || echo incomplete))"
  fi
  mkdir -p "$root$checkout"
  gitc -c init.defaultBranch=gpuhosts init -q
  printf '%s\n' "$repository" >"$made"
  gitc fetch -q --depth 1 "$repository" "$commit"
  gitc -c advice.detachedHead=false checkout -q --detach FETCH_HEAD
  head="$(gitc rev-parse HEAD)"
  [ "$head" = "$commit" ] || refuse "$repository gave $head for $commit"
  if ! message="$(gitc apply --check "$root$patch" 2>&1)"; then
    if gitc apply --reverse --check "$root$patch" >/dev/null 2>&1; then
      say "$patch_name is already part of $commit"
    else
      refuse "$patch_name does not apply to $repository at $commit: ${message//$'\n'/; }"
    fi
  else
    gitc apply "$root$patch"
  fi
  # Last: only a complete checkout with its patch carries the marker.
  printf '%s\n' "$wanted_marker" >"$marker"
  note_change "checked out $repository at $commit in $checkout with $patch_name"
fi
say "$checkout: $wanted_marker"
finish
GPUHOSTS_INNER
)"
# What the container prints is the container's: any process in it may print a line that looks like gpuhosts'
# protocol. A unit inside a container can neither require the host's reboot nor skip a teardown, so such lines are
# passed on as text, not as what the host reads; a result without a result line then fails the unit, visibly.
from_container() {
  # shellcheck disable=SC2016  # awk's own fields
  awk -v result='GPUHOSTS_RESULT ' -v skipped='GPUHOSTS_SKIPPED ' '
    index($0, skipped) == 1 || (index($0, result) == 1 && ($0 ~ /"rebootRequired":true/ || $0 ~ /awaitReboot/)) {
      print "(printed in the container) " $0; fflush(); next
    }
    { print; fflush() }'
}
pct exec "$vmid" -- bash -c "$script" gpuhosts </dev/null | from_container
