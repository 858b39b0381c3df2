#!/bin/bash
# managed by gpuhosts — DFlash drafter training of Qwen/Qwen3.6-27B on GPUs 4,5,6,7, with hidden states from the
# server on GPUs 0,1,2,3. Run by gpuhosts-dflash-training.service; a person may run it by hand the same way.
# Layer ids (derived from 64 verifier layers, 5 drafter layers): drafter config
# [1, 16, 31, 46, 61], trainer [2, 17, 32, 47, 62], server extracts [2, 17, 32, 47, 62, 64].
set -euo pipefail
# The unit's ExecStopPost: how the launch ended, in systemd's words, into the log the monitor reads (a run by hand
# has no such line; the trainer's own lines then tell).
if [ "${1:-}" = --ended ]; then
  echo "training launch ended: result=${SERVICE_RESULT:-unknown} exit=${EXIT_CODE:-unknown}/${EXIT_STATUS:-unknown}"
  exit 0
fi
echo "training launch started"
root="${GPUHOSTS_HOST_ROOT:-}"
save=/data/checkpoints/Qwen3.6-27B-DFlash
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

# The server must be up, and its hidden states non-zero, before the first step.
probe_hidden_states

export CUDA_DEVICE_ORDER=PCI_BUS_ID
export CUDA_VISIBLE_DEVICES=4,5,6,7
export HF_HUB_OFFLINE=1

# The smoke run first: 100 samples for 1 epoch(s) from the converted drafter, so the
# whole path shows working in minutes. Its checkpoints go beside the full run's, which never resumes from them; it
# runs once per smoke value (its marker names which).
smoke_save=/data/checkpoints/Qwen3.6-27B-DFlash-smoke
smoke_key=ed15f60c7db07c7b
smoke_samples=100
smoke_epochs=1
smoke_argv=("$root"/opt/gpuhosts/speculators/venv/bin/torchrun --standalone --nproc_per_node 4 "$root"/opt/gpuhosts/speculators/src/scripts/train.py  --verifier-name-or-path /data/models/Qwen/Qwen3.6-27B   --data-path /data/data/qwen36-mix-913k/tokenized-smoke   --vllm-endpoint http://127.0.0.1:8000/v1   --save-path /data/checkpoints/Qwen3.6-27B-DFlash-smoke   --epochs 1   --lr 0.0003   --speculator-type dflash   --block-size 16   --target-layer-ids 2 17 32 47 62   --total-seq-len 8192   --loss-fn kl_div   --max-anchors 3072   --per-position-loss-weight fixed-exp-decay   --from-pretrained)
if [ "$(cat "$root$smoke_save/.gpuhosts-smoke" 2>/dev/null)" != "$smoke_key" ]; then
  echo "smoke run: $smoke_samples samples, $smoke_epochs epoch(s), checkpoints in $smoke_save"
  mkdir -p "$root$smoke_save"
  "${smoke_argv[@]}" /data/models/z-lab/Qwen3.6-27B-DFlash.speculators \
    || { echo "the smoke run failed (above); the full run does not start" >&2; exit 1; }
  printf '%s\n' "$smoke_key" >"$root$smoke_save/.gpuhosts-smoke"
  echo "smoke run passed: the full run starts"
fi

# Resume from the newest checkpoint (a directory with a config.json) after a restart; else start from the drafter
# as converted to a speculators checkpoint.
start=/data/models/z-lab/Qwen3.6-27B-DFlash.speculators
newest="$(find "$root$save" -mindepth 1 -maxdepth 1 -type d -exec test -f '{}/config.json' ';' -printf '%T@ %p\n' 2>/dev/null \
  | sort -n | tail -n 1 | cut -d' ' -f2-)"
if [ -n "$newest" ]; then
  echo "resuming from $newest"
  start="${newest#"$root"}"
fi

exec "$root"/opt/gpuhosts/speculators/venv/bin/torchrun --standalone --nproc_per_node 4 "$root"/opt/gpuhosts/speculators/src/scripts/train.py \
  --verifier-name-or-path /data/models/Qwen/Qwen3.6-27B \
  --data-path /data/data/qwen36-mix-913k/tokenized \
  --vllm-endpoint http://127.0.0.1:8000/v1 \
  --save-path /data/checkpoints/Qwen3.6-27B-DFlash \
  --epochs 3 \
  --lr 0.0003 \
  --speculator-type dflash \
  --block-size 16 \
  --target-layer-ids 2 17 32 47 62 \
  --total-seq-len 8192 \
  --loss-fn kl_div \
  --max-anchors 3072 \
  --per-position-loss-weight fixed-exp-decay \
  --from-pretrained "$start"
