// GPT-2's pre-tokenisation rule, written by hand over UTF-8 units (datasets/unicode_class.h) instead of a regular
// expression. GPT-2 splits text with the pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// taking, at each position, the first alternative that matches (each greedy). Read as rules at a token's start:
//   1. an apostrophe followed by s, t, m or d (2 bytes) or re, ve, ll (3 bytes): that contraction (lower case only);
//   2. an optional single space U+0020, then a maximal run of letters, of numbers, or of "other" units (not white
//      space, letter or number; a byte that starts no well-formed UTF-8 sequence is one such unit);
//   3. otherwise a run of white space: all of it when it reaches the end of the text or is one unit long; else all
//      but its last unit, which then starts the next token (a space there joins the word after it, by rule 2).
// Byte-level BPE then encodes each pre-token separately, so no token crosses these boundaries. Every byte of the
// text lies in exactly one pre-token, in order.
#pragma once
#include <cstddef>
#include <string_view>

namespace eng {

// The end (exclusive) of the pre-token that starts at text[begin] (begin < text.size()).
size_t gpt2_pretoken_end(std::string_view text, size_t begin);

// Calls f(std::string_view token) for each pre-token of `text` in order.
template <class F>
void for_each_gpt2_pretoken(std::string_view text, F&& f) {
  for (size_t i = 0; i < text.size();) {
    const size_t end = gpt2_pretoken_end(text, i);
    f(text.substr(i, end - i));
    i = end;
  }
}

}  // namespace eng
