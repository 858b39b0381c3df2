# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=dflash-training]
# The probe of dflash-training: reads the host and changes nothing; prints one facts line.
# [templates/common/systemd-show.sh.j2 sha256:0995c6255c65608e properties=ExecStart,Environment,User,UnitFileState,ActiveState,DropInPaths]
systemd_shown[gpuhosts-dflash-training.service]="$(systemd_show gpuhosts-dflash-training.service)"
fact 'file /opt/gpuhosts/training/train_dflash_qwen36.sh' "$( { file_state /opt/gpuhosts/training/train_dflash_qwen36.sh; } 2>/dev/null || true)"
fact 'file /etc/systemd/system/gpuhosts-dflash-training.service' "$( { file_state /etc/systemd/system/gpuhosts-dflash-training.service; } 2>/dev/null || true)"
fact 'systemd gpuhosts-dflash-training.service' "$( { systemd_state gpuhosts-dflash-training.service; } 2>/dev/null || true)"
fact 'ExecStart of gpuhosts-dflash-training.service' "$( { systemd_exec gpuhosts-dflash-training.service; } 2>/dev/null || true)"
fact 'Environment of gpuhosts-dflash-training.service' "$( { systemd_property_of Environment gpuhosts-dflash-training.service; } 2>/dev/null || true)"
fact 'User of gpuhosts-dflash-training.service' "$( { systemd_property_of User gpuhosts-dflash-training.service; } 2>/dev/null || true)"
fact 'DropInPaths of gpuhosts-dflash-training.service' "$( { systemd_dropins gpuhosts-dflash-training.service; } 2>/dev/null || true)"
emit_facts
