# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=dflash-training]
# The probe of dflash-training: reads the host and changes nothing; prints one facts line.
fact 'file /opt/gpuhosts/training/train_dflash_qwen36.sh' "$( { file_state /opt/gpuhosts/training/train_dflash_qwen36.sh; } 2>/dev/null || true)"
fact 'file /etc/systemd/system/gpuhosts-dflash-training.service' "$( { file_state /etc/systemd/system/gpuhosts-dflash-training.service; } 2>/dev/null || true)"
fact 'systemd gpuhosts-dflash-training.service' "$( { { systemctl is-enabled gpuhosts-dflash-training.service; systemctl is-active gpuhosts-dflash-training.service; } | paste -sd ' ' -; } 2>/dev/null || true)"
emit_facts
