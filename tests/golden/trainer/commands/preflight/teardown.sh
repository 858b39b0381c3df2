# [templates/common/lib.sh.j2 sha256:3906e3347ec1c9a2 unit=preflight]
# It only checks: nothing to remove.
say "nothing to remove"
finish
