#!/usr/bin/env python3
"""Cuts the default model (SmolLM2-135M-Instruct Q4_1) down to a GPU test fixture small enough to travel
to the GPU machine: the first N_LAYERS blocks and the first N_VOCAB rows of the embedding, weights byte for
byte as stored (Q4_1 matrices, Q8_0 embedding, f32 norms), no tokenizer. The result is a real-weights
Llama-family GGUF on which the CPU and CUDA backends must agree (tests/unit/test_cuda_runner.c reads it
from $AIINFRA_GPU_GGUF). Usage: make_gpu_fixture.py SRC.gguf DST.gguf"""
import sys

import gguf
import numpy as np

N_LAYERS, N_VOCAB = 8, 8192


def main(src, dst):
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, "llama")
    for key in ["llama.context_length", "llama.embedding_length", "llama.feed_forward_length",
                "llama.attention.head_count", "llama.attention.head_count_kv", "llama.rope.freq_base",
                "llama.attention.layer_norm_rms_epsilon", "llama.rope.dimension_count"]:
        f = r.fields[key]
        v = f.parts[f.data[0]][0]
        if f.types[0] == gguf.GGUFValueType.FLOAT32:
            w.add_float32(key, float(v))
        else:
            w.add_uint32(key, int(v))
    w.add_uint32("llama.block_count", N_LAYERS)
    w.add_uint32("llama.vocab_size", N_VOCAB)
    w.add_string("general.name", f"SmolLM2-135M-Instruct Q4_1, first {N_LAYERS} blocks, {N_VOCAB} tokens")
    for t in r.tensors:
        name = t.name
        if name.startswith("blk.") and int(name.split(".")[1]) >= N_LAYERS:
            continue
        data = np.asarray(t.data)
        if name == "token_embd.weight":  # rows of raw block bytes: keep the first N_VOCAB
            data = data[:N_VOCAB]
        w.add_tensor(name, data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
