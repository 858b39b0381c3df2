"""Runs inside the gateway's locked environment: smg's own launcher parses the rendered flags
(smg/launch_router.py parse_router_args, then RouterArgs._validate_router_args as launch_router does) and the Rust
router's Python class is imported. Prints what the parse gave as one JSON line."""

import json
import sys

from smg.launch_router import parse_router_args
from smg.router import Router
from smg.smg_rs import get_version_string

flags = json.loads(sys.argv[1])
args = parse_router_args(flags)
args._validate_router_args()
assert Router is not None
fields = ("worker_urls", "host", "port", "policy", "health_check_endpoint", "health_check_interval_secs",
          "health_check_timeout_secs", "health_failure_threshold", "health_success_threshold", "api_key")
print(json.dumps({"version": get_version_string(), "parsed": {f: getattr(args, f) for f in fields}}, sort_keys=True))
