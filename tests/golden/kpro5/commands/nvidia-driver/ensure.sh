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
container_gpus=yes
devn_min=5.0.7
hotplug_min=6.0.4
module_reloaded=0
loaded="$(module_version)"
installed="$(userspace_version)"
say "wanted $version ($module_type); loaded module: ${loaded:-none}; installed user space: ${installed:-none}"

# --- pre-flight: what this host runs, and what the stack cannot do on it, before anything changes -----------
kernel="$(uname -r)"
# pve-manager bin/pveversion prints "pve-manager/<version>/<build commit> (running kernel: <release>)".
pve_version="$(pveversion 2>/dev/null | awk -F/ '$1 == "pve-manager" {print $2; exit}' || true)"
pct_version="$(dpkg-query -W -f='${Version}' pve-container 2>/dev/null || true)"
say "pre-flight: Proxmox VE ${pve_version:-unknown} (pveversion), pve-container ${pct_version:-not installed}, kernel $kernel"
declared_release=9.1
if [ -n "$declared_release" ] && [ "${pve_version%.*}" != "$declared_release" ]; then
  refuse "the host runs Proxmox VE ${pve_version:-unknown} (pveversion), the stack says $declared_release" \
    "(host.proxmoxRelease): the plan checked the driver against $declared_release's kernels; set the release the" \
    "host runs, or upgrade the host first"
fi

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

# Secure Boot as mokutil --sb-state decides it: SecureBoot 1 and SetupMode 0 (efivarfs: 4 attribute bytes first).
efi_byte() {
  [ -r "$1" ] || return 0
  od -An -t u1 -j4 -N1 "$1" | tr -d ' \n'
}
efivars="$root/sys/firmware/efi/efivars"
secure_boot=disabled
if [ ! -d "$root/sys/firmware/efi" ]; then
  secure_boot="not available (legacy BIOS boot)"
elif [ "$(efi_byte "$efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c")" = 1 ] \
  && [ "$(efi_byte "$efivars/SetupMode-8be4df61-93ca-11d2-aa0d-00e098032b8c")" != 1 ]; then
  secure_boot=enabled
fi
say "pre-flight: Secure Boot $secure_boot"
if [ "$secure_boot" = enabled ] && [ "$installed" != "$version" ]; then
  refuse "Secure Boot is enabled, so the kernel loads only signed modules, and gpuhosts builds nvidia $version \
unsigned (it gives the installer no --module-signing-secret-key and sets up no DKMS signing key): disable Secure \
Boot in the firmware, or install the driver signed with an enrolled MOK yourself, and run again"
fi

devn=no
hotplug=no
if [ -n "$pct_version" ] && dpkg --compare-versions "$pct_version" ge "$devn_min"; then
  devn=yes
fi
if [ -n "$pct_version" ] && dpkg --compare-versions "$pct_version" ge "$hotplug_min"; then
  hotplug=yes
fi
say "pre-flight: container devN entries: $devn (pve-container >= $devn_min); devN hotplug: $hotplug (pve-container >= $hotplug_min)"
if [ "$container_gpus" = yes ] && [ "$devn" = no ]; then
  refuse "the stack gives GPUs to containers as devN entries, which need pve-container >= $devn_min (Proxmox VE 8.1); \
this host has ${pct_version:-no pve-container}: upgrade Proxmox VE and run again"
fi

# dkms_state KERNEL — DKMS's state of nvidia $version for KERNEL (installed, built), empty when not built there.
# dkms 3.0.10 do_status prints "<module>/<version>, <kernel>, <arch>: <state>[ (WARNING…)]" or "<module>/<version>: added".
dkms_state() {
  printf '%s\n' "$dkms_status" | awk -v prefix="nvidia/$version, $1, " \
    'index($0, prefix) == 1 {rest = substr($0, length(prefix) + 1); sub(/^[^:]*: /, "", rest); split(rest, w, " "); print w[1]; exit}'
}

if [ "$installed" != "$version" ] && [ -n "$loaded" ] && [ "$loaded" != "$version" ]; then
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

if [ "$installed" != "$version" ]; then
  kernel="$(uname -r)"
  missing=()
  # dkms first: the .run registers its module with DKMS only when DKMS is already there.
  for pkg in dkms "proxmox-headers-$kernel" proxmox-default-headers; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
      missing+=("$pkg")
    fi
  done
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
dkms_status="$(dkms status -m nvidia -v "$version" 2>/dev/null || true)"
while IFS= read -r line; do
  [ -z "$line" ] || say "DKMS: $line"
done <<<"$dkms_status"
if [ -n "$dkms_status" ] && [ "$(module_version)" != "$version" ] && [ "$(dkms_state "$kernel")" != installed ]; then
  # dkms 3.0.10 actual_build moves the log beside the build only when it succeeds; a failed one stays in build/.
  failed_log="/var/lib/dkms/nvidia/$version/build/make.log"
  if [ -f "$root$failed_log" ]; then
    why="its DKMS build failed (log: $failed_log)"
  else
    why="DKMS has not built it there (is proxmox-headers-$kernel installed?)"
  fi
  refuse "nvidia $version is not installed for the running kernel $kernel, so no reboot would load it: $why; \
fix the build and run 'dkms install -m nvidia -v $version -k $kernel', or boot a kernel it is built for (dkms status \
-m nvidia) with proxmox-boot-tool kernel pin, and run again"
fi

systemd_repair "$persistenced_unit_name"
install_file /etc/systemd/system/gpuhosts-nvidia-persistenced.service 0644 <<'GPUHOSTS_EOF'
# [content: etc/systemd/system/gpuhosts-nvidia-persistenced.service sha256:daf5c359557f55d6]
GPUHOSTS_EOF
# A new unit file is read at the next start; what was done beside it (a drop-in, a mask) is undone at once.
[ "$file_changed" = 0 ] || [ "$systemd_repaired" = 1 ] || systemctl daemon-reload
systemd_running "$persistenced_unit_name" "$systemd_repaired"

installed="$(userspace_version)"
[ "$installed" = "$version" ] || refuse "after installing, user space is ${installed:-absent}, not $version"
# Unloading the old module took /dev/nvidia-uvm with it; the boot unit that makes it for the containers runs again.
if [ "$module_reloaded" = 1 ] && systemctl is-enabled --quiet "$uvm_unit_name" 2>/dev/null; then
  systemctl restart "$uvm_unit_name"
  note_change "recreated /dev/nvidia-uvm for the new module"
fi
loaded="$(module_version)"
if [ "$loaded" != "$version" ]; then
  say "the loaded module is ${loaded:-none}; $version takes over at the next boot"
  reboot_required=1
fi
for address in "${gpus[@]}"; do
  driver="$(pci_driver "$address")"
  if [ "$driver" != nvidia ]; then
    say "GPU $address is on '${driver:-no driver}'; nvidia takes it at the next boot"
    reboot_required=1
  fi
done
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
