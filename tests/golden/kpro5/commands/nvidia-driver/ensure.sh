# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=nvidia-driver]
# [templates/common/systemd-repair.sh.j2 sha256:aba09a78c43e4685]
# [templates/common/systemd.sh.j2 sha256:30f788557a9ed861]

version=580.126.09
persistenced_unit_name=gpuhosts-nvidia-persistenced.service
uvm_unit_name=gpuhosts-nvidia-uvm.service
module_type=open
run_file=NVIDIA-Linux-x86_64-580.126.09.run
url=https://download.nvidia.com/XFree86/Linux-x86_64/580.126.09/NVIDIA-Linux-x86_64-580.126.09.run
sha256=5d3fbb2b2a2bd9b3d0a6c3a9b1bd8e1f8b7ad0b7e0b1c3f6f1f1c8d5a9e6b7c4
cache="$root/var/cache/gpuhosts"
state="$state_dir/nvidia-driver.state"

gpus=(0000:41:00.0 0000:61:00.0)
bootloader=systemd-boot
module_reloaded=0
kernel="$(uname -r)"

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

# --- facts, gathered here, decided in Python (gpuhosts/hostside/nvidia_driver.py, which says their form) -----------
# [templates/common/decisions.sh.j2 sha256:ced4ceab7921708a plan_json='{"container_gpus": true, "devn_min": "5.0.7", "hotplug_min": "6.0.4", "module_type": "open", "proxmox_release": "9.1", "version": "580.126.09"}' decider=# [gpuhosts/hostside/nvidia_driver.py sha256:664518ee73365b55 verbatim; tests/test_nvidia_driver_cases.py]]

# efi_byte FILE — an efivarfs variable's value byte (its first 4 bytes are attributes), "-" when unreadable.
efi_byte() {
  if [ -r "$1" ]; then od -An -t u1 -j4 -N1 "$1" | tr -d ' \n'; else printf -- -; fi
}

# gather_facts [built] — every fact the decisions read; with `built`, DKMS's view of the installed driver.
gather_facts() {
  local efivars="$root/sys/firmware/efi/efivars" name package address driver
  printf 'installed %s\nloaded %s\nkernel %s\n' "$(userspace_version | sed 's/^$/-/')" \
    "$(module_version | sed 's/^$/-/')" "$kernel"
  # pve-manager bin/pveversion prints "pve-manager/<version>/<build commit> (running kernel: <release>)".
  printf 'pveversion %s\n' "$(pveversion 2>/dev/null | head -n1 || true)"
  printf 'pve-container %s\n' "$(dpkg-query -W -f='${Version}' pve-container 2>/dev/null | sed 's/^$/-/' || echo -)"
  if [ -d "$root/sys/firmware/efi" ]; then echo "efi present"; else echo "efi absent"; fi
  for name in SecureBoot SetupMode; do
    printf 'efivar %s %s\n' "$name-8be4df61-93ca-11d2-aa0d-00e098032b8c" \
      "$(efi_byte "$efivars/$name-8be4df61-93ca-11d2-aa0d-00e098032b8c")"
  done
  for package in dkms "proxmox-headers-$kernel" proxmox-default-headers; do
    if dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
      echo "package $package installed"
    else
      echo "package $package absent"
    fi
  done
  for address in "${gpus[@]}"; do
    driver="$(pci_driver "$address")"
    printf 'gpu %s %s\n' "$address" "${driver:--}"
  done
  if [ "${1:-}" = built ]; then
    # dkms 3.0.10 actual_build moves the log beside the build only when it succeeds; a failed one stays in build/.
    if [ -f "$root/var/lib/dkms/nvidia/$version/build/make.log" ]; then echo "build-log present"; else echo "build-log absent"; fi
    dkms status -m nvidia -v "$version" 2>/dev/null | sed 's/^/dkms /' || true
  fi
}

# --- pre-flight: what this host runs, and what the stack cannot do on it, before anything changes -----------
decisions="$(decide preflight)" || refuse "the driver could not decide: its facts are above"
run_checks

if decided_to unload; then
  loaded="$(module_version)"
  # The installer will not replace a loaded module. Unloading works only while nothing but our own persistence
  # daemon uses a GPU; that one is stopped first and started again if the upgrade has to wait.
  persistenced_was_active=0
  if systemctl is-active --quiet "$persistenced_unit_name"; then
    persistenced_was_active=1
    systemctl stop "$persistenced_unit_name"
  fi
  for node in "$root"/dev/nvidia[0-9]* "$root/dev/nvidiactl" "$root/dev/nvidia-uvm"; do
    [ -e "$node" ] || continue
    # fuser -s exits 1 both for "no process" and for an error; only an error prints (on stderr).
    fuser_rc=0
    fuser_err="$(fuser -s "$node" 2>&1)" || fuser_rc=$?
    if [ "$fuser_rc" = 1 ] && [ -z "$fuser_err" ]; then
      continue
    fi
    [ "$persistenced_was_active" = 0 ] || systemctl start "$persistenced_unit_name"
    if [ "$fuser_rc" != 0 ]; then
      refuse "cannot tell whether a process holds ${node#"$root"}: fuser -s failed (status $fuser_rc): \
$(tr '\n' ' ' <<<"$fuser_err")"
    fi
    refuse "nvidia $loaded is loaded and in use (${node#"$root"}: $(fuser -v "$node" 2>&1 | tail -n +2 | tr -s ' \n' ' ')), \
so $version cannot replace it now: stop the containers and processes using the GPUs, or reboot, and run again"
  done
  for module in nvidia_uvm nvidia_drm nvidia_modeset nvidia; do
    if [ -d "$root/sys/module/$module" ] && ! modprobe -r "$module"; then
      [ "$persistenced_was_active" = 0 ] || systemctl start "$persistenced_unit_name"
      refuse "nvidia $loaded is loaded and in use ($module), so $version cannot replace it now: stop what uses the \
GPUs (fuser -v /dev/nvidia*), or reboot, and run again"
    fi
  done
  note_change "unloaded nvidia $loaded"
  module_reloaded=1
fi

# nouveau first: while it holds a GPU the installer cannot load its module.
initramfs_stale=0
if owed initramfs; then
  initramfs_stale=1
fi
owe initramfs
install_file /etc/modprobe.d/gpuhosts-nouveau.conf 0644 <<'GPUHOSTS_EOF'
# [content: etc/modprobe.d/gpuhosts-nouveau.conf sha256:186f932bda4932d8]
GPUHOSTS_EOF
if [ "$initramfs_stale" = 1 ] || [ "$file_changed" = 1 ]; then
  update-initramfs -u -k all
  reboot_required=1
fi
settled initramfs
if [ -d "$root/sys/module/nouveau" ] && ! modprobe -r nouveau; then
  say "nouveau is loaded and in use; the driver installs after a reboot"
  reboot_required=1
  finish
  exit 0
fi

if decided_to install-driver; then
  installed="$(userspace_version)"
  read -ra missing <<<"$(decided install-packages)"
  mkdir -p "$state_dir" "$cache"
  if [ "${#missing[@]}" -gt 0 ]; then
    # Recorded first: a run cut off during apt-get must still let teardown remove them.
    printf 'installed_packages=%s\n' "${missing[*]}" >>"$state"
    with_lock dpkg env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
    note_change "installed ${missing[*]}"
  fi

  if [ ! -f "$cache/$run_file" ] || ! printf '%s  %s\n' "$sha256" "$cache/$run_file" | sha256sum --check --status; then
    curl -fsSL --retry 3 -o "$cache/$run_file.part" "$url"
    if ! printf '%s  %s\n' "$sha256" "$cache/$run_file.part" | sha256sum --check --status; then
      rm -f "$cache/$run_file.part"
      refuse "$url does not have the pinned sha256 $sha256; check gpuhosts:nvidia.sha256"
    fi
    mv -f "$cache/$run_file.part" "$cache/$run_file"
  fi

  if ! grep -q '^previous_userspace=' "$state" 2>/dev/null; then
    printf 'previous_userspace=%s\n' "$installed" >>"$state"
  fi
  sh "$cache/$run_file" --silent --dkms --kernel-module-type="$module_type"
  note_change "installed NVIDIA driver $version ($module_type kernel module, DKMS)"
fi

# DKMS after a build, and after a kernel update: a module not built for the running kernel never loads, however
# often the host reboots.
decisions="$(decide built built)" || refuse "the driver could not decide: its facts are above"
run_checks

systemd_repair "$persistenced_unit_name"
install_file /etc/systemd/system/gpuhosts-nvidia-persistenced.service 0644 <<'GPUHOSTS_EOF'
# [content: etc/systemd/system/gpuhosts-nvidia-persistenced.service sha256:daf5c359557f55d6]
GPUHOSTS_EOF
# A new unit file is read at the next start; what was done beside it (a drop-in, a mask) is undone at once.
[ "$file_changed" = 0 ] || [ "$systemd_repaired" = 1 ] || systemctl daemon-reload
systemd_running "$persistenced_unit_name" "$systemd_repaired"

decisions="$(decide settled)" || refuse "the driver could not decide: its facts are above"
run_checks
# Unloading the old module took /dev/nvidia-uvm with it; the boot unit that makes it for the containers runs again.
if [ "$module_reloaded" = 1 ] && systemctl is-enabled --quiet "$uvm_unit_name" 2>/dev/null; then
  systemctl restart "$uvm_unit_name"
  note_change "recreated /dev/nvidia-uvm for the new module"
fi
if decided_to reboot; then
  reboot_required=1
fi
# Persistence mode turned off by hand (`nvidia-smi -pm 0`) while the daemon runs: `-pm 1` has the daemon keep the
# GPU initialised again, through the RPC it serves for that (nvPdSetPersistenceMode: NVIDIA/nvidia-persistenced
# nvpd_rpc.h). A GPU nvidia-smi cannot query yet (a module that waits for the reboot) is left as it is.
if systemctl is-active --quiet "$persistenced_unit_name"; then
  for address in "${gpus[@]}"; do
    [ "$(pci_driver "$address")" = nvidia ] || continue
    pm="$(nvidia-smi -i "$address" --query-gpu=persistence_mode --format=csv,noheader 2>&1)" || continue
    if [ "$pm" = Disabled ]; then
      nvidia-smi -i "$address" -pm 1 >/dev/null
      note_change "persistence mode on again for GPU $address"
    fi
  done
fi
finish
