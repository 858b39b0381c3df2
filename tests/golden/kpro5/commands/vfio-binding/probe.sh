# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=vfio-binding]
# The probe of vfio-binding: reads the host and changes nothing; prints one facts line.
# --- facts, gathered here, decided in Python (gpuhosts/hostside/vfio_binding.py, which says their form) -----------
bootloader=systemd-boot
vfio_slots=(0000:01:00 0000:21:00)
nvidia_slots=(0000:41:00 0000:61:00)
original="$state_dir/vfio-original.state"
added_args="$state_dir/vfio-kernel-args.state"

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
# --- decisions in Python over the facts this script gathers ---------------------------------------------------
# The unit's `gather_facts [ARG]` prints its facts; its decision module (gpuhosts/hostside/, embedded below verbatim)
# reads them with the plan and prints one action a line, VERB<tab>VALUE…; this script performs them.
decision_plan='{"bootloader": "systemd-boot", "kernel_args": ["iommu=pt"], "nvidia_slots": ["0000:41:00", "0000:61:00"], "vfio_slots": ["0000:01:00", "0000:21:00"]}'
decider_source="$(cat <<'GPUHOSTS_DECIDER'
# [gpuhosts/hostside/vfio_binding.py sha256:5b2559c21320ca13 verbatim; tests/test_vfio_binding_cases.py]
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

driver_override() {
  local value
  value="$(cat "$root/sys/bus/pci/devices/$1/driver_override" 2>/dev/null || true)"
  [ "$value" = "(null)" ] || printf '%s\n' "$value"
}

# frame_file NAME PATH — a file's whole text, framed by its length: it may hold anything.
frame_file() {
  if [ -f "$root$2" ]; then
    printf 'file %s %s\n' "$1" "$(wc -c <"$root$2")"
    cat "$root$2"
    echo
  else
    printf 'missing %s\n' "$1"
  fi
}

# gather_facts [--without-vms] — every fact the decisions read. The VMs' PCI ids cost a qm call per VM on a real host.
gather_facts() {
  local slot function dev module file table
  for slot in "${vfio_slots[@]}" "${nvidia_slots[@]}"; do
    while read -r function; do
      dev="$root/sys/bus/pci/devices/$function"
      printf 'function %s %s %s %s %s\n' "$function" "$(cat "$dev/vendor")" "$(cat "$dev/device")" \
        "$(pci_driver "$function" | sed 's/^$/-/')" "$(driver_override "$function" | sed 's/^$/-/')"
    done < <(slot_functions "$slot")
  done
  for module in vfio_pci nvidia; do
    if [ -d "$root/sys/module/$module" ]; then echo "module $module loaded"; else echo "module $module absent"; fi
  done
  if [ "${1:-}" != --without-vms ]; then
    if table="$(vm_table)"; then
      sed -n 's/^./vm &/p' <<<"$table"
    else
      printf 'vm-table-error %s\n' "${table//$'\n'/ }"
    fi
  fi
  frame_file proc-cmdline /proc/cmdline
  frame_file added-args "${added_args#"$root"}"
  if [ "$bootloader" = systemd-boot ]; then
    frame_file kernel-cmdline /etc/kernel/cmdline
  else
    for file in "$root/etc/default/grub" "$root"/etc/default/grub.d/*.cfg; do
      [ ! -f "$file" ] || frame_file "grub ${file#"$root"}" "${file#"$root"}"
    done
  fi
  if [ -f "$original" ]; then
    awk '{printf "original %s %s %s\n", $1, ($2 == "" ? "-" : $2), ($3 == "" ? "-" : $3)}' "$original"
  fi
}

# check_action VERB VALUE — before anything changes, the nvidia driver must let go of a GPU that moves.
check_action() {
  local problem
  if [ "$1" = check-release ]; then
    problem="$(gpu_release_problem "$2")"
    [ -z "$problem" ] || refuse "$problem"
  fi
}

# write_cmdline PATH BASE64 — the boot loader file as decided, then the boot loader's own refresh.
write_cmdline() {
  install_file "$1" "$(stat -c %a "$root$1")" < <(base64 -d <<<"$2")
  if [ "$bootloader" = systemd-boot ]; then
    proxmox-boot-tool refresh
  else
    update-grub
  fi
}

# Every fact of the probe comes from one decision over one gathering: the VMs' PCI ids cost a qm call per VM.
decision_error=""
observations="$(decide probe 2>&1)" || { decision_error="${observations//$'\n'/ }"; observations=""; }

# observed NAME — what the decision observed for that fact, or why nothing could be.
observed() {
  if [ -n "$decision_error" ]; then
    printf 'unknown: %s\n' "$decision_error"
    return 0
  fi
  awk -F'\t' -v name="$1" '$1 == "fact" && $2 == name { sub(/^[^\t]*\t[^\t]*\t/, ""); print }' <<<"$observations"
}

fact 'file /usr/local/lib/gpuhosts/vfio-override.sh' "$( { file_state /usr/local/lib/gpuhosts/vfio-override.sh; } 2>/dev/null || true)"
fact 'file /etc/initramfs-tools/hooks/gpuhosts-vfio' "$( { file_state /etc/initramfs-tools/hooks/gpuhosts-vfio; } 2>/dev/null || true)"
fact 'file /etc/modprobe.d/gpuhosts-vfio.conf' "$( { file_state /etc/modprobe.d/gpuhosts-vfio.conf; } 2>/dev/null || true)"
fact 'file /etc/modules-load.d/gpuhosts-vfio.conf' "$( { file_state /etc/modules-load.d/gpuhosts-vfio.conf; } 2>/dev/null || true)"
fact 'kernel argument iommu=pt' "$( { observed 'kernel argument iommu=pt'; } 2>/dev/null || true)"
fact 'slot 0000:01:00' "$( { observed 'slot 0000:01:00'; } 2>/dev/null || true)"
fact 'slot 0000:21:00' "$( { observed 'slot 0000:21:00'; } 2>/dev/null || true)"
fact 'slot 0000:41:00' "$( { observed 'slot 0000:41:00'; } 2>/dev/null || true)"
fact 'running VM with 0000:41:00' "$( { observed 'running VM with 0000:41:00'; } 2>/dev/null || true)"
fact 'slot 0000:61:00' "$( { observed 'slot 0000:61:00'; } 2>/dev/null || true)"
fact 'running VM with 0000:61:00' "$( { observed 'running VM with 0000:61:00'; } 2>/dev/null || true)"
emit_facts
