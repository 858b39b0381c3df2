# [templates/common/lib.sh.j2 sha256:6fd284271a879c91 unit=preflight]
# It only checks: nothing to remove.
say "nothing to remove"
finish
