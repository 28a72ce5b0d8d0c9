// The libFuzzer entry point of one target, chosen at compile time: -DENG_FUZZ_TARGET=safetensors etc.
// (the Makefile's `fuzz` rule builds one binary per target).
#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return eng::fuzz::ENG_FUZZ_TARGET(data, size);
}
