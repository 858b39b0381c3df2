# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=dataset-qwen36-mix-913k]
# The data set qwen36-mix-913k prepared in /data/data/qwen36-mix-913k and the script that prepared it.
target=/data/data/qwen36-mix-913k
remove_file /usr/local/lib/gpuhosts/dataset-prepare.py
rmdir "$root"/usr/local/lib/gpuhosts 2>/dev/null || true
[ ! -d "$root$target" ] || say "keeping $target: data is kept on destroy unless dataset.deleteOnDestroy is true"
finish
