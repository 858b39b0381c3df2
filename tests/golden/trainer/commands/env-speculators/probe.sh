# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=env-speculators]
# The probe of env-speculators: reads the host and changes nothing; prints one facts line.
fact 'file /opt/gpuhosts/speculators/requirements.lock' "$( { file_state /opt/gpuhosts/speculators/requirements.lock; } 2>/dev/null || true)"
fact 'environment /opt/gpuhosts/speculators/venv' "$( { [ -x "$root"/opt/gpuhosts/speculators/venv/bin/python ] && cat "$root"/opt/gpuhosts/speculators/venv/.gpuhosts-requirement || echo missing; } 2>/dev/null || true)"
fact 'checkout /opt/gpuhosts/speculators/src' "$( { cat "$root"/opt/gpuhosts/speculators/src/.gpuhosts-ref || echo missing; } 2>/dev/null || true)"
emit_facts
