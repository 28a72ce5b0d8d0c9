#include "engine/batch_row.h"

#include "engine/error.h"

namespace eng {
namespace {

thread_local int64_t t_first_row = 0;

}  // namespace

int64_t batch_first_row() { return t_first_row; }

BatchRowScope::BatchRowScope(int64_t first_row) : prev_(t_first_row) {
  ENG_CHECK(first_row >= 0, "batch rows: the first row must be >= 0, got ", first_row);
  t_first_row = first_row;
}

BatchRowScope::~BatchRowScope() { t_first_row = prev_; }

}  // namespace eng
