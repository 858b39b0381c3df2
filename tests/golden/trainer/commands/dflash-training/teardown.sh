# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=dflash-training]
# [templates/common/systemd.sh.j2 sha256:30f788557a9ed861]
# Stop and remove gpuhosts-dflash-training.service; checkpoints stay unless trainingCheckpoints say otherwise.
unit_name=gpuhosts-dflash-training.service
systemd_stopped "$unit_name"
remove_file /etc/systemd/system/gpuhosts-dflash-training.service
remove_file /opt/gpuhosts/training/train_dflash_qwen36.sh
rmdir "$root"/opt/gpuhosts/training 2>/dev/null || true
rmdir "$root"/opt/gpuhosts 2>/dev/null || true
[ "$changed" = 0 ] || systemctl daemon-reload
finish
