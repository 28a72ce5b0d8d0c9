// Reference: the expected strings are written out by hand from the escaping rules in engine/safe_text.h.
#include "engine/safe_text.h"

#include <doctest/doctest.h>

using namespace eng;

TEST_CASE("terminal_text: control characters and non-UTF-8 bytes as \\xNN, other text unchanged") {
  CHECK(terminal_text("model.layers0.weight") == "model.layers0.weight");
  CHECK(terminal_text("a\\b") == "a\\b");
  CHECK(terminal_text("\x1b]0;pwned\x07") == "\\x1b]0;pwned\\x07");
  CHECK(terminal_text("tab\there\nnew\x7f") == "tab\\x09here\\x0anew\\x7f");
  CHECK(terminal_text("caf\xc3\xa9 \xe2\x9c\x93") == "caf\xc3\xa9 \xe2\x9c\x93");  // é and ✓ stay
  CHECK(terminal_text("\xc2\x9b" "31m") == "\\xc2\\x9b31m");                          // U+009B, the C1 CSI
  CHECK(terminal_text("\x9b" "31m") == "\\x9b31m");                                   // a lone 8-bit CSI
  CHECK(terminal_text("\xc0\xaf|\xed\xa0\x80|\xe2\x9c") == "\\xc0\\xaf|\\xed\\xa0\\x80|\\xe2\\x9c");  // overlong, surrogate, cut
  CHECK(terminal_text(std::string("a\0b", 3)) == "a\\x00b");
}

TEST_CASE("xml_text: markup characters as entities, control characters dropped, bad bytes as U+FFFD") {
  CHECK(xml_text("loss (eval)") == "loss (eval)");
  CHECK(xml_text("<script>&'\"") == "&lt;script&gt;&amp;&apos;&quot;");
  CHECK(xml_text("a\x1b[31mb\x07\n") == "a[31mb");
  CHECK(xml_text("\xc2\x9b|\xff|caf\xc3\xa9") == "|\xef\xbf\xbd|caf\xc3\xa9");
}
