# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=node-exporter]
# [templates/common/systemd-repair.sh.j2 sha256:aba09a78c43e4685]
# [templates/common/systemd.sh.j2 sha256:30f788557a9ed861]
# Prometheus node exporter (prometheus-node-exporter) on 127.0.0.1:9100
unit_name=gpuhosts-node-exporter.service
package_unit=prometheus-node-exporter.service
packages=(prometheus-node-exporter)
# The version each package is held at, "" for the distribution's, and the stack field that holds it.
versions=('')
version_fields=('')
state="$state_dir/"node-exporter.state
restart=0
installed_version() {
  { dpkg-query -W -f='${Status} ${Version}' "$1" 2>/dev/null || true; } | sed -n 's/^install ok installed //p'
}
# A version given without an epoch matches the installed one with or without it.
version_matches() { [ "$1" = "$2" ] || { [ "${2#*:}" = "$2" ] && [ "${1#*:}" = "$2" ]; }; }

missing=()
moved=()
for index in "${!packages[@]}"; do
  pkg="${packages[$index]}" want="${versions[$index]}"
  have="$(installed_version "$pkg")"
  if [ -z "$have" ]; then
    missing+=("$pkg${want:+=$want}")
  elif [ -n "$want" ] && ! version_matches "$have" "$want"; then
    say "$pkg is at $have, not ${version_fields[$index]} $want"
    moved+=("$pkg=$want")
  fi
done
if [ "${#moved[@]}" -gt 0 ]; then
  # Back to the version the stack holds it at, up or down; the install's record stays as it was, so teardown
  # still purges only what gpuhosts installed.
  with_lock dpkg env DEBIAN_FRONTEND=noninteractive apt-get install -y --allow-downgrades --no-install-recommends \
    "${moved[@]}" || refuse "apt-get could not install ${moved[*]}: is that version in the repository?"''
  note_change "installed ${moved[*]}"
  restart=1
fi
if [ "${#missing[@]}" -gt 0 ]; then
  # The package's own unit listens on every address (node_exporter's default :9100): masked before the
  # install, so its maintainer scripts cannot start it (deb-systemd-invoke starts only an enabled unit), and
  # gpuhosts' unit alone listens, where the stack says. Recorded first: a run cut off during apt-get must still
  # let teardown undo it.
  mkdir -p "$state_dir"
  if [ ! -e "$root/etc/systemd/system/$package_unit" ] && [ ! -L "$root/etc/systemd/system/$package_unit" ]; then
    printf 'masked_unit=%s\n' "$package_unit" >>"$state"
    systemctl mask --quiet "$package_unit"
    note_change "masked $package_unit"
  fi
  printf 'installed_packages=%s\n' "${missing[*]%%=*}" >>"$state"
  with_lock dpkg env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" \
    || refuse "apt-get could not install ${missing[*]}"''
  note_change "installed ${missing[*]}"
fi
if [ "$(systemctl is-active "$package_unit" 2>/dev/null || true)" = active ]; then
  refuse "$package_unit (the package's own unit) is running, not gpuhosts': stop and disable it, or give "'gpuhosts:monitoring.nodeExporterPort another port'
fi
[ -x "$root"/usr/bin/prometheus-node-exporter ] || refuse /usr/bin/prometheus-node-exporter" is missing after installing ${packages[*]}"

systemd_repair "$unit_name"
[ "$systemd_repaired" = 0 ] || restart=1
install_file /etc/systemd/system/gpuhosts-node-exporter.service 0644 <<'GPUHOSTS_EOF'
# [content: etc/systemd/system/gpuhosts-node-exporter.service sha256:d7235bbfab817fdc]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
systemd_running "$unit_name" "$restart"
say "$unit_name is running on "127.0.0.1:9100
finish
