"""Starts `$AIINFRA_BIN serve` (the ASan build) on a free port for the server tests (tooling).

The model is a copy of the tiny HF fixture tests/fixtures/hf/smollm (random weights, vocab 300,
context 256) with a small chat template added to its tokenizer_config.json (the fixtures carry none),
so /v1/chat/completions has something to render. The server is started with --port 0 and prints
"listening on http://HOST:PORT" on stderr; we read the port from that line and wait for /health.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests/fixtures/hf/smollm"
CHAT_TEMPLATE = ("{% for m in messages %}{{ bos_token }}{{ m['role'] }}\n{{ m['content'] }}{{ eos_token }}\n"
                 "{% endfor %}{% if add_generation_prompt %}{{ bos_token }}assistant\n{% endif %}")
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def make_model(dest):
    """A copy of the smollm fixture with a chat template; returns its folder."""
    d = Path(dest) / "smollm-chat"
    if not d.exists():
        shutil.copytree(FIXTURE, d)
        cfg = json.loads((d / "tokenizer_config.json").read_text())
        cfg["chat_template"] = CHAT_TEMPLATE
        (d / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))
    return d


def has_serve(binary):
    p = subprocess.run([binary, "serve"], capture_output=True, timeout=60)
    return b"unknown command" not in p.stderr


class Server:
    """One `aiinfra serve` process. url, port, key; stop() sends SIGTERM and returns the exit code."""

    def __init__(self, binary, model_dir, *extra, key=None, name="tiny", timeout=60):
        args = [binary, "serve", "-m", str(model_dir), "--port", "0", "--served-model-name", name, "-t", "1",
                *map(str, extra)]
        if key:
            args += ["--api-key", key]
        self.key, self.name = key, name
        self.lines = []
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._port_seen = threading.Event()
        self.port = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._port_seen.wait(timeout):
            self.proc.kill()
            raise AssertionError("server did not start:\n" + self.stderr())
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.05)
        self.proc.kill()
        raise AssertionError("server never became healthy:\n" + self.stderr())

    def _read(self):
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace")
            self.lines.append(line)
            m = re.search(r"listening on http://[^\s]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                self._port_seen.set()

    def stderr(self):
        return "".join(self.lines)

    def stop(self, timeout=60):
        """SIGTERM, wait; returns the exit code. Fails on sanitizer reports."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("server did not exit after SIGTERM:\n" + self.stderr())
        self._reader.join(5)
        err = self.stderr()
        assert not any(m in err for m in SANITIZER_MARKS), err
        return rc


def start_or_skip(binary, model_dir, *extra, **kw):
    if not has_serve(binary):
        pytest.skip(f"{binary} has no `serve` command yet (cmd_serve is not registered in src/tools/main.c)")
    return Server(binary, model_dir, *extra, **kw)
