"""`aiinfra bench serve` (the load generator) against a mock OpenAI streaming server.

The mock (mock_openai_server.py) is the reference: it knows what it sent (chunks, usage, delays,
failures) and records what it received (bodies, headers, arrival times, peak concurrency), so token
counts are checked exactly and latencies against the configured delays with a tolerance.
"""
import json
import math
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mock_openai_server import MockConfig, MockServer  # noqa: E402

JSON_KEYS = [
    "completed", "failed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
    "request_goodput", "output_throughput", "total_token_throughput", "num_prompts", "request_rate",
    "max_concurrency", "max_concurrent_requests", "errors",
] + [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "std", "p99")]


@pytest.fixture(scope="module")
def bench(aiinfra_bin):
    p = subprocess.run([aiinfra_bin, "bench", "serve", "--help"], capture_output=True, timeout=30)
    if b"--request-rate" not in p.stderr + p.stdout:
        pytest.skip("`aiinfra bench serve` is not wired into the CLI yet (cmd_bench -> cmd_bench_serve)")

    def run(args, timeout=30):
        t = time.monotonic()
        p = subprocess.run([aiinfra_bin, "bench", "serve", *map(str, args)], capture_output=True, timeout=timeout)
        p.wall = time.monotonic() - t
        return p
    return run


def run_json(bench, url, *args, timeout=30):
    p = bench(["--url", url, "--json", *args], timeout=timeout)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return json.loads(p.stdout)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_counts_and_latencies(bench):
    cfg = MockConfig(first_delay=0.05, delay=0.02)
    with MockServer(cfg) as m:
        r = run_json(bench, m.url, "--num-prompts", 8, "--max-concurrency", 4, "--input-len", 16,
                     "--output-len", 10, "--seed", 3)
    assert (r["completed"], r["failed"]) == (8, 0)
    assert r["total_output_tokens"] == 80 and r["total_input_tokens"] == 8 * 16  # usage from the mock
    assert len(m.requests) == 8
    for q in m.requests:
        b = q["body"]
        assert b["stream"] is True and b["stream_options"] == {"include_usage": True}
        assert b["max_tokens"] == 10 and b["ignore_eos"] is True and b["model"] == "mock-model"
        assert len(b["prompt"].split()) == 16
    assert len({q["body"]["prompt"] for q in m.requests}) == 8  # prompts differ
    # the mock's delays are lower bounds: a loaded machine adds, never subtracts (beyond timer jitter)
    lat = {k: round(v, 1) for k, v in r.items() if k.endswith("_ms")}
    assert 45 <= r["median_ttft_ms"] <= 50 + 40, lat
    assert abs(r["median_itl_ms"] - 20) <= 10, lat
    assert abs(r["median_tpot_ms"] - 20) <= 10, lat
    assert 50 + 9 * 20 - 20 <= r["median_e2el_ms"] <= 50 + 9 * 20 + 90, lat
    assert r["p99_e2el_ms"] >= r["median_e2el_ms"] >= r["median_ttft_ms"]
    assert r["duration"] > 0
    assert r["request_throughput"] == pytest.approx(8 / r["duration"], rel=1e-6)
    assert r["output_throughput"] == pytest.approx(80 / r["duration"], rel=1e-6)
    assert r["total_token_throughput"] == pytest.approx((80 + 128) / r["duration"], rel=1e-6)
    # 2 waves of 4 requests, each ~230 ms
    assert 0.4 < r["duration"] < 2.0


def test_tokens_without_usage_count_nonempty_chunks(bench):
    # no usage chunk: output tokens = non-empty chunks (the empty role chunk does not count); \r\n lines
    cfg = MockConfig(usage=False, role_chunk=True, crlf=True, n_chunks=7)
    with MockServer(cfg) as m:
        r = run_json(bench, m.url, "--num-prompts", 5, "--input-len", 8, "--output-len", 30)
    assert (r["completed"], r["failed"]) == (5, 0)
    assert r["total_output_tokens"] == 35
    assert r["input_tokens_from_usage"] == 0 and r["total_input_tokens"] == 5 * 8  # estimate: I words


def test_events_split_across_reads(bench):
    # every event arrives in 5-byte pieces (lines and "\r\n" cut anywhere): the parser reassembles them
    with MockServer(MockConfig(split=5, crlf=True, n_chunks=4)) as m:
        r = run_json(bench, m.url, "--num-prompts", 3, "--input-len", 4)
    assert (r["completed"], r["failed"]) == (3, 0)
    assert r["total_output_tokens"] == 12 and r["total_input_tokens"] == 12


def test_chat_endpoint(bench):
    with MockServer(MockConfig(n_chunks=5)) as m:
        r = run_json(bench, m.url, "--endpoint", "/v1/chat/completions", "--num-prompts", 3, "--input-len", 6)
    assert (r["completed"], r["failed"]) == (3, 0) and r["total_output_tokens"] == 15
    assert r["total_input_tokens"] == 18
    for q in m.requests:
        assert q["path"] == "/v1/chat/completions"
        assert q["body"]["messages"][0]["role"] == "user" and len(q["body"]["messages"][0]["content"].split()) == 6


def test_max_concurrency_honored(bench):
    cfg = MockConfig(first_delay=0.02, delay=0.01, n_chunks=5)
    with MockServer(cfg) as m:
        r = run_json(bench, m.url, "--num-prompts", 12, "--max-concurrency", 3, "--input-len", 4)
    assert r["completed"] == 12 and r["max_concurrency"] == 3
    assert m.max_active == 3 and r["max_concurrent_requests"] == 3
    with MockServer(cfg) as m:
        r = run_json(bench, m.url, "--num-prompts", 10, "--input-len", 4)  # unlimited: all at once
    assert r["completed"] == 10 and m.max_active >= 8


def test_poisson_arrivals(bench):
    rate, n = 100.0, 100
    with MockServer(MockConfig(n_chunks=2)) as m:
        r = run_json(bench, m.url, "--num-prompts", n, "--request-rate", rate, "--input-len", 4, "--seed", 7)
    assert r["completed"] == n and r["request_rate"] == rate
    t = sorted(q["t_arrive"] for q in m.requests)
    gaps = [b - a for a, b in zip(t, t[1:])]
    assert abs(statistics.mean(gaps) - 1 / rate) <= 0.3 / rate
    # exponential gaps: the spread is about the mean (a fixed pacing would have a tiny one)
    assert statistics.pstdev(gaps) > 0.5 / rate
    # another seed gives other arrivals
    with MockServer(MockConfig(n_chunks=2)) as m2:
        run_json(bench, m2.url, "--num-prompts", 20, "--request-rate", rate, "--input-len", 4, "--seed", 8)
    t2 = sorted(q["t_arrive"] for q in m2.requests)
    assert [round(b - a, 3) for a, b in zip(t2, t2[1:])] != [round(g, 3) for g in gaps[:19]]


@pytest.mark.parametrize("status", [429, 500])
def test_http_errors_counted(bench, status):
    with MockServer(MockConfig(fail_every=3, fail_status=status, n_chunks=3)) as m:
        r = run_json(bench, m.url, "--num-prompts", 9, "--max-concurrency", 2, "--input-len", 4)
    assert (r["completed"], r["failed"]) == (6, 3)
    assert r["errors"] == {f"HTTP {status}": 3}
    assert r["total_output_tokens"] == 18


def test_connection_refused(bench):
    url = f"http://127.0.0.1:{free_port()}"
    p = bench(["--url", url, "--num-prompts", 4, "--input-len", 4, "--timeout", 5])
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    assert "Serving Benchmark Result" in out
    assert "Successful requests:" in out and "Failed requests:" in out
    assert " 4  " in out.split("Failed requests by reason")[1]
    r = run_json(bench, url, "--num-prompts", 3, "--input-len", 4)
    assert (r["completed"], r["failed"]) == (0, 3)
    assert r["mean_ttft_ms"] == 0 and r["request_throughput"] == 0


def test_malformed_and_truncated_streams(bench):
    with MockServer(MockConfig(malformed_every=2, n_chunks=6)) as m:
        r = run_json(bench, m.url, "--num-prompts", 8, "--max-concurrency", 4, "--input-len", 4)
    assert (r["completed"], r["failed"]) == (4, 4)
    assert sum(v for k, v in r["errors"].items() if k.startswith("malformed SSE")) == 4
    assert r["total_output_tokens"] == 4 * 6
    with MockServer(MockConfig(garbage=3 << 20)) as m:  # 3 MiB without a line end: refused at 1 MiB
        r = run_json(bench, m.url, "--num-prompts", 2, "--input-len", 4)
    assert (r["completed"], r["failed"]) == (0, 2) and r["errors"] == {"malformed SSE: line too long": 2}
    with MockServer(MockConfig(send_done=False, n_chunks=3)) as m:
        r = run_json(bench, m.url, "--num-prompts", 3, "--input-len", 4)
    assert (r["completed"], r["failed"]) == (0, 3)
    assert list(r["errors"]) == ["stream ended without data: [DONE]"]


def test_timeout_and_deadline_never_hang(bench):
    with MockServer(MockConfig(hang=True)) as m:
        p = bench(["--url", m.url, "--json", "--num-prompts", 3, "--input-len", 4, "--timeout", 0.5])
        assert p.returncode == 0 and p.wall < 10
        r = json.loads(p.stdout)
        assert (r["completed"], r["failed"]) == (0, 3) and r["errors"] == {"timeout (--timeout)": 3}
        # the run deadline: in-flight requests are aborted, unsent ones failed
        p = bench(["--url", m.url, "--json", "--num-prompts", 4, "--max-concurrency", 2, "--input-len", 4,
                   "--timeout", 60, "--max-duration", 1])
        assert p.returncode == 0 and p.wall < 10
        r = json.loads(p.stdout)
        assert (r["completed"], r["failed"]) == (0, 4)
        assert r["errors"] == {"aborted at the run deadline (--max-duration)": 2,
                               "not sent before the run deadline (--max-duration)": 2}
        assert 0.9 < r["duration"] < 5


def test_json_has_every_field_and_goodput(bench):
    with MockServer(MockConfig(first_delay=0.05, delay=0.005, n_chunks=4)) as m:
        r = run_json(bench, m.url, "--num-prompts", 4, "--input-len", 4, "--goodput", "ttft:5000", "e2el:10000",
                     "--api-key", "sekret", "--model", "given-model")
        r2 = run_json(bench, m.url, "--num-prompts", 4, "--input-len", 4, "--goodput", "ttft:10")
    for k in JSON_KEYS:
        assert k in r, k
    assert all(isinstance(r[k], (int, float)) for k in JSON_KEYS if k.endswith("_ms"))
    assert r["request_goodput"] == pytest.approx(r["request_throughput"])  # loose SLOs: all good
    assert r["goodput_slo_ms"] == {"ttft": 5000, "e2el": 10000}
    assert r2["completed"] == 4 and r2["request_goodput"] == 0  # TTFT ~50 ms > 10 ms
    assert r["model_id"] == "given-model"
    bodies = [q for q in m.requests]
    assert all(q["headers"].get("Authorization") == "Bearer sekret" for q in bodies[:4])
    assert all(q["body"]["model"] == "given-model" for q in bodies[:4])
    assert all(q["body"]["model"] == "mock-model" for q in bodies[4:])  # from GET /v1/models
    assert r["request_rate"] == "inf" and r["max_concurrency"] is None


def test_sharegpt_file(bench, tmp_path):
    data = [
        {"conversations": [{"from": "human", "value": "What is a GPU?"},
                           {"from": "gpt", "value": "A graphics processor, good at parallel math."}]},
        {"conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "Name a prime"},
                           {"from": "gpt", "value": "7"}, {"from": "human", "value": "another"}]},
        {"conversations": [{"from": "human", "value": "no answer here"}]},  # skipped: no gpt turn
        {"id": "no conversations"},
    ]
    f = tmp_path / "sharegpt.json"
    f.write_text(json.dumps(data))
    with MockServer(MockConfig()) as m:
        r = run_json(bench, m.url, "--dataset", f, "--num-prompts", 4)
    assert (r["completed"], r["failed"]) == (4, 0)
    sent = sorted((q["body"]["prompt"], q["body"]["max_tokens"]) for q in m.requests)
    want = {("What is a GPU?", math.ceil(len("A graphics processor, good at parallel math.") / 4)),
            ("Name a prime", 1)}
    assert set(sent) == want and len(sent) == 4  # cycled: each usable entry twice
    assert sorted(sent) == sorted(list(want) * 2)
    assert all("ignore_eos" not in q["body"] for q in m.requests)
    assert r["total_output_tokens"] == 2 * (11 + 1)
    assert r["total_input_tokens"] == 2 * (4 + 3)  # words, as the mock counts prompt tokens
    with MockServer(MockConfig()) as m:
        r = run_json(bench, m.url, "--dataset", f, "--num-prompts", 2, "--output-len", 5)
    assert all(q["body"]["max_tokens"] == 5 for q in m.requests) and r["total_output_tokens"] == 10


def test_bad_arguments_exit_2(bench, tmp_path):
    for args in ([], ["--url", "127.0.0.1:1"], ["--url", "http://x", "--request-rate", "-1"],
                 ["--url", "http://x", "--goodput", "ttfx:5"], ["--url", "http://x", "--goodput"],
                 ["--url", "http://x", "--num-prompts", "0"], ["--url", "http://x", "--bogus", "1"],
                 ["--url", "http://x", "--timeout"], ["--url", "http://x", "--endpoint", "v1/completions"],
                 ["--url", "http://x", "--request-rate", "fast"], ["--url", "http://x", "--max-concurrency", "0"]):
        p = bench(args)
        assert p.returncode == 2, (args, p.stderr)
        assert b"usage:" in p.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a list"')
    p = bench(["--url", "http://127.0.0.1:9", "--dataset", bad])
    assert p.returncode == 1 and b"not valid JSON" in p.stderr
    p = bench(["--url", "http://127.0.0.1:9", "--dataset", tmp_path / "absent.json"])
    assert p.returncode == 1 and b"absent.json" in p.stderr
    p = bench(["--url", "http://127.0.0.1:9", "--num-prompts", 1000000, "--input-len", 100000])
    assert p.returncode == 1 and b"2^28 words" in p.stderr  # refused, not an out-of-memory kill
