# managed by gpuhosts — unit preflight; it only checks: nothing to remove.
printf '%s: nothing to remove\n' preflight
