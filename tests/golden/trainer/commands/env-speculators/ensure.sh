# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=env-speculators]
# On the node: the uv environment speculators with speculators==0.7.0.
uv_version=0.13.9
python_version=3.12
venv=/opt/gpuhosts/speculators/venv
requirement=speculators==0.7.0
# The locked closure of speculators==0.7.0 (gpuhosts/locks.py), installed exactly, hashes required.
lock=/opt/gpuhosts/speculators/requirements.lock
wanted_marker='speculators==0.7.0 lock:sha256:362a7dd039765043'
package=speculators
release=0.7.0
from_git=false
uv_home="$root"/opt/gpuhosts/.uv
uv="$uv_home/bin/uv"
marker="$root$venv/.gpuhosts-requirement"
# [templates/python_env/distributions.sh.j2 sha256:7edbe6e9b44dc81f]
# The lock's distributions, as the venv must hold them (the probe's facts "distributions in …" and "… in …").
distributions_wanted[$venv]='aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-doc==0.0.7
annotated-types==0.8.0
anyio==4.16.0
attrs==26.1.0
certifi==2026.10.19.post1
charset-normalizer==3.5.3
click==8.5.1
cuda-bindings==13.5.0
cuda-pathfinder==1.9.1
cuda-toolkit==13.0.3.0
datasets==5.0.0
dill==0.4.1
filelock==4.3.1
frozenlist==1.8.0
fsspec==2026.4.0
h11==0.16.0
hf-xet==1.8.0
httpcore2==2.16.2
httpcore==1.0.9
httpx2==2.16.2
httpx==0.28.1
huggingface-hub==1.33.0
idna==3.20
jinja2==3.1.6
jiter==0.19.0
loguru==0.7.3
markdown-it-py==4.3.0
markupsafe==3.0.4
mdurl==0.1.2
mpmath==1.3.0
multidict==7.2.1
multiprocess==0.70.19
networkx==3.7
numpy==2.4.6
nvidia-cublas==13.1.1.3
nvidia-cuda-cupti==13.0.85
nvidia-cuda-nvrtc==13.0.88
nvidia-cuda-runtime==13.0.96
nvidia-cudnn-cu13==9.20.0.48
nvidia-cufft==12.0.0.61
nvidia-cufile==1.15.1.6
nvidia-curand==10.4.0.35
nvidia-cusolver==12.0.4.66
nvidia-cusparse==12.6.3.3
nvidia-cusparselt-cu13==0.8.1
nvidia-nccl-cu13==2.29.7
nvidia-nvjitlink==13.5.37
nvidia-nvshmem-cu13==3.4.5
nvidia-nvtx==13.0.85
openai==3.57.0
packaging==26.4
pandas==3.1.1
pillow==13.0.0
propcache==0.5.4
protobuf==7.36.2
psutil==7.2.2
pyarrow==26.0.1
pydantic-core==2.50.5
pydantic-settings==2.16.3
pydantic==2.14.4
pygments==2.21.0
python-dateutil==4.0.0
python-dotenv==1.2.4
pyyaml==6.0.4
regex==2026.11.19
requests==2.34.2
rich==15.0.0
safetensors==0.8.0
setuptools==84.2.1
shellingham==1.5.4
sniffio==1.3.1
speculators==0.7.0
sympy==1.14.0
tokenizers==0.22.2
torch==2.13.0
torchaudio==2.11.1
torchvision==0.28.0
tqdm==4.70.0
transformers==5.14.1
triton==3.7.1
truststore==0.10.5
typer==0.29.2
typing-extensions==4.16.0
typing-inspection==0.4.5
tzdata==2026.6
urllib3==2.8.0
xxhash==4.1.0
yarl==1.25.1'
distributions_skip=''
wanted_distributions='91 distributions sha256:2657f64f870bcf88'
dist_package=speculators
wanted_package='speculators 0.7.0'

# The engine's installed version, empty when it is not installed (or there is no environment yet).
installed_version() {
  { "$uv" pip show --python "$root$venv/bin/python" "$package" 2>/dev/null || true; } | sed -n 's/^Version: //p'
}

# --- uv itself, pinned, in a small venv of its own (the container's python3 only bootstraps it) ------------
# ensure_uv — uv 0.13.9 in /opt/gpuhosts/.uv, shared by every environment here, so it is installed under the uv lock.
uv_place='this host'
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

# --- the engine's environment ----------------------------------------------------------------------------
install_file /opt/gpuhosts/speculators/requirements.lock 0644 <<'GPUHOSTS_EOF'
# [content: opt/gpuhosts/speculators/requirements.lock.sha256 sha256:362a7dd039765043]
GPUHOSTS_EOF
[ "$file_changed" = 0 ] || note_change "wrote $lock"
if [ ! -x "$root$venv/bin/python" ]; then
  "$uv" venv --python "$python_version" "$root$venv"
  note_change "created $venv (Python $python_version)"
fi
installed="$(installed_version)"
wanted_build=0
[ "$(cat "$marker" 2>/dev/null)" = "$wanted_marker" ] || wanted_build=1
[ -n "$installed" ] || wanted_build=1
if [ "$from_git" = false ] && [ "$installed" != "$release" ]; then
  wanted_build=1
fi
# A distribution installed by hand (another engine release, a dependency upgraded or added) is what the venv
# holds, whatever the marker says: sync puts the lock back.
found_distributions="$(distributions_state "$venv" "$distributions_skip")"
[ "$found_distributions" = "$wanted_distributions" ] || wanted_build=1
[ "$(package_state "$venv" "$dist_package")" = "$wanted_package" ] || wanted_build=1
if [ "$wanted_build" = 1 ]; then
  say "installing $requirement (was: ${installed:-none}; $found_distributions)"
  # The marker goes first: a cut-off install must not look complete on the next run.
  rm -f "$marker"
  # Exactly the lock's closure: sync removes what the lock does not list, and every distribution must match a hash.
  "$uv" pip sync --python "$root$venv/bin/python" --require-hashes "$root$lock"
  if [ "$from_git" = true ]; then
    # The build from git replaces the release the lock installed; its dependencies stay the locked ones.
    "$uv" pip install --python "$root$venv/bin/python" --no-deps "$requirement"
  fi
  printf '%s\n' "$wanted_marker" >"$marker"
  note_change "installed $requirement into $venv from $lock"
fi

# --- verify ----------------------------------------------------------------------------------------------
installed="$(installed_version)"
[ -n "$installed" ] || refuse "$package is not installed in $venv after installing $requirement"
if [ "$from_git" = false ] && [ "$installed" != "$release" ]; then
  refuse "$venv has $package $installed, not $release"
fi
found_distributions="$(distributions_state "$venv" "$distributions_skip")"
[ "$found_distributions" = "$wanted_distributions" ] || refuse "$venv does not hold the lock after installing it: \
$found_distributions"
found_package="$(package_state "$venv" "$dist_package")"
[ "$found_package" = "$wanted_package" ] || refuse "$venv has $found_package, not $wanted_package"
[ -x "$root$venv/bin/hf" ] || refuse "$venv has no hf command (huggingface_hub); the model downloads need it"
say "$venv: $package $installed"

# --- the package's repository at the same ref, for its scripts/ ---------------------------------------------
src=/opt/gpuhosts/speculators/src
ref=1c2895f3b6c7b649c271ced55418e67e3ddae255
url=https://github.com/vllm-project/speculators
# checkout_state DIR — "<commit>, unmodified" when DIR is a git checkout whose files are exactly its HEAD commit's
# (no tracked file changed, none added beside gpuhosts' marker), else what differs; "missing" without a checkout.
checkout_state() {
  local dir="$1" head changed
  head="$(git -C "$dir" rev-parse --verify -q HEAD 2>/dev/null)" || { echo missing; return 0; }
  changed="$(git -C "$dir" status --porcelain --untracked-files=all 2>/dev/null | grep -cv '^?? \.gpuhosts-ref$' || true)"
  if [ "$changed" = 0 ]; then
    printf '%s, unmodified\n' "$head"
  else
    printf '%s, %s file(s) changed or added\n' "$head" "$changed"
  fi
}
# A full commit is checked after the fetch and, on every run, against the files: the scripts run as root, so what
# is there must be exactly that commit's (a tag could be moved, a file edited in place).
pinned=""
[[ $ref =~ ^[0-9a-f]{40}$ ]] && pinned="$ref"
if [ "$(cat "$root$src/.gpuhosts-ref" 2>/dev/null)" != "$ref" ] \
    || { [ -n "$pinned" ] && [ "$(checkout_state "$root$src")" != "$pinned, unmodified" ]; }; then
  rm -rf "$root$src"
  mkdir -p "$root$src"
  git -C "$root$src" init -q
  timeout 600 git -C "$root$src" fetch -q --depth 1 "$url" "$ref" || refuse "fetching $ref of $url failed (above)"
  git -C "$root$src" checkout -q FETCH_HEAD
  if [ -n "$pinned" ] && [ "$(git -C "$root$src" rev-parse HEAD)" != "$pinned" ]; then
    rm -rf "$root$src"
    refuse "$url gave another commit for $ref; nothing of it is kept"
  fi
  printf '%s\n' "$ref" >"$root$src/.gpuhosts-ref"
  note_change "checked out $url at $ref in $src"
fi
finish
