# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=dcgm-exporter]
# [templates/common/systemd.sh.j2 sha256:30f788557a9ed861]
# Stop and remove gpuhosts-dcgm-exporter.service and its files; the packages and the mask only where gpuhosts put them.
unit_name=gpuhosts-dcgm-exporter.service
state="$state_dir/"dcgm-exporter.state
systemd_stopped "$unit_name"
remove_file /etc/gpuhosts/monitoring/dcgm-exporter/gpuhosts-counters.csv
remove_file /etc/systemd/system/gpuhosts-dcgm-exporter.service
rmdir "$root"/etc/gpuhosts/monitoring/dcgm-exporter 2>/dev/null || true
rmdir "$root"/etc/gpuhosts/monitoring 2>/dev/null || true
rmdir "$root"/etc/gpuhosts 2>/dev/null || true
if [ -f "$state" ]; then
  packages="$(sed -n 's/^installed_packages=//p' "$state" | tr '\n' ' ')"
  package_list=()
  for pkg in $packages; do
    if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
      package_list+=("$pkg")
    fi
  done
  if [ "${#package_list[@]}" -gt 0 ]; then
    # purge: the conffiles came with the package gpuhosts installed (/etc/default/prometheus-node-exporter)
    remove_packages purge "${package_list[@]}"
  fi
  while IFS= read -r masked; do
    if [ -L "$root/etc/systemd/system/$masked" ]; then
      systemctl unmask --quiet "$masked"
      note_change "unmasked $masked"
    fi
  done < <(sed -n 's/^masked_unit=//p' "$state")
  rm -f "$state"
fi
[ "$changed" = 0 ] || systemctl daemon-reload
finish
