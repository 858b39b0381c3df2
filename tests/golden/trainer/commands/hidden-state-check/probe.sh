# [templates/common/lib.sh.j2 sha256:d7196be3daa31e25 unit=hidden-state-check]
# The probe of hidden-state-check: reads the host and changes nothing; prints one facts line.
fact 'health http://127.0.0.1:8000' "$( { code="$(curl -sS -o /dev/null -m 10 -w "%{http_code}" http://127.0.0.1:8000/health)"; if [ "$code" = 200 ]; then echo answers; elif [ "$code" = 000 ]; then echo unreachable; else echo "answered $code"; fi; } 2>/dev/null || true)"
emit_facts
