# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=dataset-qwen36-mix-913k]
# The probe of dataset-qwen36-mix-913k: reads the host and changes nothing; prints one facts line.
# prepared_state DIR [NAME] — "tokenized from the mix" when DIR/NAME (default tokenized) holds .arrow data made from
# DIR/mix's manifest.
prepared_state() {
  local dir="$1" tokenized="$1/${2:-tokenized}"
  [ -f "$dir/mix/manifest.json" ] || { echo "no mix"; return 0; }
  compgen -G "$tokenized/*.arrow" >/dev/null || { echo "not tokenized"; return 0; }
  if [ "$(cat "$tokenized/.gpuhosts-mix" 2>/dev/null)" = "$(sha256sum <"$dir/mix/manifest.json" | cut -c1-64)" ]; then
    echo "tokenized from the mix"
  else
    echo "tokenized from another mix"
  fi
}

fact 'file /usr/local/lib/gpuhosts/dataset-prepare.py' "$( { file_state /usr/local/lib/gpuhosts/dataset-prepare.py; } 2>/dev/null || true)"
fact 'prepared /data/data/qwen36-mix-913k/tokenized' "$( { cat "$root"/data/data/qwen36-mix-913k/tokenized/.gpuhosts-prepare || echo missing; } 2>/dev/null || true)"
fact 'mix of /data/data/qwen36-mix-913k/tokenized' "$( { prepared_state "$root"/data/data/qwen36-mix-913k; } 2>/dev/null || true)"
fact 'prepared /data/data/qwen36-mix-913k/tokenized-smoke' "$( { cat "$root"/data/data/qwen36-mix-913k/tokenized-smoke/.gpuhosts-prepare || echo missing; } 2>/dev/null || true)"
fact 'mix of /data/data/qwen36-mix-913k/tokenized-smoke' "$( { prepared_state "$root"/data/data/qwen36-mix-913k tokenized-smoke; } 2>/dev/null || true)"
emit_facts
