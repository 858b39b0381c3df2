# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-env-qwen-sglang]
# The probe of ct129-env-qwen-sglang: reads the host and changes nothing; prints one facts line.
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
# Inside container 129, in one pct exec (which fails on a container that is not running: then each of its
# facts says so).
probed_vmid=129
inner_facts="$(pct exec "$probed_vmid" -- bash -c "$(cat <<'GPUHOSTS_INNER'
# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-env-qwen-sglang]
# The probe of ct129-env-qwen-sglang: reads the host and changes nothing; prints one facts line.
# [templates/python_env/distributions.sh.j2 sha256:7edbe6e9b44dc81f]
distributions_wanted[/opt/gpuhosts/qwen-sglang/venv]='addict==2.4.0
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
fact 'file /opt/gpuhosts/qwen-sglang/requirements.lock' "$( { file_state /opt/gpuhosts/qwen-sglang/requirements.lock; } 2>/dev/null || true)"
fact 'distributions in /opt/gpuhosts/qwen-sglang/venv' "$( { distributions_state /opt/gpuhosts/qwen-sglang/venv ''; } 2>/dev/null || true)"
fact 'sglang in /opt/gpuhosts/qwen-sglang/venv' "$( { package_state /opt/gpuhosts/qwen-sglang/venv sglang; } 2>/dev/null || true)"
emit_facts
GPUHOSTS_INNER
)" gpuhosts </dev/null 2>/dev/null | sed -n "s/^GPUHOSTS_FACTS {\(.*\)}\$/\1/p" | tail -n1)" || true
if [ -n "$inner_facts" ]; then
  probe_facts+="${probe_facts:+,}$inner_facts"
else
  container_state="$(ct_status "$probed_vmid" 2>/dev/null)" || true
  fact 'file /opt/gpuhosts/qwen-sglang/requirements.lock' "container $probed_vmid ${container_state:-missing}"
  fact 'distributions in /opt/gpuhosts/qwen-sglang/venv' "container $probed_vmid ${container_state:-missing}"
  fact 'sglang in /opt/gpuhosts/qwen-sglang/venv' "container $probed_vmid ${container_state:-missing}"
fi
emit_facts
