// register_all_attention: the one function that names every variant, for the programs that build any of them.
#include "models/attention/variants.h"

namespace eng {

void register_all_attention() {
#define ENG_CALL_ATTENTION_(id) register_attention_##id();
  ENG_ATTENTION_VARIANTS(ENG_CALL_ATTENTION_)
#undef ENG_CALL_ATTENTION_
}

}  // namespace eng
