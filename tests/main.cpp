#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "engine/autograd.h"
#include "models/attention/variants.h"

int main(int argc, char** argv) {
  eng::set_op_checking(true);  // every node recorded during the tests must come from a registered op
  eng::register_all_attention();
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
