# [templates/common/lib.sh.j2 sha256:3906e3347ec1c9a2 unit=hidden-state-check]
# Pre-flight after the hidden-state server (step 6d44d1a6a3f85906) starts: refuse to train on all-zero states.
# probe_hidden_states — wait for the hidden-state server, make it extract one short sample, and check the states
# it wrote are not all zero. Shared by the pre-flight step and the launch script.
probe_hidden_states() {
  local server=http://127.0.0.1:8000 states="$root"/data/hidden_states deadline since newest
  deadline=$(($(date +%s) + 1800))
  until curl -fsS -o /dev/null "$server/health"; do
    [ "$(date +%s)" -lt "$deadline" ] || { echo "hidden-state server $server not healthy after 1800 s" >&2; return 1; }
    sleep 10
  done
  mkdir -p "$states"
  since="$(mktemp "$states/.probe.XXXXXX")"
  curl -fsS -o /dev/null -H 'Content-Type: application/json' "$server/v1/completions" \
    -d '{"model": "/data/models/Qwen/Qwen3.6-27B", "prompt": "Explain in one sentence why the sky is blue.", "max_tokens": 1}' || { rm -f "$since"; echo "the probe request to $server failed" >&2; return 1; }
  newest="$(find "$states" -name '*.safetensors' -newer "$since" -printf '%T@ %p\n' | sort -n | tail -n 1 | cut -d' ' -f2-)"
  rm -f "$since"
  [ -n "$newest" ] || { echo "the server wrote no hidden states under /data/hidden_states for the probe" >&2; return 1; }
  # The probe's states are ours to remove; the server keeps caching the training's own.
  local status=0
  "$root"/opt/gpuhosts/vllm/venv/bin/python "$root"/usr/local/lib/gpuhosts/check-hidden-states.py "$newest" || status=$?
  rm -f "$newest"
  return "$status"
}

if ! probe_hidden_states; then
  refuse "the hidden states the server extracts are unusable (see above); training is not started. vLLM without \
#46301 extracts zeros from hybrid verifiers: check training.vllm"
fi
say "the server extracts non-zero hidden states"
finish
