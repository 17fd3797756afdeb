"""GGUF reader parity: `aiinfra gguf --json` against the gguf Python package (GGUFReader).

References (independent of our C code):
  - the real vocabulary GGUFs from llama.cpp in $AIINFRA_DATA/tokenizers/gguf/*.gguf
  - files written by gguf.GGUFWriter here: every value type, arrays, and one tensor of
    every ggml type the package knows (checks our block sizes / byte sizes), at a custom
    alignment.
Compared: keys in order, value types, every value (all array elements), the tensor table
(name, type, shape, absolute data offset, byte size). Then the CLI must reject corrupt
files (truncated real file, unknown ggml type ids) with exit status 1 and a message.
"""
import json
import math
import struct

import numpy as np
import pytest

from conftest import run_cli

gguf = pytest.importorskip("gguf")
VT = gguf.GGUFValueType


def cli_json(binary, path):
    p = run_cli(binary, ["gguf", str(path), "--json"])
    return json.loads(p.stdout)


def same_value(vtype, ours, theirs):
    if vtype == VT.FLOAT32:
        a, b = np.float32(ours), np.float32(theirs)
        return (math.isnan(a) and math.isnan(b)) or a == b
    if vtype == VT.FLOAT64:
        return (math.isnan(ours) and math.isnan(theirs)) or float(ours) == float(theirs)
    if vtype == VT.BOOL:
        return bool(ours) == bool(theirs)
    return ours == theirs


def compare(ours, reader):
    # the reader also lists the header as pseudo-fields (GGUF.version, ...) at offsets < 24
    fields = [f for f in reader.fields.values() if f.offset >= 24]
    assert [k["key"] for k in ours["kv"]] == [f.name for f in fields], "keys or their order differ"
    for k, f in zip(ours["kv"], fields):
        t = f.types[0]
        assert k["type"] == t.name.lower(), f"{f.name}: type"
        if t == VT.ARRAY:
            et, n = VT(int(f.parts[3][0])), int(f.parts[4][0])
            assert k["elem_type"] == et.name.lower(), f"{f.name}: element type"
            assert k["n"] == n, f"{f.name}: count"
            if et == VT.ARRAY:
                continue  # nested arrays: parsed and counted, values not exposed
            theirs = f.contents()
            assert len(k["value"]) == n == len(theirs)
            bad = [j for j, (a, b) in enumerate(zip(k["value"], theirs)) if not same_value(et, a, b)]
            assert not bad, f"{f.name}: element {bad[0]}: ours {k['value'][bad[0]]!r} vs {theirs[bad[0]]!r}"
        else:
            assert same_value(t, k["value"], f.contents()), f"{f.name}: {k['value']!r} vs {f.contents()!r}"
    assert len(ours["tensors"]) == len(reader.tensors)
    for t, rt in zip(ours["tensors"], reader.tensors):
        assert t["name"] == rt.name
        assert t["type_id"] == int(rt.tensor_type)
        assert t["type"].lower() == rt.tensor_type.name.lower()
        assert t["shape"] == [int(x) for x in rt.shape]
        assert ours["data_offset"] + t["offset"] == rt.data_offset, rt.name
        assert t["nbytes"] == rt.n_bytes, rt.name
    if reader.tensors:
        assert ours["data_offset"] == reader.data_offset
        assert ours["alignment"] == reader.alignment


# GGUFReader itself needs 5-20 s per large vocabulary (it builds numpy views of every element),
# so `make test` checks the two SentencePiece vocabularies (32k tokens, with scores and token
# types: every array kind) and AIINFRA_FULL_PARITY=1 checks all seven.
QUICK = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf"}


def real_gguf_files():
    import os
    from pathlib import Path
    d = Path(os.environ.get("AIINFRA_DATA", Path(__file__).resolve().parents[2] / "build/data")) / "tokenizers/gguf"
    files = sorted(d.glob("*.gguf")) if d.is_dir() else []
    if os.environ.get("AIINFRA_FULL_PARITY") != "1":
        files = [f for f in files if f.name in QUICK]
    return files


@pytest.mark.parametrize("path", real_gguf_files() or [None], ids=lambda p: p.name if p else "absent")
def test_real_files(aiinfra_bin, path):
    if path is None:
        pytest.skip("no $AIINFRA_DATA/tokenizers/gguf/*.gguf (run `make data`)")
    ours = cli_json(aiinfra_bin, path)
    reader = gguf.GGUFReader(path)
    assert ours["version"] in (2, 3)
    compare(ours, reader)
    # the vocabulary is there in full
    toks = next(k for k in ours["kv"] if k["key"] == "tokenizer.ggml.tokens")
    assert toks["n"] > 1000


def write_all_types(path, with_tensors):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_custom_alignment(64)
    w.add_uint8("t.u8", 250)
    w.add_int8("t.i8", -128)
    w.add_uint16("t.u16", 65535)
    w.add_int16("t.i16", -32768)
    w.add_uint32("t.u32", 4294967295)
    w.add_int32("t.i32", -2147483648)
    w.add_float32("t.f32", 1e-6)
    w.add_float32("t.f32nan", float("nan"))
    w.add_float32("t.f32inf", float("-inf"))
    w.add_bool("t.bool", False)
    w.add_uint64("t.u64", 2**64 - 1)
    w.add_int64("t.i64", -(2**63))
    w.add_float64("t.f64", 0.1)
    w.add_string("t.str", 'quote " backslash \\ newline \n tab \t ctrl \x01 中文 😀')
    w.add_array("t.arr.str", ["a", "", "b\x00c", "ünï"])
    w.add_key_value("t.arr.u64", [0, 2**64 - 1], VT.ARRAY, VT.UINT64)
    w.add_key_value("t.arr.i8", [-1, 0, 127], VT.ARRAY, VT.INT8)
    w.add_key_value("t.arr.f64", [1.5, -1e300], VT.ARRAY, VT.FLOAT64)
    w.add_key_value("t.arr.bool", [True, False, True], VT.ARRAY, VT.BOOL)
    w.add_key_value("t.arr.f32", [0.1, 3.4e38, -0.0], VT.ARRAY, VT.FLOAT32)
    if with_tensors:
        for qt in gguf.GGMLQuantizationType:
            blk, tsz = gguf.GGML_QUANT_SIZES[qt]
            raw = (np.arange(3 * 2 * tsz) % 251).astype(np.uint8).reshape(3, 2 * tsz)
            w.add_tensor(f"t.{qt.name.lower()}", raw, raw_dtype=qt)
        w.add_tensor("t.f32.4d", np.ones((2, 3, 1, 5), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("with_tensors", [False, True])
def test_writer_file(aiinfra_bin, tmp_path, with_tensors):
    path = tmp_path / "all.gguf"
    write_all_types(path, with_tensors)
    ours = cli_json(aiinfra_bin, path)
    compare(ours, gguf.GGUFReader(path))
    assert ours["alignment"] == 64
    if with_tensors:
        # every ggml type the package knows, with its byte size (block table parity)
        got = {t["type_id"] for t in ours["tensors"]}
        assert got == {int(q) for q in gguf.GGMLQuantizationType}
    s = next(k for k in ours["kv"] if k["key"] == "t.str")
    assert s["value"].endswith("中文 😀")
    # text mode runs and shows the types and tensor table
    txt = run_cli(aiinfra_bin, ["gguf", str(path)]).stdout.decode()
    assert '"t.arr.str"  string[4]  ["a", "", "b\\x00c", "ünï"]' in txt
    assert '"t.u64"  uint64  18446744073709551615' in txt


def minimal_tensor_file(path, ggml_type):
    """One 32-element tensor of type ggml_type, written by hand (struct.pack)."""
    name = b"w"
    b = b"GGUF" + struct.pack("<IQQ", 3, 1, 0)
    b += struct.pack("<Q", len(name)) + name + struct.pack("<IQIQ", 1, 256, ggml_type, 0)
    b += b"\0" * (-len(b) % 32) + b"\0" * 4096
    path.write_bytes(b)


def test_unknown_ggml_types_rejected(aiinfra_bin, tmp_path):
    known = {int(q) for q in gguf.GGMLQuantizationType}
    path = tmp_path / "t.gguf"
    for tid in [x for x in range(0, max(known) + 3) if x not in known] + [2**32 - 1]:
        minimal_tensor_file(path, tid)
        p = run_cli(aiinfra_bin, ["gguf", str(path)], check=False)
        assert p.returncode == 1, tid
        assert f"unknown ggml type {tid}".encode() in p.stderr
    minimal_tensor_file(path, 8)  # q8_0: 256 elements = 8 blocks of 34 bytes
    t = cli_json(aiinfra_bin, path)["tensors"][0]
    assert (t["type"], t["nbytes"]) == ("q8_0", 8 * 34)


def test_corrupt_real_file(aiinfra_bin, tmp_path):
    files = real_gguf_files()
    if not files:
        pytest.skip("no real GGUF files")
    data = files[0].read_bytes()
    bad = tmp_path / "cut.gguf"
    for cut in (3, 24, 100, len(data) // 2, len(data) - 1):
        bad.write_bytes(data[:cut])
        p = run_cli(aiinfra_bin, ["gguf", str(bad)], check=False)
        assert p.returncode == 1 and str(bad).encode() in p.stderr, (cut, p.stderr)
    bad.write_bytes(data[:4] + struct.pack("<I", 1) + data[8:])
    p = run_cli(aiinfra_bin, ["gguf", str(bad)], check=False)
    assert p.returncode == 1 and b"GGUF v1 is not supported" in p.stderr
