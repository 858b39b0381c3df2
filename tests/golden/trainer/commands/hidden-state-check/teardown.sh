# [templates/common/lib.sh.j2 sha256:3b27c3e384219fa3 unit=hidden-state-check]
# It only checks: nothing to remove.
say "nothing to remove"
finish
