# managed by gpuhosts — unit hidden-state-check; it only checks: nothing to remove.
printf '%s: nothing to remove\n' hidden-state-check
