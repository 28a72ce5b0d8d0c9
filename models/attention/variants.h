// Every attention variant's registration function (ENG_REGISTER_ATTENTION in its file). Nothing registers itself:
// a program calls the functions of the variants it builds, so the linker brings in only those variants' code. The
// tools (tools/registration/all_variants.cpp) and the test runner call register_all_attention(); an embedding
// program names its own (`make embed VARIANTS="softmax causal-linear"`, docs/embedding.md). The list is checked
// against the sources by tests/test_attention_registry.cpp, so a new variant cannot be left out of it.
#pragma once

// X(id) for each variant, the name with '_' for '-'.
#define ENG_ATTENTION_VARIANTS(X) \
  X(adaptive_span) \
  X(aft_conv) \
  X(aft_full) \
  X(aft_local) \
  X(aft_simple) \
  X(axial) \
  X(band) \
  X(bigbird) \
  X(block_local) \
  X(bp_transformer) \
  X(causal_improved_clustered) \
  X(causal_linear) \
  X(clustered) \
  X(dilated) \
  X(efficient) \
  X(etc) \
  X(exact_topk) \
  X(gaussian_prior) \
  X(global) \
  X(image_2d) \
  X(improved_clustered) \
  X(induced) \
  X(linear) \
  X(linformer) \
  X(longformer) \
  X(memory_compressed) \
  X(nystrom) \
  X(performer) \
  X(random) \
  X(reformer) \
  X(routing) \
  X(sinkhorn) \
  X(softmax) \
  X(sparse_fixed) \
  X(sparse_strided) \
  X(star) \
  X(stateful_softmax) \
  X(synthesizer) \
  X(talking_heads)

namespace eng {

#define ENG_DECLARE_ATTENTION_(id) void register_attention_##id();
ENG_ATTENTION_VARIANTS(ENG_DECLARE_ATTENTION_)
#undef ENG_DECLARE_ATTENTION_

// Registers every variant above; calling it again changes nothing.
void register_all_attention();

}  // namespace eng
