#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets (tests/fuzz/seeds/<target>/): one small valid input of each
format, from which libFuzzer mutates. Run from the repository root; the seeds are committed."""
import gzip, json, os, struct, zlib

def put(target, name, data):
    d = os.path.join("tests/fuzz/seeds", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

header = json.dumps({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                     "i": {"dtype": "I64", "shape": [1], "data_offsets": [16, 24]},
                     "__metadata__": {"step": "3"}}).encode()
header += b" " * ((8 - len(header) % 8) % 8)
put("safetensors", "two_tensors", struct.pack("<Q", len(header)) + header + struct.pack("<4f", 1, 2, 3, 4) +
    struct.pack("<q", 7))

images = struct.pack(">I", 0x803) + struct.pack(">3I", 2, 2, 2) + bytes(range(8))
labels = struct.pack(">I", 0x801) + struct.pack(">I", 3) + bytes([1, 2, 3])
put("idx", "images", bytes([3]) + images)
put("idx", "labels", bytes([1]) + labels)
put("idx", "images_gz", bytes([3]) + gzip.compress(images, mtime=0))

put("cifar10", "two_records", (bytes([3]) + bytes(range(256)) * 12) * 2)

put("text", "sentence", bytes([4]) + b"The quick brown fox jumps over the lazy dog, twice: the quick brown fox.")

payload = b"hello hello hello, deflate me " * 4
put("gunzip", "gzip", gzip.compress(payload, mtime=0))
put("gunzip", "zlib", zlib.compress(payload))
raw = zlib.compressobj(9, zlib.DEFLATED, -15)
put("gunzip", "raw", raw.compress(payload) + raw.flush())

put("cli", "flags", b"\0".join([b"copy", b"--steps", b"5", b"--lr=0.1", b"--fixed", b"--attn-opt", b"window=3",
                                 b"--task", b"sort", b"--attn-opt=causal=true"]))

# Tokenizers: the smallest valid file of each format (256 byte tokens, a few merges), and a text for tokenize.
def spell(b):
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for x in range(256):
        if x not in bs:
            bs.append(x)
            cs.append(256 + n)
            n += 1
    return "".join(chr(dict(zip(bs, cs))[x]) for x in b), bs

_, order = spell(b"")
gpt_vocab = {spell(bytes([b]))[0]: i for i, b in enumerate(order)}
for piece in ["th", "Ġt", "Ġth", "<|endoftext|>"]:
    gpt_vocab[piece] = len(gpt_vocab)
gpt_merges = ["t h", "Ġ t", "Ġt h"]
put("gpt2_vocab", "three_merges", json.dumps(gpt_vocab, ensure_ascii=False).encode() + b"\0" +
    ("#version: 0.2\n" + "\n".join(gpt_merges) + "\n").encode())
put("tokenizer_json", "byte_level", json.dumps({
    "added_tokens": [{"id": 259, "content": "<|endoftext|>", "special": True}],
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
    "model": {"type": "BPE", "vocab": gpt_vocab, "merges": gpt_merges}}, ensure_ascii=False).encode())
sp_vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
for b in range(256):
    sp_vocab["<0x%02X>" % b] = len(sp_vocab)
for piece in ["\u2581", "a", "b", "\u2581a", "ab"]:
    sp_vocab[piece] = len(sp_vocab)
put("tokenizer_json", "sentencepiece", json.dumps({
    "added_tokens": [{"id": 0, "content": "<unk>", "special": True}, {"id": 1, "content": "<s>", "special": True},
                     {"id": 2, "content": "</s>", "special": True}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                       {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": None,
    "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True, "vocab": sp_vocab,
              "merges": [["\u2581", "a"], ["a", "b"]]}}, ensure_ascii=False).encode())
pieces = [(0.0, b"<unk>"), (0.0, b"\n<s>\n"), (0.0, b"\n</s>\n")] + [(0.0, b"<0x%02X>" % b) for b in range(256)]
pieces += [(0.0, b" "), (0.0, b"a"), (0.0, b"b"), (-1.0, b"ab"), (-2.0, b" a")]
put("tokenizer_bin", "five_tokens", struct.pack("<i", 6) + b"".join(struct.pack("<fi", s, len(p)) + p for s, p in pieces))
put("tokenize", "mixed", "the cat's hat, Über 日本 ▁ 12 <|endoftext|>\n".encode() + b"\xff\xe2\x82 end")
