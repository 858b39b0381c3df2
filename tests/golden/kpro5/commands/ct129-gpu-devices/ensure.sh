# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-gpu-devices]
# [templates/common/container.sh.j2 sha256:d10200d97fad05ca vmid=129 allow_restart=true]
# node_name — the name Proxmox files this node under: the kernel's host name cut at the first dot, as
# PVE::INotify::nodename does (`hostname` may print an FQDN).
node_name() {
  local name
  name="$(hostname)"
  printf '%s\n' "${name%%.*}"
}

# mapped_paths NAME — the PCI paths a cluster resource mapping (`hostpciN: mapping=NAME`) gives this node.
mapped_paths() {
  local node
  node="$(node_name)"
  [ -r "$root/etc/pve/mapping/pci.cfg" ] || return 0
  awk -v name="$1" -v node="$node" '
    /^[^[:space:]]/ {inside = ($1 == name); next}
    inside && $1 == "map" {
      this = ""; paths = ""
      n = split($2, kv, ",")
      for (i = 1; i <= n; i++) {
        if (substr(kv[i], 1, 5) == "node=") this = substr(kv[i], 6)
        if (substr(kv[i], 1, 5) == "path=") paths = substr(kv[i], 6)
      }
      if (this == node) print paths
    }' "$root/etc/pve/mapping/pci.cfg" | tr ';' ' '
}

# hostpci_ids CONFIG — the PCI ids every hostpciN line of `qm config` output names, one a line, mappings resolved.
# A property string's keys come in any order and `host` is its default key: `pcie=1,0000:01:00` names the host too.
hostpci_ids() {
  local line value part id
  local -a parts
  while IFS= read -r line; do
    [[ "$line" =~ ^hostpci[0-9]+:[[:space:]]*(.*)$ ]] || continue
    value="${BASH_REMATCH[1]}"
    IFS=',' read -ra parts <<<"$value"
    for part in "${parts[@]}"; do
      case "$part" in
        host=*) part="${part#host=}" ;;
        mapping=*) part="$(mapped_paths "${part#mapping=}")" ;;
        *=* | "") continue ;;
      esac
      for id in ${part//;/ }; do
        normal_address "$id"
      done
    done
  done <<<"$1"
}

# vm_table — "VMID STATUS ID" for every PCI id in a VM's current config (`qm config --current`: what a running VM
# has, not what is pending), STATUS as `qm status` says it ("stopped" or what QMP reports: running, paused, …).
# The VM list comes from `qm list`'s first column only: the NAME column may hold a blank ("VM 105"). When a qm call
# fails this prints why and returns 1 — "no VM" must never stand for "qm could not tell".
vm_table() {
  local out vmid config ids id status rows=""
  if ! out="$(qm list 2>&1)"; then
    printf 'qm list failed: %s\n' "$out"
    return 1
  fi
  while read -r vmid _; do
    [[ "$vmid" =~ ^[0-9]+$ ]] || continue
    if ! config="$(qm config "$vmid" --current 2>&1)"; then
      printf 'qm config %s --current failed: %s\n' "$vmid" "$config"
      return 1
    fi
    ids="$(hostpci_ids "$config")"
    [ -n "$ids" ] || continue
    if ! status="$(qm status "$vmid" 2>&1)"; then
      printf 'qm status %s failed: %s\n' "$vmid" "$status"
      return 1
    fi
    status="${status#status: }"
    for id in $ids; do
      rows+="$vmid $status $id"$'\n'
    done
  done <<<"$out"
  printf '%s' "$rows"
}

# load_vm_table — vm_table into $vm_table, once; a qm failure refuses. Call it in the script's own shell.
vm_table_loaded=0
vm_table=""
load_vm_table() {
  [ "$vm_table_loaded" = 0 ] || return 0
  vm_table="$(vm_table)" || refuse "cannot tell which VMs use a GPU: $vm_table"
  vm_table_loaded=1
}

# vms_using_slot SLOT — "vmid status" of every VM whose hostpciN names a function of SLOT, directly or through a
# resource mapping (from $vm_table: load_vm_table first).
vms_using_slot() {
  local vmid status id seen=" "
  while read -r vmid status id; do
    [ -n "$vmid" ] || continue
    if [ "${id%.*}" = "$1" ] || [ "$id" = "$1" ]; then
      case "$seen" in *" $vmid "*) continue ;; esac
      seen+="$vmid "
      printf '%s %s\n' "$vmid" "$status"
    fi
  done <<<"$vm_table"
}
# --- other guests on the container's GPUs (the devices' ensure and probe) ------------------------------------
# Two guests on one GPU is drift no ensure may repair: taking the GPU from the other guest stops whatever runs
# there, so the probe names the guest and the ensure refuses. Read once per script, as each pct and qm call costs
# a Perl start on a real host; a failed call is the fact's value, never "none".
#
# guest_table — "CT <vmid> <key> <path>" for each devN in effect (`pct config --current`) of every other running
# container. Returns 1 with the reason when pct cannot tell.
guest_table() {
  local out id status config rows=""
  if ! out="$(pct list 2>&1)"; then
    printf 'pct list failed: %s\n' "$out"
    return 1
  fi
  while read -r id status _; do
    if ! [[ "$id" =~ ^[0-9]+$ ]] || [ "$id" = "$vmid" ] || [ "$status" != running ]; then
      continue
    fi
    if ! config="$(pct config "$id" --current 2>&1)"; then
      printf 'pct config %s --current failed: %s\n' "$id" "$config"
      return 1
    fi
    while IFS=$'\t' read -r key path; do
      [ -z "$key" ] || rows+="CT $id $key $path"$'\n'
    done < <(parse_dev_entries <<<"$config")
  done <<<"$out"
  printf '%s' "$rows"
}
guests_error=""
guests_cts="$(guest_table)" || { guests_error="${guests_cts//$'\n'/ }"; guests_cts=""; }
# vm_table (common/vms.sh.j2): every VM's PCI ids with its status.
vm_table="$(vm_table)" || { guests_error="${guests_error:+$guests_error; }${vm_table//$'\n'/ }"; vm_table=""; }

# guest_rows ADDRESS — "CT <vmid> <key> <path>" for each running container given the GPU's node
# (/dev/nvidia<minor>), "VM <vmid> <status>" for each VM not stopped that lists its slot in hostpciN.
guest_rows() {
  local address="$1" minor node kind id key path status
  minor="$(gpu_minor "$address")"
  node="${minor:+/dev/nvidia$minor}"
  while read -r kind id key path; do
    if [ -n "$node" ] && [ "$kind" = CT ] && [ "$path" = "$node" ]; then
      printf 'CT %s %s %s\n' "$id" "$key" "$path"
    fi
  done <<<"$guests_cts"
  while read -r id status; do
    if [ -n "$id" ] && [ "$status" != stopped ]; then
      printf 'VM %s %s\n' "$id" "$status"
    fi
  done <<<"$(vms_using_slot "${address%.*}")"
}

# gpu_guests ADDRESS — the other guests that hold the GPU now, "none", or "unknown: <why>".
gpu_guests() {
  local kind id a b found=""
  if [ -n "$guests_error" ]; then
    printf 'unknown: %s\n' "$guests_error"
    return 0
  fi
  while read -r kind id a b; do
    case "$kind" in
      CT) found+="${found:+; }CT $id (running with $a: $b)" ;;
      VM) found+="${found:+; }VM $id ($a with ${1%.*} in hostpci)" ;;
    esac
  done < <(guest_rows "$1")
  echo "${found:-none}"
}

# guest_fix ADDRESS — how each of those guests lets go of the GPU.
guest_fix() {
  local kind id a _b fixes=""
  while read -r kind id a _b; do
    case "$kind" in
      CT) fixes+="${fixes:+; }pct stop $id && pct set $id --delete $a" ;;
      VM) fixes+="${fixes:+; }qm stop $id, then remove the hostpciN entry that names ${1%.*} (qm config $id)" ;;
    esac
  done < <(guest_rows "$1")
  printf '%s\n' "$fixes"
}

gpus=(0000:41:00.0 0000:61:00.0)
nodes=(/dev/nvidiactl /dev/nvidia-uvm)
# --- decisions in Python over the facts this script gathers ---------------------------------------------------
# The unit's `gather_facts [ARG]` prints its facts; its decision module (gpuhosts/hostside/, embedded below verbatim)
# reads them with the plan and prints one action a line, VERB<tab>VALUE…; this script performs them.
decision_plan='{"gpus": ["0000:41:00.0", "0000:61:00.0"], "hostname": "llm", "nodes": ["/dev/nvidiactl", "/dev/nvidia-uvm"], "privileged": true, "unwanted": ["/dev/nvidia-uvm-tools"], "vmid": 129}'
decider_source="$(cat <<'GPUHOSTS_DECIDER'
# [gpuhosts/hostside/lxc_gpu_passthrough.py sha256:757d95ae4a4eb71b verbatim; tests/test_lxc_gpu_passthrough_cases.py]
GPUHOSTS_DECIDER
)"
# The actions of the last decision.
decisions=""

# decide COMMAND [ARG] — the decision COMMAND over what `gather_facts ARG` prints.
decide() {
  command -v python3 >/dev/null \
    || refuse "python3 is missing, and this unit decides in Python: apt-get install python3-minimal"
  gather_facts "${2:-}" | python3 -I -c "$decider_source" "$1" "$decision_plan"
}

# decided VERB — the values of each of that verb's actions, one action a line.
decided() {
  awk -F'\t' -v verb="$1" '$1 == verb { sub(/^[^\t]*\t?/, ""); print }' <<<"$decisions"
}

# decided_to VERB — whether any action has that verb.
decided_to() {
  awk -F'\t' -v verb="$1" '$1 == verb { found = 1 } END { exit !found }' <<<"$decisions"
}

# run_checks — the decision's refusals and messages in their order, and each other verb the unit checks itself
# (its `check_action VERB VALUE`, where it has one): all before anything the decision leads to changes.
run_checks() {
  local verb value
  while IFS=$'\t' read -r verb value; do
    case "$verb" in
      refuse) refuse "$value" ;;
      warn | say) say "$value" ;;
      *) if declare -F check_action >/dev/null; then check_action "$verb" "$value"; fi ;;
    esac
  done <<<"$decisions"
}

# --- facts, gathered here, decided in Python (gpuhosts/hostside/lxc_gpu_passthrough.py, which says their form) ----
node_state() {
  if [ -e "$root$1" ]; then echo "node $1 present"; else echo "node $1 absent"; fi
}
# api_config RECORD [--current 1] — the container's config as Proxmox's API gives it (GET
# /nodes/{node}/lxc/{vmid}/config, pve-container src/PVE/API2/LXC/Config.pm `vm_config`), framed by its length.
api_config() {
  local record="$1" json
  shift
  if json="$(pvesh get "/nodes/$(node_name)/lxc/$vmid/config" "$@" --output-format json 2>&1)"; then
    printf '%s %s\n%s\n' "$record" "$(printf '%s' "$json" | wc -c)" "$json"
  else
    printf 'config-error %s\n' "${json//$'\n'/ }"
  fi
}
gather_facts() {
  local config address driver minor guests node
  config="$(api_config config && api_config current-config --current 1)"
  printf '%s\n' "$config"
  if container_running; then echo "container running"; else echo "container stopped"; fi
  [ ! -f "$owned" ] || sed 's/^/owned /' "$owned"
  for address in "${gpus[@]}"; do
    driver="$(pci_driver "$address")"
    minor="$(gpu_minor "$address")"
    printf 'gpu %s %s %s\n' "$address" "${driver:--}" "${minor:--}"
    guests="$(gpu_guests "$address")"
    printf 'guests %s %s\n' "$address" "$guests"
    [ "$guests" = none ] || printf 'guest-fix %s %s\n' "$address" "$(guest_fix "$address")"
    [ -z "$minor" ] || node_state "/dev/nvidia$minor"
  done
  for node in "${nodes[@]}"; do
    node_state "$node"
  done
  # the host node of every devN, as the decisions read the config
  while IFS=$'\t' read -r _ node; do
    [ -z "$node" ] || node_state "$node"
  done < <(python3 -I -c "$decider_source" paths "$decision_plan" <<<"$config")
}
decisions="$(decide ensure)" || refuse "the GPU passthrough could not decide: its facts are above"
run_checks

# --- act ---------------------------------------------------------------------------------------------------
mkdir -p "$state_dir"
touch "$owned"
restart_owed_before=0
if owed "ct-$vmid-restart" || owed "ct-$vmid-start"; then
  restart_owed_before=1
fi
devices_changed=0
while IFS=$'\t' read -r verb key path how; do
  case "$verb" in
    drop)
      owe "ct-$vmid-restart"
      if [ "$how" = delete ]; then
        ct_set --delete "$key"
      else
        ct_set --revert "$key"
      fi
      awk -v line="$key $path" '$0 != line' "$owned" >"$owned.new" && mv -f "$owned.new" "$owned"
      note_change "removed $key ($path) from container $vmid"
      ;;
    take-back)
      ct_set --revert "$key"
      grep -qxF "$key $path" "$owned" || printf '%s %s\n' "$key" "$path" >>"$owned"
      note_change "took back the pending removal of $key ($path) from container $vmid"
      ;;
    add)
      owe "ct-$vmid-restart"
      ct_set "--$key" "$path"
      printf '%s %s\n' "$key" "$path" >>"$owned"
      note_change "passed $path to container $vmid as $key"
      ;;
    *) continue ;;
  esac
  devices_changed=1
done <<<"$decisions"
if [ "$devices_changed" = 1 ] && [ "$restart_owed_before" = 0 ] && container_running \
    && [ "$(dev_entries)" = "$(dev_entries_current)" ]; then
  # pve-container >= 6.0.4 plugs a new devN into a running container: nothing waits for a restart
  settled "ct-$vmid-restart"
  say "container $vmid got its new devices at once (hot-plugged)"
elif [ "$devices_changed" = 1 ] || owed "ct-$vmid-restart" || owed "ct-$vmid-start"; then
  with_lock "ct-$vmid" restart_if_running
fi

# --- verify ------------------------------------------------------------------------------------------------
entries="$(dev_entries)"
while IFS=$'\t' read -r verb path; do
  if [ "$verb" = want ] && ! cut -f2 <<<"$entries" | grep -qxF "$path"; then
    refuse "container $vmid lacks $path after pct set"
  fi
done <<<"$decisions"
finish
