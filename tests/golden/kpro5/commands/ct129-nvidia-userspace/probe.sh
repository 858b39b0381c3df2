# [templates/common/lib.sh.j2 sha256:3906e3347ec1c9a2 unit=ct129-nvidia-userspace]
# The probe of ct129-nvidia-userspace: reads the host and changes nothing; prints one facts line.
fact 'host module' "$( { module_version; } 2>/dev/null || true)"
# Inside container 129, in one pct exec; a container that is not running reports that for each of its facts.
if [ "$(pct status 129 2>/dev/null | awk '{print $2}')" = running ]; then
  inner_facts="$(pct exec 129 -- bash -c "$(cat <<'GPUHOSTS_INNER'
# [templates/common/lib.sh.j2 sha256:3906e3347ec1c9a2 unit=ct129-nvidia-userspace]
# The probe of ct129-nvidia-userspace: reads the host and changes nothing; prints one facts line.
fact 'user space in ct129' "$( { userspace_version; } 2>/dev/null || true)"
emit_facts
GPUHOSTS_INNER
)" gpuhosts </dev/null 2>/dev/null | sed -n "s/^GPUHOSTS_FACTS {\(.*\)}\$/\1/p" | tail -n1)" || true
  [ -z "$inner_facts" ] || probe_facts+="${probe_facts:+,}$inner_facts"
else
  fact 'user space in ct129' "container 129 not running"
fi
emit_facts
