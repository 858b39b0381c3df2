# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-gpu-devices]
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

gpus=(0000:41:00.0 0000:61:00.0)
nodes=(/dev/nvidiactl /dev/nvidia-uvm)
# [templates/common/decisions.sh.j2 sha256:ced4ceab7921708a plan_json='{"gpus": ["0000:41:00.0", "0000:61:00.0"], "hostname": "llm", "nodes": ["/dev/nvidiactl", "/dev/nvidia-uvm"], "privileged": true, "unwanted": ["/dev/nvidia-uvm-tools"], "vmid": 129}' decider=# [gpuhosts/hostside/lxc_gpu_passthrough.py sha256:757d95ae4a4eb71b verbatim; tests/test_lxc_gpu_passthrough_cases.py]]

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
