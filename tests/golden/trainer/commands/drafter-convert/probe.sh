# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=drafter-convert]
# The probe of drafter-convert: reads the host and changes nothing; prints one facts line.
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

fact 'file /usr/local/lib/gpuhosts/check-drafter-config.py' "$( { file_state /usr/local/lib/gpuhosts/check-drafter-config.py; } 2>/dev/null || true)"
fact 'converted /data/models/z-lab/Qwen3.6-27B-DFlash.speculators' "$( { cat "$root"/data/models/z-lab/Qwen3.6-27B-DFlash.speculators/.gpuhosts-convert || echo missing; } 2>/dev/null || true)"
fact 'converted config /data/models/z-lab/Qwen3.6-27B-DFlash.speculators/config.json' "$( { if [ ! -f "$root"/data/models/z-lab/Qwen3.6-27B-DFlash.speculators/config.json ]; then echo missing; elif [ ! -f "$root"/data/models/z-lab/Qwen3.6-27B-DFlash.speculators/.gpuhosts-convert-config ]; then echo "no record"; else found="$(sha256sum <"$root"/data/models/z-lab/Qwen3.6-27B-DFlash.speculators/config.json | cut -c1-16)"; recorded="$(cut -c1-16 "$root"/data/models/z-lab/Qwen3.6-27B-DFlash.speculators/.gpuhosts-convert-config)"; if [ "$found" = "$recorded" ]; then echo 'as converted'; else echo "edited since the conversion (sha256 $found, converted $recorded)"; fi; fi; } 2>/dev/null || true)"
fact 'content of /data/models/z-lab/Qwen3.6-27B-DFlash.speculators' "$( { content_state "$root"/data/models/z-lab/Qwen3.6-27B-DFlash.speculators; } 2>/dev/null || true)"
emit_facts
