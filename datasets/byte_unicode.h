// GPT-2's byte-to-character map: byte-level BPE files (vocab.json, merges.txt, a ByteLevel tokenizer.json) spell
// each token's bytes as printable characters, one per byte. Bytes 0x21..0x7E, 0xA1..0xAC and 0xAE..0xFF stand for
// the code point of the same value; the other 68 bytes (controls, space, 0x7F..0xA0, 0xAD), in increasing order,
// for U+0100, U+0101, ... U+0143. So the space 0x20 is written "Ġ" (U+0120) and the newline "Ċ" (U+010A).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace eng {

uint32_t gpt2_byte_to_code_point(uint8_t b);

// The i-th byte in GPT-2's vocabulary order (ids 0..255 of its vocab.json): the printable bytes in increasing
// order, then the other 68.
uint8_t gpt2_byte_order(int i);

// Bytes -> their spelling (UTF-8 of the mapped characters).
std::string gpt2_spell_bytes(std::string_view bytes);
// The inverse; false when `spelling` is not UTF-8 of mapped characters only.
bool gpt2_unspell(std::string_view spelling, std::string& bytes);

}  // namespace eng
