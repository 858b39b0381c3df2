# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=preflight]
# Pre-flight of training node trainer: its GPUs, its driver and its disk, checked before anything is installed.
want_count=8
want_model='RTX PRO 6000'
want_driver=580.126.09
storage=/data
need_gb=261
# Directories whose contents count towards the need when they are already there (a re-run needs no new room).
present_dirs=(/data/models/Qwen/Qwen3.6-27B /data/models/z-lab/Qwen3.6-27B-DFlash /data/data/qwen36-mix-913k /data/checkpoints/Qwen3.6-27B-DFlash)

command -v nvidia-smi >/dev/null || refuse "nvidia-smi is missing: the node's NVIDIA driver $want_driver must be installed first"
if ! rows="$(nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>&1)"; then
  refuse "nvidia-smi failed: $rows"
fi
count=0
while IFS=',' read -r index name driver; do
  [ -n "$index" ] || continue
  name="$(printf '%s' "$name" | xargs)"
  driver="$(printf '%s' "$driver" | xargs)"
  count=$((count + 1))
  case "$name" in
    *"$want_model"*) ;;
    *) refuse "GPU $index is '$name', not a $want_model: this stack is for another node" ;;
  esac
  [ "$driver" = "$want_driver" ] || refuse "GPU $index runs driver $driver, the stack expects $want_driver; install \
$want_driver (or change node.driverVersion after checking the training stack against it)"
done <<<"$rows"
[ "$count" -ge "$want_count" ] || refuse "the node has $count GPU(s), the stack needs $want_count ($want_model)"
say "$count × $want_model, driver $want_driver"

mkdir -p "$root$storage"
free_kb="$(df -Pk "$root$storage" | awk 'NR == 2 {print $4}')"
have_kb=0
for dir in "${present_dirs[@]}"; do
  if [ -d "$root$dir" ]; then
    have_kb=$((have_kb + $(du -sk "$root$dir" | awk '{print $1}')))
  fi
done
need_kb=$((need_gb * 1024 * 1024))
if [ $((free_kb + have_kb)) -lt "$need_kb" ]; then
  refuse "$storage has $((free_kb / 1024 / 1024)) GB free (+ $((have_kb / 1024 / 1024)) GB already staged); models, \
data and checkpoints need $need_gb GB: free space or lower training.checkpointsReserveGb"
fi
say "$storage: $((free_kb / 1024 / 1024)) GB free, $need_gb GB needed in all"
finish
