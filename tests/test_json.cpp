#include "engine/json.h"

#include <doctest/doctest.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/rng.h"

using namespace eng;

TEST_CASE("json: literals, numbers and their types") {
  CHECK(Json::parse("null").is_null());
  CHECK(Json::parse(" true ").as_bool() == true);
  CHECK(Json::parse("false").as_bool() == false);
  CHECK(Json::parse("0").as_int() == 0);
  CHECK(Json::parse("-17").as_int() == -17);
  CHECK(Json::parse("1.5").as_double() == 1.5);
  CHECK(Json::parse("-2.5e3").as_double() == -2500.0);
  CHECK(Json::parse("1E2").type() == Json::Type::Double);  // an exponent makes a double, even when integral
  CHECK(Json::parse("2.0").type() == Json::Type::Double);
  CHECK(Json::parse("7").as_double() == 7.0);             // an int reads as a double too
  CHECK(Json::parse("1e-400").as_double() == 0.0);        // underflow rounds to zero, like strtod
  CHECK(std::signbit(Json::parse("-1e-400").as_double()));  // a zero of the number's sign
  CHECK(Json::parse("0." + std::string(400, '0') + "1").as_double() == 0.0);
  CHECK_THROWS_WITH(Json::parse("1e400"), "json: number 1e400 is out of range at byte 0");
  CHECK_THROWS(Json::parse("1" + std::string(400, '0') + "e-10"));  // 1e390: too large, whatever the exponent's sign
  CHECK(Json::parse("1" + std::string(300, '0') + "e-10").as_double() == 1e290);
  CHECK_THROWS_WITH(Json::parse("1.5").as_int(), "json: expected an integer, got a number");
  CHECK_THROWS_WITH(Json(1).as_string(), "json: expected a string, got an integer");
  CHECK_THROWS_WITH(Json("x").as_array(), "json: expected an array, got a string");
  CHECK_THROWS_WITH(Json(uint64_t(1) << 63), "json: integer does not fit in int64");
}

TEST_CASE("json: integers beyond 2^53 are exact") {
  // 2^53 + 1 is not a double; a parser that went through double would give 2^53
  Json j = Json::parse("9007199254740993");
  CHECK(j.is_int());
  CHECK(j.as_int() == 9007199254740993LL);
  CHECK(j.dump() == "9007199254740993");
  CHECK(Json::parse("9223372036854775807").as_int() == std::numeric_limits<int64_t>::max());
  CHECK(Json::parse("-9223372036854775808").as_int() == std::numeric_limits<int64_t>::min());
  CHECK(Json(std::numeric_limits<int64_t>::min()).dump() == "-9223372036854775808");
  // past int64: still valid JSON, kept as the nearest double
  Json big = Json::parse("9223372036854775808");
  CHECK(big.type() == Json::Type::Double);
  CHECK(big.as_double() == 9223372036854775808.0);
  CHECK(Json::parse("-9223372036854775809").type() == Json::Type::Double);
  Json offs = Json::parse("[0,123456789012345678]");
  CHECK(offs.dump() == "[0,123456789012345678]");
}

TEST_CASE("json: doubles are written with the shortest exact text") {
  CHECK(Json(0.1).dump() == "0.1");
  CHECK(Json(2.0).dump() == "2.0");  // stays a double when read back
  CHECK(Json(-0.0).dump() == "-0.0");
  CHECK(Json(1e300).dump() == "1e+300");
  CHECK(Json(1.0 / 3).dump() == "0.3333333333333333");
  for (double d : {0.1, 1.0 / 3, 2.0, -1e-310, 123456.789, 1e300, 5e-324}) {
    Json back = Json::parse(Json(d).dump());
    CHECK(back.type() == Json::Type::Double);
    CHECK(back.as_double() == d);
  }
  CHECK_THROWS_WITH(Json(std::nan("")).dump(), "json: cannot write nan: JSON has no NaN or infinity");
  CHECK_THROWS_WITH(Json(HUGE_VAL).dump(), "json: cannot write inf: JSON has no NaN or infinity");
}

TEST_CASE("general_text: printf's %.*g, the same text as to_chars in the classic locale") {
  Rng rng(11);
  std::vector<double> values = {0.0, -0.0, 0.1, 1.0 / 3, 1e300, -1e-310, 5e-324, 123456.789, 1e21, 1e-5, 9.5, 0.5,
                                HUGE_VAL, -HUGE_VAL};
  for (int i = 0; i < 2000; ++i) {  // random bit patterns: every binade, denormals, both signs (no NaN payloads)
    const uint64_t bits = uint64_t(rng.next_u32()) << 32 | rng.next_u32();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    if (std::isfinite(d)) values.push_back(d);
  }
  for (double v : values)
    for (int p = 1; p <= 17; ++p) {
      char buf[64];
      const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, p);
      CHECK(general_text(v, p) == std::string(buf, r.ptr));
    }
}

TEST_CASE("json: numbers read as std::from_chars reads them (strtod, correctly rounded)") {
  Rng rng(12);
  std::vector<std::string> texts = {"0.1", "-1e-310", "4.9e-324", "2.4703282292062328e-324", "1.7976931348623157e308",
                                    "123456789012345678901234567890.5", "0.30000000000000004", "-2.5e-3"};
  for (int i = 0; i < 2000; ++i) {  // random bit patterns, written with 1 to 17 digits
    const uint64_t bits = uint64_t(rng.next_u32()) << 32 | rng.next_u32();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    if (std::isfinite(d)) texts.push_back(general_text(d, 1 + i % 17));
  }
  for (const std::string& t : texts) {
    double want = 0;
    // Out of range at 1 to 16 digits ("2e+308", "2e-324"): the overflow and underflow cases above.
    if (std::from_chars(t.data(), t.data() + t.size(), want).ec == std::errc::result_out_of_range) continue;
    CHECK_MESSAGE(Json::parse(t).as_double() == want, t);
  }
}

TEST_CASE("json: string escapes and UTF-8") {
  CHECK(Json::parse(R"("a\"b\\c\/d\b\f\n\r\t")").as_string() == "a\"b\\c/d\b\f\n\r\t");
  CHECK(Json::parse(R"("\u0041\u00e9\u20AC")").as_string() == "A\xC3\xA9\xE2\x82\xAC");
  CHECK(Json::parse(R"("\u0000")").as_string() == std::string(1, '\0'));
  // a surrogate pair is one code point, U+1F600, four bytes of UTF-8
  CHECK(Json::parse(R"("\ud83d\ude00")").as_string() == "\xF0\x9F\x98\x80");
  CHECK(Json::parse("\"\xF0\x9F\x98\x80 \xC3\xA9\"").as_string() == "\xF0\x9F\x98\x80 \xC3\xA9");
  CHECK_THROWS_WITH(Json::parse(R"("x\ud83d")"), "json: high surrogate \\uD83D not followed by a low one at byte 2");
  CHECK_THROWS_WITH(Json::parse(R"("\ud83d\u0041")"), "json: high surrogate \\uD83D not followed by a low one at byte 1");
  CHECK_THROWS_WITH(Json::parse(R"("\ude00")"), "json: unpaired low surrogate \\uDE00 at byte 1");
  CHECK_THROWS_WITH(Json::parse(R"("\u12g4")"), "json: expected 4 hex digits after \\u at byte 5");
  CHECK_THROWS_WITH(Json::parse(R"("\x")"), "json: invalid escape '\\x' at byte 1");
  CHECK_THROWS_WITH(Json::parse("\"a\nb\""), "json: unescaped control character in a string at byte 2");
  CHECK_THROWS_WITH(Json::parse("\"ab"), "json: unexpected end of input at byte 3");
  CHECK_THROWS_WITH(Json::parse("\"a\xFF\""), "json: invalid UTF-8 in a string at byte 2");
  CHECK_THROWS_WITH(Json::parse("\"\xC0\xAF\""), "json: invalid UTF-8 in a string at byte 1");      // overlong '/'
  CHECK_THROWS_WITH(Json::parse("\"\xED\xA0\x80\""), "json: invalid UTF-8 in a string at byte 1");  // surrogate
  CHECK_THROWS_WITH(Json::parse("\"\xE2\x82\""), "json: invalid UTF-8 in a string at byte 1");      // truncated

  // writing escapes quotes, backslashes and control characters, and keeps UTF-8 as is
  CHECK(Json("a\"b\\c\n\t\x01\x1f\xC3\xA9").dump() == "\"a\\\"b\\\\c\\n\\t\\u0001\\u001f\xC3\xA9\"");
  std::string nasty = std::string("q\"\\/\b\f\n\r\t\x7f", 11) + std::string(1, '\0') + "\xF0\x9F\x98\x80";
  CHECK(Json::parse(Json(nasty).dump()).as_string() == nasty);
  CHECK_THROWS_WITH(Json("\xFF").dump(), "json: cannot write a string that is not valid UTF-8");

  CHECK(valid_utf8("plain"));
  CHECK(valid_utf8("\xF4\x8F\xBF\xBF"));   // U+10FFFF
  CHECK(!valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  CHECK(!valid_utf8("\xE0\x80\xAF"));      // overlong
  CHECK(!valid_utf8("\x80"));              // lone continuation byte
}

TEST_CASE("json: arrays and objects keep their order") {
  const std::string text = R"({"b":1,"a":[true,null,"s",{}],"c":{"z":[],"y":-0.5}})";
  Json j = Json::parse(text);
  CHECK(j.dump() == text);
  CHECK(j.as_object().size() == 3);
  CHECK(j.as_object()[0].first == "b");
  CHECK(j.find("a")->as_array().size() == 4);
  CHECK(j.find("c")->find("y")->as_double() == -0.5);
  CHECK(j.find("missing") == nullptr);
  CHECK(Json::parse(" [ 1 , { \"k\" : \"v\" } ]\n\t\r").dump() == R"([1,{"k":"v"}])");

  Json o = Json::object();
  o.set("z", 1);
  o.set("a", Json::array({1, "two", 3.5, nullptr, false}));
  CHECK(o.dump() == R"({"z":1,"a":[1,"two",3.5,null,false]})");
  CHECK_THROWS_WITH(o.set("z", 2), "json: duplicate key \"z\"");
  CHECK_THROWS_WITH(Json::parse(R"({"a":1,"b":2,"a":3})"), "json: duplicate key \"a\" at byte 13");
  // keys compare after unescaping
  CHECK_THROWS_WITH(Json::parse(R"({"a":1,"\u0061":2})"), "json: duplicate key \"a\" at byte 7");
}

TEST_CASE("json: nesting is limited to 64 levels") {
  auto nested = [](int n) { return std::string(size_t(n), '[') + std::string(size_t(n), ']'); };
  CHECK(Json::parse(nested(64)).dump() == nested(64));
  CHECK_THROWS_WITH(Json::parse(nested(65)), "json: nesting deeper than 64 levels at byte 64");
  // a deep document cannot exhaust the stack: it stops at the limit
  CHECK_THROWS_WITH(Json::parse(std::string(1000000, '[')), "json: nesting deeper than 64 levels at byte 64");
  std::string objs;
  for (int i = 0; i < 65; ++i) objs += "{\"k\":";
  CHECK_THROWS_WITH(Json::parse(objs), "json: nesting deeper than 64 levels at byte 320");
}

TEST_CASE("json: malformed documents name the problem and the byte") {
  CHECK_THROWS_WITH(Json::parse(""), "json: unexpected end of input at byte 0");
  CHECK_THROWS_WITH(Json::parse("   "), "json: unexpected end of input at byte 3");
  CHECK_THROWS_WITH(Json::parse("1 2"), "json: trailing characters after the value at byte 2");
  CHECK_THROWS_WITH(Json::parse("{} x"), "json: trailing characters after the value at byte 3");
  CHECK_THROWS_WITH(Json::parse("[1]]"), "json: trailing characters after the value at byte 3");
  CHECK_THROWS_WITH(Json::parse(std::string("1\0", 2)), "json: trailing characters after the value at byte 1");
  CHECK_THROWS_WITH(Json::parse("[1,]"), "json: unexpected character ']' at byte 3");
  CHECK_THROWS_WITH(Json::parse("[1 2]"), "json: expected ',' or ']' in an array at byte 3");
  CHECK_THROWS_WITH(Json::parse("[1,2"), "json: unexpected end of input at byte 4");
  CHECK_THROWS_WITH(Json::parse(R"({"a" 1})"), "json: expected ':' after an object key at byte 5");
  CHECK_THROWS_WITH(Json::parse(R"({"a":1,})"), "json: expected a string key at byte 7");
  CHECK_THROWS_WITH(Json::parse("{1:2}"), "json: expected a string key at byte 1");
  CHECK_THROWS_WITH(Json::parse(R"({"a":1 "b":2})"), "json: expected ',' or '}' in an object at byte 7");
  CHECK_THROWS_WITH(Json::parse("tru"), "json: invalid literal at byte 0");
  CHECK_THROWS_WITH(Json::parse("nul!"), "json: invalid literal at byte 0");
  CHECK_THROWS_WITH(Json::parse("'a'"), "json: unexpected character ''' at byte 0");
  CHECK_THROWS_WITH(Json::parse("01"), "json: leading zero in a number at byte 0");
  CHECK_THROWS_WITH(Json::parse("-"), "json: unexpected end of input at byte 1");
  CHECK_THROWS_WITH(Json::parse("-a"), "json: expected a digit at byte 1");
  CHECK_THROWS_WITH(Json::parse("1.e3"), "json: expected a digit after '.' at byte 2");
  CHECK_THROWS_WITH(Json::parse("1e+"), "json: unexpected end of input at byte 3");
  CHECK_THROWS_WITH(Json::parse("+1"), "json: unexpected character '+' at byte 0");
  CHECK_THROWS_WITH(Json::parse(".5"), "json: unexpected character '.' at byte 0");
  CHECK_THROWS_WITH(Json::parse("1e999"), "json: number 1e999 is out of range at byte 0");
  CHECK_THROWS_WITH(Json::parse("NaN"), "json: unexpected character 'N' at byte 0");
  CHECK_THROWS_AS(Json::parse("[\"a\",]"), Error);
}
