# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=vfio-binding]
# [templates/vfio_binding/decide.sh.j2 sha256:f0eb1df6a1186b60 bootloader=systemd-boot vfio_slots=(0000:01:00 0000:21:00) nvidia_slots=(0000:41:00 0000:61:00) plan_json='{"bootloader": "systemd-boot", "kernel_args": ["iommu=pt"], "nvidia_slots": ["0000:41:00", "0000:61:00"], "vfio_slots": ["0000:01:00", "0000:21:00"]}' decider=# [gpuhosts/hostside/vfio_binding.py sha256:5b2559c21320ca13 verbatim; tests/test_vfio_binding_cases.py]]
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
