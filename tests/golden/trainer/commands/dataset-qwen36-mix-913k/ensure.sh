# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=dataset-qwen36-mix-913k]
# The tokenized data set qwen36-mix-913k (913786 samples) from https://datasets.example.internal/qwen36-mix-913k/, pinned by its manifest.
dataset_name=qwen36-mix-913k
source_url=https://datasets.example.internal/qwen36-mix-913k/
manifest_sha256=0c6e3b0f2b1f6a7c9d8e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c
target=/data/data/qwen36-mix-913k
manifest="$root$target/SHA256SUMS"

# fetch URL FILE — resumes a partial file (curl -C -); file:// sources are copied.
fetch() {
  case "$1" in
    file://*) cp -f "${1#file://}" "$2" ;;
    *) curl -fsSL --retry 3 -C - -o "$2" "$1" ;;
  esac
}

mkdir -p "$root$target"
if [ ! -f "$manifest" ] || [ "$(sha256sum "$manifest" | awk '{print $1}')" != "$manifest_sha256" ]; then
  rm -f "$manifest.part"
  fetch "${source_url}SHA256SUMS" "$manifest.part" || refuse "cannot fetch ${source_url}SHA256SUMS"
  got="$(sha256sum "$manifest.part" | awk '{print $1}')"
  [ "$got" = "$manifest_sha256" ] || { rm -f "$manifest.part"; refuse "the manifest at $source_url has sha256 $got, \
the stack pins $manifest_sha256: the data set changed; check it and update training.dataset.manifestSha256"; }
  mv -f "$manifest.part" "$manifest"
  note_change "fetched the manifest of $dataset_name"
fi

fetched=0
kept=0
while read -r sum name; do
  [ -n "$sum" ] || continue
  name="${name#\*}"
  case "$name" in
    /*|*..*) refuse "the manifest names '$name', outside the data set's directory" ;;
  esac
  file="$root$target/$name"
  if [ -f "$file" ] && [ "$(sha256sum "$file" | awk '{print $1}')" = "$sum" ]; then
    kept=$((kept + 1))
    continue
  fi
  mkdir -p "$(dirname "$file")"
  fetch "$source_url$name" "$file.part" || refuse "fetching $name stopped; run again to resume"
  got="$(sha256sum "$file.part" | awk '{print $1}')"
  [ "$got" = "$sum" ] || { rm -f "$file.part"; refuse "$name has sha256 $got, the manifest says $sum"; }
  mv -f "$file.part" "$file"
  fetched=$((fetched + 1))
done <"$manifest"
if [ "$fetched" -gt 0 ]; then
  note_change "staged $dataset_name: $fetched file(s) fetched, $kept already there"
else
  say "$dataset_name is complete ($kept file(s) match the manifest)"
fi
finish
