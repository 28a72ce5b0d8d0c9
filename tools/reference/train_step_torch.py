"""PyTorch's training step on the model of `build/bench train`, for its --vs-torch comparison.

A decoder-only transformer: learned positions, pre-LayerNorm blocks (causal softmax attention with a fused QKV
projection, GELU feed-forward), a final LayerNorm and a linear head; next-token cross-entropy on random tokens,
Adam. Prints one JSON line with tokens_per_s (total tokens / total time of the timed steps).
Needs python3-torch (Debian's 1.13); bench train runs it with jemalloc and passive OpenMP waits when present.
Usage: python3 train_step_torch.py LAYERS D_MODEL HEADS D_FF VOCAB BATCH SEQ THREADS STEPS
"""
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads, d_ff):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, d_ff), nn.Linear(d_ff, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        y = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v
        x = x + self.out(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Model(nn.Module):
    def __init__(self, layers, d, heads, d_ff, vocab, seq):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList([Block(d, heads, d_ff) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, ids):
        t = ids.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        x = self.tok(ids) + self.pos(torch.arange(t))
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln(x))


def main():
    layers, d, heads, d_ff, vocab, batch, seq, threads, steps = map(int, sys.argv[1:10])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Model(layers, d, heads, d_ff, vocab, seq).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    data = torch.randint(0, vocab, (steps + 2, batch, seq + 1))

    def step(i):
        logits = model(data[i, :, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), data[i, :, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for i in range(2):  # warm-up, as bench train does
        step(i)
    t0 = time.perf_counter()
    for i in range(2, steps + 2):
        step(i)
    seconds = (time.perf_counter() - t0) / steps
    print(json.dumps({"torch": torch.__version__, "threads": threads, "s_per_step": seconds,
                      "tokens_per_s": batch * seq / seconds}), flush=True)


if __name__ == "__main__":
    main()
