# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=model-qwen3-6-27b]
# The probe of model-qwen3-6-27b: reads the host and changes nothing; prints one facts line.
# [templates/model_download/model-files.sh.j2 sha256:92c97dab60fceda2]
fact 'file /opt/gpuhosts/downloads/requirements.lock' "$( { file_state /opt/gpuhosts/downloads/requirements.lock; } 2>/dev/null || true)"
fact 'weights /data/models/Qwen/Qwen3.6-27B' "$( { cat "$root"/data/models/Qwen/Qwen3.6-27B/.gpuhosts-download || echo missing; } 2>/dev/null || true)"
fact 'small files of /data/models/Qwen/Qwen3.6-27B' "$( { small_files_state /data/models/Qwen/Qwen3.6-27B; } 2>/dev/null || true)"
fact 'weight files of /data/models/Qwen/Qwen3.6-27B' "$( { weights_state /data/models/Qwen/Qwen3.6-27B; } 2>/dev/null || true)"
emit_facts
