# managed by gpuhosts — unit ct129-env-qwen-sglang; generated from templates/, do not edit on the host.
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
  printf '%s: refused: container %s is %s; start it (pct start %s) and run again\n' ct129-env-qwen-sglang "$vmid" \
    "${status:-missing}" "$vmid" >&2
  exit 1
fi
script="$(cat <<'GPUHOSTS_INNER'
# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-env-qwen-sglang]
# Inside container 129: the uv environment qwen-sglang with sglang[all]==0.5.11.
uv_version=0.13.9
python_version=3.12
venv=/opt/gpuhosts/qwen-sglang/venv
requirement='sglang[all]==0.5.11'
# The locked closure of sglang[all]==0.5.11 (gpuhosts/locks.py), installed exactly, hashes required.
lock=/opt/gpuhosts/qwen-sglang/requirements.lock
wanted_marker='sglang[all]==0.5.11 lock:sha256:43d06524ff07a204'
package=sglang
release=0.5.11
from_git=false
uv_home="$root"/opt/gpuhosts/.uv
uv="$uv_home/bin/uv"
marker="$root$venv/.gpuhosts-requirement"
# [templates/python_env/distributions.sh.j2 sha256:7edbe6e9b44dc81f]
# The lock's distributions, as the venv must hold them (the probe's facts "distributions in …" and "… in …").
distributions_wanted[$venv]='addict==2.4.0
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
airportsdata==20261103
annotated-doc==0.0.7
annotated-types==0.8.0
anthropic==2.15.0
anyio==4.16.0
apache-tvm-ffi==0.1.15.post2
asttokens==3.0.2
attrs==26.1.0
av==16.1.0
blobfile==3.0.0
build==1.6.1
cache-dit==1.3.0
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
click==8.5.1
cloudpickle==3.1.2
compressed-tensors==0.20.1
cryptography==50.0.2
cuda-bindings==13.4.4
cuda-core==1.2.2
cuda-pathfinder==1.9.1
cuda-python==13.4.4
cuda-tile==1.7.0
cuda-toolkit==13.0.2
datasets==5.2.0
decorator==5.3.1
diffusers==0.37.0
dill==0.4.1
diskcache==5.6.3
distro==1.9.0
docstring-parser==0.18.0
easydict==1.14
einops==0.8.2
executing==2.3.0
fastapi==0.165.0
filelock==4.3.1
flash-attn-4==4.0.0b15
flashinfer-cubin==0.6.8.post1
flashinfer-python==0.6.8.post1
frozenlist==1.8.0
fsspec==2026.9.0
gguf==0.19.0
googleapis-common-protos==1.76.0
granian==2.8.9
grpcio-health-checking==1.85.1
grpcio-reflection==1.85.1
grpcio==1.85.3
h11==0.16.0
hf-xet==1.8.0
httpcore2==2.16.2
httpcore==1.0.9
httpx2==2.16.2
httpx==0.28.1
huggingface-hub==1.33.0
humanize==4.17.0
idna==3.20
imageio-ffmpeg==0.5.1
imageio==2.36.0
importlib-metadata==10.2.0
interegular==0.3.3
ipython-pygments-lexers==1.1.1
ipython==9.18.1
jedi==0.20.1
jinja2==3.1.6
jiter==0.19.0
jsonschema-specifications==2025.9.1
jsonschema==4.26.0
kernels-data==0.16.2
kernels==0.14.1
lark==1.3.1
lazy-importer==0.1.0
lazy-loader==0.6
llguidance==0.7.30
loguru==0.7.3
lxml==6.1.3
markdown-it-py==4.3.0
markupsafe==3.0.4
matplotlib-inline==0.2.2
mdurl==0.1.2
mistral-common==1.13.1
modelscope-hub==0.5.1
modelscope==1.40.2
moviepy==2.2.1
mpmath==1.3.0
msgspec==0.23.0
multidict==7.2.1
multiprocess==0.70.19
nest-asyncio==1.6.0
networkx==3.7
ninja==1.13.2
numpy==2.3.5
nvidia-cublas==13.1.0.3
nvidia-cuda-cupti==13.0.85
nvidia-cuda-nvrtc==13.0.88
nvidia-cuda-runtime==13.0.96
nvidia-cudnn-cu13==9.19.0.56
nvidia-cudnn-frontend==1.28.0
nvidia-cufft==12.0.0.61
nvidia-cufile==1.15.1.6
nvidia-curand==10.4.0.35
nvidia-cusolver==12.0.4.66
nvidia-cusparse==12.6.3.3
nvidia-cusparselt-cu13==0.8.0
nvidia-cutlass-dsl-libs-base==4.4.2
nvidia-cutlass-dsl==4.4.2
nvidia-ml-py==13.615.71
nvidia-modelopt==0.47.0
nvidia-nccl-cu13==2.28.9
nvidia-nvjitlink==13.0.88
nvidia-nvshmem-cu13==3.4.5
nvidia-nvtx==13.0.85
omegaconf==2.4.0
openai-harmony==0.0.4
openai==2.6.1
opencv-python-headless==4.10.0.84
opentelemetry-api==1.45.2
opentelemetry-exporter-http-transport==0.66b2
opentelemetry-exporter-otlp-common==0.66b2
opentelemetry-exporter-otlp-proto-common==1.45.2
opentelemetry-exporter-otlp-proto-grpc==1.45.2
opentelemetry-exporter-otlp-proto-http==1.45.2
opentelemetry-exporter-otlp==1.45.2
opentelemetry-proto==1.45.2
opentelemetry-sdk==1.45.2
opentelemetry-semantic-conventions==0.66b2
orjson==3.13.0
outlines-core==0.1.26
outlines==0.1.11
packaging==26.4
pandas==3.1.1
parso==0.8.7
partial-json-parser==0.2.1.1.post7
pexpect==4.9.0
pillow==11.3.0
proglog==0.1.12
prometheus-client==0.26.0
prompt-toolkit==3.0.53
propcache==0.5.4
protobuf==7.36.2
psutil==7.2.2
ptyprocess==0.7.0
pulp==3.3.2
pure-eval==0.2.4
py-spy==0.4.3
pyarrow==26.0.1
pybase64==1.5.1
pycountry==26.2.16
pycparser==3.12
pycryptodomex==3.24.2
pydantic-core==2.50.5
pydantic-extra-types==2.11.1
pydantic==2.14.4
pygments==2.21.0
pyproject-hooks==1.3.3
python-dateutil==4.0.0
python-dotenv==1.2.4
python-multipart==0.0.34
pyyaml==6.0.1
pyzmq==27.3.0
quack-kernels==0.4.1
referencing==0.37.0
regex==2026.11.19
remote-pdb==2.1.0
requests==2.34.2
rich==15.0.0
rpds-py==2026.9.1
runai-model-streamer==0.17.1
safetensors==0.8.0
scikit-image==0.25.2
scipy==1.18.1
sentencepiece==0.2.3
setproctitle==1.3.8
setuptools==81.0.0
sglang-kernel==0.4.2
sglang==0.5.11
shellingham==1.5.4
smg-grpc-proto==0.4.28
smg-grpc-servicer==0.14.1
sniffio==1.3.1
soundfile==0.13.1
st-attn==0.0.7
stack-data==0.6.3
starlette==1.10.0
sympy==1.14.0
tabulate==0.10.0
tifffile==2026.11.8
tiktoken==0.14.0
timm==1.0.16
tokenizers==0.22.2
tomlkit==0.15.2
torch-c-dlpack-ext==0.1.5
torch-memory-saver==0.0.10
torch==2.11.0
torchao==0.17.0
torchaudio==2.11.0
torchcodec==0.11.1
torchvision==0.26.0
tqdm==4.70.1
traitlets==5.16.1
transformers==5.6.0
trimesh==5.2.0
triton==3.6.0
truststore==0.10.5
typer==0.29.2
typing-extensions==4.16.0
typing-inspection==0.4.5
tzdata==2026.6
urllib3==2.8.0
uvicorn==0.54.0
uvloop==0.23.0
vsa==0.0.4
watchfiles==1.3.0
wcwidth==0.9.4
xatlas==0.0.11
xgrammar==0.1.32
xxhash==4.1.0
yarl==1.25.1
zipp==4.1.2'
distributions_skip=''
wanted_distributions='223 distributions sha256:b1492692cefe0059'
dist_package=sglang
wanted_package='sglang 0.5.11'

# The engine's installed version, empty when it is not installed (or there is no environment yet).
installed_version() {
  { "$uv" pip show --python "$root$venv/bin/python" "$package" 2>/dev/null || true; } | sed -n 's/^Version: //p'
}

# --- uv itself, pinned, in a small venv of its own (the container's python3 only bootstraps it) ------------
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

# --- the engine's environment ----------------------------------------------------------------------------
install_file /opt/gpuhosts/qwen-sglang/requirements.lock 0644 <<'GPUHOSTS_EOF'
# [content: containers/129/opt/gpuhosts/qwen-sglang/requirements.lock.sha256 sha256:43d06524ff07a204]
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
