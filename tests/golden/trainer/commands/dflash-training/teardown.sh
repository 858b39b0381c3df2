# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=dflash-training]
# Stop and remove gpuhosts-dflash-training.service; checkpoints stay unless trainingCheckpoints say otherwise.
unit_name=gpuhosts-dflash-training.service
if systemctl is-active --quiet "$unit_name"; then
  systemctl stop "$unit_name"
  note_change "stopped $unit_name"
fi
if systemctl is-enabled --quiet "$unit_name" 2>/dev/null; then
  systemctl disable --quiet "$unit_name"
  note_change "disabled $unit_name"
fi
remove_file /etc/systemd/system/gpuhosts-dflash-training.service
remove_file /opt/gpuhosts/training/train_dflash_qwen36.sh
rmdir "$root"/opt/gpuhosts/training 2>/dev/null || true
rmdir "$root"/opt/gpuhosts 2>/dev/null || true
[ "$changed" = 0 ] || systemctl daemon-reload
finish
