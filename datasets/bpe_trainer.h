// Training a BPE tokenizer on a corpus (docs/tokenizers.md, "Training"), as GPT-2's and SentencePiece's trainers do
// in outline: cut the text into words, start each word from its smallest tokens, and repeatedly merge the adjacent
// pair seen most often across all words (a word seen n times counts n times), until the vocabulary is full or no
// pair is seen min_count times. Ties go to the pair whose (left bytes, right bytes) is smallest, byte by byte, so
// the result is a function of the corpus alone.
//   ByteLevel: words are GPT-2's pre-tokens (datasets/pretokenize.h), starting from the 256 bytes (ids 0..255 in
//     GPT-2's order); <|endoftext|> is the last id.
//   SentencePiece: each text gets a space in front; a word runs from a space to the next (so it starts with its
//     space). Ids 0, 1, 2 are <unk>, <s>, </s>, then the 256 byte tokens, then the alphabet: the characters most
//     often seen (ties: lower code point first) until they cover char_coverage of all character occurrences, and
//     the space always. Other characters, and bytes that are not UTF-8, stay byte tokens, which never merge.
// A merge whose result already exists (made from another pair) is kept in the list and adds no token.
//
// Cost: a heap of pair counts and, per pair, the words that hold it: each merge touches only those words.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/tokenizer.h"

namespace eng {

struct BpeTrainOptions {
  TokenizerKind kind = TokenizerKind::ByteLevel;
  int64_t vocab_size = 4096;  // every token, special ones included
  int64_t min_count = 2;
  double char_coverage = 0.9995;  // SentencePiece only
};

Tokenizer train_bpe(const std::vector<std::string>& texts, const BpeTrainOptions& options);

}  // namespace eng
