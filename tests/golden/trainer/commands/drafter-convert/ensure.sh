# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=drafter-convert]
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
# [content: usr/local/lib/gpuhosts/check-drafter-config.py.sha256 sha256:bd1cca8f04d64a71]
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
  note_change "converted $drafter_dir into $output"
fi
finish
