// The tools build any attention variant a flag names, so they register every one (models/attention/variants.h).
// Linked into each tool; a lean embedding build links a list of its own instead (`make embed VARIANTS=...`).
#include "models/attention/variants.h"
#include "tools/tool_main.h"

namespace eng {

void register_program_variants() { register_all_attention(); }

}  // namespace eng
