# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=drafter-convert]
# The converted drafter in /data/models/z-lab/Qwen3.6-27B-DFlash.speculators and its check script.
output=/data/models/z-lab/Qwen3.6-27B-DFlash.speculators
remove_file /usr/local/lib/gpuhosts/check-drafter-config.py
rmdir "$root"/usr/local/lib/gpuhosts 2>/dev/null || true
[ ! -d "$root$output" ] || say "keeping $output: the converted drafter is kept on destroy unless drafter.deleteOnDestroy is true"
finish
