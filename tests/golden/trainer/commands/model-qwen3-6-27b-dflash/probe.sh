# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=model-qwen3-6-27b-dflash]
# The probe of model-qwen3-6-27b-dflash: reads the host and changes nothing; prints one facts line.
# [templates/model_download/model-files.sh.j2 sha256:92c97dab60fceda2]
fact 'file /opt/gpuhosts/downloads/requirements.lock' "$( { file_state /opt/gpuhosts/downloads/requirements.lock; } 2>/dev/null || true)"
fact 'weights /data/models/z-lab/Qwen3.6-27B-DFlash' "$( { cat "$root"/data/models/z-lab/Qwen3.6-27B-DFlash/.gpuhosts-download || echo missing; } 2>/dev/null || true)"
fact 'small files of /data/models/z-lab/Qwen3.6-27B-DFlash' "$( { small_files_state /data/models/z-lab/Qwen3.6-27B-DFlash; } 2>/dev/null || true)"
fact 'weight files of /data/models/z-lab/Qwen3.6-27B-DFlash' "$( { weights_state /data/models/z-lab/Qwen3.6-27B-DFlash; } 2>/dev/null || true)"
emit_facts
