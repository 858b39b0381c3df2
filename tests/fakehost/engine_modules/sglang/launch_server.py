"""`python -m sglang.launch_server FLAGS…` on a simulated host: sglang 0.5.11 sglang/launch_server.py parses the
server arguments from sys.argv[1:] and serves over HTTP; the stand-in does both in fakehost.engines."""
import sys

if __name__ == "__main__":
    from fakehost.engines import serve
    from fakehost.util import run_main

    sys.exit(run_main(lambda argv: serve("sglang", argv), sys.argv[1:]))
