# [templates/common/lib.sh.j2 sha256:f60bb100d7a0c77f unit=preflight]
# It only checks: nothing to remove.
say "nothing to remove"
finish
