# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-bench-spec-bakeoff]
# The benchmark's scripts leave the container; its results stay on the host, and no service changes state.
vmid=129
scripts=/usr/local/lib/gpuhosts/benchmarks/spec-bakeoff
results=/var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff
status="$(pct status "$vmid" 2>/dev/null | awk '{print $2}')" || true
if [ "$status" = running ]; then
  # shellcheck disable=SC2016  # expanded inside the container
  remove='root="${GPUHOSTS_HOST_ROOT:-}"; if [ -d "$root$1" ]; then rm -rf -- "$root$1"; echo removed; fi'
  if pct exec "$vmid" -- bash -c "$remove" gpuhosts "$scripts" </dev/null | grep -qx removed; then
    note_change "removed $scripts from container $vmid"
  fi
else
  say "container $vmid is ${status:-missing}; nothing to remove in it"
fi
say "results kept in $results on the host"
finish
