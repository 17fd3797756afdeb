"""`aiinfra serve` (the ASan build) driven by real clients: the official `openai` client, curl, httpx
and raw sockets (issue 5).

Model: the tiny random-weight HF fixture tests/fixtures/hf/smollm (vocab 300, context 256) plus a
small chat template (server_util.py). References, where a value is checked against something other
than our own server:
  * greedy continuation: expected.json's 16 greedy ids from transformers (PyTorch f32), decoded with
    HF `tokenizers`; first-token logprob = log_softmax(expected last-position logits) at the greedy id;
  * /tokenize: expected.json's prompt ids (AutoTokenizer of the folder);
  * streaming: the chunks joined equal the non-stream text of the same greedy request;
  * batching: 32 concurrent greedy requests equal the same requests sent one at a time.
Errors: every malformed input gets its OpenAI-style status and body naming the field, and the
server keeps serving. The whole file runs in well under a minute on 2 cores.
"""
import json
import math
import re
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
from tokenizers import Tokenizer

from server_util import FIXTURE, make_model, start_or_skip

KEY = "test-key"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())
HF_TOK = Tokenizer.from_file(str(FIXTURE / "tokenizer.json"))
N_CTX = 256
HTTP = httpx.Client(timeout=30)  # one pooled client: polling /metrics costs ~ms, not a TLS context each


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def srv(aiinfra_bin, model_dir):
    s = start_or_skip(aiinfra_bin, model_dir, key=KEY)
    yield s
    assert s.stop() == 0, s.stderr()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=KEY, max_retries=0, timeout=60)


def auth():
    return {"Authorization": f"Bearer {KEY}"}


def metrics(srv):
    text = HTTP.get(srv.url + "/metrics").text
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_:]+)(\{[^}]*\})? (\S+)$", line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out, text


def metric(srv, name):
    """Sum of the samples named `name` (every label set), or of those starting with `name` when it
    already holds a label ('x_total{finished_reason="abort"')."""
    vals, _ = metrics(srv)
    return sum(v for k, v in vals.items() if k == name or k.startswith(name + "{") or ("{" in name and k.startswith(name)))


def wait_idle(srv, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if metric(srv, "vllm:num_requests_running") == 0 and metric(srv, "vllm:kv_cache_usage_perc") == 0 \
                and metric(srv, "vllm:num_requests_waiting") == 0:
            return True
        time.sleep(0.05)
    return False


def greedy(client, prompt, max_tokens, **kw):
    return client.completions.create(model="tiny", prompt=prompt, max_tokens=max_tokens, temperature=0,
                                      extra_body={"ignore_eos": True}, **kw)


# --- plain endpoints -------------------------------------------------------------------

def test_health_models_metrics_curl(srv):
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", srv.url + "/health"],
                         capture_output=True, text=True, timeout=30)
    assert out.stdout == "200"
    r = subprocess.run(["curl", "-s", "-H", f"Authorization: Bearer {KEY}", srv.url + "/v1/models"],
                       capture_output=True, text=True, timeout=30)
    models = json.loads(r.stdout)
    assert [m["id"] for m in models["data"]] == ["tiny"]
    r = subprocess.run(["curl", "-s", "-i", srv.url + "/metrics"], capture_output=True, text=True, timeout=30)
    assert "text/plain" in r.stdout.lower()
    for name in ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket",
                 "vllm:inter_token_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_count",
                 "vllm:num_preemptions_total", 'vllm:request_success_total{finished_reason="stop"']:
        assert name in r.stdout, name


def test_tokenize_detokenize_curl(srv):
    p = EXPECTED["prompts"][0]
    r = subprocess.run(["curl", "-s", "-X", "POST", srv.url + "/tokenize", "-d", json.dumps({"prompt": p["text"]})],
                       capture_output=True, text=True, timeout=30)
    out = json.loads(r.stdout)
    assert out["tokens"] == p["ids"] and out["count"] == len(p["ids"])
    r = httpx.post(srv.url + "/detokenize", json={"tokens": p["ids"][1:]}, timeout=10)
    assert r.status_code == 200 and r.json()["prompt"] == HF_TOK.decode(p["ids"][1:])
    msgs = [{"role": "user", "content": "hi"}]
    r = httpx.post(srv.url + "/tokenize", json={"messages": msgs}, timeout=10).json()
    want = HF_TOK.encode("<s>user\nhi</s>\n<s>assistant\n", add_special_tokens=False).ids
    assert r["tokens"] == want


# --- completions and chat with the openai client ------------------------------------------

@pytest.mark.parametrize("k", range(len(EXPECTED["prompts"])))
def test_completion_matches_transformers_greedy(client, k):
    p = EXPECTED["prompts"][k]
    r = greedy(client, p["ids"], EXPECTED["n_gen"])
    assert r.id.startswith("cmpl-") and r.object == "text_completion" and r.model == "tiny" and r.created > 0
    assert r.choices[0].text == HF_TOK.decode(p["greedy"], skip_special_tokens=False)
    assert r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(p["ids"]), EXPECTED["n_gen"])
    assert r.usage.total_tokens == len(p["ids"]) + EXPECTED["n_gen"]
    # text prompt: our tokenizer gives the same ids (BOS added), so the same continuation
    r2 = greedy(client, p["text"], EXPECTED["n_gen"])
    assert r2.choices[0].text == r.choices[0].text and r2.usage.prompt_tokens == len(p["ids"])


def test_logprobs_against_transformers(client):
    p = EXPECTED["prompts"][0]
    r = greedy(client, p["ids"], 4, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    logits = p["last_logits"]
    m = max(logits)
    lse = m + math.log(sum(math.exp(x - m) for x in logits))
    # 5e-3: the engine's KV cache is f16 (runner default; 2^-11 relative rounding of K and V), the
    # reference is f32 throughout; a wrong token, a missing normalization or post-temperature logprobs
    # would be off by far more (the log-sum-exp alone is ~6 here)
    assert abs(lp.token_logprobs[0] - (logits[p["greedy"][0]] - lse)) < 5e-3
    for chosen, lpv, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) >= 3 and max(top.values()) == pytest.approx(lpv, abs=1e-6)  # greedy = top-1
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset[0] == 0
    # chat: logprobs bool + top_logprobs
    c = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello"}],
                                       max_tokens=3, temperature=0, logprobs=True, top_logprobs=2,
                                       extra_body={"ignore_eos": True})
    content = c.choices[0].logprobs.content
    assert len(content) == 3 and all(len(t.top_logprobs) == 2 for t in content)
    assert all(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob for t in content)
    assert all(bytes(t.bytes).decode(errors="replace") == t.token for t in content)


def test_stream_equals_nonstream(client):
    prompt = "The quick brown fox"
    full = greedy(client, prompt, 24).choices[0].text
    chunks = list(greedy(client, prompt, 24, stream=True, stream_options={"include_usage": True}))
    assert all(c.id == chunks[0].id for c in chunks)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == full
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 24

    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "say something"}]
    kw = dict(model="tiny", messages=msgs, max_tokens=20, temperature=0, extra_body={"ignore_eos": True})
    c = client.chat.completions.create(**kw)
    assert c.id.startswith("chatcmpl-") and c.object == "chat.completion"
    assert c.choices[0].message.role == "assistant" and c.choices[0].finish_reason == "length"
    assert c.usage.completion_tokens == 20
    s = list(client.chat.completions.create(stream=True, **kw))
    assert s[0].choices[0].delta.role == "assistant"
    assert "".join(x.choices[0].delta.content or "" for x in s if x.choices) == c.choices[0].message.content
    assert s[-1].choices[0].finish_reason == "length"
    # the prompt the template rendered, tokenized by HF: usage agrees
    want = HF_TOK.encode("<s>system\nbe brief</s>\n<s>user\nsay something</s>\n<s>assistant\n",
                         add_special_tokens=False).ids
    assert c.usage.prompt_tokens == len(want)


def test_stop_strings_and_tokens(client):
    prompt = "The quick brown fox"
    full = greedy(client, prompt, 32).choices[0].text
    stop = full[10:13]
    assert len(stop) == 3
    cut = full[:full.index(stop)]
    r = greedy(client, prompt, 32, stop=[stop, "\u2603 never"])
    assert r.choices[0].text == cut and r.choices[0].finish_reason == "stop"
    r = greedy(client, prompt, 32, stop=stop, stream=True)
    assert "".join(c.choices[0].text for c in r if c.choices) == cut


def test_stop_token_ids(aiinfra_bin, model_dir):
    """A server of its own: the first generated token is a stop id, so the request ends before any
    text was released (a path that once crashed the stop matcher)."""
    s = start_or_skip(aiinfra_bin, model_dir)
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=60)
        p = EXPECTED["prompts"][0]
        second = p["greedy"][1]
        r = client.completions.create(model="tiny", prompt=p["ids"], max_tokens=10, temperature=0,
                                      extra_body={"stop_token_ids": [second], "ignore_eos": True})
        assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 2
        assert r.choices[0].text == HF_TOK.decode(p["greedy"][:1])  # the stop token's text is not included
        r = client.completions.create(model="tiny", prompt=p["ids"], max_tokens=10, temperature=0,
                                      extra_body={"stop_token_ids": [p["greedy"][0]], "ignore_eos": True})
        assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 1
        assert r.choices[0].text == ""
    finally:
        assert s.stop() == 0, s.stderr()


def test_n2_and_seed(client):
    r = greedy(client, "Hello", 8, n=2)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].text == r.choices[1].text  # greedy: both samples agree
    assert r.usage.completion_tokens == 16
    kw = dict(model="tiny", prompt="Hello", max_tokens=12, temperature=1.0, n=2, seed=7,
              extra_body={"ignore_eos": True})
    a, b = client.completions.create(**kw), client.completions.create(**kw)
    assert [c.text for c in a.choices] == [c.text for c in b.choices]  # seeded: reproducible
    assert a.choices[0].text != a.choices[1].text  # distinct samples (seed + index)
    s = list(client.completions.create(stream=True, **kw))
    for i in range(2):
        assert "".join(c.choices[0].text for c in s if c.choices and c.choices[0].index == i) == a.choices[i].text


def test_echo_and_max_completion_tokens(client):
    r = greedy(client, "Hello there", 5, echo=True)
    plain = greedy(client, "Hello there", 5).choices[0].text
    assert r.choices[0].text == "Hello there" + plain
    c = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}],
                                       max_completion_tokens=3, temperature=0, extra_body={"ignore_eos": True})
    assert c.usage.completion_tokens == 3


# --- errors ------------------------------------------------------------------------------------

BAD = [
    ("/v1/completions", b"{not json", 400, None),
    ("/v1/completions", b"[1, 2]", 400, None),
    ("/v1/completions", {"model": "tiny"}, 400, "prompt"),
    ("/v1/completions", {"prompt": 5}, 400, "prompt"),
    ("/v1/completions", {"prompt": []}, 400, "prompt"),
    ("/v1/completions", {"prompt": [1, 99999]}, 400, "prompt"),
    ("/v1/completions", {"prompt": ["a", "b"]}, 400, "prompt"),
    ("/v1/completions", {"prompt": "x", "temperature": "hot"}, 400, "temperature"),
    ("/v1/completions", {"prompt": "x", "temperature": -1}, 400, "temperature"),
    ("/v1/completions", {"prompt": "x", "top_p": 2}, 400, "top_p"),
    ("/v1/completions", {"prompt": "x", "top_k": 1.5}, 400, "top_k"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 1.5}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 100000}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "n": "2"}, 400, "n"),
    ("/v1/completions", {"prompt": "x", "n": 99}, 400, "n"),
    ("/v1/completions", {"prompt": "x", "logprobs": 50}, 400, "logprobs"),
    ("/v1/completions", {"prompt": "x", "stream": "yes"}, 400, "stream"),
    ("/v1/completions", {"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options"),
    ("/v1/completions", {"prompt": "x", "stop": 5}, 400, "stop"),
    ("/v1/completions", {"prompt": "x", "stop": ["a", 1]}, 400, "stop"),
    ("/v1/completions", {"prompt": "x", "stop_token_ids": "1"}, 400, "stop_token_ids"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"abc": 1}}, 400, "logit_bias"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"5": 1000}}, 400, "logit_bias"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"5000": 1}}, 400, "logit_bias"),
    ("/v1/completions", {"prompt": "x", "presence_penalty": 3}, 400, "presence_penalty"),
    ("/v1/completions", {"prompt": "x", "repetition_penalty": 0}, 400, "repetition_penalty"),
    ("/v1/completions", {"prompt": "x", "seed": "s"}, 400, "seed"),
    ("/v1/completions", {"prompt": "x", "suffix": "y"}, 400, "suffix"),
    ("/v1/completions", {"prompt": "x", "echo": True, "logprobs": 1}, 400, "echo"),
    ("/v1/completions", {"prompt": "x", "model": 3}, 400, "model"),
    ("/v1/completions", {"prompt": "x", "model": "gpt-9"}, 404, "model"),
    ("/v1/completions", {"prompt": "word " * 300}, 400, "prompt"),
    ("/v1/completions", {"prompt": list(range(2, 240)), "max_tokens": 100}, 400, "max_tokens"),
    ("/v1/chat/completions", {"messages": "hi"}, 400, "messages"),
    ("/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"content": "no role"}]}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": 1}, 400, "logprobs"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, 400, "top_logprobs"),
    ("/tokenize", {"prompt": 1}, 400, "prompt"),
    ("/tokenize", {}, 400, "prompt"),
    ("/detokenize", {"tokens": [1, "a"]}, 400, "tokens"),
    ("/detokenize", {"tokens": [-1]}, 400, "tokens"),
]


@pytest.mark.parametrize("path,body,status,param", BAD, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD)])
def test_bad_requests(srv, path, body, status, param):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(srv.url + path, content=data, headers={**auth(), "Content-Type": "application/json"}, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"} and err["message"]
    assert err["param"] == param, err
    if status == 404:
        assert err["code"] == "model_not_found"


def test_http_level_errors(srv, client):
    r = httpx.post(srv.url + "/v1/completions", json={"prompt": "x"}, timeout=10)
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = httpx.post(srv.url + "/v1/completions", json={"prompt": "x"}, headers={"Authorization": "Bearer nope"},
                   timeout=10)
    assert r.status_code == 401
    bad = openai.OpenAI(base_url=srv.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model="tiny", prompt="x", max_tokens=1)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x", max_tokens=1)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="x", max_tokens=1, temperature=-3)
    assert "temperature" in str(e.value)
    assert httpx.get(srv.url + "/v1/nothing", headers=auth(), timeout=10).status_code == 404
    assert httpx.get(srv.url + "/v1/completions", headers=auth(), timeout=10).status_code == 405
    big = b'{"prompt": "' + b"a" * (5 << 20) + b'"}'
    r = httpx.post(srv.url + "/v1/completions", content=big, headers=auth(), timeout=60)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    # still serving
    assert greedy(client, "ok", 2).usage.completion_tokens == 2


def test_client_disconnect_mid_stream(srv, client):
    aborted = metric(srv, 'vllm:request_success_total{finished_reason="abort"')
    # 16 sampled sequences with 20 logprobs each: ~1 s of work here, so the hang-up comes mid-generation
    body = json.dumps({"model": "tiny", "prompt": "a b c", "max_tokens": 240, "stream": True, "temperature": 1,
                       "n": 16, "logprobs": 20, "ignore_eos": True}).encode()
    for _ in range(2):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: " + str(len(body)).encode() +
                  b"\r\n\r\n" + body)
        got = s.recv(200)
        assert got.startswith(b"HTTP/1.1 200")
        s.close()
    assert wait_idle(srv), metrics(srv)[1]
    assert metric(srv, 'vllm:request_success_total{finished_reason="abort"') >= aborted + 16  # all samples
    assert greedy(client, "still here", 3).usage.completion_tokens == 3


def test_concurrent_greedy_equals_sequential(client, srv):
    prompts = [("lorem ipsum " * (1 + i % 7)) + str(i) for i in range(32)]
    lens = [8 + (i * 5) % 17 for i in range(32)]
    alone = [greedy(client, p, n).choices[0].text for p, n in zip(prompts, lens)]
    with ThreadPoolExecutor(32) as ex:
        together = list(ex.map(lambda pn: greedy(client, pn[0], pn[1]).choices[0].text, zip(prompts, lens)))
    assert together == alone
    assert wait_idle(srv)


def test_shared_system_prompt_prefix_cache(client, srv):
    system = "You are a careful assistant. " * 5
    hits0 = metric(srv, "vllm:prefix_cache_hits_total")
    out = []
    for q in ["first question", "second question", "third one"]:
        out.append(client.chat.completions.create(
            model="tiny", messages=[{"role": "system", "content": system}, {"role": "user", "content": q}],
            max_tokens=4, temperature=0, extra_body={"ignore_eos": True}))
    assert out[0].usage.prompt_tokens > 64
    cached = [c.usage.prompt_tokens_details.cached_tokens for c in out]
    assert cached[1] >= 48 and cached[2] >= 48, cached
    assert metric(srv, "vllm:prefix_cache_hits_total") - hits0 >= 96


# --- queue limits and draining (servers of their own) ---------------------------------------

def _post(url, n, stream=False):
    # sampled with 20 logprobs: slow enough (~2 ms a token under ASan) that requests overlap
    body = {"model": "tiny", "prompt": "count with me", "max_tokens": n, "temperature": 1, "seed": 1,
            "logprobs": 20, "ignore_eos": True, "stream": stream}
    return httpx.post(url + "/v1/completions", json=body, timeout=120)


def test_queue_full_429(aiinfra_bin, model_dir):
    s = start_or_skip(aiinfra_bin, model_dir, "--max-num-seqs", "1", "--max-waiting", "1")
    try:
        with ThreadPoolExecutor(8) as ex:
            rs = list(ex.map(lambda _: _post(s.url, 120), range(8)))
        codes = sorted(r.status_code for r in rs)
        assert codes.count(200) >= 2 and 429 in codes, codes
        r429 = next(r for r in rs if r.status_code == 429)
        assert r429.headers["Retry-After"] == "1" and r429.json()["error"]["type"] == "rate_limit_error"
    finally:
        assert s.stop() == 0, s.stderr()


def test_sigterm_drains_in_flight(aiinfra_bin, model_dir):
    s = start_or_skip(aiinfra_bin, model_dir)
    results = {}

    n_tok = 240

    def go(i):
        results[i] = _post(s.url, n_tok, stream=bool(i % 2))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]  # 2 streamed, 2 not
    for t in threads:
        t.start()
    deadline, running = time.time() + 20, 0
    while time.time() < deadline:  # one read per check: a second read may already see them finish
        running = metric(s, "vllm:num_requests_running")
        if running >= 4:
            break
        time.sleep(0.005)
    # all in flight when the signal arrives (else: how many ran, and what finished requests answered)
    assert running == 4, (running, {i: r.status_code for i, r in results.items()})
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    try:  # while draining: /health says 503 (unless the drain already finished)
        h = httpx.get(s.url + "/health", timeout=5)
        assert h.status_code == 503
        assert _post(s.url, 2).status_code == 503
    except httpx.TransportError:
        pass
    for t in threads:
        t.join(120)
    for i, r in results.items():
        assert r.status_code == 200, r.text
        if i % 2:
            assert r.text.rstrip().endswith("data: [DONE]") and '"finish_reason":"length"' in r.text
        else:
            assert r.json()["usage"]["completion_tokens"] == n_tok
    assert len(results) == 4
    assert s.stop() == 0, s.stderr()
    assert "draining" in s.stderr()


def test_model_without_chat_template(aiinfra_bin):
    """The fixture as shipped has no chat template: chat answers 400 naming messages, completions work."""
    s = start_or_skip(aiinfra_bin, FIXTURE)
    try:
        r = HTTP.post(s.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
        assert "chat template" in r.json()["error"]["message"]
        r = HTTP.post(s.url + "/tokenize", json={"messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 400
        r = HTTP.post(s.url + "/v1/completions", json={"prompt": EXPECTED["prompts"][0]["ids"], "max_tokens": 16,
                                                       "temperature": 0, "ignore_eos": True})
        assert r.json()["choices"][0]["text"] == HF_TOK.decode(EXPECTED["prompts"][0]["greedy"])
    finally:
        assert s.stop() == 0, s.stderr()


def test_kv_cache_dtype_fp8(aiinfra_bin, model_dir):
    """--kv-cache-dtype fp8: the server announces the fp8 cache, and a greedy completion equals
    `aiinfra run --kv-cache-dtype fp8` on the same prompt ids (both the paged runner over an e4m3 cache on
    the CPU backend, so the tokens must be identical)."""
    p = EXPECTED["prompts"][0]
    run = subprocess.run([str(aiinfra_bin), "run", "-m", str(model_dir), "--prompt-ids", " ".join(map(str, p["ids"])),
                          "-n", "12", "--ignore-eos", "--kv-cache-dtype", "fp8", "-q"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    s = start_or_skip(aiinfra_bin, model_dir, "--kv-cache-dtype", "fp8")
    try:
        assert "kv cache fp8" in s.stderr()
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=60)
        r = client.completions.create(model="tiny", prompt=p["ids"], max_tokens=12, temperature=0,
                                      extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == 12
        assert r.choices[0].text == run.stdout
    finally:
        assert s.stop() == 0, s.stderr()
    bad = subprocess.run([str(aiinfra_bin), "serve", "-m", str(model_dir), "--kv-cache-dtype", "int4"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--kv-cache-dtype" in bad.stderr
