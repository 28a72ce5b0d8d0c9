#!/usr/bin/env python3
"""Reference BPE tokenizers, written from the published algorithms and not from our C++, and the fixtures the C++
tests compare against (tests/test_tokenizer_reference.cpp). Run from the repository root:

    python3 tools/reference/bpe_reference.py      # needs Python 3 and the `regex` module; Debian's dpkg installed

It writes tests/data/tokenizer/:
  corpus.txt.gz           every manual page of Debian's dpkg package (1.21.22 on Debian 12: English and its translations
                          into German, French, Dutch, Portuguese, Swedish, Spanish, Italian, Japanese, Polish and
                          Hungarian), in path order, rendered to UTF-8 text by groff: about 1.06 MB, 17,800 characters
                          of it non-ASCII; GPL-2+ like dpkg (its /usr/share/doc/dpkg/copyright)
  gpt2_vocab.json, gpt2_merges.txt, gpt2_tokenizer.json
                          byte-level BPE trained on the corpus's first TRAIN_BYTES bytes, GPT-2's files and the same
                          tokenizer as Hugging Face's tokenizer.json
  sp_tokenizer.json       SentencePiece-style BPE (▁ for spaces, byte fallback <0xNN>) trained on the same text
  sp_tokenizer.bin        that tokenizer in llama2.c's format, scores = -rank of the merge that makes each token
  gpt2_ids.u16.gz, sp_ids.u16.gz
                          the whole corpus encoded, little-endian uint16 ids
  llama2c_ids.u16.gz      the corpus's first LLAMA2C_LINES lines, each encoded alone by llama2.c's algorithm: per line
                          a uint16 count, then the ids

Algorithms:
  GPT-2: the pre-tokenisation regular expression of GPT-2's encoder.py, run by the `regex` module; bytes mapped to
  characters by its bytes_to_unicode(); its bpe() loop (merge every occurrence of the lowest-ranked pair, repeat).
  Text that is not UTF-8 is read with surrogateescape, so each bad byte is one character outside letters, numbers
  and spaces.
  SentencePiece-style: a space before the text, spaces as ▁, characters outside the vocabulary as <0xNN> byte tokens;
  the same bpe() loop, per word (a word runs from one ▁ to the next: the trained vocabulary has no token with a ▁
  inside, so no merge crosses that boundary and per-word equals whole-text).
  Training (both): count words, repeatedly merge the most frequent adjacent pair, recounting every pair from
  scratch; ties to the smallest (left bytes, right bytes).
  llama2.c: run.c's encode(): dummy-prefix space, characters or bytes + 3, then repeatedly merge the adjacent pair
  whose concatenation is the vocabulary's highest-scored piece (leftmost on ties).
"""
import glob, gzip, json, os, struct, subprocess, sys
import regex

OUT = "tests/data/tokenizer"
TRAIN_BYTES = 200_000
VOCAB = 800
MIN_COUNT = 2
COVERAGE = 0.9995
LLAMA2C_LINES = 2000
GPT2_PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def corpus_bytes():
    """dpkg's manual pages rendered as groff renders them for a UTF-8 terminal 100 columns wide, overstrikes
    removed: the troff sources spell their accents as escapes (\\(:u), the rendered text in UTF-8."""
    pages = subprocess.run(["dpkg", "-L", "dpkg"], capture_output=True, text=True, check=True).stdout.split("\n")
    pages = sorted(p for p in pages if p.startswith("/usr/share/man/") and p.endswith(".gz") and os.path.isfile(p))
    render = "zcat \"$0\" | preconv -e UTF-8 | groff -Tutf8 -man -rLL=100n -rHY=0 -P-c 2>/dev/null | col -bx"
    return b"".join(subprocess.run(["sh", "-c", render, p], capture_output=True, check=True).stdout for p in pages)


def check_unicode_classes(text):
    """The C++ tables are the Unicode Character Database of Debian's unicode-data (tools/reference/unicode_tables.py),
    `regex` may be of another version: the corpus must hold no character whose class the two disagree on."""
    import unicode_tables
    cats, spaces = unicode_tables.categories(), unicode_tables.white_space()
    for c in set(text):
        cp, cat = ord(c), cats.get(ord(c), "Cn")
        ours = "L" if cat[0] == "L" else "N" if cat[0] == "N" else "s" if cp in spaces else "o"
        theirs = ("L" if regex.match(r"\p{L}", c) else "N" if regex.match(r"\p{N}", c)
                  else "s" if regex.match(r"\s", c) else "o")
        assert ours == theirs, f"U+{cp:04X}: class {ours} in the UCD tables, {theirs} in regex"


# ---- GPT-2 (encoder.py) ----
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return bs, dict(zip(bs, map(chr, cs)))


BYTE_ORDER, BYTE_ENCODER = bytes_to_unicode()


def gpt2_words(data):
    text = data.decode("utf-8", errors="surrogateescape")
    return [w.encode("utf-8", errors="surrogateescape") for w in GPT2_PATTERN.findall(text)]


def bpe_loop(symbols, ranks):
    """encoder.py's bpe(): symbols is a tuple of strings; returns the merged tuple."""
    word = tuple(symbols)
    while len(word) > 1:
        pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
        bigram = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if bigram not in ranks:
            break
        first, second = bigram
        new, i = [], 0
        while i < len(word):
            if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
                new.append(first + second)
                i += 2
            else:
                new.append(word[i])
                i += 1
        word = tuple(new)
    return word


# ---- training (both kinds): words are tuples of symbols (bytes objects); `mergeable` says which may pair ----
def train(word_counts, base_vocab, mergeable, target):
    words = {w: list(syms) for w, syms in word_counts[0].items()}
    counts = word_counts[1]
    vocab = list(base_vocab)
    known = set(vocab)
    merges = []
    while len(vocab) < target:
        pairs = {}
        for w, syms in words.items():
            for a, b in zip(syms, syms[1:]):
                if mergeable(a) and mergeable(b):
                    pairs[(a, b)] = pairs.get((a, b), 0) + counts[w]
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p[0], p[1]))
        if pairs[best] < MIN_COUNT:
            break
        merges.append(best)
        joined = best[0] + best[1]
        if joined not in known:
            known.add(joined)
            vocab.append(joined)
        for w, syms in words.items():
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == best[0] and syms[i + 1] == best[1]:
                    out.append(joined)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            words[w] = out
    return vocab, merges


def count(words):
    c = {}
    for w in words:
        c[w] = c.get(w, 0) + 1
    return c


# ---- byte-level ----
def train_gpt2(data):
    counts = count(gpt2_words(data))
    base = [bytes([b]) for b in BYTE_ORDER]
    vocab, merges = train(({w: [bytes([b]) for b in w] for w in counts}, counts), base, lambda s: True, VOCAB - 1)
    return vocab + [b"<|endoftext|>"], merges


def spell(b):
    return "".join(BYTE_ENCODER[x] for x in b)


def write_gpt2(vocab, merges):
    pieces = {(spell(t) if t != b"<|endoftext|>" else "<|endoftext|>"): i for i, t in enumerate(vocab)}
    with open(f"{OUT}/gpt2_vocab.json", "w", encoding="utf-8") as f:
        json.dump(pieces, f, ensure_ascii=False)
    with open(f"{OUT}/gpt2_merges.txt", "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{spell(a)} {spell(b)}\n" for a, b in merges))
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tj = {"version": "1.0", "truncation": None, "padding": None,
          "added_tokens": [{"id": len(vocab) - 1, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": True, "special": True}],
          "normalizer": None, "pre_tokenizer": level, "post_processor": level, "decoder": level,
          "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                    "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": pieces,
                    "merges": [[spell(a), spell(b)] for a, b in merges]}}
    with open(f"{OUT}/gpt2_tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=1)


def encode_gpt2(data, vocab, merges):
    ranks = {(spell(a), spell(b)): i for i, (a, b) in enumerate(merges)}
    ids = {spell(t): i for i, t in enumerate(vocab[:-1])}
    cache, out = {}, []
    for w in gpt2_words(data):
        if w not in cache:
            cache[w] = [ids[s] for s in bpe_loop([BYTE_ENCODER[b] for b in w], ranks)]
        out += cache[w]
    return out


# ---- SentencePiece-style ----
def utf8_chars(b):
    """Well-formed UTF-8 characters as bytes objects; a byte that starts none is (None, byte)."""
    out, i = [], 0
    while i < len(b):
        for n in (1, 2, 3, 4):
            try:
                b[i:i + n].decode("utf-8")
                out.append(b[i:i + n])
                i += n
                break
            except UnicodeDecodeError:
                continue
        else:
            out.append((None, b[i]))
            i += 1
    return out


def sp_words(data):
    s = b" " + data if data else b""
    starts = [i for i in range(len(s)) if s[i:i + 1] == b" "]
    return [s[a:b] for a, b in zip(starts, starts[1:] + [len(s)])]


def sp_symbols(word, chars):
    syms = []
    for c in utf8_chars(word):
        if isinstance(c, bytes) and c in chars:
            syms.append(c)
        else:
            raw = bytes([c[1]]) if isinstance(c, tuple) else c
            syms += [("byte", x) for x in raw]
    return syms


def train_sp(data):
    counts = count(sp_words(data))
    char_counts = {}
    for w, n in counts.items():
        for c in utf8_chars(w):
            if isinstance(c, bytes):
                char_counts[c] = char_counts.get(c, 0) + n
    total = sum(char_counts.values())
    alphabet, covered = [], 0
    for c in sorted(char_counts, key=lambda c: (-char_counts[c], c)):
        if covered >= COVERAGE * total:
            break
        alphabet.append(c)
        covered += char_counts[c]
    if b" " not in alphabet:
        alphabet.append(b" ")
    chars = set(alphabet)
    base = [("special", "<unk>"), ("special", "<s>"), ("special", "</s>")] + [("byte", b) for b in range(256)] + alphabet
    vocab, merges = train(({w: sp_symbols(w, chars) for w in counts}, counts), base,
                          lambda s: isinstance(s, bytes), VOCAB)
    return vocab, merges


def sp_piece(t):
    if isinstance(t, tuple):
        return t[1] if t[0] == "special" else "<0x%02X>" % t[1]
    return t.decode("utf-8").replace(" ", "\u2581")


def write_sp(vocab, merges):
    pieces = {sp_piece(t): i for i, t in enumerate(vocab)}
    added = [{"id": i, "content": sp_piece(t), "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(vocab) if t[0:1] == ("special",)[0:1]
             and isinstance(t, tuple) and t[0] == "special"]
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
          "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                             {"type": "Replace", "pattern": {"String": " "},
                                                              "content": "\u2581"}]},
          "pre_tokenizer": None, "post_processor": None,
          "decoder": {"type": "Sequence", "decoders": [
              {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
              {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
          "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                    "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "vocab": pieces,
                    "merges": [f"{sp_piece(a)} {sp_piece(b)}" for a, b in merges]}}
    with open(f"{OUT}/sp_tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=1)


def encode_sp(data, vocab, merges):
    ranks = {(a, b): i for i, (a, b) in enumerate(merges)}
    ids = {t: i for i, t in enumerate(vocab)}
    chars = {t for t in vocab if isinstance(t, bytes) and len(utf8_chars(t)) == 1}
    cache, out = {}, []
    for w in sp_words(data):
        if w not in cache:
            cache[w] = [ids[s] for s in bpe_loop(sp_symbols(w, chars), ranks)]
        out += cache[w]
    return out


# ---- llama2.c ----
def llama2c_table(vocab, merges):
    made = {}
    for r, (a, b) in enumerate(merges):
        made.setdefault(a + b, r)
    pieces = []
    for t in vocab:
        if isinstance(t, tuple):
            pieces.append((0.0, sp_piece(t).encode()))
        else:
            pieces.append((-float(made[t]) if t in made else 0.0, t))
    return pieces


def write_llama2c(pieces):
    with open(f"{OUT}/sp_tokenizer.bin", "wb") as f:
        f.write(struct.pack("<i", max(len(p) for _, p in pieces)))
        for score, p in pieces:
            f.write(struct.pack("<fi", score, len(p)) + p)


def encode_llama2c(text, pieces):
    """run.c's encode(), without BOS/EOS."""
    lookup = {p: i for i, (_, p) in enumerate(pieces)}
    scores = [struct.unpack("<f", struct.pack("<f", s))[0] for s, _ in pieces]
    tokens = [lookup[b" "]] if text else []
    i = 0
    while i < len(text):
        j = i + 1
        while j < len(text) and (text[j] & 0xC0) == 0x80 and j - i < 4:
            j += 1
        c = text[i:j]
        if c in lookup:
            tokens.append(lookup[c])
        else:
            tokens += [b + 3 for b in c]
        i = j
    while True:
        best, best_id, best_idx = -1e10, -1, -1
        for k in range(len(tokens) - 1):
            t = lookup.get(pieces[tokens[k]][1] + pieces[tokens[k + 1]][1], -1)
            if t != -1 and scores[t] > best:
                best, best_id, best_idx = scores[t], t, k
        if best_idx == -1:
            break
        tokens[best_idx:best_idx + 2] = [best_id]
    return tokens


def write_ids(name, ids):
    assert max(ids) < 65536
    with gzip.GzipFile(f"{OUT}/{name}", "wb", mtime=0) as f:
        f.write(struct.pack(f"<{len(ids)}H", *ids))


def main():
    os.makedirs(OUT, exist_ok=True)
    data = corpus_bytes()
    with gzip.GzipFile(f"{OUT}/corpus.txt.gz", "wb", mtime=0) as f:
        f.write(data)
    text = data.decode("utf-8", errors="surrogateescape")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    check_unicode_classes(text)
    train_text = data[:TRAIN_BYTES]
    vocab, merges = train_gpt2(train_text)
    write_gpt2(vocab, merges)
    write_ids("gpt2_ids.u16.gz", encode_gpt2(data, vocab, merges))
    print(f"gpt2: {len(vocab)} tokens, {len(merges)} merges")
    vocab, merges = train_sp(train_text)
    write_sp(vocab, merges)
    write_ids("sp_ids.u16.gz", encode_sp(data, vocab, merges))
    print(f"sp: {len(vocab)} tokens, {len(merges)} merges")
    pieces = llama2c_table(vocab, merges)
    write_llama2c(pieces)
    lines = data.split(b"\n")[:LLAMA2C_LINES]
    flat = []
    for line in lines:
        ids = encode_llama2c(line, pieces)
        flat += [len(ids)] + ids
    write_ids("llama2c_ids.u16.gz", flat)
    print(f"corpus: {len(data)} bytes, {len(text)} characters, {sum(1 for c in text if ord(c) > 127)} non-ASCII")


if __name__ == "__main__":
    main()
