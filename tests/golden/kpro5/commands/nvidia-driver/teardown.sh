# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=nvidia-driver]
# [templates/common/systemd.sh.j2 sha256:30f788557a9ed861]

version=580.126.09
persistenced_unit_name=gpuhosts-nvidia-persistenced.service
run_file=NVIDIA-Linux-x86_64-580.126.09.run
cache="$root/var/cache/gpuhosts"
state="$state_dir/nvidia-driver.state"

systemd_stopped "$persistenced_unit_name"
remove_file /etc/systemd/system/gpuhosts-nvidia-persistenced.service
if [ "$file_changed" = 1 ]; then
  systemctl daemon-reload
fi

remove_file /etc/modprobe.d/gpuhosts-nouveau.conf
if [ "$file_changed" = 1 ]; then
  update-initramfs -u -k all
  reboot_required=1
fi

# Only a driver this unit installed is removed; one that was there before stays.
if [ -f "$state" ] && grep -qx 'previous_userspace=' "$state" && [ "$(userspace_version)" = "$version" ]; then
  nvidia-uninstall --silent
  note_change "uninstalled NVIDIA driver $version"
  # The module unloads now if nothing uses it, else at the next boot.
  for module in nvidia_uvm nvidia_drm nvidia_modeset nvidia; do
    if [ -d "$root/sys/module/$module" ] && ! modprobe -r "$module"; then
      reboot_required=1
    fi
  done
fi

packages=""
if [ -f "$state" ]; then
  packages="$(sed -n 's/^installed_packages=//p' "$state" | tr '\n' ' ')"
fi
package_list=()
for pkg in $packages; do
  if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    package_list+=("$pkg")
  fi
done
if [ "${#package_list[@]}" -gt 0 ]; then
  remove_packages remove "${package_list[@]}"
fi

if [ -e "$cache/$run_file" ]; then
  rm -f "$cache/$run_file"
  rmdir "$cache" 2>/dev/null || true
fi
rm -f "$state"
rmdir "$state_dir" 2>/dev/null || true
finish
