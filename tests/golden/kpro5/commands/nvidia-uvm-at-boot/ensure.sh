# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=nvidia-uvm-at-boot]
# [templates/common/systemd-repair.sh.j2 sha256:aba09a78c43e4685]
# [templates/common/systemd.sh.j2 sha256:30f788557a9ed861]
uvm_unit_name=gpuhosts-nvidia-uvm.service
container_gpus=(0000:41:00.0 0000:61:00.0)

# node_paths — every node the boot unit makes: the control node, one per GPU the driver knows, the uvm pair.
node_paths() {
  local info minor
  echo /dev/nvidiactl
  for info in "$root"/proc/driver/nvidia/gpus/*/information; do
    [ -e "$info" ] || continue
    minor="$(sed -nE 's/^Device Minor:[[:space:]]*([0-9]+).*/\1/p' "$info")"
    [ -z "$minor" ] || echo "/dev/nvidia$minor"
  done
  echo /dev/nvidia-uvm
  echo /dev/nvidia-uvm-tools
}

systemd_repair "$uvm_unit_name"
install_file /etc/systemd/system/gpuhosts-nvidia-uvm.service 0644 <<'GPUHOSTS_EOF'
# [content: etc/systemd/system/gpuhosts-nvidia-uvm.service sha256:dc8e245113452c67]
GPUHOSTS_EOF
uvm_restart=0
if [ "$file_changed" = 1 ] || [ "$systemd_repaired" = 1 ]; then
  uvm_restart=1
fi
systemd_running "$uvm_unit_name" "$uvm_restart"
# A oneshot unit stays "active" while its nodes go away (a driver upgrade unloads the module): make them again.
missing=()
while read -r node; do
  [ -e "$root$node" ] || missing+=("$node")
done < <(node_paths)
if [ "${#missing[@]}" -gt 0 ]; then
  systemctl restart "$uvm_unit_name"
  note_change "recreated ${missing[*]}"
fi
for address in "${container_gpus[@]}"; do
  minor="$(gpu_minor "$address")"
  [ -n "$minor" ] || refuse "GPU $address has no minor: is it bound to nvidia (cat /proc/driver/nvidia/gpus/$address/information)?"
  [ -e "$root/dev/nvidia$minor" ] || refuse "/dev/nvidia$minor (GPU $address) is missing after starting $uvm_unit_name"
done
while read -r node; do
  [ -e "$root$node" ] || refuse "$node is missing after starting $uvm_unit_name: is the nvidia module loaded (cat /proc/driver/nvidia/version)?"
done < <(node_paths)
say "nvidia-uvm major $(char_major nvidia-uvm) (dynamic; read from /proc/devices at every container start)"
finish
