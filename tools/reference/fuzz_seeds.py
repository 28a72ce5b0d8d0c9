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
