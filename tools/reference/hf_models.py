"""Random-weight GPT-2 and LLaMA checkpoints in Hugging Face's format, with their logits and greedy continuations.

The test fixtures of `build/convert` (tests/fixtures/hf/): each model is written out from the published
architecture definitions, in plain PyTorch (float64), not from our C++:
  GPT-2 (Radford et al. 2019; HF GPT2LMHeadModel): learned positions, pre-norm LayerNorm (eps 1e-5), gelu-tanh
    ("gelu_new"), tied input/output embeddings, biases everywhere, Conv1D weights stored [in, out], one fused c_attn.
  LLaMA (Touvron et al. 2023; HF LlamaForCausalLM): RMSNorm x / sqrt(mean(x^2) + eps) * w, RoPE on q and k in HF's
    rotate-half layout (dims i and i + D/2 pair), SwiGLU down(silu(gate x) * up x), no biases, grouped-query
    attention (query head h reads K/V head h // (heads / kv_heads)), untied head.
  llama2.c's .bin (karpathy/llama2.c run.c): the LLaMA weights with q/k rows in Meta's interleaved layout (pairs
    2i, 2i + 1), theta 10000, eps 1e-5, as its export writes them.
Weights are rounded to values that bfloat16 and float16 both hold exactly, so the f32, f16 and bf16 files hold the
same model and one reference serves all three. Greedy continuations are checked for a clear margin between the
best and second-best logit at every step (no near-tie that f32 rounding could flip).

Usage: /usr/bin/python3 tools/reference/hf_models.py OUT_DIR   (python3-torch 1.13; writes about 200 KB)
"""
import json
import math
import os
import struct
import sys

import torch

torch.set_default_dtype(torch.float64)

PROMPT_LEN, GENERATE, LOGIT_LEN = 4, 32, 16


# ---- weights ---------------------------------------------------------------------------------------------------

def representable(w):
    """w rounded to bfloat16, with magnitudes below float16's smallest normal set to 0: exact in both."""
    w = w.to(torch.bfloat16).to(torch.float64)
    w[w.abs() < 2.0 ** -14] = 0.0
    assert torch.equal(w.to(torch.float16).to(torch.float64), w)
    return w


def normal(gen, shape, std, mean=0.0):
    return representable(torch.randn(shape, generator=gen) * std + mean)


# ---- safetensors ------------------------------------------------------------------------------------------------

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}


def tensor_bytes(t, dtype):
    t = t.to(DTYPES[dtype]).contiguous()
    if dtype == "BF16":  # numpy has no bfloat16: its bits as int16
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def write_safetensors(path, tensors, dtype):
    """u64 LE header length | JSON header padded with spaces to 8 bytes | data, in the order given."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        d = "I64" if t.dtype == torch.int64 else dtype
        b = tensor_bytes(t, d)
        header[name] = {"dtype": d, "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


# ---- GPT-2 -----------------------------------------------------------------------------------------------------

GPT2 = dict(vocab_size=64, n_embd=16, n_head=4, n_layer=2, n_positions=48, layer_norm_epsilon=1e-5)


def gpt2_weights(gen):
    c = GPT2
    d, v = c["n_embd"], c["vocab_size"]
    w = {"wte.weight": normal(gen, (v, d), 0.5), "wpe.weight": normal(gen, (c["n_positions"], d), 1.0)}
    for i in range(c["n_layer"]):
        p = f"h.{i}."
        for ln in ("ln_1", "ln_2"):
            w[p + ln + ".weight"] = normal(gen, (d,), 0.1, 1.0)
            w[p + ln + ".bias"] = normal(gen, (d,), 0.1)
        for name, n_in, n_out in (("attn.c_attn", d, 3 * d), ("attn.c_proj", d, d),
                                  ("mlp.c_fc", d, 4 * d), ("mlp.c_proj", 4 * d, d)):
            w[p + name + ".weight"] = normal(gen, (n_in, n_out), 1 / math.sqrt(n_in))  # Conv1D: [in, out]
            w[p + name + ".bias"] = normal(gen, (n_out,), 0.1)
    w["ln_f.weight"] = normal(gen, (d,), 0.1, 1.0)
    w["ln_f.bias"] = normal(gen, (d,), 0.1)
    return w


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def causal_attention(q, k, v):
    """q [H, L, Dh], k and v [H, L, Dh] -> [L, H·Dh], softmax(q kᵀ / sqrt(Dh)) with a causal mask."""
    L, dh = q.shape[1], q.shape[2]
    s = q @ k.transpose(-1, -2) / math.sqrt(dh)
    s = s.masked_fill(torch.triu(torch.ones(L, L, dtype=torch.bool), 1), float("-inf"))
    return (torch.softmax(s, -1) @ v).transpose(0, 1).reshape(L, -1)


def gpt2_forward(w, ids):
    c = GPT2
    d, H, eps = c["n_embd"], c["n_head"], c["layer_norm_epsilon"]
    L = len(ids)
    h = w["wte.weight"][ids] + w["wpe.weight"][:L]
    for i in range(c["n_layer"]):
        p = f"h.{i}."
        a = layer_norm(h, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (t.reshape(L, H, d // H).transpose(0, 1) for t in qkv.split(d, -1))
        h = h + causal_attention(q, k, v) @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = layer_norm(h, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        m = gelu_new(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        h = h + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    h = layer_norm(h, w["ln_f.weight"], w["ln_f.bias"], eps)
    return h @ w["wte.weight"].T


def gpt2_config(dtype):
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
            "n_ctx": GPT2["n_positions"], "n_inner": None, "scale_attn_weights": True, "tie_word_embeddings": True,
            "torch_dtype": dtype, **GPT2}


# ---- LLaMA -----------------------------------------------------------------------------------------------------

LLAMA = dict(vocab_size=64, hidden_size=16, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
             num_hidden_layers=2, max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=1000.0)
LLAMA2C = dict(LLAMA, rms_norm_eps=1e-5, rope_theta=10000.0)  # run.c's constants


def llama_weights(gen):
    c = LLAMA
    d, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = d // c["num_attention_heads"] * c["num_key_value_heads"]
    w = {"model.embed_tokens.weight": normal(gen, (v, d), 0.5)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = normal(gen, (d,), 0.1, 1.0)
        for name, n_out, n_in in (("q_proj", d, d), ("k_proj", kv, d), ("v_proj", kv, d), ("o_proj", d, d)):
            w[p + "self_attn." + name + ".weight"] = normal(gen, (n_out, n_in), 1 / math.sqrt(n_in))
        w[p + "post_attention_layernorm.weight"] = normal(gen, (d,), 0.1, 1.0)
        for name, n_out, n_in in (("gate_proj", f, d), ("up_proj", f, d), ("down_proj", d, f)):
            w[p + "mlp." + name + ".weight"] = normal(gen, (n_out, n_in), 1 / math.sqrt(n_in))
    w["model.norm.weight"] = normal(gen, (d,), 0.1, 1.0)
    w["lm_head.weight"] = normal(gen, (v, d), 0.5)
    return w


def rms_norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), -1)


def rope_rotate_half(x, theta):
    """x [H, L, Dh]: HF's apply_rotary_pos_emb, cos and sin of p · theta^(-2i/Dh) repeated over both halves."""
    dh = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    ang = torch.arange(x.shape[1], dtype=torch.float64)[:, None] * inv_freq[None, :]
    ang = torch.cat((ang, ang), -1)
    return x * torch.cos(ang) + rotate_half(x) * torch.sin(ang)


def llama_forward(w, ids, c=LLAMA):
    d, H, G, eps = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["rms_norm_eps"]
    dh, L = d // H, len(ids)
    h = w["model.embed_tokens.weight"][ids]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        q = (a @ w[p + "self_attn.q_proj.weight"].T).reshape(L, H, dh).transpose(0, 1)
        k = (a @ w[p + "self_attn.k_proj.weight"].T).reshape(L, G, dh).transpose(0, 1)
        v = (a @ w[p + "self_attn.v_proj.weight"].T).reshape(L, G, dh).transpose(0, 1)
        q, k = rope_rotate_half(q, c["rope_theta"]), rope_rotate_half(k, c["rope_theta"])
        k, v = k.repeat_interleave(H // G, 0), v.repeat_interleave(H // G, 0)  # HF's repeat_kv
        h = h + causal_attention(q, k, v) @ w[p + "self_attn.o_proj.weight"].T
        m = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = m @ w[p + "mlp.gate_proj.weight"].T, m @ w[p + "mlp.up_proj.weight"].T
        h = h + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    h = rms_norm(h, w["model.norm.weight"], eps)
    return h @ w["lm_head.weight"].T


def llama_config(dtype):
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
            "attention_bias": False, "rope_scaling": None, "tie_word_embeddings": False, "torch_dtype": dtype,
            "bos_token_id": 1, "eos_token_id": 2, **LLAMA}


def to_interleaved(w, heads):
    """HF's rotate-half rows of q_proj / k_proj back to Meta's interleaved order (inverse of HF's permute)."""
    n, d = w.shape
    return w.reshape(heads, 2, n // heads // 2, d).transpose(1, 2).reshape(n, d)


def write_llama2c(path, w):
    """llama2.c's legacy .bin: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len), then
    f32 arrays, each stacked over the layers: embeddings, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final,
    freq_cis_real and freq_cis_imag [seq_len, head_size / 2], and the head (vocab_size > 0 means shared)."""
    c = LLAMA2C
    n, H, G, d = c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"], c["hidden_size"]
    head_size, seq_len = d // H, c["max_position_embeddings"]
    layers = lambda name, f=lambda t: t: torch.stack([f(w[f"model.layers.{i}.{name}.weight"]) for i in range(n)])
    arrays = [w["model.embed_tokens.weight"], layers("input_layernorm"),
              layers("self_attn.q_proj", lambda t: to_interleaved(t, H)),
              layers("self_attn.k_proj", lambda t: to_interleaved(t, G)),
              layers("self_attn.v_proj"), layers("self_attn.o_proj"), layers("post_attention_layernorm"),
              layers("mlp.gate_proj"), layers("mlp.down_proj"), layers("mlp.up_proj"), w["model.norm.weight"]]
    freqs = 1.0 / 10000.0 ** (torch.arange(0, head_size, 2, dtype=torch.float64) / head_size)
    ang = torch.arange(seq_len, dtype=torch.float64)[:, None] * freqs[None, :]
    arrays += [torch.cos(ang), torch.sin(ang), w["lm_head.weight"]]
    header = struct.pack("<7i", d, c["intermediate_size"], n, H, G, -c["vocab_size"], seq_len)  # < 0: untied
    with open(path, "wb") as f:
        f.write(header + b"".join(a.to(torch.float32).contiguous().numpy().tobytes() for a in arrays))


# ---- references --------------------------------------------------------------------------------------------------

def greedy(forward, prompt):
    """GENERATE tokens after `prompt`, each the argmax of the last position's logits, recomputed from scratch."""
    ids = list(prompt)
    for _ in range(GENERATE):
        last = forward(ids)[-1]
        top = torch.topk(last, 2).values
        assert top[0] - top[1] > 1e-3, f"near-tie {float(top[0] - top[1])} at step {len(ids)}: pick another seed"
        ids.append(int(last.argmax()))
    return ids[len(prompt):]


def write_reference(path, forward, gen, vocab):
    ids = torch.randint(0, vocab, (LOGIT_LEN,), generator=gen)
    logits = forward(ids.tolist())
    tokens = greedy(forward, ids[:PROMPT_LEN].tolist())
    write_safetensors(path, {"ids": ids, "logits": logits, "prompt": ids[:PROMPT_LEN],
                             "greedy": torch.tensor(tokens, dtype=torch.int64)}, "F32")
    with open(path.replace(".safetensors", ".txt"), "w") as f:  # for tests/tools/generate.sh
        f.write(",".join(map(str, ids[:PROMPT_LEN].tolist())) + "\n" + ",".join(map(str, tokens)) + "\n")


def shard(tensors, parts):
    names = list(tensors)
    size = (len(names) + parts - 1) // parts
    return [{n: tensors[n] for n in names[i * size:(i + 1) * size]} for i in range(parts)]


def main(out):
    gen = torch.Generator().manual_seed(23)
    names = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}

    g = gpt2_weights(gen)
    for dtype, torch_name in names.items():
        folder = os.path.join(out, "gpt2-" + dtype.lower())
        os.makedirs(folder, exist_ok=True)
        write_json(os.path.join(folder, "config.json"), gpt2_config(torch_name))
        if dtype == "F32":  # as GPT2LMHeadModel saves it: "transformer." names and the causal-mask buffers
            n = GPT2["n_positions"]
            mask = torch.tril(torch.ones(n, n)).reshape(1, 1, n, n)
            named = {}
            for k, v in g.items():
                named["transformer." + k] = v
                if k.endswith("attn.c_proj.bias"):
                    named["transformer." + k.replace("c_proj.bias", "bias")] = mask
            write_safetensors(os.path.join(folder, "model.safetensors"), named, dtype)
        else:  # as the hub's gpt2 files: GPT2Model's names, no prefix
            write_safetensors(os.path.join(folder, "model.safetensors"), g, dtype)
    write_reference(os.path.join(out, "gpt2_reference.safetensors"), lambda ids: gpt2_forward(g, ids), gen,
                    GPT2["vocab_size"])

    w = llama_weights(gen)
    for dtype, torch_name in names.items():
        folder = os.path.join(out, "llama-" + dtype.lower())
        os.makedirs(folder, exist_ok=True)
        write_json(os.path.join(folder, "config.json"), llama_config(torch_name))
        if dtype == "BF16":  # sharded, with the index a sharded save writes
            parts = shard(w, 2)
            files = [f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors" for i in range(len(parts))]
            weight_map = {}
            for part, name in zip(parts, files):
                write_safetensors(os.path.join(folder, name), part, dtype)
                weight_map.update({k: name for k in part})
            write_json(os.path.join(folder, "model.safetensors.index.json"),
                       {"metadata": {"total_size": 2 * sum(t.numel() for t in w.values())}, "weight_map": weight_map})
        else:
            write_safetensors(os.path.join(folder, "model.safetensors"), w, dtype)
    write_reference(os.path.join(out, "llama_reference.safetensors"), lambda ids: llama_forward(w, ids), gen,
                    LLAMA["vocab_size"])

    write_llama2c(os.path.join(out, "llama2c.bin"), w)
    write_reference(os.path.join(out, "llama2c_reference.safetensors"), lambda ids: llama_forward(w, ids, LLAMA2C),
                    gen, LLAMA["vocab_size"])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/hf")
