# [templates/common/lib.sh.j2 sha256:24e549ce7da88918 unit=env-monitor]
# On the node: the uv environment monitor with flask==3.1.3.
uv_version=0.13.9
python_version=3.12
venv=/opt/gpuhosts/monitor/venv
requirement=flask==3.1.3
# The locked closure of flask==3.1.3 (gpuhosts/locks.py), installed exactly, hashes required.
lock=/opt/gpuhosts/monitor/requirements.lock
wanted_marker='flask==3.1.3 lock:sha256:8dcfff73449447b7'
package=flask
release=3.1.3
from_git=false
uv_home="$root"/opt/gpuhosts/.uv
uv="$uv_home/bin/uv"
marker="$root$venv/.gpuhosts-requirement"
# [templates/container_services/distributions.sh.j2 sha256:7edbe6e9b44dc81f]
# The lock's distributions, as the venv must hold them (the probe's facts "distributions in …" and "… in …").
distributions_wanted[$venv]='blinker==1.9.0
click==8.5.1
flask==3.1.3
itsdangerous==2.2.0
jinja2==3.1.6
markupsafe==3.0.4
werkzeug==3.1.9'
distributions_skip=''
wanted_distributions='7 distributions sha256:51647acce6a15e76'
dist_package=flask
wanted_package='flask 3.1.3'

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
    "$uv_home/bin/python" -m pip install --quiet "uv==$uv_version"
    [ "$("$uv" --version 2>/dev/null)" = "uv $uv_version" ] || refuse "uv $uv_version did not install into $uv_home"
    note_change "installed uv $uv_version"
  fi
}
with_lock uv ensure_uv

# --- the engine's environment ----------------------------------------------------------------------------
install_file /opt/gpuhosts/monitor/requirements.lock 0644 <<'GPUHOSTS_EOF'
# [content: opt/gpuhosts/monitor/requirements.lock.sha256 sha256:8dcfff73449447b7]
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
