// The command-line parser and the number parser behind it, against hand-written expectations: every refusal
// with its exact message, and the values that must still be accepted.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/cli.h"
#include "engine/error.h"
#include "engine/parse_number.h"

using namespace eng;

namespace {

// Parses `args` (without the program name) with `cli`; "" when accepted, else the error message.
std::string parse_error(Cli& cli, std::vector<std::string> args) {
  std::vector<char*> argv{const_cast<char*>("prog")};
  for (std::string& a : args) argv.push_back(a.data());
  try {
    cli.parse(int(argv.size()), argv.data());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("parse_number: the whole text is one number in its range, or a message says what was expected") {
  CHECK(parse_int("42", {1, 1024}, "n") == 42);
  CHECK(parse_int("-7", {}, "n") == -7);
  CHECK(parse_int("9223372036854775807", {}, "n") == INT64_MAX);
  CHECK_THROWS_WITH(parse_int("4x", {1, 1024}, "ENG_THREADS"), "ENG_THREADS expects an integer in 1..1024, got '4x'");
  CHECK_THROWS_WITH(parse_int("", {1, 1024}, "n"), "n expects an integer in 1..1024, got ''");
  CHECK_THROWS_WITH(parse_int(" 4", {1, 1024}, "n"), "n expects an integer in 1..1024, got ' 4'");
  CHECK_THROWS_WITH(parse_int("4.0", IntRange::at_least(0), "n"), "n expects an integer >= 0, got '4.0'");
  CHECK_THROWS_WITH(parse_int("1099511627776", {0, 1024}, "--threads"),
                    "--threads expects an integer in 0..1024, got '1099511627776'");
  CHECK_THROWS_WITH(parse_int("99999999999999999999", {}, "n"), "n expects an integer, got '99999999999999999999'");
  // a hostile value is quoted short and without control characters
  CHECK_THROWS_WITH(parse_int("\x1b[2J" + std::string(60, '9'), {}, "n"),
                    ("n expects an integer, got '\\x1b[2J" + std::string(36, '9') + "...'").c_str());

  CHECK(parse_real("0.5", RealRange::below(0, 1), "p") == 0.5);
  CHECK(parse_real("1e-300", RealRange::at_least(0), "x") == 1e-300);
  CHECK(parse_real("1e-320", RealRange::at_least(0), "x") > 0);  // a denormal is a fine value
  CHECK(parse_real("-3", RealRange{}, "x") == -3);
  CHECK_THROWS_WITH(parse_real("1", RealRange::below(0, 1), "--dropout"),
                    "--dropout expects a finite number in [0, 1), got '1'");
  CHECK_THROWS_WITH(parse_real("nan", RealRange::at_least(0), "--clip"),
                    "--clip expects a finite number >= 0, got 'nan'");
  CHECK_THROWS_WITH(parse_real("inf", RealRange{}, "x"), "x expects a finite number, got 'inf'");
  CHECK_THROWS_WITH(parse_real("1e999", RealRange{}, "x"), "x expects a finite number, got '1e999'");
  CHECK_THROWS_WITH(parse_real("0", RealRange::above(0), "--lr"), "--lr expects a finite number > 0, got '0'");
  CHECK_THROWS_WITH(parse_real("2", RealRange::closed(0, 1), "a"), "a expects a finite number in [0, 1], got '2'");
  CHECK_THROWS_WITH(parse_real("1,5", RealRange{}, "x"), "x expects a finite number, got '1,5'");
}

TEST_CASE("cli: every numeric flag has a range, and the parser refuses what lies outside it") {
  Cli cli("prog", "a test program");
  auto& steps = cli.add_int("steps", 10, {1, 100}, "steps");
  auto& lr = cli.add_double("lr", 0.1, RealRange::above(0), "learning rate");
  auto& flag = cli.add_bool("fixed", false, "a boolean");
  auto& name = cli.add_string("name", "x", "a string");
  CHECK(parse_error(cli, {"--steps", "5", "--lr=0.25", "--fixed", "--name", "--odd"}) == "");
  CHECK(steps == 5);
  CHECK(lr == 0.25);
  CHECK(flag);
  CHECK(name == "--odd");
  CHECK(parse_error(cli, {"--steps", "0"}) == "prog: --steps expects an integer in 1..100, got '0'");
  CHECK(parse_error(cli, {"--steps=abc"}) == "prog: --steps expects an integer in 1..100, got 'abc'");
  CHECK(parse_error(cli, {"--lr", "nan"}) == "prog: --lr expects a finite number > 0, got 'nan'");
  CHECK(parse_error(cli, {"--lr", "-1"}) == "prog: --lr expects a finite number > 0, got '-1'");
  CHECK(parse_error(cli, {"--steps"}) == "prog: flag --steps needs a value");
  CHECK(parse_error(cli, {"--nope"}) == "prog: unknown flag --nope (see --help)");
  CHECK(parse_error(cli, {"--fixed=maybe"}) == "prog: --fixed expects true or false, got 'maybe'");
  // a default outside its own range is a programming error, caught where the flag is declared
  CHECK_THROWS_WITH(cli.add_int("bad", 0, {1, 4}, "x"), "cli: the default 0 of --bad is outside its range in 1..4");
  CHECK_THROWS_WITH(cli.add_double("worse", NAN, RealRange{}, "x"), doctest::Contains("of --worse is outside"));
}

TEST_CASE("cli: a boolean takes a following true or false; arguments only where declared") {
  Cli cli("prog", "a test program");
  auto& flag = cli.add_bool("fixed", true, "a boolean");
  CHECK(parse_error(cli, {"--fixed", "false"}) == "");
  CHECK(!flag);
  CHECK(parse_error(cli, {"--fixed", "true"}) == "");
  CHECK(flag);
  CHECK(parse_error(cli, {"extra"}) ==
        "prog: unexpected argument 'extra' (it takes no arguments besides flags; see --help)");

  Cli with("tool", "takes files");
  with.add_bool("fast", false, "a boolean");
  with.add_positionals("FILE ...", "the files to read", 2);
  CHECK(parse_error(with, {"a", "--fast", "b"}) == "");
  CHECK(with.positional() == std::vector<std::string>{"a", "b"});
  CHECK(parse_error(with, {"c"}) == "tool: unexpected argument 'c' (usage: tool [flags] FILE ...; see --help)");
  CHECK(with.help().find("usage: tool [flags] FILE ...\n") == 0);
  CHECK(with.help().find("\narguments:\n  FILE ...: the files to read\n") != std::string::npos);
}

TEST_CASE("cli: --help lists each flag with its default and range") {
  Cli cli("prog", "a test program");
  cli.add_int("threads", 0, {0, 1024}, "threads (0: all)");
  cli.add_double("dropout", 0, RealRange::below(0, 1), "dropout");
  cli.add_int("seed", 1, IntRange::at_least(0), "seed");
  const std::string h = cli.help();
  CHECK(h.find("threads (0: all) (default 0; in 0..1024)") != std::string::npos);
  CHECK(h.find("dropout (default 0; in [0, 1))") != std::string::npos);
  CHECK(h.find("seed (default 1; >= 0)") != std::string::npos);
}

TEST_CASE("cli: a refused flag names why; names() lists the declared flags in order") {
  Cli cli("prog", "a test program");
  cli.add_int("steps", 10, {1, 100}, "steps");
  cli.add_bool("fixed", false, "a boolean");
  cli.refuse("symbols", "is for the copy task, not 'text'");
  CHECK(parse_error(cli, {"--steps", "5", "--symbols", "3"}) == "prog: --symbols is for the copy task, not 'text'");
  CHECK(parse_error(cli, {"--symbols=3"}) == "prog: --symbols is for the copy task, not 'text'");
  CHECK(parse_error(cli, {"--nope"}) == "prog: unknown flag --nope (see --help)");
  CHECK(cli.help().find("symbols") == std::string::npos);
  CHECK(cli.names() == std::vector<std::string>{"steps", "fixed"});
  CHECK_THROWS_WITH(cli.refuse("steps", "x"), "cli: flag --steps is both declared and refused");
}
