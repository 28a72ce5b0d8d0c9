#include "datasets/inflate.h"

#include <algorithm>
#include <array>

#include "engine/checksum.h"
#include "engine/error.h"

namespace eng {

namespace {

constexpr int kMaxBits = 15;  // the longest code DEFLATE allows
constexpr int kFastBits = 9;  // codes up to this length decode with one table lookup

// LSB-first bit reader over the compressed bytes; running out of input is the "truncated" error.
class BitReader {
 public:
  BitReader(const uint8_t* data, size_t n, const std::string& what) : p_(data), n_(n), what_(what) {}

  [[noreturn]] void error(const char* problem) const { fail("inflate: ", what_, ": ", problem); }

  void refill() {
    while (cnt_ <= 56 && pos_ < n_) {
      buf_ |= uint64_t(p_[pos_++]) << cnt_;
      cnt_ += 8;
    }
  }
  uint32_t take(int k) {
    if (cnt_ < k) {
      refill();
      if (cnt_ < k) error("truncated DEFLATE data (the input ends inside a block)");
    }
    const uint32_t v = uint32_t(buf_ & ((uint64_t(1) << k) - 1));
    buf_ >>= k;
    cnt_ -= k;
    return v;
  }
  // Stored blocks start on a byte boundary.
  void align() { take(cnt_ % 8); }
  // Bits not yet consumed; above cnt_ the buffer holds zeros.
  uint64_t peek() const { return buf_; }
  int available() const { return cnt_; }
  void skip(int k) {
    buf_ >>= k;
    cnt_ -= k;
  }
  // Input bytes consumed, counting buffered whole bytes as unread (call after the final block).
  size_t consumed() const { return pos_ - size_t(cnt_ / 8); }

 private:
  const uint8_t* p_;
  size_t n_, pos_ = 0;
  uint64_t buf_ = 0;
  int cnt_ = 0;
  const std::string& what_;
};

// A canonical Huffman code: codes of each length, symbols in code order (as puff.c decodes them), and a
// table indexed by the next kFastBits input bits holding (symbol << 4 | length), 0 for longer codes.
struct Huffman {
  std::array<uint16_t, kMaxBits + 1> count{};
  std::vector<uint16_t> symbol;
  std::vector<uint16_t> fast;

  // False when the lengths over-subscribe the code space or leave it incomplete, except for the
  // single one-bit code RFC 1951 allows (a distance code with one distance).
  bool build(const uint16_t* lengths, int n) {
    count.fill(0);
    for (int s = 0; s < n; ++s) ++count[lengths[s]];
    int left = 1;
    for (int len = 1; len <= kMaxBits; ++len) {
      left = 2 * left - count[len];
      if (left < 0) return false;
    }
    const int used = n - count[0];
    if (left > 0 && !(used == 1 && count[1] == 1)) return false;
    std::array<uint16_t, kMaxBits + 2> offs{};
    for (int len = 1; len <= kMaxBits; ++len) offs[len + 1] = uint16_t(offs[len] + count[len]);
    symbol.assign(size_t(used), 0);
    for (int s = 0; s < n; ++s)
      if (lengths[s]) symbol[offs[lengths[s]]++] = uint16_t(s);
    // Codes arrive most significant bit first, so the table is indexed by the bit-reversed code.
    fast.assign(size_t(1) << kFastBits, 0);
    uint32_t code = 0;
    size_t index = 0;
    for (int len = 1; len <= kFastBits; ++len) {
      for (int i = 0; i < count[len]; ++i, ++code, ++index) {
        uint32_t rev = 0;
        for (int b = 0; b < len; ++b) rev |= ((code >> b) & 1) << (len - 1 - b);
        for (uint32_t j = rev; j < fast.size(); j += 1u << len) fast[j] = uint16_t(symbol[index] << 4 | len);
      }
      code <<= 1;
    }
    return true;
  }
};

int decode(BitReader& in, const Huffman& h) {
  if (in.available() < kFastBits) in.refill();
  const uint16_t e = h.fast[in.peek() & ((1u << kFastBits) - 1)];
  if (e != 0 && (e & 15) <= in.available()) {
    in.skip(e & 15);
    return e >> 4;
  }
  // Longer codes (and the last bits of the input): canonical decoding one bit at a time.
  int code = 0, first = 0, index = 0;
  for (int len = 1; len <= kMaxBits; ++len) {
    code |= int(in.take(1));
    const int n = h.count[len];
    if (code - n < first) return h.symbol[size_t(index + code - first)];
    index += n;
    first = (first + n) << 1;
    code <<= 1;
  }
  in.error("invalid Huffman code");
}

// RFC 1951 §3.2.5: base values and extra bits of the length symbols 257..285 and the distance symbols 0..29.
constexpr uint16_t kLenBase[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                   31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
constexpr uint8_t kLenExtra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                   2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
constexpr uint16_t kDistBase[30] = {1,    2,    3,    4,    5,    7,     9,     13,    17,  25,
                                    33,   49,   65,   97,   129,  193,   257,   385,   513, 769,
                                    1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
constexpr uint8_t kDistExtra[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6,
                                    6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

class Inflater {
 public:
  Inflater(BitReader& in, std::vector<uint8_t>& out, size_t max_output) : in_(in), out_(out), max_(max_output) {}

  void run() {
    bool last = false;
    while (!last) {
      last = in_.take(1) == 1;
      switch (in_.take(2)) {
        case 0: stored(); break;
        case 1: codes(fixed_lit(), fixed_dist()); break;
        case 2: dynamic(); break;
        default: in_.error("invalid block type 3");
      }
    }
  }

 private:
  void room(size_t k) {
    if (out_.size() + k > max_) in_.error("decompressed data exceed the size limit (corrupt or hostile file)");
  }

  void stored() {
    in_.align();
    const uint32_t len = in_.take(16), nlen = in_.take(16);
    if (len != (~nlen & 0xFFFF)) in_.error("stored block length does not match its complement");
    room(len);
    for (uint32_t i = 0; i < len; ++i) out_.push_back(uint8_t(in_.take(8)));
  }

  static const Huffman& fixed_lit() {
    static const Huffman h = [] {
      uint16_t len[288];
      for (int s = 0; s < 288; ++s) len[s] = s < 144 ? 8 : s < 256 ? 9 : s < 280 ? 7 : 8;
      Huffman f;
      f.build(len, 288);
      return f;
    }();
    return h;
  }
  static const Huffman& fixed_dist() {
    static const Huffman h = [] {
      // All 32 five-bit codes, so that the code is complete; 30 and 31 never occur in valid data.
      uint16_t len[32];
      for (auto& l : len) l = 5;
      Huffman f;
      f.build(len, 32);
      return f;
    }();
    return h;
  }

  void dynamic() {
    const int nlen = int(in_.take(5)) + 257, ndist = int(in_.take(5)) + 1, ncode = int(in_.take(4)) + 4;
    if (nlen > 286 || ndist > 30) in_.error("dynamic block declares too many length or distance codes");
    static constexpr uint8_t kOrder[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
    uint16_t lengths[286 + 30] = {};
    for (int i = 0; i < ncode; ++i) lengths[kOrder[i]] = uint16_t(in_.take(3));
    Huffman lencode;
    if (!lencode.build(lengths, 19)) in_.error("invalid code-length code");
    int i = 0;
    while (i < nlen + ndist) {
      const int sym = decode(in_, lencode);
      if (sym < 16) {
        lengths[i++] = uint16_t(sym);
        continue;
      }
      uint16_t value = 0;
      int repeat;
      if (sym == 16) {
        if (i == 0) in_.error("length repeat with no previous length");
        value = lengths[i - 1];
        repeat = 3 + int(in_.take(2));
      } else {
        repeat = sym == 17 ? 3 + int(in_.take(3)) : 11 + int(in_.take(7));
      }
      if (i + repeat > nlen + ndist) in_.error("code lengths run past the declared count");
      while (repeat--) lengths[i++] = value;
    }
    if (lengths[256] == 0) in_.error("dynamic block has no end-of-block code");
    Huffman lit, dist;
    if (!lit.build(lengths, nlen)) in_.error("invalid literal/length code");
    if (!dist.build(lengths + nlen, ndist)) in_.error("invalid distance code");
    codes(lit, dist);
  }

  void codes(const Huffman& lit, const Huffman& dist) {
    for (;;) {
      const int sym = decode(in_, lit);
      if (sym < 256) {
        room(1);
        out_.push_back(uint8_t(sym));
        continue;
      }
      if (sym == 256) return;
      const int li = sym - 257;
      if (li >= 29) in_.error("invalid length symbol");
      const size_t len = kLenBase[li] + in_.take(kLenExtra[li]);
      const int di = decode(in_, dist);
      if (di >= 30) in_.error("invalid distance symbol");
      const size_t d = kDistBase[di] + in_.take(kDistExtra[di]);
      if (d > out_.size()) in_.error("distance reaches back before the start of the data");
      room(len);
      const size_t at = out_.size();
      out_.resize(at + len);
      // Byte by byte: a match may overlap the bytes it produces (distance < length).
      uint8_t* o = out_.data() + at;
      const uint8_t* from = o - d;
      for (size_t k = 0; k < len; ++k) o[k] = from[k];
    }
  }

  BitReader& in_;
  std::vector<uint8_t>& out_;
  size_t max_;
};

uint32_t le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

}  // namespace

std::vector<uint8_t> inflate_raw(const uint8_t* data, size_t n, const std::string& what, size_t* consumed,
                                 size_t max_output) {
  std::vector<uint8_t> out;
  BitReader in(data, n, what);
  Inflater(in, out, max_output).run();
  if (consumed) *consumed = in.consumed();
  return out;
}

bool is_gzip(const std::vector<uint8_t>& bytes) { return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b; }

std::vector<uint8_t> gunzip(const std::vector<uint8_t>& file, const std::string& what, size_t max_output) {
  auto error = [&](auto&&... parts) { fail("gzip: ", what, ": ", parts...); };
  std::vector<uint8_t> out;
  // The last trailer's length is the whole size for a one-member file (mod 2^32): a reservation hint, trusted
  // only up to what DEFLATE can produce from this many bytes (at most 1032:1), so that a 20-byte file claiming
  // 4 GiB cannot make us reserve it (found by `make fuzz`, tests/fuzz/regressions/idx/).
  if (file.size() >= 18)
    out.reserve(std::min({size_t(le32(file.data() + file.size() - 4)), max_output, file.size() * 1032}));
  size_t pos = 0;
  do {
    const size_t n = file.size() - pos;
    const uint8_t* h = file.data() + pos;
    if (n < 18) error("truncated member header at byte ", pos, " (", n, " bytes left, a member needs at least 18)");
    if (h[0] != 0x1f || h[1] != 0x8b)
      error("bad magic ", int(h[0]), " ", int(h[1]), " at byte ", pos, " (gzip: 31 139)");
    if (h[2] != 8) error("compression method ", int(h[2]), " is not DEFLATE (8)");
    const uint8_t flags = h[3];
    if (flags & 0xE0) error("reserved header flags are set");
    size_t p = 10;
    auto need = [&](size_t k) {
      if (p + k > n) error("truncated member header");
    };
    if (flags & 4) {  // FEXTRA: a length-prefixed field
      need(2);
      p += 2 + (size_t(h[p]) | size_t(h[p + 1]) << 8);
    }
    for (uint8_t bit : {uint8_t(8), uint8_t(16)})  // FNAME, FCOMMENT: zero-terminated strings
      if (flags & bit) {
        while (p < n && h[p] != 0) ++p;
        need(1);
        ++p;
      }
    if (flags & 2) p += 2;  // FHCRC
    need(0);
    const size_t begin = out.size();
    BitReader in(h + p, n - p, what);
    Inflater(in, out, max_output).run();
    p += in.consumed();
    const size_t size = out.size() - begin;
    if (p + 8 > n) error("truncated member trailer (CRC-32 and length missing)");
    if (crc32(out.data() + begin, size) != le32(h + p)) error("CRC-32 mismatch: the decompressed data are corrupt");
    if (uint32_t(size) != le32(h + p + 4))
      error("length mismatch: the trailer says ", le32(h + p + 4), " bytes (mod 2^32), the data hold ", size);
    pos += p + 8;
  } while (pos < file.size());
  return out;
}

std::vector<uint8_t> zlib_decompress(const std::vector<uint8_t>& stream, const std::string& what, size_t max_output) {
  auto error = [&](auto&&... parts) { fail("zlib: ", what, ": ", parts...); };
  if (stream.size() < 6) error("stream of ", stream.size(), " bytes is shorter than a header and trailer");
  const uint8_t cmf = stream[0], flg = stream[1];
  if ((cmf & 15) != 8 || (cmf >> 4) > 7)
    error("compression method ", int(cmf), " is not DEFLATE with a <= 32 KiB window");
  if ((cmf * 256 + flg) % 31 != 0) error("header check bits are wrong");
  if (flg & 0x20) error("preset dictionaries are not supported");
  size_t used = 0;
  std::vector<uint8_t> out = inflate_raw(stream.data() + 2, stream.size() - 2, what, &used, max_output);
  const size_t p = 2 + used;
  if (p + 4 != stream.size())
    error(p + 4 > stream.size() ? "truncated Adler-32 trailer" : "data follow the Adler-32 trailer");
  const uint32_t want = uint32_t(stream[p]) << 24 | uint32_t(stream[p + 1]) << 16 | uint32_t(stream[p + 2]) << 8 |
                        uint32_t(stream[p + 3]);
  if (adler32(out.data(), out.size()) != want) error("Adler-32 mismatch: the decompressed data are corrupt");
  return out;
}

}  // namespace eng
