# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=drafter-convert]
# Content records: what a step wrote, recorded as it wrote it (DIR/.gpuhosts-content, a line per file:
# "<sha256> <sampled digest> <size> <path>"), so that a refresh checks each file cheaply, by its size and a sampled
# digest, and `gpuhosts check --deep` whole, by its sha256. gpuhosts' own markers (.gpuhosts-*) are not content.

# sampled_digest FILE — the sha256 of the size and of the first, the middle and the last MiB (the whole file when
# it is no larger than three): any change of size shows, and any change within the samples; one elsewhere in a
# multi-GB shard does not, which is what the deep check is for.
sampled_digest() {
  local file="$1" size mib=1048576
  size="$(stat -c %s "$file")"
  {
    printf '%s\n' "$size"
    if [ "$size" -le $((3 * mib)) ]; then
      cat "$file"
    else
      dd if="$file" bs="$mib" count=1 status=none
      dd if="$file" bs="$mib" count=1 skip=$((size / 2 - mib / 2)) iflag=skip_bytes status=none
      dd if="$file" bs="$mib" count=1 skip=$((size - mib)) iflag=skip_bytes status=none
    fi
  } | sha256sum | cut -c1-16
}

# listed OK PROBLEM… — OK when there is no problem, else the first three and how many more.
listed() {
  local ok="$1"
  shift
  if [ "$#" = 0 ]; then
    printf '%s\n' "$ok"
    return 0
  fi
  local shown=("${@:1:3}") joined
  joined="$(printf '%s; ' "${shown[@]}")"
  printf '%s' "${joined%; }"
  [ "$#" -le 3 ] || printf ' (+%s more)' "$(($# - 3))"
  printf '\n'
}

# content_record DIR — DIR/.gpuhosts-content for every file now in DIR.
content_record() {
  local dir="$1" path
  while IFS= read -r -d '' path; do
    printf '%s %s %s %s\n' "$(sha256sum <"$dir/$path" | cut -c1-64)" "$(sampled_digest "$dir/$path")" \
      "$(stat -c %s "$dir/$path")" "$path"
  done < <(cd "$dir" && find . -type f ! -name '.gpuhosts-*' -printf '%P\0' | LC_ALL=C sort -z) \
    >"$dir/.gpuhosts-content.part"
  mv -f "$dir/.gpuhosts-content.part" "$dir/.gpuhosts-content"
}

# content_state DIR [deep] — "as recorded", or which recorded files are gone or differ: by size and sampled digest,
# or with `deep` by each file's whole sha256. Files added since are not the step's and are not counted.
content_state() {
  local dir="$1" deep="${2:-}" sum sampled size path found issues=()
  [ -d "$dir" ] || { echo missing; return 0; }
  [ -f "$dir/.gpuhosts-content" ] || { echo "no record"; return 0; }
  while read -r sum sampled size path; do
    [ -n "$path" ] || continue
    if [ ! -f "$dir/$path" ]; then
      issues+=("$path missing")
    elif found="$(stat -c %s "$dir/$path")" && [ "$found" != "$size" ]; then
      issues+=("$path: $found bytes, recorded $size")
    elif [ -z "$deep" ] && found="$(sampled_digest "$dir/$path")" && [ "$found" != "$sampled" ]; then
      issues+=("$path: sampled sha256 $found, recorded $sampled")
    elif [ -n "$deep" ] && found="$(sha256sum <"$dir/$path" | cut -c1-64)" && [ "$found" != "$sum" ]; then
      issues+=("$path: sha256 ${found:0:16}, recorded ${sum:0:16}")
    fi
  done <"$dir/.gpuhosts-content"
  listed "as recorded" "${issues[@]}"
}
# The starting drafter z-lab/Qwen3.6-27B-DFlash as a speculators checkpoint in /data/models/z-lab/Qwen3.6-27B-DFlash.speculators (speculators.convert.convert_model of speculators 0.7.0).
# Its config.json is checked against the stack first (mask token, layer types, sliding window: read from it where
# the stack leaves them out), and the converted checkpoint's config after.
drafter_dir=/data/models/z-lab/Qwen3.6-27B-DFlash
output=/data/models/z-lab/Qwen3.6-27B-DFlash.speculators
part=/data/models/z-lab/Qwen3.6-27B-DFlash.speculators.part
marker="$root$output/.gpuhosts-convert"
# The converted config.json's sha256 when the conversion wrote it: the probe compares the file with it.
config_record="$root$output/".gpuhosts-convert-config
want='z-lab/Qwen3.6-27B-DFlash@main speculators==0.7.0'
python=/opt/gpuhosts/speculators/venv/bin/python
check_script=/usr/local/lib/gpuhosts/check-drafter-config.py
declared='{"blockSize": 16, "layerTypes": ["sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention"], "maskTokenId": null, "numLayers": 5, "slidingWindow": null, "targetLayerIds": [1, 16, 31, 46, 61]}'
needs=(/data/models/z-lab/Qwen3.6-27B-DFlash/.gpuhosts-download /data/models/Qwen/Qwen3.6-27B/.gpuhosts-download /opt/gpuhosts/speculators/venv/bin/python)
for path in "${needs[@]}"; do
  [ -e "$root$path" ] || refuse "$path is missing; the step that provides it comes first"
done
install_file /usr/local/lib/gpuhosts/check-drafter-config.py 0755 <<'GPUHOSTS_EOF'
# [content: usr/local/lib/gpuhosts/check-drafter-config.py.sha256 sha256:c4300d9b3ab2abf4]
GPUHOSTS_EOF

# check_config FILE WHAT — the values to train with, or every disagreement with the stack (naming its field).
check_config() {
  local out
  if ! out="$("$root$python" "$root$check_script" "$root$1" "$declared" "$2" 2>&1)"; then
    refuse "$out"
  fi
  say "$out"
}
check_config "$drafter_dir/config.json" "$drafter_dir/config.json"

converted=0
if [ "$(cat "$marker" 2>/dev/null)" = "$want" ] && [ -f "$root$output/config.json" ]; then
  found="$(sha256sum <"$root$output/config.json" | cut -d' ' -f1)"
  if [ ! -f "$config_record" ]; then
    # Converted before the record was kept: the marker vouched for the conversion as it is.
    printf '%s\n' "$found" >"$config_record"
    note_change "recorded the sha256 of $output/config.json"
    converted=1
  elif [ "$found" = "$(cat "$config_record")" ]; then
    converted=1
  else
    say "$output/config.json was edited since the conversion; converting again"
  fi
fi
if [ "$converted" = 1 ]; then
  case "$(content_state "$root$output")" in
    "as recorded") ;;
    "no record")
      # converted before the record was kept: the marker vouched for the conversion as it is
      content_record "$root$output"
      note_change "recorded the content of $output" ;;
    *)
      say "$output changed since the conversion ($(content_state "$root$output")); converting again"
      converted=0 ;;
  esac
fi
if [ "$converted" = 1 ]; then
  say "$output is converted from $want"
else
  rm -rf "$root$part"
  mkdir -p "$(dirname "$root$output")"
  say "converting $drafter_dir into $output"
  if ! env CUDA_VISIBLE_DEVICES= HF_HUB_OFFLINE=1 "$root"/opt/gpuhosts/speculators/venv/bin/python -c 'import sys; from speculators.convert import convert_model; convert_model(model=sys.argv[1], verifier=sys.argv[2], algorithm=sys.argv[3], output_path=sys.argv[4])' \
    /data/models/z-lab/Qwen3.6-27B-DFlash \
    /data/models/Qwen/Qwen3.6-27B \
    dflash \
    /data/models/z-lab/Qwen3.6-27B-DFlash.speculators.part
  then
    rm -rf "$root$part"
    refuse "converting $drafter_dir failed (above); nothing was kept"
  fi
  [ -f "$root$part/config.json" ] || refuse "the conversion wrote no config.json into $part"
  check_config "$part/config.json" "the converted $output/config.json"
  rm -rf "$root$output"
  mv "$root$part" "$root$output"
  sha256sum <"$root$output/config.json" | cut -d' ' -f1 >"$config_record"
  printf '%s\n' "$want" >"$marker"
  content_record "$root$output"
  note_change "converted $drafter_dir into $output"
fi
finish
