"""Chat-template parity: `aiinfra template` vs transformers' own renderer, byte for byte.

Reference: transformers.utils.chat_template_utils.render_jinja_template (the function behind
apply_chat_template: ImmutableSandboxedEnvironment, trim_blocks/lstrip_blocks, loopcontrols,
its tojson/raise_exception/strftime_now), after _normalize_chat_messages like
apply_chat_template does. strftime_now is pinned on both sides to EPOCH in UTC.
Every template in $AIINFRA_SHARED/data/chat_templates is rendered with every conversation
below through one `--batch` CLI call per template. Where the reference raises, ours must
report an error too.
"""
import copy
import datetime as _dt
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import run_cli

EPOCH = 1764547200  # 2025-12-01T00:00:00Z
BOS, EOS = "<s>", "</s>"

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "Current time.",
    "parameters": {"type": "object", "properties": {}, "required": []}}}

SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello! What's the weather like?"}
A1 = {"role": "assistant", "content": "I can check that. Which city?"}
U2 = {"role": "user", "content": "Paris — « quotes » \"double\" and 'single',\nnew lines\n\tand emoji 🌧️."}
CALL = {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
    "name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]}
RESULT = {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
          "content": "{\"temp\": 12.5, \"sky\": \"rain\"}"}
A2 = {"role": "assistant", "content": "It is 12.5 °C and raining in Paris."}

CONVERSATIONS = {
    "single": dict(messages=[U1], gen=True),
    "single_nogen": dict(messages=[U1], gen=False),
    "system_multi": dict(messages=[SYS, U1, A1, U2], gen=True),
    "ends_assistant": dict(messages=[SYS, U1, A1], gen=False),
    "unicode_nosys": dict(messages=[U2, A2, U1], gen=True),
    "parts": dict(messages=[{"role": "user", "content": [{"type": "text", "text": "Describe:"},
                                                          {"type": "text", "text": "two parts"}]}], gen=True),
    "reasoning": dict(messages=[U1, {"role": "assistant", "content": "Sunny.",
                                     "reasoning_content": "The user wants weather."}, U2], gen=True),
    "tools_only": dict(messages=[SYS, U1], gen=True, tools=[WEATHER_TOOL, TIME_TOOL]),
    "tool_roundtrip": dict(messages=[U2, CALL, RESULT, A2], gen=False, tools=[WEATHER_TOOL]),
    "tool_roundtrip_gen": dict(messages=[SYS, U2, CALL, RESULT], gen=True, tools=[WEATHER_TOOL, TIME_TOOL]),
    "null_content": dict(messages=[U1, {"role": "assistant", "content": None, "tool_calls": CALL["tool_calls"]},
                                   RESULT], gen=True, tools=[WEATHER_TOOL]),
}


def _templates_dir():
    d = Path(os.environ.get("AIINFRA_SHARED", Path(__file__).resolve().parents[3] / "shared")) / "data/chat_templates"
    return d


TEMPLATES = sorted(p.name for p in _templates_dir().glob("*.jinja")) if _templates_dir().is_dir() else []


@pytest.fixture(scope="module")
def reference():
    os.environ["TZ"] = "UTC"
    time.tzset()
    ctu = pytest.importorskip("transformers.utils.chat_template_utils")

    class FixedDatetime(_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return _dt.datetime.fromtimestamp(EPOCH, tz)

    ctu.datetime = FixedDatetime

    def render(src, conv):
        msgs = copy.deepcopy(conv["messages"])
        if hasattr(ctu, "_normalize_chat_messages"):
            msgs = ctu._normalize_chat_messages(msgs)
        out, _ = ctu.render_jinja_template(conversations=[msgs], tools=copy.deepcopy(conv.get("tools")),
                                           chat_template=src, add_generation_prompt=conv["gen"],
                                           bos_token=BOS, eos_token=EOS)
        return out[0]
    return render


def context(conv):
    return {"messages": conv["messages"], "tools": conv.get("tools"), "documents": None,
            "add_generation_prompt": conv["gen"], "bos_token": BOS, "eos_token": EOS}


def run_batch(aiinfra_bin, tmp_path, args, contexts):
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in contexts), encoding="utf-8")
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(EPOCH), TZ="UTC")
    p = subprocess.run([aiinfra_bin, "template", *args, "--batch", str(batch)], capture_output=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    lines = p.stdout.decode("utf-8").splitlines()
    assert len(lines) == len(contexts)
    return [json.loads(x) for x in lines]


@pytest.mark.skipif(not TEMPLATES, reason="$AIINFRA_SHARED/data/chat_templates absent (../shared not mounted)")
@pytest.mark.parametrize("name", TEMPLATES)
def test_template_parity(name, aiinfra_bin, reference, tmp_path):
    src = (_templates_dir() / name).read_text(encoding="utf-8")
    names = list(CONVERSATIONS)
    ours = run_batch(aiinfra_bin, tmp_path, ["--template", str(_templates_dir() / name)],
                     [context(CONVERSATIONS[n]) for n in names])
    failures = []
    for n, got in zip(names, ours):
        try:
            want = reference(src, CONVERSATIONS[n])
        except Exception as e:  # the template rejects this conversation: ours must fail too
            if "error" not in got:
                failures.append(f"{n}: reference raised {type(e).__name__}: {e}; ours rendered")
            continue
        if "error" in got:
            failures.append(f"{n}: ours failed: {got['error']}")
        elif got["out"] != want:
            a, b = got["out"], want
            i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
            failures.append(f"{n}: differs at char {i}: ours {a[max(0, i - 40):i + 40]!r} vs ref {b[max(0, i - 40):i + 40]!r}")
    assert not failures, "\n".join(failures)


def test_single_render_matches_batch(aiinfra_bin, reference, tmp_path, shared):
    """The documented CLI form (one conversation, files) prints exactly the reference text."""
    tpl = shared / "data/chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja"
    conv = CONVERSATIONS["tool_roundtrip_gen"]
    (tmp_path / "m.json").write_text(json.dumps(conv["messages"]), encoding="utf-8")
    (tmp_path / "t.json").write_text(json.dumps(conv["tools"]), encoding="utf-8")
    p = run_cli(aiinfra_bin, ["template", "--template", str(tpl), "--messages", str(tmp_path / "m.json"),
                              "--tools", str(tmp_path / "t.json"), "--add-generation-prompt", "--bos", BOS, "--eos", EOS])
    assert p.stdout.decode("utf-8") == reference(tpl.read_text(encoding="utf-8"), conv)


def test_raise_exception_fails_cli(aiinfra_bin, tmp_path):
    (tmp_path / "t.jinja").write_text("a\n{% if messages|length > 1 %}{{ raise_exception('too many: ' ~ messages|length) }}{% endif %}")
    (tmp_path / "m.json").write_text(json.dumps([U1, A1]))
    p = run_cli(aiinfra_bin, ["template", "--template", str(tmp_path / "t.jinja"), "--messages", str(tmp_path / "m.json")], check=False)
    assert p.returncode == 1 and p.stdout == b""
    assert b"too many: 2" in p.stderr and b"line 2" in p.stderr


def test_usage_errors(aiinfra_bin, tmp_path):
    assert run_cli(aiinfra_bin, ["template"], check=False).returncode == 2
    assert run_cli(aiinfra_bin, ["template", "--template", "x", "--bogus"], check=False).returncode == 2
    (tmp_path / "t.jinja").write_text("{{ x | xmlattr }}")
    (tmp_path / "m.json").write_text("[]")
    p = run_cli(aiinfra_bin, ["template", "--template", str(tmp_path / "t.jinja"), "--messages", str(tmp_path / "m.json")], check=False)
    assert p.returncode == 1 and b"line 1: unsupported filter 'xmlattr'" in p.stderr


# --- -m MODEL paths: tokenizer_config.json, HF folder, GGUF

def _hf_reference(reference, template, conv, bos, eos):
    import transformers.utils.chat_template_utils as ctu
    msgs = ctu._normalize_chat_messages(copy.deepcopy(conv["messages"]))
    out, _ = ctu.render_jinja_template(conversations=[msgs], tools=conv.get("tools"), chat_template=template,
                                       add_generation_prompt=conv["gen"], bos_token=bos, eos_token=eos)
    return out[0]


def _tok_text(t):
    return t.get("content") if isinstance(t, dict) else t


@pytest.mark.parametrize("model", ["llama3", "qwen3", "llama2"])
@pytest.mark.parametrize("as_file", [False, True])
def test_model_folder(model, as_file, aiinfra_bin, reference, tokdata, tmp_path):
    folder = tokdata / "hf" / model
    cfg = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    if "chat_template" not in cfg:
        pytest.skip(f"{model}: tokenizer_config.json has no chat_template")
    template = cfg["chat_template"]
    if isinstance(template, list):
        template = next(t["template"] for t in template if t["name"] == "default")
    path = folder / "tokenizer_config.json" if as_file else folder
    names = ["system_multi", "single", "ends_assistant"]
    ours = run_batch(aiinfra_bin, tmp_path, ["-m", str(path)], [
        {k: v for k, v in context(CONVERSATIONS[n]).items() if k not in ("bos_token", "eos_token")} for n in names])
    for n, got in zip(names, ours):
        try:
            want = _hf_reference(reference, template, CONVERSATIONS[n], _tok_text(cfg.get("bos_token")), _tok_text(cfg.get("eos_token")))
        except Exception:
            assert "error" in got, n
            continue
        assert got.get("out") == want, f"{model}/{n}: {got}"


@pytest.mark.parametrize("vocab", ["ggml-vocab-phi-3.gguf"])  # qwen2 works too; its 151k-token vocab takes gguf.GGUFReader 40 s
def test_model_gguf(vocab, aiinfra_bin, reference, tokdata, tmp_path):
    gg = pytest.importorskip("gguf")
    path = tokdata / "gguf" / vocab
    r = gg.GGUFReader(str(path))

    def field_str(f):
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    template = field_str(r.fields["tokenizer.chat_template"])
    toks = r.fields["tokenizer.ggml.tokens"]

    def tok(key):
        if key not in r.fields:
            return None
        i = int(r.fields[key].parts[r.fields[key].data[0]][0])
        return bytes(toks.parts[toks.data[i]]).decode("utf-8")
    bos, eos = tok("tokenizer.ggml.bos_token_id"), tok("tokenizer.ggml.eos_token_id")
    names = ["system_multi", "single"]
    ours = run_batch(aiinfra_bin, tmp_path, ["-m", str(path)], [
        {k: v for k, v in context(CONVERSATIONS[n]).items() if k not in ("bos_token", "eos_token")} for n in names])
    for n, got in zip(names, ours):
        want = _hf_reference(reference, template, CONVERSATIONS[n], bos, eos)
        assert got.get("out") == want, f"{vocab}/{n}: {got}"


# --- language snippets (Python/Jinja2 semantics) checked live against the same reference environment

SNIPPETS = [
 "{{ {'b': 1, 'a': 'é'} | tojson(sort_keys=true) }}{{ [1,'x'] | tojson(separators=(',', ':')) }}{{ 'é' | tojson(ensure_ascii=true) }}",
 "{% filter upper %}ab{{ 'c' }}{% endfilter %}|{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}",
 "{% for i in range(3) %}{{ loop.cycle('a','b') }}{{ loop.previtem }}{% endfor %}|{{ dict(a=1, b=[2]) }}|{{ none is sameas none }}",
 "{{ '\\u00e9\\x41\\n\\'' }}|{{ \"a\" 'b' }}|{{ 1 if false }}|{{ [1,2,3][1:] }}|{{ (1,) }}|{{ ('a', 2) }}",
 "{% set a, b = 1, 2 %}{{ a }}{{ b }}{{ [1,2] + [3] }}{{ 'ab' * 2 }}{{ 5 / 2 }}{{ 2 ** -1 }}{{ 1.5e300 * 1e10 }}",
 "{{ x|default('d') }}{{ ''|default('e', true) }}{{ [3,1]|max }}{{ ['a','B']|min }}{{ [1,2.5]|sum }}{{ 'a b c'|wordcount }}",
 "{{ 'a-b_c d'.split('-') }}{{ '  '.join(['a','b']) }}{{ 'abc'.find('c') }}{{ 'aaa'.count('a') }}{{ 'x{}y{}'.format(1, 'z') }}",
 "{{ [1,2,3]|batch(2)|list }}{{ 'abc'|list }}{{ {'a':1}|items|list }}{{ [1,1,'A','a']|unique|list }}{{ 'abc'|reverse }}",
 "{{ 0.0 }}{{ -0.0 }}{{ 1e16 }}{{ 1e15 }}{{ 123.456 }}{{ 1/3 }}{{ 100.0 }}{{ 2.5e-5 }}{{ 1e-4 }}",
 "{% for m in msgs %}{{ m.content is string }}{{ m.x is none }}{{ m['y'] }}{{ m.get('z', 'Z') }}{% endfor %}{{ msgs|length }}",
 "{{ \"it's\" }}{{ [\"it's\", 'a\"b', 'a\\'b\"c'] }}{{ ['\\n\\t\\x01é\\u200b'] }}",
 "{%- set x = 3 -%}\n  {{- x -}}  \n{# c #}\n  {% if x %}\n    y\n  {% endif %}\n",
]


def test_snippets(aiinfra_bin, reference, tmp_path):
    import transformers.utils.chat_template_utils as ctu
    ctx = {"messages": [], "msgs": [{"content": "hi", "x": None, "y": 1.5}]}
    bad = []
    for i, src in enumerate(SNIPPETS):
        want = ctu._compile_jinja_template(src).render(**ctx)
        (tmp_path / "t.jinja").write_text(src, encoding="utf-8")
        got = run_batch(aiinfra_bin, tmp_path, ["--template", str(tmp_path / "t.jinja")], [ctx])[0]
        if got.get("out") != want:
            bad.append(f"snippet {i} {src[:50]!r}: ours {got} want {want!r}")
    assert not bad, "\n".join(bad)
