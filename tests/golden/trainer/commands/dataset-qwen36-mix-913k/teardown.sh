# [templates/common/lib.sh.j2 sha256:3906e3347ec1c9a2 unit=dataset-qwen36-mix-913k]
target=/data/data/qwen36-mix-913k
[ ! -d "$root$target" ] || say "keeping $target: data is kept on destroy unless dataset.deleteOnDestroy is true"
finish
