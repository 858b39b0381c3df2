# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=hidden-state-server]
# [templates/common/systemd-repair.sh.j2 sha256:aba09a78c43e4685]
# [templates/common/systemd.sh.j2 sha256:30f788557a9ed861]
# The hidden-state server on GPUs [0, 1, 2, 3].
unit_name=gpuhosts-hidden-state-server.service
restart=0
needs=(/opt/gpuhosts/speculators/src/scripts/launch_vllm.py /data/models/Qwen/Qwen3.6-27B/.gpuhosts-download)
for path in "${needs[@]}"; do
  [ -e "$root$path" ] || refuse "$path is missing; the step that provides it comes first"
done
systemd_repair "$unit_name"
[ "$systemd_repaired" = 0 ] || restart=1
install_file /etc/systemd/system/gpuhosts-hidden-state-server.service 0644 <<'GPUHOSTS_EOF'
# [content: etc/systemd/system/gpuhosts-hidden-state-server.service sha256:cb60ced6f9eee56c]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /usr/local/lib/gpuhosts/check-hidden-states.py 0755 <<'GPUHOSTS_EOF'
# [content: usr/local/lib/gpuhosts/check-hidden-states.py.sha256 sha256:83ee62c01dbea9a5]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
systemd_running "$unit_name" "$restart"
say "$unit_name is running"
finish
