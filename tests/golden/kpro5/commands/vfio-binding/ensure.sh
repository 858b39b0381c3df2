# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=vfio-binding]
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
# [templates/vfio_binding/pci.sh.j2 sha256:327a157f4f6b2c72]

# --- check: the boot loader the stack names is the one this host boots with --------------------------------
# Shared by the vfio binding (it runs first and writes kernel arguments) and the driver's pre-flight.
# proxmox-boot-tool status exits 2 when it keeps no ESP (plain GRUB); an ESP with a systemd-boot loader reads
# "… is configured with: uefi", one with GRUB "… configured with: grub".
host_bootloader=grub
if pbt_status="$(proxmox-boot-tool status 2>/dev/null)" && grep -qF 'is configured with: uefi' <<<"$pbt_status"; then
  host_bootloader=systemd-boot
fi
say "pre-flight: boot loader $host_bootloader (proxmox-boot-tool status)"
if [ "$host_bootloader" != "$bootloader" ]; then
  refuse "the host boots with $host_bootloader (proxmox-boot-tool status) but gpuhosts:host.bootloader is $bootloader, \
so kernel arguments would be written where the boot loader does not read them: set host.bootloader to $host_bootloader"
fi

# --- check: every declared GPU is here and NVIDIA, which functions move, and whether that is safe now ---------
decisions="$(decide ensure)" || refuse "the vfio binding could not decide: its facts are above"
run_checks

# --- act: boot-time binding by address ---------------------------------------------------------------------
mkdir -p "$state_dir"
if [ ! -f "$original" ]; then
  for slot in "${vfio_slots[@]}" "${nvidia_slots[@]}"; do
    while read -r function; do
      printf '%s %s %s\n' "$function" "$(pci_driver "$function")" "$(driver_override "$function")"
    done < <(slot_functions "$slot")
  done >"$original"
fi

initramfs_stale=0
if owed initramfs; then
  initramfs_stale=1
fi
owe initramfs
install_file /usr/local/lib/gpuhosts/vfio-override.sh 0755 <<'GPUHOSTS_EOF'
# [content: usr/local/lib/gpuhosts/vfio-override.sh sha256:844e7b8eb7dbce77]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || initramfs_stale=1
install_file /etc/initramfs-tools/hooks/gpuhosts-vfio 0755 <<'GPUHOSTS_EOF'
# [content: etc/initramfs-tools/hooks/gpuhosts-vfio sha256:380aac77cfb0eea9]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || initramfs_stale=1
install_file /etc/modprobe.d/gpuhosts-vfio.conf 0644 <<'GPUHOSTS_EOF'
# [content: etc/modprobe.d/gpuhosts-vfio.conf sha256:4996b6928c9ae98c]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || initramfs_stale=1
install_file /etc/modules-load.d/gpuhosts-vfio.conf 0644 <<'GPUHOSTS_EOF'
# [content: etc/modules-load.d/gpuhosts-vfio.conf sha256:a867bda466690686]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || initramfs_stale=1

current_cmdline="$(decided cmdline)"
# A hand-made `options vfio-pci ids=…` grabs every GPU of that model, wherever kmod finds it: in a file of any
# of its modprobe.d directories (a line continued with a backslash counts whole), or as `vfio-pci.ids=` (or
# `vfio_pci.ids=`) on the kernel command line, which kmod takes as options too. When it would take a GPU that
# must stay with nvidia, one in /etc/modprobe.d is commented out (kept in a backup that teardown restores); one
# the unit cannot rewrite (another directory, the kernel command line) is refused with where it is and the fix.
release_ids=()
for slot in "${nvidia_slots[@]}"; do
  while read -r function; do
    dev="$root/sys/bus/pci/devices/$function"
    release_ids+=("$(sed 's/^0x//' "$dev/vendor"):$(sed 's/^0x//' "$dev/device")")
  done < <(slot_functions "$slot")
done

# ids_clashes — reads modprobe.d text; prints "FIRST LAST IDS" for each `options vfio-pci … ids=…` line (FIRST
# to LAST: its physical lines) whose ids name a GPU in release_ids. As kmod reads it (kmod 30 shared/util.c
# freadline_wrapped, libkmod-config.c kmod_config_parse): a backslash at the end joins the next line as it is,
# a line starting with `#` is a comment, `-` and `_` are alike in the module name. An id is vendor:device
# with optional subsystem and class fields after it.
ids_clashes() {
  awk -v release="${release_ids[*]}" '
    BEGIN { n = split(release, r, " "); for (i = 1; i <= n; i++) wanted[r[i]] = 1 }
    {
      if (!joining) { text = ""; first = FNR }
      text = text $0
      joining = (text ~ /\\$/)
      if (joining) { text = substr(text, 1, length(text) - 1); next }
      if (substr(text, 1, 1) == "#") next
      line = text
      sub(/^[ \t]+/, "", line)
      k = split(line, word, /[ \t]+/)
      module = word[2]
      gsub(/-/, "_", module)
      if (word[1] != "options" || module != "vfio_pci") next
      found = ""
      for (i = 3; i <= k; i++) {
        if (substr(word[i], 1, 4) != "ids=") continue
        list = substr(word[i], 5)
        gsub(/"/, "", list)
        m = split(list, id, ",")
        for (j = 1; j <= m; j++) {
          split(tolower(id[j]), field, ":")
          if ((field[1] ":" field[2]) in wanted) found = found (found == "" ? "" : ",") id[j]
        }
      }
      if (found != "") print first, FNR, found
    }'
}

# cmdline_clashes LINE — the ids of `vfio-pci.ids=` words of a kernel command line that name a GPU in
# release_ids (kmod 30 libkmod-config.c kmod_config_parse_kcmdline: `module.param=value`, quotes dropped).
cmdline_clashes() {
  local words word
  read -ra words <<<"$1"
  for word in "${words[@]}"; do
    word="${word//\"/}"
    case "$word" in
      vfio[-_]pci.ids=*) printf 'options vfio_pci ids=%s\n' "${word#*=}" ;;
    esac
  done | ids_clashes | awk '{print $3}'
}

case "$bootloader" in
  systemd-boot) configured_at="/etc/kernel/cmdline (then proxmox-boot-tool refresh)" ;;
  *) configured_at="GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub (then update-grub)" ;;
esac
taken="$(cmdline_clashes "$current_cmdline")"
[ -z "$taken" ] || refuse "the kernel command line carries vfio-pci.ids=$taken, which gives GPUs meant for nvidia to vfio-pci at every boot: remove it from $configured_at, reboot, and run again"
taken="$(cmdline_clashes "$(cat "$root/proc/cmdline")")"
[ -z "$taken" ] || refuse "the running kernel was booted with vfio-pci.ids=$taken (/proc/cmdline), which gives GPUs meant for nvidia to vfio-pci, but $configured_at does not carry it: remove it where the boot loader takes it from (GRUB_CMDLINE_LINUX?), reboot, and run again"

# Every file kmod reads, each name once: a file hides a same-named one in a later directory (kmod 30
# libkmod.c default_config_paths, libkmod-config.c conf_files_list and conf_files_insert_sorted: *.conf and
# *.alias). On Debian 12 /lib is /usr/lib; a host that is not merged has both.
own=/etc/modprobe.d/gpuhosts-vfio.conf
seen=" "
edits=()
for dir in /etc/modprobe.d /run/modprobe.d /usr/local/lib/modprobe.d /lib/modprobe.d /usr/lib/modprobe.d; do
  for conf in "$root$dir"/*.conf "$root$dir"/*.alias; do
    [ -f "$conf" ] || continue
    name="${conf##*/}"
    case "$seen" in
      *" $name "*) continue ;;
    esac
    seen+="$name "
    [ "$dir/$name" != "$own" ] || continue
    while read -r first last ids; do
      if [ "$dir" != /etc/modprobe.d ]; then
        refuse "$dir/$name (line $first) sets options vfio-pci ids=$ids, which gives GPUs meant for nvidia to vfio-pci at every boot, and only /etc/modprobe.d is this unit's to edit: put a copy of it without that option at /etc/modprobe.d/$name (a file there hides the other), then run again"
      fi
      edits+=("$name $first $last")
    done < <(ids_clashes <"$conf")
  done
done

for edit in "${edits[@]}"; do
  read -r name first last <<<"$edit"
  conf="$root/etc/modprobe.d/$name"
  mkdir -p "$state_dir/backup/etc/modprobe.d"
  [ -f "$state_dir/backup/etc/modprobe.d/$name" ] || cp -p "$conf" "$state_dir/backup/etc/modprobe.d/$name"
  install_file "/etc/modprobe.d/$name" "$(stat -c %a "$conf")" < <(
    awk -v first="$first" -v last="$last" '
      FNR >= first + 0 && FNR <= last + 0 { print "# gpuhosts: vfio-pci binds by PCI address now; was: " $0; next }
      { print }' "$conf")
  initramfs_stale=1
done

# What kmod itself makes of the whole configuration (`modprobe --showconfig`, kernel command line included) is
# the last word: a clash it still shows comes from somewhere read above differently, and would bring the GPU
# back to vfio-pci at every boot.
taken="$(modprobe --showconfig 2>/dev/null | ids_clashes | awk '{print $3}' | paste -sd, -)"
[ -z "$taken" ] || refuse "modprobe --showconfig still shows options vfio_pci ids=$taken, which gives GPUs meant for nvidia to vfio-pci: find it in /etc, /run, /usr/local/lib, /lib or /usr/lib modprobe.d (a line continued with a backslash?), remove it, and run again"

if [ "$initramfs_stale" = 1 ]; then
  update-initramfs -u -k all
  reboot_required=1
fi
settled initramfs

# --- act: IOMMU kernel arguments ---------------------------------------------------------------------------
decided record-arg >>"$added_args"
while IFS=$'\t' read -r path content; do
  write_cmdline "$path" "$content"
done < <(decided write-cmdline)
if decided_to reboot; then
  reboot_required=1
fi

# --- act: live rebinding -----------------------------------------------------------------------------------
if decided_to load-vfio; then
  modprobe vfio-pci
fi
while read -r function; do
  sysfs_write "/sys/bus/pci/devices/$function/driver_override" vfio-pci
  note_change "marked $function for vfio-pci"
done < <(decided mark)
while read -r function; do
  rebind "$function" vfio-pci
  note_change "bound $function to vfio-pci"
done < <(decided bind)
while IFS=$'\t' read -r vendor device; do
  sysfs_write /sys/bus/pci/drivers/vfio-pci/remove_id "$vendor $device" 2>/dev/null || true
done < <(decided remove-id)
while read -r function; do
  rebind "$function" ""
  note_change "released $function from vfio-pci (now: $(pci_driver "$function"))"
done < <(decided release)

# --- verify ------------------------------------------------------------------------------------------------
decisions="$(decide verify --without-vms)" || refuse "the vfio binding could not verify: its facts are above"
run_checks
if decided_to reboot; then
  reboot_required=1
fi
finish
