# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=dataset-qwen36-mix-913k]
target=/data/data/qwen36-mix-913k
[ ! -d "$root$target" ] || say "keeping $target: data is kept on destroy unless dataset.deleteOnDestroy is true"
finish
