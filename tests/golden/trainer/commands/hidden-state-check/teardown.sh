# [templates/common/lib.sh.j2 sha256:24e549ce7da88918 unit=hidden-state-check]
# It only checks: nothing to remove.
say "nothing to remove"
finish
