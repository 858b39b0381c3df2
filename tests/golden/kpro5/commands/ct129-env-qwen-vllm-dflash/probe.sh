# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-env-qwen-vllm-dflash]
# The probe of ct129-env-qwen-vllm-dflash: reads the host and changes nothing; prints one facts line.
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
# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-env-qwen-vllm-dflash]
# The probe of ct129-env-qwen-vllm-dflash: reads the host and changes nothing; prints one facts line.
# [templates/python_env/distributions.sh.j2 sha256:7edbe6e9b44dc81f]
distributions_wanted[/opt/gpuhosts/qwen-vllm-dflash/venv]='agent-detector==2.0.0
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-doc==0.0.7
annotated-types==0.8.0
anthropic==2.15.0
anyio==4.16.0
apache-tvm-ffi==0.1.10
astor==0.8.1
attrs==26.1.0
blake3==1.0.11
cachetools==8.0.2
cbor2==6.3.0
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
click==8.5.1
cloudpickle==3.1.3
compressed-tensors==0.17.0
cryptography==50.0.2
cuda-bindings==13.4.4
cuda-core==1.2.2
cuda-pathfinder==1.9.1
cuda-python==13.4.4
cuda-tile==1.7.0
cuda-toolkit==13.0.2
depyf==0.20.0
detect-installer==0.2.1
dill==0.4.1
dnspython==2.9.2
docstring-parser==0.18.0
einops==0.8.2
email-validator==2.4.0
fastapi-cli==0.0.34
fastapi-cloud-cli==0.28.0
fastapi==0.136.3
fastar==0.12.0
fastsafetensors==0.5.0
filelock==4.3.1
flashinfer-python==0.6.14
frozenlist==1.8.0
fsspec==2026.9.0
googleapis-common-protos==1.76.0
grpcio==1.85.3
h11==0.16.0
hf-xet==1.8.0
httpcore2==2.16.2
httpcore==1.0.9
httptools==0.9.0
httpx2==2.16.2
httpx==0.28.1
huggingface-hub==2.4.0
humming-kernels==0.1.10
idna==3.20
ijson==3.6.0
interegular==0.3.3
jinja2==3.1.6
jiter==0.19.0
jmespath==1.1.0
jsonschema-specifications==2025.9.1
jsonschema==4.26.0
lark==1.2.2
llguidance==1.7.6
llvmlite==0.47.0
lm-format-enforcer==0.11.3
loguru==0.7.3
markdown-it-py==4.3.0
markupsafe==3.0.4
mcp-types==2.3.0
mcp==2.3.0
mdurl==0.1.2
mistral-common==1.13.1
ml-dtypes==0.7.0
model-hosting-container-standards==0.1.16
mpmath==1.3.0
msgspec==0.23.0
multidict==7.2.1
networkx==3.7
ninja==1.13.2
numba==0.65.0
numpy==2.3.5
nvidia-cublas==13.1.0.3
nvidia-cuda-cccl==13.3.5.0.6
nvidia-cuda-crt==13.5.37
nvidia-cuda-cupti==13.0.85
nvidia-cuda-nvcc==13.5.37
nvidia-cuda-nvdisasm==13.5.37
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
nvidia-cutlass-dsl-libs-base==4.6.0
nvidia-cutlass-dsl-libs-core==4.6.0
nvidia-cutlass-dsl-libs-cu12==4.6.0
nvidia-cutlass-dsl-libs-cu13==4.6.0
nvidia-cutlass-dsl==4.6.0
nvidia-ml-py==13.615.71
nvidia-nccl-cu13==2.28.9
nvidia-nvjitlink==13.0.88
nvidia-nvshmem-cu13==3.4.5
nvidia-nvtx==13.0.85
nvidia-nvvm==13.5.37
nvtx==0.2.15
openai-harmony==0.0.8
openai==3.57.0
opencv-python-headless==5.0.0.93
opentelemetry-api==1.45.2
opentelemetry-exporter-http-transport==0.66b2
opentelemetry-exporter-otlp-common==0.66b2
opentelemetry-exporter-otlp-proto-common==1.45.2
opentelemetry-exporter-otlp-proto-grpc==1.45.2
opentelemetry-exporter-otlp-proto-http==1.45.2
opentelemetry-exporter-otlp==1.45.2
opentelemetry-proto==1.45.2
opentelemetry-sdk==1.45.2
opentelemetry-semantic-conventions-ai==0.5.1
opentelemetry-semantic-conventions==0.66b2
outlines-core==0.2.14
packaging==26.4
partial-json-parser==0.2.1.1.post7
pillow==13.0.0
prometheus-client==0.26.0
prometheus-fastapi-instrumentator==8.1.0
propcache==0.5.4
protobuf==6.33.6
psutil==7.2.2
py-cpuinfo==9.0.0
pybase64==1.5.1
pycountry==26.2.16
pycparser==3.12
pydantic-core==2.50.5
pydantic-extra-types==2.11.1
pydantic-settings==2.16.3
pydantic==2.14.4
pyelftools==0.33
pygments==2.21.0
pyjwt==2.15.1
pynvvideocodec==2.0.4
python-dotenv==1.2.4
python-json-logger==4.2.0
python-multipart==0.0.34
pyyaml==6.0.4
pyzmq==27.3.0
quack-kernels==0.6.3
referencing==0.37.0
regex==2026.11.19
requests==2.34.2
rich-toolkit==0.20.6
rich==15.0.0
rignore==0.8.1
rpds-py==2026.9.1
safetensors==0.8.0
sentencepiece==0.2.3
sentry-sdk==2.75.0
setproctitle==1.3.8
setuptools==80.10.2
shellingham==1.5.4
six==1.17.0
sniffio==1.3.1
sse-starlette==3.7.0
starlette==1.10.0
supervisor==4.3.0
sympy==1.14.0
tabulate==0.10.0
tiktoken==0.14.0
tilelang==0.1.9
tokenizers==0.23.3
tokenspeed-mla==0.1.8
tokenspeed-triton==3.9.10.post20261028
torch-c-dlpack-ext==0.1.5
torch==2.11.0
torchaudio==2.11.0
torchcodec==0.17.0
torchvision==0.26.0
tqdm==4.70.1
transformers==5.24.0
triton==3.6.0
truststore==0.10.5
typer==0.29.2
typing-extensions==4.16.0
typing-inspection==0.4.5
urllib3==2.8.0
uvicorn==0.54.0
uvloop==0.23.0
vllm==0.26.0
watchfiles==1.3.0
websockets==17.4
xgrammar==0.2.7
yarl==1.25.1
z3-solver==4.15.4.0'
fact 'file /opt/gpuhosts/qwen-vllm-dflash/requirements.lock' "$( { file_state /opt/gpuhosts/qwen-vllm-dflash/requirements.lock; } 2>/dev/null || true)"
fact 'distributions in /opt/gpuhosts/qwen-vllm-dflash/venv' "$( { distributions_state /opt/gpuhosts/qwen-vllm-dflash/venv ''; } 2>/dev/null || true)"
fact 'vllm in /opt/gpuhosts/qwen-vllm-dflash/venv' "$( { package_state /opt/gpuhosts/qwen-vllm-dflash/venv vllm; } 2>/dev/null || true)"
emit_facts
GPUHOSTS_INNER
)" gpuhosts </dev/null 2>/dev/null | sed -n "s/^GPUHOSTS_FACTS {\(.*\)}\$/\1/p" | tail -n1)" || true
if [ -n "$inner_facts" ]; then
  probe_facts+="${probe_facts:+,}$inner_facts"
else
  container_state="$(ct_status "$probed_vmid" 2>/dev/null)" || true
  fact 'file /opt/gpuhosts/qwen-vllm-dflash/requirements.lock' "container $probed_vmid ${container_state:-missing}"
  fact 'distributions in /opt/gpuhosts/qwen-vllm-dflash/venv' "container $probed_vmid ${container_state:-missing}"
  fact 'vllm in /opt/gpuhosts/qwen-vllm-dflash/venv' "container $probed_vmid ${container_state:-missing}"
fi
emit_facts
