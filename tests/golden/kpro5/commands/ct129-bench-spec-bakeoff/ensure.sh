# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-bench-spec-bakeoff]
# node_name — the name Proxmox files this node under: the kernel's host name cut at the first dot, as
# PVE::INotify::nodename does (`hostname` may print an FQDN).
node_name() {
  local name
  name="$(hostname)"
  printf '%s\n' "${name%%.*}"
}

# ct_status VMID — the container's status from the API, running or stopped (GET
# /nodes/{node}/lxc/{vmid}/status/current: pve-container src/PVE/API2/LXC/Status.pm `vm_status`, which loads the
# config first); fails, printing nothing, when there is no such container.
ct_status() {
  local answer
  answer="$(pvesh get "/nodes/$(node_name)/lxc/$1/status/current" --output-format json)" || return 1
  python3 -I -c 'import json, sys; print(json.load(sys.stdin)["status"])' <<<"$answer"
}
# Benchmark spec-bakeoff of container 129: each service in turn on the GPUs they share, then the
# DDTree reference; the services are put back as declared, also after a failure. Runs only for new inputs.
vmid=129
name=spec-bakeoff
results=/var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff
inputs=e9486b24c2cb01edd9766043457c6f26
# `gpuhosts bench STACK NAME` runs this script with force=1: the same inputs, measured again.
force=0
status="$(ct_status "$vmid" 2>/dev/null)" || true
[ "$status" = running ] || refuse "container $vmid is ${status:-missing}; start it (pct start $vmid) and run again"
if [ "$force" = 0 ] && [ "$(cat "$root$results/inputs" 2>/dev/null)" = "$inputs" ] && [ -s "$root$results/results.json" ]; then
  say "results for these inputs are in $results; gpuhosts bench or a new runId measures again"
  result_report="$(cat "$root$results/results.json")"
  finish
  exit 0
fi
script="$(cat <<'GPUHOSTS_INNER'
# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-bench-spec-bakeoff]
# Inside container 129: benchmark spec-bakeoff. Every service on its GPUs goes back to its declared
# state when this script ends, however it ends (the EXIT trap).
work=/var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff/run
run_status=0
install_file /usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/bench.py 0755 <<'GPUHOSTS_EOF'
# [content: containers/129/usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/bench.py.sha256 sha256:de4dcfd6f624464a]
GPUHOSTS_EOF
install_file /usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/prompts.json 0644 <<'GPUHOSTS_EOF'
# [content: containers/129/usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/prompts.json sha256:392a8052328edd78]
GPUHOSTS_EOF
install_file /usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/ddtree-result.py 0755 <<'GPUHOSTS_EOF'
# [content: containers/129/usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/ddtree-result.py.sha256 sha256:2ae52523b32f63e1]
GPUHOSTS_EOF
rm -rf "$root$work"
mkdir -p "$root$work"

restore() {
  local failed=0
  set +e
  systemctl start gpuhosts-qwen-sglang.service || failed=1
  systemctl stop gpuhosts-qwen-vllm-dflash.service || failed=1
  # shellcheck disable=SC2016  # the client's settings: JSON in single quotes, nothing for bash to expand
  "$root"/opt/gpuhosts/qwen-sglang/venv/bin/python "$root"/usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/bench.py wait "$root"/usr/local/lib/gpuhosts/deploy-gate.py '{"acceptance_metrics": {"kind": "gauges", "length": "sglang:spec_accept_length", "rate": "sglang:spec_accept_rate"}, "base_url": "http://127.0.0.1:30000", "engine": "sglang", "method": "mtp", "model": "qwen3.6-27b", "prompts_file": "/usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/prompts.json", "ready_timeout_s": 1800, "reasoning_field": "reasoning_content", "service": "qwen-sglang", "speculative": true}' "$root"/etc/gpuhosts/qwen-sglang.env GPUHOSTS_API_KEY || failed=1
  say "services restored as declared: $(printf %s 'qwen-sglang=running qwen-vllm-dflash=stopped')"
  if [ "$failed" != 0 ]; then
    say "restoring the declared services failed; see above"
    run_status=1
  fi
}
trap 'restore; exit "$run_status"' EXIT
# A cut connection (HUP) or a stop (TERM, INT) ends the script through the EXIT trap, so it restores too.
trap 'run_status=1; exit 1' HUP TERM INT

# measured NAME ENGINE METHOD — the client's result line into NAME.json; without one, a failure naming the client's
# last line (a service that did not start, a client that crashed). NAME, ENGINE and METHOD are plain words.
measured() {
  local out="$root$work/$1.out"
  grep -v '^GPUHOSTS_BENCH_SERVICE ' "$out" || true
  sed -n 's/^GPUHOSTS_BENCH_SERVICE //p' "$out" | tail -n1 >"$root$work/$1.json"
  if [ ! -s "$root$work/$1.json" ]; then
    local last
    last="$(tail -n1 "$out" | tr -d "\"\\\\" | tr -d '[:cntrl:]' | cut -c1-200)"
    printf '{"service":"%s","engine":"%s","method":"%s","passed":false,"figures":{},"failures":["no result: %s"]}\n' \
      "$1" "$2" "$3" "${last:-the client printed nothing}" >"$root$work/$1.json"
  fi
}

say "measuring "qwen-sglang
systemctl stop gpuhosts-qwen-vllm-dflash.service
if systemctl start gpuhosts-qwen-sglang.service; then
  # shellcheck disable=SC2016  # the client's settings: JSON in single quotes, nothing for bash to expand
  "$root"/opt/gpuhosts/qwen-sglang/venv/bin/python "$root"/usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/bench.py run "$root"/usr/local/lib/gpuhosts/deploy-gate.py '{"acceptance_metrics": {"kind": "gauges", "length": "sglang:spec_accept_length", "rate": "sglang:spec_accept_rate"}, "base_url": "http://127.0.0.1:30000", "engine": "sglang", "method": "mtp", "model": "qwen3.6-27b", "prompts_file": "/usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/prompts.json", "ready_timeout_s": 1800, "reasoning_field": "reasoning_content", "service": "qwen-sglang", "speculative": true}' "$root"/etc/gpuhosts/qwen-sglang.env GPUHOSTS_API_KEY >"$root$work/"qwen-sglang.out 2>&1 || run_status=1
else
  run_status=1
  printf 'systemctl start %s failed\n' gpuhosts-qwen-sglang.service >"$root$work/"qwen-sglang.out
fi
measured qwen-sglang sglang mtp
systemctl stop gpuhosts-qwen-sglang.service
say "measuring "qwen-vllm-dflash
systemctl stop gpuhosts-qwen-sglang.service
if systemctl start gpuhosts-qwen-vllm-dflash.service; then
  # shellcheck disable=SC2016  # the client's settings: JSON in single quotes, nothing for bash to expand
  "$root"/opt/gpuhosts/qwen-vllm-dflash/venv/bin/python "$root"/usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/bench.py run "$root"/usr/local/lib/gpuhosts/deploy-gate.py '{"acceptance_metrics": {"accepted": "vllm:spec_decode_num_accepted_tokens_total", "draft_tokens": "vllm:spec_decode_num_draft_tokens_total", "drafts": "vllm:spec_decode_num_drafts_total", "kind": "counters"}, "base_url": "http://127.0.0.1:8000", "engine": "vllm", "method": "dflash", "model": "qwen3.6-27b", "prompts_file": "/usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/prompts.json", "ready_timeout_s": 1800, "reasoning_field": "reasoning", "service": "qwen-vllm-dflash", "speculative": true}' "$root"/etc/gpuhosts/qwen-vllm-dflash.env VLLM_API_KEY >"$root$work/"qwen-vllm-dflash.out 2>&1 || run_status=1
else
  run_status=1
  printf 'systemctl start %s failed\n' gpuhosts-qwen-vllm-dflash.service >"$root$work/"qwen-vllm-dflash.out
fi
measured qwen-vllm-dflash vllm dflash
systemctl stop gpuhosts-qwen-vllm-dflash.service

say "running the DDTree reference"
stop_all=(gpuhosts-qwen-sglang.service gpuhosts-qwen-vllm-dflash.service)
for unit_name in "${stop_all[@]}"; do
  systemctl stop "$unit_name"
done
client=/usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/bench.py
job='{"argv": ["/opt/gpuhosts/ddtree-spec-bakeoff/venv/bin/python", "benchmark.py", "--model-name-or-path", "/srv/models/Qwen3.6-27B", "--draft-name-or-path", "/srv/models/Qwen3.6-27B-DFlash", "--prompts", "/usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/prompts.json", "--thinking", "on", "--max-new-tokens", "256", "--tree-budget", "16,32,64,128,256", "--temperature", "0.0", "--save-path", "/var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff/ddtree/run.pt"], "cuda": "0,1", "cwd": "/opt/gpuhosts/ddtree/spec-bakeoff/c96427a185677bf4133ed865dd1626a5041aef9b", "lock": "sha256:7687a757991e3e45", "log": "/var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff/ddtree/benchmark.log", "out": "/var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff/ddtree/result.json", "python": "/opt/gpuhosts/ddtree-spec-bakeoff/venv/bin/python", "result_script": "/usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/ddtree-result.py", "save": "/var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff/ddtree/run.pt"}'
# The reference failing (out of GPU memory, a crash, a run it cannot read) is a finding its row names, not a failed
# benchmark: the services' rows stand, they are restored as declared, and the same inputs are not run again.
CUDA_VISIBLE_DEVICES=0,1 CUDA_DEVICE_ORDER=PCI_BUS_ID \
  "$root"/opt/gpuhosts/ddtree-spec-bakeoff/venv/bin/python "$root$client" ddtree "$root"/usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/ddtree-result.py "$job" || true
[ -s "$root"/var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff/ddtree/result.json ] || printf '{"failures":["the job gave no result"]}\n' >"$root"/var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff/ddtree/result.json

cd "$root$work"
tables=(qwen-sglang.json qwen-vllm-dflash.json )
"$root"/opt/gpuhosts/qwen-sglang/venv/bin/python "$root"/usr/local/lib/gpuhosts/benchmarks/spec-bakeoff/bench.py table 'Benchmark spec-bakeoff on CT 129 (qwen-sglang, qwen-vllm-dflash)' '["decodeTokensPerS", "ttftS", "acceptanceLength", "acceptanceRate", "longContextDecodeRatio"]' "${tables[@]}" --ddtree "$root"/var/lib/gpuhosts/benchmarks/ct129-spec-bakeoff/ddtree/result.json

GPUHOSTS_INNER
)"
set +e
output="$(pct exec "$vmid" -- bash -c "$script" gpuhosts </dev/null)"
run_status=$?
set -e
grep -v '^GPUHOSTS_BENCH_' <<<"$output" || true
table="$(sed -n 's/^GPUHOSTS_BENCH_TABLE //p' <<<"$output" | tail -n1)"
page="$(sed -n 's/^GPUHOSTS_BENCH_MD //p' <<<"$output" | tail -n1)"
if [ -n "$table" ]; then
  # A new run's figures replace the last ones, even a failed run's: they say what failed.
  printf '%s\n' "$table" | install_file "$results/results.json" 0644
  base64 -d <<<"$page" | install_file "$results/results.md" 0644
fi
if [ "$run_status" != 0 ]; then
  rm -f "$root$results/inputs"
  refuse "benchmark $name failed (see above; the table is in $results); the services on its GPUs are back as declared"
fi
printf '%s\n' "$inputs" | install_file "$results/inputs" 0644
note_change "measured benchmark $name: $results/results.md"
result_report="$table"
finish
