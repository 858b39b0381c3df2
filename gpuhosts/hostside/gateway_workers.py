"""A replica's place in its gateway, through the gateway's own worker management API.

smg (the Shepherd Model Gateway) keeps its workers in a registry that `/workers` manages at run time
(lightseekorg/smg model_gateway/src/server.rs `worker_routes`; the wheel 1.13.0 answers the same):

* `GET /workers` lists them, each with its `id`, `url` and `status` (`pending`, `ready`, `draining`, …);
* `DELETE /workers/{id}` queues the removal, whose workflow first marks the worker `draining`, so that no policy
  picks it for a new request, waits the worker's drain settle time for the requests it holds, then removes it
  (model_gateway/src/workflow/steps/local/drain_workers.rs);
* `POST /workers` with `{"url", "api_key"}` queues its registration, which reads the worker's models and makes it
  `ready` (worker/service.rs `create_worker`; 202, then the job).

Both calls answer before the job is done, so each command waits until the list shows the outcome: `drain` until the
replica is gone, `admit` until it is ready. The gateway's API key guards these routes too (server.rs
`apply_control_plane_auth`); it is read from the gateway's 0600 EnvironmentFile, never from the command line.

Runs verbatim inside the gateway's container with the standard library only (the gateway's own Python).
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request

# A cap that reports a hang, never a verdict on speed: the registration of a ready replica takes well under a
# second, a drain the worker's settle time (smg's default 5 s).
WAIT_CAP_S = 900.0
POLL_S = 0.2


def read_key(env_file: str, variable: str) -> str | None:
    try:
        with open(env_file, encoding="utf-8") as handle:
            for line in handle:
                name, _, value = line.rstrip("\n").partition("=")
                if name == variable:
                    return value
    except OSError:
        return None
    return None


class Gateway:
    def __init__(self, base_url: str, key: str | None, opener=urllib.request.urlopen):
        self.base_url, self.key, self.opener = base_url.rstrip("/"), key, opener

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
        try:
            with self.opener(request, timeout=30) as response:
                text = response.read().decode() or "{}"
                return response.status, json.loads(text)
        except urllib.error.HTTPError as error:
            text = error.read().decode(errors="replace")
            try:
                return error.code, json.loads(text or "{}")
            except ValueError:
                return error.code, {"message": text[:200]}

    def workers(self) -> list[dict]:
        status, body = self.call("GET", "/workers")
        if status != 200:
            raise RuntimeError(f"GET /workers answered {status}: {str(body)[:200]}")
        return list(body.get("workers") or [])

    def find(self, url: str) -> dict | None:
        return next((w for w in self.workers() if w.get("url") == url), None)


def wait_for(check, what: str, clock=time.monotonic, sleep=time.sleep) -> None:
    deadline = clock() + WAIT_CAP_S
    while not check():
        if clock() > deadline:
            raise RuntimeError(f"{what} did not happen within {WAIT_CAP_S:.0f} s")
        sleep(POLL_S)


def reachable(gateway: Gateway) -> bool:
    try:
        gateway.workers()
    except (urllib.error.URLError, ConnectionError, OSError):
        return False
    return True


def drain(gateway: Gateway, url: str, say=print) -> bool:
    """Take `url` out of the gateway and wait until it is gone; True when it was in."""
    if not reachable(gateway):
        say(f"the gateway at {gateway.base_url} does not answer: no traffic reaches {url} through it")
        return False
    worker = gateway.find(url)
    if worker is None:
        say(f"{url} is not in the gateway")
        return False
    if worker.get("status") != "draining":
        status, body = gateway.call("DELETE", f"/workers/{worker['id']}")
        if status not in (200, 202, 404):
            raise RuntimeError(f"DELETE /workers/{worker['id']} answered {status}: {str(body)[:200]}")
    wait_for(lambda: gateway.find(url) is None, f"the removal of {url} from the gateway")
    say(f"{url} drained and out of the gateway")
    return True


def admit(gateway: Gateway, url: str, key: str | None, say=print) -> bool:
    """Put `url` (back) into the gateway and wait until it is ready; True when it had to be added."""
    worker = gateway.find(url)
    added = False
    if worker is None or worker.get("status") == "draining":
        if worker is not None:
            wait_for(lambda: gateway.find(url) is None, f"the end of {url}'s drain")
        body = {"url": url, **({"api_key": key} if key else {})}
        status, answer = gateway.call("POST", "/workers", body)
        if status not in (200, 201, 202, 409):
            raise RuntimeError(f"POST /workers for {url} answered {status}: {str(answer)[:200]}")
        added = True
    wait_for(lambda: (gateway.find(url) or {}).get("status") == "ready", f"{url} becoming ready in the gateway")
    say(f"{url} is ready in the gateway")
    return added


def state(gateway: Gateway, url: str) -> str:
    """What a refresh reads: the replica's status in the gateway, `absent`, or `gateway down`."""
    if not reachable(gateway):
        return "gateway down"
    worker = gateway.find(url)
    return "absent" if worker is None else str(worker.get("status"))


def main(argv: list[str]) -> int:
    if len(argv) != 5 or argv[0] not in ("drain", "admit", "state"):
        print("usage: gateway_workers.py drain|admit|state GATEWAY_URL WORKER_URL ENV_FILE KEY_VARIABLE",
              file=sys.stderr)
        return 2
    command, base_url, url, env_file, variable = argv
    key = read_key(env_file, variable)
    gateway = Gateway(base_url, key)
    try:
        if command == "state":
            print(f"worker: {state(gateway, url)}")
            return 0
        changed = drain(gateway, url) if command == "drain" else admit(gateway, url, key)
    except (RuntimeError, urllib.error.URLError, OSError) as error:
        print(f"gateway {base_url}: {error}", file=sys.stderr)
        return 1
    print(f"GPUHOSTS_WORKER {json.dumps({'changed': changed})}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
