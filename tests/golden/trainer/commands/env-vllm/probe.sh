# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=env-vllm]
# The probe of env-vllm: reads the host and changes nothing; prints one facts line.
fact 'file /opt/gpuhosts/vllm/requirements.lock' "$( { file_state /opt/gpuhosts/vllm/requirements.lock; } 2>/dev/null || true)"
fact 'environment /opt/gpuhosts/vllm/venv' "$( { [ -x "$root"/opt/gpuhosts/vllm/venv/bin/python ] && cat "$root"/opt/gpuhosts/vllm/venv/.gpuhosts-requirement || echo missing; } 2>/dev/null || true)"
emit_facts
