# managed by gpuhosts — unit ct129-model-qwen3-6-27b; generated from templates/, do not edit on the host.
# Runs the script below inside container 129 (pct exec).
set -euo pipefail
vmid=129
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
status="$(ct_status "$vmid" 2>/dev/null)" || true
if [ "$status" != running ]; then
  printf '%s: refused: container %s is %s; start it (pct start %s) and run again\n' ct129-model-qwen3-6-27b "$vmid" \
    "${status:-missing}" "$vmid" >&2
  exit 1
fi
script="$(cat <<'GPUHOSTS_INNER'
# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-model-qwen3-6-27b]
# Inside container 129: Qwen/Qwen3.6-27B@main in /srv/models/Qwen3.6-27B.
repo=Qwen/Qwen3.6-27B
revision=main
local_dir=/srv/models/Qwen3.6-27B
hf=/opt/gpuhosts/downloads/venv/bin/hf
python=/opt/gpuhosts/downloads/venv/bin/python
marker="$root$local_dir/.gpuhosts-download"
uv_version=0.13.9
uv_home="$root"/opt/gpuhosts/.uv
uv="$uv_home/bin/uv"
tools=/opt/gpuhosts/downloads
hf_requirement=huggingface_hub==0.36.0
# [templates/model_download/model-files.sh.j2 sha256:92c97dab60fceda2]
record="$root$local_dir/.gpuhosts-weights"

# drop_differing — each file a refresh would find changed (a small file not the Hub's blob, a weight file whose
# size or samples are not the record's) goes, with hf's metadata of it: hf keeps a file whose metadata still
# stands, whatever its content (a byte changed in place), and fetches one that is gone.
drop_differing() {
  local etag path digest size
  while IFS=$'\t' read -r etag path; do
    [[ $etag =~ ^[0-9a-f]{40}$ ]] || continue
    if [ -f "$root$local_dir/$path" ] && [ "$(git_blob "$root$local_dir/$path")" != "$etag" ]; then
      rm -f "$root$local_dir/$path" "$root$local_dir/.cache/huggingface/download/$path.metadata"
      say "removed $path: it is not the Hub's blob any more; the download fetches it again"
    fi
  done < <(download_entries "$local_dir")
  [ -f "$record" ] || return 0
  while IFS=' ' read -r digest size path; do
    if [ -z "$path" ] || [ ! -f "$root$local_dir/$path" ]; then
      continue
    fi
    if [ "$(stat -c %s "$root$local_dir/$path")" != "$size" ] || [ "$(sampled_digest "$root$local_dir/$path")" != "$digest" ]; then
      rm -f "$root$local_dir/$path" "$root$local_dir/.cache/huggingface/download/$path.metadata"
      say "removed $path: its size or samples are not what its download recorded; the download fetches it again"
    fi
  done <"$record"
}

# record_weights — the size and sampled digest of every weight file (an LFS file: its etag is a sha256), as the
# download leaves them.
record_weights() {
  local etag path
  while IFS=$'\t' read -r etag path; do
    [[ $etag =~ ^[0-9a-f]{64}$ ]] || continue
    [ -f "$root$local_dir/$path" ] || refuse "$path is missing after the download of $repo@$revision"
    printf '%s %s %s\n' "$(sampled_digest "$root$local_dir/$path")" "$(stat -c %s "$root$local_dir/$path")" "$path"
  done < <(download_entries "$local_dir") >"$record.part"
  mv -f "$record.part" "$record"
}

# --- hf, pinned, in an environment of the downloads' own: a download waits for no engine environment --------
# ensure_uv — uv 0.13.9 in /opt/gpuhosts/.uv, shared by every environment here, so it is installed under the uv lock.
uv_place='container 129'
ensure_uv() {
  if [ "$("$uv" --version 2>/dev/null)" != "uv $uv_version" ]; then
    [ -x "$root/usr/bin/python3" ] || refuse "$uv_place has no /usr/bin/python3; install it (apt-get install python3 python3-venv)"
    if ! "$root/usr/bin/python3" -c 'import ensurepip' 2>/dev/null; then
      with_lock dpkg env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv
    fi
    [ -x "$uv_home/bin/python" ] || "$root/usr/bin/python3" -m venv "$uv_home"
    # pinned by content: pip installs only a wheel whose sha256 is one of these
    local requirement
    requirement="$(mktemp "$uv_home/uv-requirements.XXXXXX")"
    printf '%s' 'uv==0.13.9 \
    --hash=sha256:56ec37616c00220032fc7b8c9d0ef51367fd0d70d9cd6ddd841660f949f84fed \
    --hash=sha256:c16ed11e013557536b3e60065f1b912f6407bd6518e041b961e23ef9e6b4fbf5 \
    --hash=sha256:66c512266d633bef48384a1f53003f41f2a8e7b36fe6e7fbfd3e0fd52d96fa63 \
    --hash=sha256:5435c5ce14a56431208ca0996416d310f1598e8c2c8ba707688985a16bb82dbe \
    --hash=sha256:7ec1e1dd9b6cb335c301afdf877989df384227313981850755a59561f75e4ab8 \
    --hash=sha256:16963d19594e18d746a70c7fce82237bde4f2cac4cfcf0ca2b84796fe9d0c6e9 \
    --hash=sha256:db5c8df7145c21ffea9c0f74e38823bac3af60cbadf0e26b8633f08627b17bab \
    --hash=sha256:c5dbdb7c8737cd183a9dce95b39cfd1f3d54ec2a27a1bb58f160293f9ba2c805 \
    --hash=sha256:a6e845f387e4ed55bb59342957a9179e24a631fcc7668bda3426ae1cef8ed4b9 \
    --hash=sha256:d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19 \
    --hash=sha256:ecb6028d79dc96fbeafffe5c8af62a7099487ebc05a701e76714eebcffd06375 \
    --hash=sha256:6d5114bba238adddacb32fb11904f2b3ff4e988f8e9ff0d8d3b5e9822cf836b8 \
    --hash=sha256:6b0c7b9f47a5d011939d61e324d3fe18a8bc155d8dd53add738709a92f290a7c \
    --hash=sha256:a2ee66fe8b6608e1482ab1bde5799da04705c1cb40324c7f66054ecf46ae6e40 \
    --hash=sha256:2c45530751517d6c3bbc69a19473f6effe47cce047bede01ffd8af7ea7b36b25 \
    --hash=sha256:3eeeb51a267a2144640fcd8f38d4a2f63439b39bc47445fd84727c3fc462c843 \
    --hash=sha256:6a44b2ed8111d2f60d2b92627c5dccda3f7ed7570b18ce115e569cd68c28246b \
    --hash=sha256:eeb92051c2123b9730c46b04cc843cfa4bc7d7b0aec56df431a2215ef4cb0273
' >"$requirement"
    "$uv_home/bin/python" -m pip install --quiet --require-hashes --only-binary :all: -r "$requirement" \
      || { rm -f "$requirement"; refuse "uv $uv_version did not install into $uv_home (above)"; }
    rm -f "$requirement"
    [ "$("$uv" --version 2>/dev/null)" = "uv $uv_version" ] || refuse "uv $uv_version did not install into $uv_home"
    note_change "installed uv $uv_version"
  fi
}
with_lock uv ensure_uv
# Each download registers itself, so that the last one's teardown knows to remove the tool environment.
mkdir -p "$root$tools/users"
: >"$root$tools/users/"ct129-model-qwen3-6-27b
# The locked closure of $hf_requirement (gpuhosts/locks.py), installed exactly, hashes required.
hf_marker='huggingface_hub==0.36.0 lock:sha256:4491ff02c85da4bf'
ensure_hf() {
install_file /opt/gpuhosts/downloads/requirements.lock 0644 <<'GPUHOSTS_EOF'
# [content: containers/129/opt/gpuhosts/downloads/requirements.lock.sha256 sha256:4491ff02c85da4bf]
GPUHOSTS_EOF
  [ "$file_changed" = 0 ] || note_change "wrote "/opt/gpuhosts/downloads/requirements.lock
  if [ "$(cat "$root$tools/venv/.gpuhosts-requirement" 2>/dev/null)" != "$hf_marker" ] || [ ! -x "$root$hf" ]; then
    [ -x "$root$tools/venv/bin/python" ] || "$uv" venv --python 3.12 "$root$tools/venv"
    rm -f "$root$tools/venv/.gpuhosts-requirement"
    "$uv" pip sync --python "$root$tools/venv/bin/python" --require-hashes "$root"/opt/gpuhosts/downloads/requirements.lock
    printf '%s\n' "$hf_marker" >"$root$tools/venv/.gpuhosts-requirement"
    note_change "installed $hf_requirement into $tools/venv from "/opt/gpuhosts/downloads/requirements.lock
  fi
}
with_lock hf ensure_hf

complete=0
if [ "$(cat "$marker" 2>/dev/null)" = "$repo@$revision" ] && [ "$(small_files_state "$local_dir")" = "as the Hub's blobs" ]; then
  weights="$(weights_state "$local_dir")"
  if [ "$weights" = "as downloaded" ]; then
    complete=1
  elif [ "$weights" = "no record" ]; then
    # Downloaded before the record was kept: what is there is what the marker vouched for.
    record_weights
    note_change "recorded the size and samples of each weight file in $local_dir"
    complete=1
  else
    say "$local_dir: $weights"
  fi
fi
if [ "$complete" = 1 ]; then
  say "$repo@$revision is complete in $local_dir"
else
  [ -x "$root$hf" ] || refuse "$hf is missing after installing $hf_requirement"
  unset HF_TOKEN
  mkdir -p "$root$local_dir"
  rm -f "$marker"
  drop_differing
  rm -f "$record"
  say "downloading $repo@$revision into $local_dir (finished files are kept; a new run resumes)"
  if ! HF_HUB_DISABLE_PROGRESS_BARS=1 "$root$hf" download "$repo" --revision "$revision" --local-dir "$root$local_dir"; then
    refuse "the download of $repo@$revision stopped; run again to resume it (files already fetched are kept)"
  fi
  record_weights
  printf '%s\n' "$repo@$revision" >"$marker"
  note_change "downloaded $repo@$revision into $local_dir"
fi
# hf download --local-dir leaves one lock file per downloaded file (<file>.lock beside <file>.metadata under
# .cache/huggingface/download: huggingface_hub _local_folder.py get_local_download_paths, read in 2.4.0) and never
# removes them; no hf runs now, so none is held.
stale_locks="$(find "$root$local_dir/.cache/huggingface/download" -type f -name '*.lock' -print -delete 2>/dev/null | wc -l)"
[ "$stale_locks" = 0 ] || say "removed $stale_locks lock file(s) hf download left under $local_dir/.cache/huggingface"

# --- verify what was downloaded against what the plan derived from it --------------------------------------
if ! problems="$("$root$python" - "$root$local_dir/config.json" '{"num_layers": 64}' <<'GPUHOSTS_CHECK'
import json, sys
expected = json.loads(sys.argv[2])
config = json.load(open(sys.argv[1]))
text = config.get("text_config") or {}
problems = []
if "num_layers" in expected:
    layers = config.get("num_hidden_layers", text.get("num_hidden_layers"))
    if layers != expected["num_layers"]:
        problems.append(f"num_hidden_layers is {layers}, the plan derived the drafter's layer ids for {expected['num_layers']}")
if "target_layer_ids" in expected:
    ids = (config.get("dflash_config") or {}).get("target_layer_ids", config.get("target_layer_ids"))
    if ids is not None and list(ids) != expected["target_layer_ids"]:
        problems.append(f"dflash_config.target_layer_ids {ids} differ from {expected['target_layer_ids']} derived "
                        "from the target; a drafter conditioned on other layers accepts almost nothing")
if "sliding_window" in expected:
    sliding = "sliding_attention" in (config.get("layer_types") or [])
    if sliding != expected["sliding_window"]:
        problems.append(f"the drafter {'has' if sliding else 'has no'} sliding-window layers, the plan assumed the "
                        "opposite; set speculative.drafter.slidingWindow to match")
print("; ".join(problems))
sys.exit(1 if problems else 0)
GPUHOSTS_CHECK
)"; then
  refuse "$local_dir/config.json: ${problems:-could not be read}"
fi
say "$local_dir/config.json agrees with the plan"
finish
GPUHOSTS_INNER
)"
# What the container prints is the container's: any process in it may print a line that looks like gpuhosts'
# protocol. A unit inside a container can neither require the host's reboot nor skip a teardown, so such lines are
# passed on as text, not as what the host reads; a result without a result line then fails the unit, visibly.
from_container() {
  # shellcheck disable=SC2016  # awk's own fields
  awk -v result='GPUHOSTS_RESULT ' -v skipped='GPUHOSTS_SKIPPED ' '
    index($0, skipped) == 1 || (index($0, result) == 1 && ($0 ~ /"rebootRequired":true/ || $0 ~ /awaitReboot/)) {
      print "(printed in the container) " $0; fflush(); next
    }
    { print; fflush() }'
}
pct exec "$vmid" -- bash -c "$script" gpuhosts </dev/null | from_container
