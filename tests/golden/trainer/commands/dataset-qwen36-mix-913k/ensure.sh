# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=dataset-qwen36-mix-913k]
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
# The data set qwen36-mix-913k prepared on the node from 5 Hugging Face data set source(s): each
# downloaded and converted to ShareGPT rows, mixed with seed 20260601, tokenized by speculators 0.7.0
# scripts/prepare_data.py with the verifier's tokenizer and chat template. Every step writes to a temporary path and
# renames it; a marker beside each result says which inputs made it, so a run reuses what is complete and resumes
# after an interruption.
target=/data/data/qwen36-mix-913k
python=/opt/gpuhosts/speculators/venv/bin/python
hf=/opt/gpuhosts/speculators/venv/bin/hf
script=/usr/local/lib/gpuhosts/dataset-prepare.py
script_digest=9a86d5b5f6a180da464d821674cbdda0ddccd3e4720e82db0b997bf3c02637fe
spec='{"seed":20260601,"sources":[{"converted":"sources/open-orca-openorca-train-bd216d34e6/converted.jsonl","count":677786,"name":"Open-Orca/OpenOrca@0d8a61a06664ddb11341d806e4508a2624eaddbf:train"},{"converted":"sources/theblackcat102-evol-codealpaca-v1-train-9f3e8e51f5/converted.jsonl","count":110000,"name":"theblackcat102/evol-codealpaca-v1@c75242318519b5470635e84064baed7c78594020:train"},{"converted":"sources/ise-uiuc-magicoder-evol-instruct-110k-train-fdd9dd889f/converted.jsonl","count":1000,"name":"ise-uiuc/Magicoder-Evol-Instruct-110K@b0079beaa0361d82412520b873715bee59cc7dd4:train"},{"converted":"sources/thoughtworks-agentic-coding-trajectories-train-31d3e7828b/converted.jsonl","count":15000,"name":"thoughtworks/agentic-coding-trajectories@cef72d1f4d0caabf85937adf8337a14b7522c782:train"},{"converted":"sources/glaiveai-glaive-function-calling-v2-train-a4b7102572/converted.jsonl","count":110000,"name":"glaiveai/glaive-function-calling-v2@e7f4b6456019f5d8bcb991ef0dd67d8ff23221ac:train"}]}'
prepare_key=a0a1ea8e7ac9e2f85b3fc30c611ff073
version=0.7.0
needs=(/data/models/Qwen/Qwen3.6-27B/.gpuhosts-download /opt/gpuhosts/speculators/src/scripts/prepare_data.py /opt/gpuhosts/speculators/venv/bin/hf)
for path in "${needs[@]}"; do
  [ -e "$root$path" ] || refuse "$path is missing; the step that provides it comes first"
done
install_file /usr/local/lib/gpuhosts/dataset-prepare.py 0755 <<'GPUHOSTS_EOF'
# [content: usr/local/lib/gpuhosts/dataset-prepare.py.sha256 sha256:9a86d5b5f6a180da]
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

# convert NAME DIR SPLIT SUBSET CONVERTER [PATTERN…] — ShareGPT rows in DIR/converted.jsonl, again only when the split's files, the
# converter or the script changed (the marker's first line is their digest, its second the output's sha256).
convert() {
  local name="$1" dir="$2" split="$3" subset="$4" converter="$5" marker="$root$2/.gpuhosts-convert" inputs digest out
  shift 5
  # The split's files by the Hub's own rule (or the dataFiles), chosen by the shipped script, as the plan checks them.
  if ! out="$("$root$python" "$root$script" files --split "$split" --subset "$subset" --data-files "$@" -- \
      "$root$dir/download" 2>&1)"; then
    refuse "$name: ${out#dataset-prepare: }"
  fi
  mapfile -t inputs <<<"$out"
  inputs=("${inputs[@]/#/$root$dir/download/}")
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
  download glaiveai/glaive-function-calling-v2@e7f4b6456019f5d8bcb991ef0dd67d8ff23221ac:train glaiveai/glaive-function-calling-v2 e7f4b6456019f5d8bcb991ef0dd67d8ff23221ac /data/data/qwen36-mix-913k/sources/glaiveai-glaive-function-calling-v2-train-a4b7102572/download false
  convert glaiveai/glaive-function-calling-v2@e7f4b6456019f5d8bcb991ef0dd67d8ff23221ac:train /data/data/qwen36-mix-913k/sources/glaiveai-glaive-function-calling-v2-train-a4b7102572 train '' glaive-function-calling
  converted+=("$(sed -n 2p "$root"/data/data/qwen36-mix-913k/sources/glaiveai-glaive-function-calling-v2-train-a4b7102572/.gpuhosts-convert)")

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
  tokenize "the mix" "$target/tokenized" "$prepare_key" \
      --model \
      /data/models/Qwen/Qwen3.6-27B \
      --data \
      /data/data/qwen36-mix-913k/mix/mix.jsonl \
      --output \
      /data/data/qwen36-mix-913k/tokenized.part \
      --seq-length \
      8192 \
      --seed \
      20260601
  # The smoke run's 100 samples, drawn by prepare_data.py from the same mix with the same seed.
  tokenize "the smoke run's samples" /data/data/qwen36-mix-913k/tokenized-smoke e4ee5a159be0e7c90fe5036519461dae \
      --model \
      /data/models/Qwen/Qwen3.6-27B \
      --data \
      /data/data/qwen36-mix-913k/mix/mix.jsonl \
      --output \
      /data/data/qwen36-mix-913k/tokenized-smoke.part \
      --seq-length \
      8192 \
      --seed \
      20260601 \
      --max-samples \
      100
}

# tokenize WHAT DIR KEY ARG… — speculators' prepare_data.py with ARGs (its --output DIR.part), renamed to DIR when
# complete; skipped when DIR's markers name KEY and the mix's manifest.
tokenize() {
  local what="$1" dir="$2" key="$3" manifest_sha
  shift 3
  manifest_sha="$(sha256sum <"$root$target/mix/manifest.json" | cut -c1-64)"
  if [ "$(cat "$root$dir/.gpuhosts-prepare" 2>/dev/null)" = "$key" ] \
      && [ "$(cat "$root$dir/.gpuhosts-mix" 2>/dev/null)" = "$manifest_sha" ]; then
    case "$(content_state "$root$dir")" in
      "as recorded")
        say "tokenized data in $dir is up to date"
        return 0 ;;
      "no record")
        # tokenized before the record was kept: the markers vouch for it as it is
        content_record "$root$dir"
        note_change "recorded the content of $dir"
        return 0 ;;
      *) say "tokenized data in $dir changed since it was written ($(content_state "$root$dir")); tokenizing again" ;;
    esac
  fi
  rm -rf "$root$dir.part"
  say "tokenizing $what with speculators $version prepare_data.py"
  if ! env CUDA_VISIBLE_DEVICES= HF_HUB_OFFLINE=1 "$root"/opt/gpuhosts/speculators/venv/bin/python "$root"/opt/gpuhosts/speculators/src/scripts/prepare_data.py "$@"; then
    refuse "tokenizing stopped (above); run again: downloads, conversions and the mix are kept"
  fi
  compgen -G "$root$dir.part/*.arrow" >/dev/null || refuse "prepare_data.py wrote no .arrow file"
  printf '%s\n' "$manifest_sha" >"$root$dir.part/.gpuhosts-mix"
  printf '%s\n' "$key" >"$root$dir.part/.gpuhosts-prepare"
  content_record "$root$dir.part"
  rm -rf "$root$dir"
  mv "$root$dir.part" "$root$dir"
  note_change "tokenized $what into $dir"
}
mkdir -p "$root$target"
with_lock dataset-qwen36-mix-913k prepare
finish
