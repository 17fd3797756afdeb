"""safetensors + config.json parity: `aiinfra safetensors --json --data` against the
`safetensors` Python package (files written by safetensors.numpy.save_file, read back
with safe_open) and config.json against transformers.AutoConfig.

Needs the `safetensors` CLI command (src/tools/cmd_safetensors.c) registered in
src/tools/main.c; skips with a message until it is.
"""
import json

import numpy as np
import pytest

from conftest import run_cli

st_numpy = pytest.importorskip("safetensors.numpy")
safetensors = pytest.importorskip("safetensors")

DTYPES = {np.float16: "F16", np.float32: "F32", np.float64: "F64", np.int8: "I8", np.int16: "I16",
          np.int32: "I32", np.int64: "I64", np.uint8: "U8", np.uint16: "U16", np.uint32: "U32",
          np.uint64: "U64", np.bool_: "BOOL"}


@pytest.fixture(scope="module")
def st_cli(aiinfra_bin):
    p = run_cli(aiinfra_bin, ["safetensors"], check=False)
    if b"unknown command" in p.stderr:
        pytest.skip("`aiinfra safetensors` not registered in src/tools/main.c yet (cmd_safetensors.c exists)")
    return aiinfra_bin


def dump(binary, path):
    return json.loads(run_cli(binary, ["safetensors", str(path), "--json", "--data"]).stdout)


def sample_tensors(seed):
    rng = np.random.default_rng(seed)
    out = {}
    for i, dt in enumerate(DTYPES):
        shape = [(2, 3), (5,), (), (1, 2, 3, 2), (0, 4)][i % 5]
        if dt == np.bool_:
            a = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif np.issubdtype(dt, np.floating):
            a = rng.standard_normal(shape).astype(dt)
        else:
            a = rng.integers(0, 100, size=shape).astype(dt)
        out[f"layer{i}.{np.dtype(dt).name}"] = a
    return out


def compare(ours, paths):
    """ours: our JSON for a file/folder; paths: the shard files, in our shard order."""
    want = {}
    for s, p in enumerate(paths):
        with safetensors.safe_open(str(p), framework="numpy") as f:
            for k in f.keys():
                a = f.get_tensor(k)
                want[k] = (s, DTYPES[a.dtype.type], list(a.shape), a.tobytes().hex())
    got = {t["name"]: (t["shard"], t["dtype"], t["shape"], t["data"]) for t in ours["tensors"]}
    assert got == want


def test_single_file(st_cli, tmp_path):
    tensors = sample_tensors(1)
    path = tmp_path / "model.safetensors"
    st_numpy.save_file(tensors, str(path), metadata={"format": "np", "source": "test"})
    ours = dump(st_cli, path)
    compare(ours, [path])
    with safetensors.safe_open(str(path), framework="numpy") as f:
        assert ours["metadata"] == f.metadata()
    # a folder holding model.safetensors reads the same
    assert dump(st_cli, tmp_path)["tensors"] == ours["tensors"]


def test_sharded_folder(st_cli, tmp_path):
    a, b = sample_tensors(2), {f"extra.{k}": v for k, v in sample_tensors(3).items()}
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    st_numpy.save_file(a, str(tmp_path / names[0]), metadata={"format": "np"})
    st_numpy.save_file(b, str(tmp_path / names[1]), metadata={"format": "np"})
    wm = {k: names[0] for k in a} | {k: names[1] for k in b}
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 0}, "weight_map": wm}))
    ours = dump(st_cli, tmp_path)
    # shards open in first-mention order of the weight_map, which is names[0], names[1]
    compare(ours, [tmp_path / n for n in names])
    assert len(ours["tensors"]) == len(wm)


def test_corrupt_file_rejected(st_cli, tmp_path):
    path = tmp_path / "x.safetensors"
    st_numpy.save_file(sample_tensors(4), str(path))
    data = path.read_bytes()
    for cut in (0, 7, 8, 20, len(data) - 1):
        path.write_bytes(data[:cut])
        p = run_cli(st_cli, ["safetensors", str(path)], check=False)
        assert p.returncode == 1 and str(path).encode() in p.stderr, (cut, p.stderr)


CONFIGS = {
    "llama31": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
                "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 8, "vocab_size": 128256, "rope_theta": 500000.0,
                "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 8192, "rope_type": "llama3"},
                "torch_dtype": "bfloat16", "eos_token_id": [128001, 128008, 128009], "bos_token_id": 128000,
                "rms_norm_eps": 1e-5, "max_position_embeddings": 131072, "tie_word_embeddings": False},
    "qwen25": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
               "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
               "num_key_value_heads": 2, "vocab_size": 151936, "rope_theta": 1000000.0, "rope_scaling": None,
               "tie_word_embeddings": True, "torch_dtype": "bfloat16", "eos_token_id": 151643,
               "bos_token_id": 151643, "rms_norm_eps": 1e-6, "max_position_embeddings": 32768},
    "llama_defaults": {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
                       "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 1000},
    "llama_linear": {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
                     "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
                     "head_dim": 64, "vocab_size": 1000, "attention_bias": True,
                     "rope_scaling": {"type": "linear", "factor": 4.0}},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_config_vs_transformers(st_cli, tmp_path, name):
    transformers = pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text(json.dumps(CONFIGS[name]))
    st_numpy.save_file({"w": np.zeros(2, np.float32)}, str(tmp_path / "model.safetensors"))
    c = dump(st_cli, tmp_path)["config"]
    ref = transformers.AutoConfig.from_pretrained(str(tmp_path))
    for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "vocab_size", "max_position_embeddings", "tie_word_embeddings"):
        assert c[k] == getattr(ref, k), k
    assert c["model_type"] == ref.model_type
    assert c["head_dim"] == (getattr(ref, "head_dim", None) or ref.hidden_size // ref.num_attention_heads)
    if hasattr(ref, "attention_bias"):
        assert c["attention_bias"] == ref.attention_bias
    assert np.float64(c["rms_norm_eps"]) == ref.rms_norm_eps
    rp = ref.rope_parameters
    assert c["rope_theta"] == rp["rope_theta"]
    rope_type = {"default": "none"}.get(rp["rope_type"], rp["rope_type"])
    assert c["rope_type"] == rope_type
    if rope_type != "none":
        assert c["rope_factor"] == rp["factor"]
    if rope_type == "llama3":
        for k in ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
            assert c["rope_" + k] == rp[k], k
    # token ids: compared when the file has them (absent, we report none; LlamaConfig
    # would assume Llama 2's 1/2, which is the tokenizer's business, not the config's)
    if "eos_token_id" in CONFIGS[name]:
        eos = ref.eos_token_id
        assert c["eos_token_ids"] == (eos if isinstance(eos, list) else [eos])
    else:
        assert c["eos_token_ids"] == []
    if "bos_token_id" in CONFIGS[name]:
        assert c["bos_token_id"] == ref.bos_token_id
