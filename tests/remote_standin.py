"""A stdlib stand-in for an OpenAI-compatible server, for what a real one will not do on demand.

The requested model name picks the behaviour: "chat" (a normal stream), "reasoning",
"keepalive", "malformed", "malformed-first", "stall", "drop", "error-500", "overflow",
"slow" (one token every 50 ms, 400 of them), "tool-call" (a call to `add` streamed in
pieces, as OpenAI does, when the request has tools and no tool result yet), "scripted" (what
`script(body, headers)` yields, each piece sent as it comes, for as long as it yields: hostile streams).
Every request body is recorded as received.

Hostile answers on demand: `models_drip_s` sends the model list one byte at a time,
`models_gzip` says the (already compressed) body is gzip-encoded, `models_status` answers it with another status, `echo_auth` refuses every request with an error body that
quotes the Authorization header back, `error_body` answers every chat request HTTP 500 with it, `stream_type` is the Content-Type of a 200 answer.
"""

import json
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODELS = [
    "chat",
    "reasoning",
    "keepalive",
    "malformed",
    "malformed-first",
    "stall",
    "drop",
    "error-500",
    "overflow",
    "slow",
    "tool-call",
    "scripted",
]


def chunk(content=None, reasoning=None, finish=None, usage=None):
    delta = {}
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    event = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        event = {"object": "chat.completion.chunk", "choices": [], "usage": usage}
    return f"data: {json.dumps(event)}\n\n".encode()


class StandIn:
    def __init__(  # noqa: C901 - the handler class inside holds one branch per scripted behaviour
        self,
        api_key: str = "",
        models_body: bytes = None,
        models_endpoint: bool = True,
        script: Callable[[dict, dict], Iterable[bytes]] | None = None,
        models_drip_s: float = 0.0,
        models_gzip: bool = False,
        models_status: int = 200,
        echo_auth: bool = False,
        stream_headers: dict | None = None,
        error_body: bytes | None = None,
        stream_type: str = "text/event-stream",
    ):
        self.api_key = api_key
        self.models_body = models_body
        self.models_endpoint = models_endpoint
        self.script = script
        self.models_drip_s = models_drip_s
        self.models_gzip = models_gzip
        self.models_status = models_status
        self.echo_auth = echo_auth
        self.stream_headers = stream_headers or {}  # e.g. a Content-Encoding for a scripted stream
        self.error_body = error_body  # every chat request is answered HTTP 500 with this body
        self.stream_type = stream_type  # the Content-Type of a 200 answer to a chat request
        self.sent = 0  # bytes a scripted stream got out before the client went away
        self.requests = []  # (path, raw body bytes, parsed)
        self.release = threading.Event()  # ends a stalled stream
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _auth_ok(self):
                if standin.echo_auth:
                    auth = self.headers.get("Authorization", "")
                    self._json(401, {"error": {"message": f"rejected header Authorization: {auth}"}, "raw": auth})
                    return False
                if standin.api_key and self.headers.get("Authorization") != f"Bearer {standin.api_key}":
                    self._json(401, {"error": {"message": "Invalid API key provided"}})
                    return False
                return True

            def _json(self, status, data):
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if not self._auth_ok():
                    return
                if self.path.rstrip("/").endswith("/models") and standin.models_endpoint:
                    if standin.models_body is not None:
                        body = standin.models_body
                        self.send_response(standin.models_status)
                        self.send_header("Content-Length", str(len(body)))
                        if standin.models_gzip:
                            self.send_header("Content-Encoding", "gzip")
                        self.end_headers()
                        try:
                            self.drip(body) if standin.models_drip_s else self.wfile.write(body)
                        except (BrokenPipeError, ConnectionResetError):
                            self.close_connection = True
                    else:
                        self._json(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in MODELS]})
                else:
                    self._json(404, {"error": "not found"})

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw)
                standin.requests.append((self.path, raw, body))
                if not self._auth_ok():
                    return
                model = body.get("model")
                if standin.error_body is not None:
                    self.send_response(500)
                    self.send_header("Content-Length", str(len(standin.error_body)))
                    self.end_headers()
                    try:
                        self.wfile.write(standin.error_body)
                    except (BrokenPipeError, ConnectionResetError):
                        self.close_connection = True
                    return
                if model == "error-500":
                    return self._json(500, {"error": "the GPU caught fire"})
                if model == "overflow" and len(body["messages"]) > 3:
                    return self._json(400, {"error": {"message": "This model's maximum context length is 64 tokens"}})
                if model not in MODELS:
                    return self._json(404, {"error": f"model {model} not found"})
                self.send_response(200)
                self.send_header("Content-Type", standin.stream_type)
                self.send_header("Connection", "close")
                for name, value in standin.stream_headers.items():
                    self.send_header(name, value)
                self.end_headers()
                try:
                    getattr(self, "stream_" + model.replace("-", "_"), self.stream_chat)(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

            def send(self, data: bytes):
                self.wfile.write(data)
                self.wfile.flush()

            def drip(self, body: bytes):
                for i in range(len(body)):
                    if standin.release.is_set():
                        return
                    self.send(body[i : i + 1])
                    standin.release.wait(standin.models_drip_s)

            def stream_scripted(self, body):
                for piece in standin.script(body, dict(self.headers)):
                    if standin.release.is_set():
                        return
                    self.send(piece)
                    standin.sent += len(piece)

            def finish_stream(self, finish="stop", prompt=20, completion=3, cached=0):
                self.send(chunk(finish=finish))
                usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
                if cached:
                    usage["prompt_tokens_details"] = {"cached_tokens": cached}
                self.send(chunk(usage=usage))
                self.send(b"data: [DONE]\n\n")

            def stream_chat(self, body):
                turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
                for word in ("Hello", " there", f" #{turns}"):
                    self.send(chunk(word))
                self.finish_stream("length" if body.get("max_tokens") == 3 else "stop", cached=10 * turns)

            def stream_tool_call(self, body):
                if not body.get("tools") or body["messages"][-1]["role"] == "tool":
                    return self.stream_chat(body)
                first = {"index": 0, "id": "call_abc", "type": "function", "function": {"name": "add", "arguments": ""}}
                for piece in (first, *({"index": 0, "function": {"arguments": a}} for a in ('{"a": 2,', ' "b": 3}'))):
                    event = {"choices": [{"index": 0, "delta": {"tool_calls": [piece]}, "finish_reason": None}]}
                    self.send(f"data: {json.dumps(event)}\n\n".encode())
                self.finish_stream("tool_calls")

            def stream_reasoning(self, body):
                self.send(chunk(reasoning="Let me think."))
                self.send(chunk(reasoning=" Done."))
                self.send(chunk("The answer"))
                self.send(chunk(" is 4."))
                self.finish_stream(completion=4)

            def stream_keepalive(self, body):
                for i in (1, 2, 3):
                    self.send(f": keepalive {i * 100}/300\n\n".encode())
                self.stream_chat(body)

            def stream_malformed(self, body):
                self.send(chunk("Partial"))
                self.send(b"data: {not json\n\n")

            def stream_malformed_first(self, body):
                self.send(b"data: {not json\n\n")

            def stream_stall(self, body):
                self.send(chunk("Before the stall"))
                standin.release.wait(30)

            def stream_drop(self, body):
                self.send(chunk("Cut"))
                self.send(chunk(" off"))
                self.wfile.flush()
                self.connection.shutdown(2)

            def stream_slow(self, body):
                for i in range(400):
                    self.send(chunk(f" t{i}"))
                    time.sleep(0.05)
                self.finish_stream(completion=400)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        # Polled every 20 ms, not 500: shutdown() waits for the poll, and each test stops a stand-in.
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
