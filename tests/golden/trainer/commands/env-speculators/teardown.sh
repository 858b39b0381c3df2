# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=env-speculators]
# On the node: remove the uv environment speculators (an environment, not user data).
service_dir=/opt/gpuhosts/speculators
uv_home=/opt/gpuhosts/.uv
if [ -d "$root$service_dir" ]; then
  rm -rf "$root$service_dir"
  note_change "removed $service_dir"
fi
# uv goes with the last environment gpuhosts made with it; the uv lock makes "the last" one answer.
remove_uv_if_last() {
  local others=("$root"/opt/gpuhosts/*/venv)
  if [ -d "$root$uv_home" ] && [ ! -e "${others[0]}" ]; then
    rm -rf "$root$uv_home"
    note_change "removed $uv_home (no environment uses it any more)"
    rmdir "$root"/opt/gpuhosts 2>/dev/null || true
  fi
}
with_lock uv remove_uv_if_last
finish
