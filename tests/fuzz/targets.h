// Fuzz targets: each feeds one hostile input to a reader and accepts exactly two outcomes, a result or
// an eng::Error. Anything else (a crash, a sanitizer report, another exception type) is a bug. The same
// functions run under libFuzzer (`make fuzz`, tests/fuzz/main.cpp) and replay the committed seeds and
// regression inputs in the ordinary test suite (tests/test_fuzz_inputs.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace eng::fuzz {

int safetensors(const uint8_t* data, size_t size);  // the checkpoint reader
int idx(const uint8_t* data, size_t size);          // IDX (MNIST) files, plain or gzip; first byte: dimensions
int cifar10(const uint8_t* data, size_t size);      // a CIFAR-10 binary batch
int text(const uint8_t* data, size_t size);         // a byte-level text corpus, then batches from it
int gunzip(const uint8_t* data, size_t size);       // gzip / zlib / raw DEFLATE streams, in memory
int cli(const uint8_t* data, size_t size);          // the command-line parser and --attn-opt pairs; '\0' splits
int tokenizer_json(const uint8_t* data, size_t size);  // a tokenizer.json, then encoding and decoding with it
int gpt2_vocab(const uint8_t* data, size_t size);      // vocab.json '\0' merges.txt
int tokenizer_bin(const uint8_t* data, size_t size);   // llama2.c's tokenizer.bin
int tokenize(const uint8_t* data, size_t size);        // any bytes: encode then decode gives them back (both kinds)
int quantized(const uint8_t* data, size_t size);       // a quantized checkpoint's tensors (models/quantized.h)

struct Target {
  const char* name;
  int (*run)(const uint8_t*, size_t);
};
const std::vector<Target>& targets();

}  // namespace eng::fuzz
