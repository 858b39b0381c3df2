# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-gpu-devices]
# The probe of ct129-gpu-devices: reads the host and changes nothing; prints one facts line.
# [templates/common/container.sh.j2 sha256:138093b4bc2d324f vmid=129 allow_restart=true]
# [templates/common/vms.sh.j2 sha256:55b2bb4de1f92606]
# --- other guests on the container's GPUs (the devices' ensure and probe) ------------------------------------
# Two guests on one GPU is drift no ensure may repair: taking the GPU from the other guest stops whatever runs
# there, so the probe names the guest and the ensure refuses. Read once per script, as each pvesh call costs a Perl
# start on a real host; a failed call is the fact's value, never "none".
#
# guest_table — "CT <vmid> <key> <path>" for each devN in effect of every other running container, read from the
# API (gpuhosts/hostside/guest_table.py names each path). Returns 1 with the reason when Proxmox cannot tell.
guest_table() {
  local node answers answer id ids
  guest_table_python || return 1
  node="$(node_name)"
  answers="$(api_answer lxc-list "/nodes/$node/lxc")" || { printf '%s\n' "$answers"; return 1; }
  ids="$(python3 -I -c "$guest_table_source" ctids "$vmid" <<<"$answers")" || { printf '%s\n' "$ids"; return 1; }
  for id in $ids; do
    answer="$(api_answer "lxc-config $id" "/nodes/$node/lxc/$id/config" --current 1)" \
      || { printf '%s\n' "$answer"; return 1; }
    answers+=$'\n'"$answer"
  done
  python3 -I -c "$guest_table_source" ct-rows <<<"$answers"
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
# A container that is gone has neither: its facts read absent.
container_devices="$(ct_config "$vmid" dev 2>/dev/null)" || container_devices=""
container_unprivileged="$(ct_config "$vmid" unprivileged 2>/dev/null)" || container_unprivileged=""

# container_device NODE — "passed" when a devN entry of the container names NODE.
# container_privileged — "no" for an unprivileged container; a privileged one is "yes, declared" where the stack
# says privileged: true, else "yes" (drift the ensure refuses).
privileged_declared=True
container_privileged() {
  if [ "$container_unprivileged" = 1 ]; then
    echo no
  elif [ "$privileged_declared" = True ]; then
    echo "yes, declared"
  else
    echo yes
  fi
}

container_device() {
  if awk -F '\t' -v p="$1" '$2 == p {found = 1} END {exit !found}' <<<"$container_devices"; then
    echo passed
  else
    echo absent
  fi
}

# container_device_of_gpu ADDRESS — the same for the GPU's node, /dev/nvidia<minor from the host's driver>.
container_device_of_gpu() {
  local minor
  minor="$(gpu_minor "$1")"
  if [ -z "$minor" ]; then
    echo "no minor (GPU not on nvidia)"
  else
    container_device "/dev/nvidia$minor"
  fi
}

fact 'device 0000:41:00.0' "$( { container_device_of_gpu 0000:41:00.0; } 2>/dev/null || true)"
fact 'device 0000:61:00.0' "$( { container_device_of_gpu 0000:61:00.0; } 2>/dev/null || true)"
fact 'device /dev/nvidiactl' "$( { container_device /dev/nvidiactl; } 2>/dev/null || true)"
fact 'device /dev/nvidia-uvm' "$( { container_device /dev/nvidia-uvm; } 2>/dev/null || true)"
fact privileged "$( { container_privileged; } 2>/dev/null || true)"
fact 'device /dev/nvidia-uvm-tools' "$( { container_device /dev/nvidia-uvm-tools; } 2>/dev/null || true)"
fact 'other guests on 0000:41:00.0' "$( { gpu_guests 0000:41:00.0; } 2>/dev/null || true)"
fact 'other guests on 0000:61:00.0' "$( { gpu_guests 0000:61:00.0; } 2>/dev/null || true)"
fact 'observed: minor of 0000:41:00.0' "$( { gpu_minor 0000:41:00.0; } 2>/dev/null || true)"
fact 'observed: minor of 0000:61:00.0' "$( { gpu_minor 0000:61:00.0; } 2>/dev/null || true)"
fact 'observed: major of nvidia-uvm' "$( { char_major nvidia-uvm; } 2>/dev/null || true)"
fact 'observed: major of nvidia-caps' "$( { char_major nvidia-caps; } 2>/dev/null || true)"
emit_facts
