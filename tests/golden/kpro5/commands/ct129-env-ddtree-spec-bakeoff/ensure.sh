# managed by gpuhosts — unit ct129-env-ddtree-spec-bakeoff; generated from templates/, do not edit on the host.
# Runs the script below inside container 129 (pct exec).
set -euo pipefail
vmid=129
status="$(pct status "$vmid" 2>/dev/null | awk '{print $2}')" || true
if [ "$status" != running ]; then
  printf '%s: refused: container %s is %s; start it (pct start %s) and run again\n' ct129-env-ddtree-spec-bakeoff "$vmid" \
    "${status:-missing}" "$vmid" >&2
  exit 1
fi
script="$(cat <<'GPUHOSTS_INNER'
# [templates/common/lib.sh.j2 sha256:24e549ce7da88918 unit=ct129-env-ddtree-spec-bakeoff]
# Inside container 129: the uv environment ddtree-spec-bakeoff with DDTree c96427a (locks/ddtree/requirements.in).
uv_version=0.13.9
python_version=3.12
venv=/opt/gpuhosts/ddtree-spec-bakeoff/venv
requirement='DDTree c96427a (locks/ddtree/requirements.in)'
# The locked closure of DDTree c96427a (locks/ddtree/requirements.in) (gpuhosts/locks.py), installed exactly, hashes required.
lock=/opt/gpuhosts/ddtree-spec-bakeoff/requirements.lock
wanted_marker='DDTree c96427a (locks/ddtree/requirements.in) lock:sha256:7687a757991e3e45'
package=transformers
release=5.17.0
from_git=false
uv_home="$root"/opt/gpuhosts/.uv
uv="$uv_home/bin/uv"
marker="$root$venv/.gpuhosts-requirement"
# [templates/container_services/distributions.sh.j2 sha256:7edbe6e9b44dc81f]
# The lock's distributions, as the venv must hold them (the probe's facts "distributions in …" and "… in …").
distributions_wanted[$venv]='accelerate==1.15.0
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
distributions_skip=''
wanted_distributions='68 distributions sha256:796d5af12d947fa6'
dist_package=transformers
wanted_package='transformers 5.17.0'

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
    "$uv_home/bin/python" -m pip install --quiet "uv==$uv_version"
    [ "$("$uv" --version 2>/dev/null)" = "uv $uv_version" ] || refuse "uv $uv_version did not install into $uv_home"
    note_change "installed uv $uv_version"
  fi
}
with_lock uv ensure_uv

# --- the engine's environment ----------------------------------------------------------------------------
install_file /opt/gpuhosts/ddtree-spec-bakeoff/requirements.lock 0644 <<'GPUHOSTS_EOF'
# [content: containers/129/opt/gpuhosts/ddtree-spec-bakeoff/requirements.lock.sha256 sha256:7687a757991e3e45]
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
say "$venv: $package $installed"
finish
GPUHOSTS_INNER
)"
pct exec "$vmid" -- bash -c "$script" gpuhosts </dev/null
