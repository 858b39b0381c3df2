"""A hidden-state server that answers as vLLM 0.26.0 launched by speculators' launch_vllm.py does, backed by a real
transformers model.

    python tests/gpu/hidden_state_standin.py --model DIR --served-model-name NAME --hidden-states-path DIR \
        --layers 2,17,32,47,62,64 --port 8000 [--device cuda] [--log FILE]

vLLM itself cannot run on the machines this is for (no wheel of it there, and its kernels need its own torch);
what train.py sees of it is its HTTP answers and the files its connector writes, and those are what this serves:

* `GET /health`, and `GET /v1/models` listing one model whose id is the path it serves (vLLM's default served model
  name is the model argument; train.py's ArrowDataset._setup_client compares it with --verifier-name-or-path,
  speculators v0.7.0 src/speculators/train/data.py).
* `POST /v1/completions` with `prompt` as token ids (what speculators' generate_hidden_states sends, max_tokens 1
  and `return_token_ids`, src/speculators/data_generation/vllm_client.py v0.7.0) or as text (the launch script's
  probe): a text completion whose `choices[0].prompt_token_ids` are the prompt's ids and whose
  `kv_transfer_params.hidden_states_path` names `<states dir>/<request id>.safetensors` (vLLM 0.26.0
  vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py, request_finished).
* The file the way that connector writes it: `<file>.lock` created and held with an exclusive flock before the
  answer goes out (wait_for_save), then `hidden_states` [tokens, layers, hidden] in the model's dtype and
  `token_ids` (int64) saved with safetensors' save_file from another thread, the lock's descriptor closed after the
  save (_write_tensors).
* Layer id i is the residual stream entering decoder layer i, and id N (the layer count) the output of the last
  layer before the final norm: vLLM's aux hidden states (`hidden_states + residual` before layer i; the last one
  after the loop, before `self.norm`), which launch_vllm.py's ids use. Forward hooks on the transformers decoder
  layers take the same tensors.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import torch
from safetensors.torch import save_file


class States:
    def __init__(self, model_dir: str, layers: list[int], device: str):
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        multimodal = hasattr(AutoConfig.from_pretrained(model_dir), "text_config")
        loader = AutoModelForImageTextToText if multimodal else AutoModelForCausalLM
        self.model = loader.from_pretrained(model_dir, dtype=torch.bfloat16).to(device).eval()
        self.device = device
        decoder = (self.model.model.language_model if multimodal else self.model.model).layers
        self.layers = layers
        self.captured: dict[int, torch.Tensor] = {}
        count = len(decoder)
        if any(i < 0 or i > count for i in layers):
            raise ValueError(f"layer ids {layers} outside 0..{count}")
        for index in sorted(set(layers)):
            if index < count:
                decoder[index].register_forward_pre_hook(self._before(index), with_kwargs=True)
            else:
                decoder[count - 1].register_forward_hook(self._after(index))
        self.lock = threading.Lock()

    def _before(self, index):
        def hook(module, args, kwargs):
            self.captured[index] = (args[0] if args else kwargs["hidden_states"]).detach()
        return hook

    def _after(self, index):
        def hook(module, args, output):
            self.captured[index] = (output[0] if isinstance(output, tuple) else output).detach()
        return hook

    def run(self, token_ids: list[int]) -> tuple[torch.Tensor, int]:
        with self.lock, torch.inference_mode():
            self.captured.clear()
            ids = torch.tensor([token_ids], device=self.device)
            logits = self.model(input_ids=ids).logits
            states = torch.stack([self.captured[i][0] for i in self.layers], dim=1)
            return states.to("cpu"), int(logits[0, -1].argmax())


def serve(args) -> None:
    states = States(args.model, [int(i) for i in args.layers.split(",")], args.device)
    states_dir = Path(args.hidden_states_path)
    states_dir.mkdir(parents=True, exist_ok=True)
    log = open(args.log, "a", buffering=1) if args.log else None

    def note(text: str) -> None:
        if log:
            log.write(f"{time.strftime('%H:%M:%S')} {text}\n")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif self.path == "/v1/models":
                self.reply(200, {"object": "list", "data": [{
                    "id": args.served_model_name, "object": "model", "created": int(time.time()),
                    "owned_by": "vllm", "root": args.model, "parent": None, "max_model_len": args.max_model_len}]})
            else:
                self.reply(404, {"error": {"message": f"{self.path} not found"}})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path != "/v1/completions":
                return self.reply(404, {"error": {"message": f"{self.path} not found"}})
            if body.get("model") != args.served_model_name:
                return self.reply(404, {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                                  "type": "NotFoundError", "code": 404}})
            prompt = body.get("prompt")
            token_ids = (list(prompt) if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)
                         else states.tokenizer(prompt)["input_ids"])
            if len(token_ids) + 1 > args.max_model_len:
                return self.reply(400, {"error": {"message": f"prompt of {len(token_ids)} tokens exceeds "
                                                  f"max_model_len {args.max_model_len}", "code": 400}})
            hidden, next_token = states.run(token_ids)
            request = f"cmpl-{uuid.uuid4().hex}-0"
            target = states_dir / f"{request}.safetensors"
            lock_fd = os.open(f"{target}.lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            tensors = {"hidden_states": hidden.contiguous(), "token_ids": torch.tensor(token_ids)}
            created = int(time.time())
            self.reply(200, {
                "id": request[:-2], "object": "text_completion", "created": created, "model": args.served_model_name,
                "choices": [{"index": 0, "text": states.tokenizer.decode([next_token]), "logprobs": None,
                             "finish_reason": "length", "stop_reason": None, "prompt_logprobs": None,
                             "prompt_token_ids": token_ids if body.get("return_token_ids") else None,
                             "token_ids": [next_token] if body.get("return_token_ids") else None}],
                "usage": {"prompt_tokens": len(token_ids), "total_tokens": len(token_ids) + 1,
                          "completion_tokens": 1, "prompt_tokens_details": None},
                "kv_transfer_params": {"hidden_states_path": str(target)}, "system_fingerprint": None})
            note(f"{request} {len(token_ids)} tokens -> {target.name}")

            def write():
                try:
                    save_file(tensors, str(target))
                finally:
                    os.close(lock_fd)  # releases LOCK_EX

            threading.Thread(target=write, daemon=True).start()

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    note(f"serving {args.model} as {args.served_model_name} on 127.0.0.1:{args.port}, layers {states.layers}")
    print(f"hidden-state stand-in ready on 127.0.0.1:{args.port}", flush=True)
    server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--served-model-name", required=True)
    parser.add_argument("--hidden-states-path", required=True)
    parser.add_argument("--layers", required=True, help="comma-separated layer ids, in the order the file keeps them")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--log")
    serve(parser.parse_args())


if __name__ == "__main__":
    main()
