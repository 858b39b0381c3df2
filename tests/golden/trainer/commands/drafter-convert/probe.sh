# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=drafter-convert]
# The probe of drafter-convert: reads the host and changes nothing; prints one facts line.
fact 'file /usr/local/lib/gpuhosts/check-drafter-config.py' "$( { file_state /usr/local/lib/gpuhosts/check-drafter-config.py; } 2>/dev/null || true)"
fact 'converted /data/models/z-lab/Qwen3.6-27B-DFlash.speculators' "$( { cat "$root"/data/models/z-lab/Qwen3.6-27B-DFlash.speculators/.gpuhosts-convert || echo missing; } 2>/dev/null || true)"
emit_facts
