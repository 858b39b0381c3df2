# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=hidden-state-check]
# Pre-flight after the hidden-state server (step 7bdfb1fddcebc657) starts: refuse to train on states of which
# a layer is all zero or not finite.
# probe_hidden_states — wait for the hidden-state server, make it extract one short sample, and check that each layer
# it extracts (2,17,32,47,62,64) is non-zero and finite in what it wrote. Shared by the pre-flight step and
# the launch script.
probe_hidden_states() {
  local server=http://127.0.0.1:8000 states_dir=/data/hidden_states timeout_s=1800 write_timeout_s=120 states deadline response
  states="$root$states_dir"
  deadline=$(($(date +%s) + timeout_s))
  until curl -fsS -o /dev/null "$server/health"; do
    [ "$(date +%s)" -lt "$deadline" ] || { echo "hidden-state server $server not healthy after $timeout_s s" >&2; return 1; }
    sleep 10
  done
  mkdir -p "$states"
  response="$(mktemp "$states/.probe-response.XXXXXX")"
  curl -fsS -o "$response" -H 'Content-Type: application/json' "$server/v1/completions" \
    -d '{"model": "/data/models/Qwen/Qwen3.6-27B", "prompt": "Explain in one sentence why the sky is blue.", "max_tokens": 1}' || { rm -f "$response"; echo "the probe request to $server failed" >&2; return 1; }
  # The response names the file (kv_transfer_params.hidden_states_path); the server writes it afterwards, behind
  # <file>.lock, which the check waits on before reading. The probe's file and lock are removed after the check;
  # stale locks of files already gone are swept.
  local status=0
  "$root"/opt/gpuhosts/vllm/venv/bin/python "$root"/usr/local/lib/gpuhosts/check-hidden-states.py --response "$response" --root "$root" \
    --states-dir "$states_dir" --timeout "$write_timeout_s" --sweep "$states" --layers 2,17,32,47,62,64 || status=$?
  rm -f "$response"
  return "$status"
}

if ! probe_hidden_states; then
  refuse "the hidden states the server extracts are unusable (see above); training is not started. vLLM without \
#46301 extracts zeros from hybrid verifiers: check training.vllm"
fi
say "the server extracts non-zero hidden states"
finish
