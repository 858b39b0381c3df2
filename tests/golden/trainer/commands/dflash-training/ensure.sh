# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=dflash-training]
# [templates/common/systemd-repair.sh.j2 sha256:aba09a78c43e4685]
# [templates/common/systemd.sh.j2 sha256:30f788557a9ed861]
# torchrun on GPUs [4, 5, 6, 7]; checkpoints in /data/checkpoints/Qwen3.6-27B-DFlash.
unit_name=gpuhosts-dflash-training.service
restart=0
needs=(/data/data/qwen36-mix-913k/tokenized/.gpuhosts-prepare /data/models/z-lab/Qwen3.6-27B-DFlash.speculators/.gpuhosts-convert /data/data/qwen36-mix-913k/tokenized-smoke/.gpuhosts-prepare)
for path in "${needs[@]}"; do
  [ -e "$root$path" ] || refuse "$path is missing; the step that provides it comes first"
done
mkdir -p "$root"/data/checkpoints/Qwen3.6-27B-DFlash
systemd_repair "$unit_name"
[ "$systemd_repaired" = 0 ] || restart=1
install_file /opt/gpuhosts/training/train_dflash_qwen36.sh 0755 <<'GPUHOSTS_EOF'
# [content: opt/gpuhosts/training/train_dflash_qwen36.sh sha256:10f4358dad2abf61]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
install_file /etc/systemd/system/gpuhosts-dflash-training.service 0644 <<'GPUHOSTS_EOF'
# [content: etc/systemd/system/gpuhosts-dflash-training.service sha256:bb8e2d5307e69b97]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || restart=1
systemd_running "$unit_name" "$restart"
say "$unit_name is running"
finish
