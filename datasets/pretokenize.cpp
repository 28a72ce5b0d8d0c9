#include "datasets/pretokenize.h"

#include "datasets/unicode_class.h"

namespace eng {

namespace {

// Rule 1: the length of the contraction at text[i] (an apostrophe), or 0.
size_t contraction_len(std::string_view text, size_t i) {
  if (i + 1 >= text.size()) return 0;
  const char a = text[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= text.size()) return 0;
  const char b = text[i + 2];
  return (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l') ? 3 : 0;
}

// The end of the run of units of class `cls` starting at text[i].
size_t run_end(std::string_view text, size_t i, CharClass cls) {
  while (i < text.size()) {
    const TextUnit u = text_unit_at(text, i);
    if (u.cls != cls) break;
    i += u.len;
  }
  return i;
}

}  // namespace

size_t gpt2_pretoken_end(std::string_view text, size_t begin) {
  if (text[begin] == '\'') {
    const size_t n = contraction_len(text, begin);
    if (n > 0) return begin + n;
  }
  const TextUnit first = text_unit_at(text, begin);
  if (first.cls != CharClass::Space) return run_end(text, begin + first.len, first.cls);
  if (text[begin] == ' ' && begin + 1 < text.size()) {
    const TextUnit next = text_unit_at(text, begin + 1);
    if (next.cls != CharClass::Space) return run_end(text, begin + 1 + next.len, next.cls);
  }
  // Rule 3: white space; `last` is where its last unit starts.
  size_t i = begin, last = begin;
  while (i < text.size()) {
    const TextUnit u = text_unit_at(text, i);
    if (u.cls != CharClass::Space) break;
    last = i;
    i += u.len;
  }
  return i == text.size() || last == begin ? i : last;
}

}  // namespace eng
