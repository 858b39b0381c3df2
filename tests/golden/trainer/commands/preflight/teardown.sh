# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=preflight]
say 'nothing to remove: it only checks'
finish
