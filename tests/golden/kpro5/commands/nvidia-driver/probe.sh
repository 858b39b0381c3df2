# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=nvidia-driver]
# The probe of nvidia-driver: reads the host and changes nothing; prints one facts line.
fact 'file /etc/modprobe.d/gpuhosts-nouveau.conf' "$( { file_state /etc/modprobe.d/gpuhosts-nouveau.conf; } 2>/dev/null || true)"
fact 'file /etc/systemd/system/gpuhosts-nvidia-persistenced.service' "$( { file_state /etc/systemd/system/gpuhosts-nvidia-persistenced.service; } 2>/dev/null || true)"
fact 'installed user space' "$( { userspace_version; } 2>/dev/null || true)"
fact 'loaded module' "$( { module_version; } 2>/dev/null || true)"
fact 'loaded module type' "$( { module_type; } 2>/dev/null || true)"
fact 'systemd gpuhosts-nvidia-persistenced.service' "$( { { systemctl is-enabled gpuhosts-nvidia-persistenced.service; systemctl is-active gpuhosts-nvidia-persistenced.service; } | paste -sd ' ' -; } 2>/dev/null || true)"
emit_facts
