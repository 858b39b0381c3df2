# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=env-speculators]
# The probe of env-speculators: reads the host and changes nothing; prints one facts line.
# [templates/python_env/distributions.sh.j2 sha256:7edbe6e9b44dc81f]
distributions_wanted[/opt/gpuhosts/speculators/venv]='aiohappyeyeballs==2.7.1
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

fact 'file /opt/gpuhosts/speculators/requirements.lock' "$( { file_state /opt/gpuhosts/speculators/requirements.lock; } 2>/dev/null || true)"
fact 'distributions in /opt/gpuhosts/speculators/venv' "$( { distributions_state /opt/gpuhosts/speculators/venv ''; } 2>/dev/null || true)"
fact 'speculators in /opt/gpuhosts/speculators/venv' "$( { package_state /opt/gpuhosts/speculators/venv speculators; } 2>/dev/null || true)"
fact 'checkout /opt/gpuhosts/speculators/src' "$( { checkout_state "$root"/opt/gpuhosts/speculators/src; } 2>/dev/null || true)"
emit_facts
