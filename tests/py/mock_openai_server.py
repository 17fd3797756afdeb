"""A mock OpenAI-compatible completions server for testing `aiinfra bench serve` (tooling).

A threaded http.server speaking HTTP/1.1 with chunked transfer encoding (as a real streaming server
does). POST /v1/completions (or /v1/chat/completions, text in choices[0].delta.content) with "stream": true answers with SSE chunks:
    data: {"choices": [{"index": 0, "text": "t0 ", ...}], "usage": null}\n\n   (n chunks)
    data: {"choices": [], "usage": {"prompt_tokens": P, "completion_tokens": n, ...}}\n\n
    data: [DONE]\n\n
where n = max_tokens (or `n_chunks`), P = the prompt's whitespace-separated words. Behaviour is set
by MockConfig; every request is recorded (body, headers, arrival/end times), with the largest number
of requests in flight at once (a request stops counting before its final "[DONE]" is written, so a
client that starts the next request on [DONE] is never seen as over its limit).
"""
import json
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class MockConfig:
    first_delay: float = 0.0     # s before the first token chunk (TTFT)
    delay: float = 0.0           # s between token chunks (ITL)
    n_chunks: int = 0            # token chunks per answer; 0 = the request's max_tokens
    role_chunk: bool = True      # an empty-text chunk first (must not count as a token)
    usage: bool = True           # honour stream_options.include_usage
    send_done: bool = True       # end with data: [DONE]
    fail_every: int = 0          # request k (1-based arrival order) with k % fail_every == 0 fails ...
    fail_status: int = 500       # ... with this HTTP status
    malformed_every: int = 0     # request k with k % malformed_every == 0 gets a broken data event
    hang: bool = False           # never answer (until the client gives up)
    crlf: bool = False           # end SSE lines with \r\n
    garbage: int = 0             # > 0: the 200 stream is this many bytes of 'x' with no line end
    split: int = 0               # > 0: write each event in pieces of this many bytes, 1 ms apart


class MockServer:
    def __init__(self, config=None):
        self.config = config or MockConfig()
        self.requests = []          # dicts: path, body, headers, t_arrive, t_end, status
        self.active = 0
        self.max_active = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def setup(self):
                super().setup()
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle delay per chunk

            def do_GET(self):
                if self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": "mock-model", "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self):
                srv._handle_post(self)

            def _json(self, status, obj):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- request handling (runs on the server's threads)

    def _handle_post(self, h):
        t_arrive = time.monotonic()
        n = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(n)
        with self.lock:
            k = len(self.requests) + 1
            rec = {"path": h.path, "headers": dict(h.headers), "t_arrive": t_arrive, "t_end": None, "status": 200}
            self.requests.append(rec)
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            rec["body"] = json.loads(raw)
        except ValueError:
            rec["body"] = None
        cfg = self.config
        try:
            if rec["body"] is None or h.path not in ("/v1/completions", "/v1/chat/completions"):
                self._finish(rec, h, 400, {"error": {"message": "bad request"}})
            elif cfg.fail_every and k % cfg.fail_every == 0:
                self._finish(rec, h, cfg.fail_status, {"error": {"message": "mock failure", "code": cfg.fail_status}})
            elif cfg.hang:
                self._leave(rec)
                self.stopping.wait(30)
            else:
                self._stream(rec, h, k)
        except (BrokenPipeError, ConnectionResetError):
            self._leave(rec)
            h.close_connection = True

    def _leave(self, rec):
        with self.lock:
            if rec["t_end"] is None:
                rec["t_end"] = time.monotonic()
                self.active -= 1

    def _finish(self, rec, h, status, obj):
        rec["status"] = status
        self._leave(rec)
        data = json.dumps(obj).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _stream(self, rec, h, k):
        cfg, body = self.config, rec["body"]
        eol = "\r\n" if cfg.crlf else "\n"
        n_tok = cfg.n_chunks or int(body.get("max_tokens") or 16)
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def chunk(text):
            data = text.encode()
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()

        def event(obj):
            text = "data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + eol + eol
            if not cfg.split:
                chunk(text)
                return
            for i in range(0, len(text), cfg.split):
                chunk(text[i:i + cfg.split])
                time.sleep(0.001)

        chat = rec["path"] == "/v1/chat/completions"

        def choice(text):
            if chat:
                return {"id": f"chatcmpl-{k}", "object": "chat.completion.chunk", "model": "mock-model",
                        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}], "usage": None}
            return {"id": f"cmpl-{k}", "object": "text_completion", "model": "mock-model",
                    "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": None}], "usage": None}

        if cfg.garbage:
            for _ in range(0, cfg.garbage, 65536):
                chunk("x" * 65536)
            self._leave(rec)
            chunk("")
            return
        if cfg.role_chunk:
            event(choice(""))
        time.sleep(cfg.first_delay)
        for i in range(n_tok):
            if i:
                time.sleep(cfg.delay)
            if cfg.malformed_every and k % cfg.malformed_every == 0 and i == n_tok // 2:
                event('{"choices": [{"text": "broken')
                continue
            event(choice(f"t{i} "))
        want_usage = cfg.usage and (body.get("stream_options") or {}).get("include_usage")
        if want_usage:
            prompt = body["messages"][0]["content"] if chat else body.get("prompt", "")
            p = len(str(prompt).split())
            event({"id": f"cmpl-{k}", "object": "text_completion", "choices": [],
                   "usage": {"prompt_tokens": p, "completion_tokens": n_tok, "total_tokens": p + n_tok}})
        self._leave(rec)
        if cfg.send_done:
            event("[DONE]")
        chunk("")  # the terminating zero-length chunk
