# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=dataset-qwen36-mix-913k]
# The data set qwen36-mix-913k prepared on the node from 6 Hugging Face data set source(s): each
# downloaded and converted to ShareGPT rows, mixed with seed 20260601, tokenized by speculators 0.7.0
# scripts/prepare_data.py with the verifier's tokenizer and chat template. Every step writes to a temporary path and
# renames it; a marker beside each result says which inputs made it, so a run reuses what is complete and resumes
# after an interruption.
target=/data/data/qwen36-mix-913k
python=/opt/gpuhosts/speculators/venv/bin/python
hf=/opt/gpuhosts/speculators/venv/bin/hf
script=/usr/local/lib/gpuhosts/dataset-prepare.py
script_digest=6992a8d4f03a79de60985f95a7c8ae0d7b48142d617ab854fad609ba74fbb02c
spec='{"seed":20260601,"sources":[{"converted":"sources/open-orca-openorca-train-bd216d34e6/converted.jsonl","count":564786,"name":"Open-Orca/OpenOrca@0d8a61a06664ddb11341d806e4508a2624eaddbf:train"},{"converted":"sources/theblackcat102-evol-codealpaca-v1-train-9f3e8e51f5/converted.jsonl","count":110000,"name":"theblackcat102/evol-codealpaca-v1@c75242318519b5470635e84064baed7c78594020:train"},{"converted":"sources/ise-uiuc-magicoder-evol-instruct-110k-train-fdd9dd889f/converted.jsonl","count":110000,"name":"ise-uiuc/Magicoder-Evol-Instruct-110K@b0079beaa0361d82412520b873715bee59cc7dd4:train"},{"converted":"sources/thoughtworks-agentic-coding-trajectories-train-31d3e7828b/converted.jsonl","count":15000,"name":"thoughtworks/agentic-coding-trajectories@cef72d1f4d0caabf85937adf8337a14b7522c782:train"},{"converted":"sources/glaiveai-glaive-function-calling-v2-train-f2686b7269/converted.jsonl","count":57000,"name":"glaiveai/glaive-function-calling-v2@0000000000000000000000000000000000000000:train"},{"converted":"sources/mustafaege-qwen3-5-functioncalling-v2-train-fc2c82fd97/converted.jsonl","count":57000,"name":"Mustafaege/qwen3.5-functioncalling-v2@0000000000000000000000000000000000000000:train"}]}'
prepare_key=05be850a223428b4520beeb0b8143247
version=0.7.0
needs=(/data/models/Qwen/Qwen3.6-27B/.gpuhosts-download /opt/gpuhosts/speculators/src/scripts/prepare_data.py /opt/gpuhosts/speculators/venv/bin/hf)
for path in "${needs[@]}"; do
  [ -e "$root$path" ] || refuse "$path is missing; the step that provides it comes first"
done
install_file /usr/local/lib/gpuhosts/dataset-prepare.py 0755 <<'GPUHOSTS_EOF'
# [content: usr/local/lib/gpuhosts/dataset-prepare.py.sha256 sha256:6992a8d4f03a79de]
GPUHOSTS_EOF
unset HF_TOKEN HF_TOKEN_PATH

# download NAME REPO REVISION DIR GATED [PATTERN…] — `hf download --repo-type dataset` (only the PATTERNs' files when
# given), skipped when its marker says complete.
download() {
  local name="$1" repo="$2" revision="$3" dir="$4" gated="$5" marker="$root$4/.gpuhosts-download"
  shift 5
  local include=()
  [ "$#" = 0 ] || include=(--include "$@")
  if [ "$(cat "$marker" 2>/dev/null)" = "$repo@$revision" ]; then
    say "$name: download complete"
    return 0
  fi
  mkdir -p "$root$dir"
  rm -f "$marker"
  local token_env=()
  if [ "$gated" = true ]; then
    refuse "$repo is gated and the plan passes no token"
  fi
  say "$name: downloading (finished files are kept; a new run resumes)"
  if ! env "${token_env[@]}" HF_HUB_DISABLE_PROGRESS_BARS=1 "$root$hf" download --repo-type dataset "$repo" \
      --revision "$revision" --local-dir "$root$dir" "${include[@]}"; then
    refuse "the download of $repo@$revision stopped; run again to resume it (files already fetched are kept)"
  fi
  printf '%s\n' "$repo@$revision" >"$marker"
  note_change "$name: downloaded"
}

# split_files DIR SPLIT SUBSET [PATTERN…] — the downloaded files to convert, sorted: those the PATTERNs (the source's
# dataFiles) name, else the split's (`SPLIT.*`, `SPLIT-*`, or under a folder SPLIT/; under SUBSET/ when given).
split_files() {
  local dir="$1" split="$2" subset="$3" pattern
  shift 3
  if [ "$#" -gt 0 ]; then
    for pattern in "$@"; do
      compgen -G "$root$dir/$pattern" || true
    done | LC_ALL=C sort -u
    return 0
  fi
  find "$root$dir" -type f \( -name "$split.*" -o -name "$split-*" -o -path "*/$split/*" \) -not -path '*/.cache/*' \
    -not -name '.gpuhosts-*' | { if [ -n "$subset" ]; then grep -F "/$subset/" || true; else cat; fi; } | LC_ALL=C sort
}

# convert NAME DIR SPLIT SUBSET CONVERTER [PATTERN…] — ShareGPT rows in DIR/converted.jsonl, again only when the split's files, the
# converter or the script changed (the marker's first line is their digest, its second the output's sha256).
convert() {
  local name="$1" dir="$2" split="$3" subset="$4" converter="$5" marker="$root$2/.gpuhosts-convert" inputs digest out
  shift 5
  mapfile -t inputs < <(split_files "$dir/download" "$split" "$subset" "$@")
  [ "${#inputs[@]}" -gt 0 ] || refuse "$name: the download has no file of split '$split'${subset:+ of subset $subset}\
${1:+ matching dataFiles $*}; check the source's split, subset and dataFiles"
  digest="$converter $script_digest $(sha256sum "${inputs[@]}" | sed "s|$root$dir/download/||" | sha256sum | cut -c1-64)"
  if [ "$(head -n1 "$marker" 2>/dev/null)" = "$digest" ] && [ -f "$root$dir/converted.jsonl" ]; then
    say "$name: conversion up to date"
    return 0
  fi
  rm -f "$marker" "$root$dir/converted.jsonl.part"
  if ! out="$("$root$python" "$root$script" convert --converter "$converter" --source "${name%%@*}" \
      --out "$root$dir/converted.jsonl.part" \
      "${inputs[@]}")"; then
    rm -f "$root$dir/converted.jsonl.part"
    refuse "$name: converting with $converter failed (above)"
  fi
  mv -f "$root$dir/converted.jsonl.part" "$root$dir/converted.jsonl"
  printf '%s\n%s\n' "$digest" "$(sha256sum <"$root$dir/converted.jsonl" | cut -c1-64)" >"$marker"
  note_change "$name: converted with $converter ($out)"
}

prepare() {
  local converted=()
  download Open-Orca/OpenOrca@0d8a61a06664ddb11341d806e4508a2624eaddbf:train Open-Orca/OpenOrca 0d8a61a06664ddb11341d806e4508a2624eaddbf /data/data/qwen36-mix-913k/sources/open-orca-openorca-train-bd216d34e6/download false
  convert Open-Orca/OpenOrca@0d8a61a06664ddb11341d806e4508a2624eaddbf:train /data/data/qwen36-mix-913k/sources/open-orca-openorca-train-bd216d34e6 train '' orca
  converted+=("$(sed -n 2p "$root"/data/data/qwen36-mix-913k/sources/open-orca-openorca-train-bd216d34e6/.gpuhosts-convert)")
  download theblackcat102/evol-codealpaca-v1@c75242318519b5470635e84064baed7c78594020:train theblackcat102/evol-codealpaca-v1 c75242318519b5470635e84064baed7c78594020 /data/data/qwen36-mix-913k/sources/theblackcat102-evol-codealpaca-v1-train-9f3e8e51f5/download false
  convert theblackcat102/evol-codealpaca-v1@c75242318519b5470635e84064baed7c78594020:train /data/data/qwen36-mix-913k/sources/theblackcat102-evol-codealpaca-v1-train-9f3e8e51f5 train '' alpaca
  converted+=("$(sed -n 2p "$root"/data/data/qwen36-mix-913k/sources/theblackcat102-evol-codealpaca-v1-train-9f3e8e51f5/.gpuhosts-convert)")
  download ise-uiuc/Magicoder-Evol-Instruct-110K@b0079beaa0361d82412520b873715bee59cc7dd4:train ise-uiuc/Magicoder-Evol-Instruct-110K b0079beaa0361d82412520b873715bee59cc7dd4 /data/data/qwen36-mix-913k/sources/ise-uiuc-magicoder-evol-instruct-110k-train-fdd9dd889f/download false data-evol_instruct-decontaminated.jsonl
  convert ise-uiuc/Magicoder-Evol-Instruct-110K@b0079beaa0361d82412520b873715bee59cc7dd4:train /data/data/qwen36-mix-913k/sources/ise-uiuc-magicoder-evol-instruct-110k-train-fdd9dd889f train '' alpaca data-evol_instruct-decontaminated.jsonl
  converted+=("$(sed -n 2p "$root"/data/data/qwen36-mix-913k/sources/ise-uiuc-magicoder-evol-instruct-110k-train-fdd9dd889f/.gpuhosts-convert)")
  download thoughtworks/agentic-coding-trajectories@cef72d1f4d0caabf85937adf8337a14b7522c782:train thoughtworks/agentic-coding-trajectories cef72d1f4d0caabf85937adf8337a14b7522c782 /data/data/qwen36-mix-913k/sources/thoughtworks-agentic-coding-trajectories-train-31d3e7828b/download false sessions.parquet
  convert thoughtworks/agentic-coding-trajectories@cef72d1f4d0caabf85937adf8337a14b7522c782:train /data/data/qwen36-mix-913k/sources/thoughtworks-agentic-coding-trajectories-train-31d3e7828b train '' openai-messages sessions.parquet
  converted+=("$(sed -n 2p "$root"/data/data/qwen36-mix-913k/sources/thoughtworks-agentic-coding-trajectories-train-31d3e7828b/.gpuhosts-convert)")
  download glaiveai/glaive-function-calling-v2@0000000000000000000000000000000000000000:train glaiveai/glaive-function-calling-v2 0000000000000000000000000000000000000000 /data/data/qwen36-mix-913k/sources/glaiveai-glaive-function-calling-v2-train-f2686b7269/download false
  convert glaiveai/glaive-function-calling-v2@0000000000000000000000000000000000000000:train /data/data/qwen36-mix-913k/sources/glaiveai-glaive-function-calling-v2-train-f2686b7269 train '' glaive-function-calling
  converted+=("$(sed -n 2p "$root"/data/data/qwen36-mix-913k/sources/glaiveai-glaive-function-calling-v2-train-f2686b7269/.gpuhosts-convert)")
  download Mustafaege/qwen3.5-functioncalling-v2@0000000000000000000000000000000000000000:train Mustafaege/qwen3.5-functioncalling-v2 0000000000000000000000000000000000000000 /data/data/qwen36-mix-913k/sources/mustafaege-qwen3-5-functioncalling-v2-train-fc2c82fd97/download false
  convert Mustafaege/qwen3.5-functioncalling-v2@0000000000000000000000000000000000000000:train /data/data/qwen36-mix-913k/sources/mustafaege-qwen3-5-functioncalling-v2-train-fc2c82fd97 train '' tool-calls
  converted+=("$(sed -n 2p "$root"/data/data/qwen36-mix-913k/sources/mustafaege-qwen3-5-functioncalling-v2-train-fc2c82fd97/.gpuhosts-convert)")

  # The mix: again when the spec (seed, sources, counts) or a converted source changed.
  local mix_key
  mix_key="$(printf '%s\n' "$spec" "${converted[@]}" | sha256sum | cut -c1-64)"
  if [ "$(cat "$root$target/mix/.gpuhosts-mix" 2>/dev/null)" = "$mix_key" ] && [ -f "$root$target/mix/manifest.json" ]; then
    say "the mix is up to date"
  else
    rm -rf "$root$target/mix.part"
    mkdir -p "$root$target/mix.part"
    printf '%s\n' "$spec" >"$root$target/mix.part/spec.json"
    # The spec names the converted files relative to the data set's directory.
    if ! out="$(cd "$root$target" && "$root$python" "$root$script" mix --spec mix.part/spec.json --out mix.part)"; then
      refuse "mixing failed (above); the converted sources are kept"
    fi
    printf '%s\n' "$mix_key" >"$root$target/mix.part/.gpuhosts-mix"
    rm -rf "$root$target/mix"
    mv "$root$target/mix.part" "$root$target/mix"
    note_change "mixed: $out"
  fi

  # Tokenized by prepare_data.py into tokenized.part, renamed when complete; its marker names the plan's inputs and
  # the mix it read.
  local manifest_sha
  manifest_sha="$(sha256sum <"$root$target/mix/manifest.json" | cut -c1-64)"
  if [ "$(cat "$root$target/tokenized/.gpuhosts-prepare" 2>/dev/null)" = "$prepare_key" ] \
      && [ "$(cat "$root$target/tokenized/.gpuhosts-mix" 2>/dev/null)" = "$manifest_sha" ]; then
    say "tokenized data in $target/tokenized is up to date"
    return 0
  fi
  rm -rf "$root$target/tokenized.part"
  say "tokenizing the mix with speculators $version prepare_data.py"
  if ! env CUDA_VISIBLE_DEVICES= HF_HUB_OFFLINE=1 "$root"/opt/gpuhosts/speculators/venv/bin/python "$root"/opt/gpuhosts/speculators/src/scripts/prepare_data.py \
      --model \
      /data/models/Qwen/Qwen3.6-27B \
      --data \
      /data/data/qwen36-mix-913k/mix/mix.jsonl \
      --output \
      /data/data/qwen36-mix-913k/tokenized.part \
      --seq-length \
      8192 \
      --seed \
      20260601; then
    refuse "tokenizing stopped (above); run again: downloads, conversions and the mix are kept"
  fi
  compgen -G "$root$target/tokenized.part/*.arrow" >/dev/null || refuse "prepare_data.py wrote no .arrow file"
  printf '%s\n' "$manifest_sha" >"$root$target/tokenized.part/.gpuhosts-mix"
  printf '%s\n' "$prepare_key" >"$root$target/tokenized.part/.gpuhosts-prepare"
  rm -rf "$root$target/tokenized"
  mv "$root$target/tokenized.part" "$root$target/tokenized"
  note_change "tokenized the mix into $target/tokenized"
}
mkdir -p "$root$target"
with_lock dataset-qwen36-mix-913k prepare
finish
