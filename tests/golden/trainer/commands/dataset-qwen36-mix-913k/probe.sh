# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=dataset-qwen36-mix-913k]
# The probe of dataset-qwen36-mix-913k: reads the host and changes nothing; prints one facts line.
# dataset_files_state DIR — "all present" when every file SHA256SUMS lists is there, else how many are missing.
dataset_files_state() {
  local dir="$1" missing=0 sum name
  [ -f "$dir/SHA256SUMS" ] || { echo "no manifest"; return 0; }
  while read -r sum name; do
    [ -n "$sum" ] || continue
    [ -f "$dir/${name#\*}" ] || missing=$((missing + 1))
  done <"$dir/SHA256SUMS"
  if [ "$missing" = 0 ]; then echo "all present"; else echo "$missing missing"; fi
}

fact 'manifest /data/data/qwen36-mix-913k/SHA256SUMS' "$( { sha256sum <"$root"/data/data/qwen36-mix-913k/SHA256SUMS | cut -d" " -f1 || echo missing; } 2>/dev/null || true)"
fact 'files of /data/data/qwen36-mix-913k/SHA256SUMS' "$( { dataset_files_state "$root"/data/data/qwen36-mix-913k; } 2>/dev/null || true)"
emit_facts
