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
want_hostname=llm

# --- check -------------------------------------------------------------------------------------------------
pct config "$vmid" >/dev/null 2>&1 || refuse "container $vmid does not exist on this host (pct list); fix gpuhosts:containers"
hostname="$(pct config "$vmid" | sed -n 's/^hostname: //p')"
[ "$hostname" = "$want_hostname" ] || say "warning: container $vmid is named '$hostname', the stack says $want_hostname"
# A privileged container's root is the host's: GPUs go to one only where the stack says it knows.
privileged_declared=True
if [ "$(pct config "$vmid" | sed -n 's/^unprivileged: //p')" != 1 ] && [ "$privileged_declared" != True ]; then
  refuse "container $vmid is privileged (unprivileged: 0): its root is the host's root, and what runs in it could \
take the host; make it unprivileged, or declare it with privileged: true in gpuhosts:containers"
fi

# Before the driver's check: a VM that holds the GPU has it on vfio-pci, and the guest is what to name.
for address in "${gpus[@]}"; do
  guests="$(gpu_guests "$address")"
  case "$guests" in
    none) ;;
    unknown:*) refuse "cannot tell which other guests hold GPU $address: ${guests#unknown: }" ;;
    *) refuse "GPU $address is held by $guests besides container $vmid: two guests on one GPU, and gpuhosts \
does not take it from the other. Let the other guest go ($(guest_fix "$address")), or give container $vmid another GPU \
in gpuhosts:gpus, and run again" ;;
  esac
done

wanted=()
for address in "${gpus[@]}"; do
  driver="$(pci_driver "$address")"
  [ "$driver" = nvidia ] || refuse "GPU $address is on '${driver:-no driver}', not nvidia: the vfio binding or a reboot must release it first"
  minor="$(gpu_minor "$address")"
  [ -n "$minor" ] || refuse "the nvidia driver reports no minor for $address (/proc/driver/nvidia/gpus/$address/information)"
  wanted+=("/dev/nvidia$minor")
  say "GPU $address is /dev/nvidia$minor"
done
wanted+=(/dev/nvidiactl /dev/nvidia-uvm)
for node in "${wanted[@]}"; do
  [ -e "$root$node" ] || refuse "host device $node is missing ($(node_fix "$node"); the nvidia-uvm-at-boot unit \
does at every boot); pct would refuse it and the container would not start"
done

# --- act ---------------------------------------------------------------------------------------------------
mkdir -p "$state_dir"
touch "$owned"
restart_owed_before=0
if owed "ct-$vmid-restart" || owed "ct-$vmid-start"; then
  restart_owed_before=1
fi
devices_changed=0
# has_entry KEY-OR-PATH COLUMN ENTRIES — an entry of ENTRIES ("devN<TAB>path" lines) with that key or path.
has_entry() {
  awk -F '\t' -v want="$1" -v col="$2" '$col == want {found = 1} END {exit !found}' <<<"$3"
}
# Entries of ours that are no longer wanted go; their nodes may be gone already (a GPU moved to vfio-pci).
entries="$(dev_entries)"
dropped=()
while IFS=$'\t' read -r key path; do
  [ -n "$key" ] || continue
  keep=0
  for node in "${wanted[@]}"; do
    [ "$node" != "$path" ] || keep=1
  done
  if [ "$keep" = 0 ] && grep -qxF "$key $path" "$owned"; then
    dropped+=("$key")
  fi
done <<<"$entries"
# A node the stack does not give (the profiling node, unless profilingDevice) that someone passed by hand: gpuhosts
# takes back only its own entries, and names the other.
unwanted=(/dev/nvidia-uvm-tools)
for node in "${unwanted[@]}"; do
  while IFS=$'\t' read -r key path; do
    [ "$path" = "$node" ] || continue
    grep -qxF "$key $path" "$owned" || refuse "container $vmid has $path as $key, which gpuhosts did not give: \
remove it (pct set $vmid --delete $key), or set profilingDevice: true for this container"
  done <<<"$entries"
done
to_add=()
for node in "${wanted[@]}"; do
  has_entry "$node" 2 "$entries" || to_add+=("$node")
done
if [ "${#dropped[@]}" -gt 0 ] || [ "${#to_add[@]}" -gt 0 ]; then
  dev_going=("${dropped[@]}")
  dev_nodes_ready
fi
for key in "${dropped[@]}"; do
  path="$(awk -F '\t' -v k="$key" '$1 == k {print $2; exit}' <<<"$entries")"
  owe "ct-$vmid-restart"
  if has_entry "$key" 1 "$(dev_entries_current)"; then
    # on a running container the removal waits for its next start (pve-container does not hot-unplug)
    ct_set --delete "$key"
  else
    ct_set --revert "$key"  # only pending so far: --delete would leave it pending
  fi
  awk -v line="$key $path" '$0 != line' "$owned" >"$owned.new" && mv -f "$owned.new" "$owned"
  devices_changed=1
  note_change "removed $key ($path) from container $vmid"
done
for node in "${to_add[@]}"; do
  # Removed by hand from the running container, the entry is only pending removal (pve-container does not
  # hot-unplug): taking the removal back restores it as it was. A new devN for the same node would wait for a
  # restart before pve-container 6.0.4, and from 6.0.4 on fails to plug in: the node is still there (mknod: File
  # exists; pve-container 5eb5574e src/PVE/LXC/Config.pm vmconfig_hotplug_pending).
  pending_key="$(awk -F '\t' -v n="$node" '$2 == n {print $1; exit}' <<<"$(dev_entries_current)")"
  if [ -n "$pending_key" ]; then
    ct_set --revert "$pending_key"
    grep -qxF "$pending_key $node" "$owned" || printf '%s %s\n' "$pending_key" "$node" >>"$owned"
    devices_changed=1
    note_change "took back the pending removal of $pending_key ($node) from container $vmid"
    continue
  fi
  entries="$(dev_entries)"
  # a free key in both views: a key whose removal is pending is still taken until the next start
  taken="$entries"$'\n'"$(dev_entries_current)"
  index=0
  while has_entry "dev$index" 1 "$taken"; do
    index=$((index + 1))
  done
  owe "ct-$vmid-restart"
  ct_set "--dev$index" "$node"
  printf 'dev%s %s\n' "$index" "$node" >>"$owned"
  devices_changed=1
  note_change "passed $node to container $vmid as dev$index"
done
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
for node in "${wanted[@]}"; do
  has_entry "$node" 2 "$entries" || refuse "container $vmid lacks $node after pct set"
done
finish
