# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=model-qwen3-6-27b-dflash]
# On the node: the weights of z-lab/Qwen3.6-27B-DFlash in /data/models/z-lab/Qwen3.6-27B-DFlash.
local_dir=/data/models/z-lab/Qwen3.6-27B-DFlash
tools=/opt/gpuhosts/downloads
uv_home=/opt/gpuhosts/.uv
if [ -d "$root$local_dir" ]; then
  say "keeping $local_dir: weights are kept on destroy unless the model sets deleteOnDestroy: true"
fi
# The downloads' tool environment (not user data) goes with the last download; uv with the last environment.
remove_tools_if_last() {
  rm -f "$root$tools/users/"model-qwen3-6-27b-dflash
  local users=("$root$tools"/users/*)
  [ -e "${users[0]}" ] && return 0
  if [ -d "$root$tools" ]; then
    rm -rf "$root$tools"
    note_change "removed $tools (no download uses it any more)"
  fi
  local others=("$root"/opt/gpuhosts/*/venv)
  if [ -d "$root$uv_home" ] && [ ! -e "${others[0]}" ]; then
    rm -rf "$root$uv_home"
    note_change "removed $uv_home (no environment uses it any more)"
    rmdir "$root"/opt/gpuhosts 2>/dev/null || true
  fi
}
with_lock uv remove_tools_if_last
finish
