# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=nvidia-driver]

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
module_reloaded=0
loaded="$(module_version)"
installed="$(userspace_version)"
say "wanted $version ($module_type); loaded module: ${loaded:-none}; installed user space: ${installed:-none}"

if [ "$installed" != "$version" ] && [ -n "$loaded" ] && [ "$loaded" != "$version" ]; then
  # The installer will not replace a loaded module. Unloading works only while nothing but our own persistence
  # daemon uses a GPU; that one is stopped first and started again if the upgrade has to wait.
  persistenced_was_active=0
  if systemctl is-active --quiet "$persistenced_unit_name"; then
    persistenced_was_active=1
    systemctl stop "$persistenced_unit_name"
  fi
  for node in "$root"/dev/nvidia[0-9]* "$root/dev/nvidiactl" "$root/dev/nvidia-uvm"; do
    if [ -e "$node" ] && fuser -s "$node" 2>/dev/null; then
      [ "$persistenced_was_active" = 0 ] || systemctl start "$persistenced_unit_name"
      refuse "nvidia $loaded is loaded and in use (${node#"$root"}: $(fuser -v "$node" 2>&1 | tail -n +2 | tr -s ' \n' ' ')), \
so $version cannot replace it now: stop the containers and processes using the GPUs, or reboot, and run again"
    fi
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

install_file /etc/systemd/system/gpuhosts-nvidia-persistenced.service 0644 <<'GPUHOSTS_EOF'
# [content: etc/systemd/system/gpuhosts-nvidia-persistenced.service sha256:baa5ba13d157aa15]
GPUHOSTS_EOF
if [ "$file_changed" = 1 ]; then
  systemctl daemon-reload
fi
if ! systemctl is-enabled --quiet "$persistenced_unit_name" || ! systemctl is-active --quiet "$persistenced_unit_name"; then
  systemctl enable --now "$persistenced_unit_name"
  note_change "enabled $persistenced_unit_name"
fi

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
finish
