# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-env-ddtree-spec-bakeoff]
# The probe of ct129-env-ddtree-spec-bakeoff: reads the host and changes nothing; prints one facts line.
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
# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=ct129-env-ddtree-spec-bakeoff]
# The probe of ct129-env-ddtree-spec-bakeoff: reads the host and changes nothing; prints one facts line.
# [templates/python_env/distributions.sh.j2 sha256:7edbe6e9b44dc81f]
distributions_wanted[/opt/gpuhosts/ddtree-spec-bakeoff/venv]='accelerate==1.15.0
annotated-doc==0.0.7
annotated-types==0.8.0
anyio==4.16.0
certifi==2026.10.19.post1
click==8.5.1
cuda-bindings==13.5.0
cuda-pathfinder==1.9.1
cuda-toolkit==13.0.2
datasets==5.2.0
dill==0.4.1
filelock==4.3.1
fsspec==2026.9.0
h11==0.16.0
hf-xet==1.8.0
httpcore==1.0.9
httpx==0.28.1
huggingface-hub==1.33.0
idna==3.20
jinja2==3.1.6
loguru==0.7.3
markdown-it-py==4.3.0
markupsafe==3.0.4
mdurl==0.1.2
mpmath==1.3.0
multiprocess==0.70.19
networkx==3.7
numpy==2.5.5
nvidia-cublas==13.1.0.3
nvidia-cuda-cupti==13.0.85
nvidia-cuda-nvrtc==13.0.88
nvidia-cuda-runtime==13.0.96
nvidia-cudnn-cu13==9.19.0.56
nvidia-cufft==12.0.0.61
nvidia-cufile==1.15.1.6
nvidia-curand==10.4.0.35
nvidia-cusolver==12.0.4.66
nvidia-cusparse==12.6.3.3
nvidia-cusparselt-cu13==0.8.0
nvidia-nccl-cu13==2.28.9
nvidia-nvjitlink==13.0.88
nvidia-nvshmem-cu13==3.4.5
nvidia-nvtx==13.0.85
packaging==26.4
pandas==3.1.1
psutil==7.2.2
pyarrow==26.0.1
pydantic-core==2.50.5
pydantic==2.14.4
pygments==2.21.0
python-dateutil==4.0.0
pyyaml==6.0.4
regex==2026.11.19
rich==15.0.0
safetensors==0.8.0
setuptools==81.0.0
shellingham==1.5.4
sympy==1.14.0
tokenizers==0.23.3
torch==2.11.0
tqdm==4.70.1
transformers==5.17.0
triton==3.6.0
typer==0.29.2
typing-extensions==4.16.0
typing-inspection==0.4.5
tzdata==2026.6
xxhash==4.1.0'
fact 'file /opt/gpuhosts/ddtree-spec-bakeoff/requirements.lock' "$( { file_state /opt/gpuhosts/ddtree-spec-bakeoff/requirements.lock; } 2>/dev/null || true)"
fact 'distributions in /opt/gpuhosts/ddtree-spec-bakeoff/venv' "$( { distributions_state /opt/gpuhosts/ddtree-spec-bakeoff/venv ''; } 2>/dev/null || true)"
fact 'transformers in /opt/gpuhosts/ddtree-spec-bakeoff/venv' "$( { package_state /opt/gpuhosts/ddtree-spec-bakeoff/venv transformers; } 2>/dev/null || true)"
emit_facts
GPUHOSTS_INNER
)" gpuhosts </dev/null 2>/dev/null | sed -n "s/^GPUHOSTS_FACTS {\(.*\)}\$/\1/p" | tail -n1)" || true
if [ -n "$inner_facts" ]; then
  probe_facts+="${probe_facts:+,}$inner_facts"
else
  container_state="$(ct_status "$probed_vmid" 2>/dev/null)" || true
  fact 'file /opt/gpuhosts/ddtree-spec-bakeoff/requirements.lock' "container $probed_vmid ${container_state:-missing}"
  fact 'distributions in /opt/gpuhosts/ddtree-spec-bakeoff/venv' "container $probed_vmid ${container_state:-missing}"
  fact 'transformers in /opt/gpuhosts/ddtree-spec-bakeoff/venv' "container $probed_vmid ${container_state:-missing}"
fi
emit_facts
