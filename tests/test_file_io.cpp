// Reading and writing files as the programs do (engine/file_io.h, engine/file_lock.h), checked against what the
// file system says with plain POSIX calls: special files refused without blocking, unique temporary files,
// stale ones removed only when their writer is dead, output locks exclusive.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>

#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/file_lock.h"
#include "tests/temp_files.h"

using namespace eng;
using eng::test::TempDir;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("file io: only regular files are read; a FIFO, a device or a directory is refused at once") {
  TempDir dir;
  const std::string file = dir.file("f.bin"), fifo = dir.file("fifo"), link = dir.file("link");
  eng::test::write_file(file, {1, 2, 3});
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);  // opening it for reading would block forever without O_NONBLOCK
  REQUIRE(::symlink(file.c_str(), link.c_str()) == 0);
  CHECK(read_file_bytes(file, "t") == std::vector<uint8_t>{1, 2, 3});
  CHECK(read_file_bytes(link, "t") == std::vector<uint8_t>{1, 2, 3});  // a link to a regular file is read
  CHECK(error_of([&] { read_file_bytes(fifo, "text"); }) == "text: " + fifo + ": is a FIFO, not a regular file");
  CHECK(error_of([&] { read_file_bytes("/dev/zero", "text"); }) ==
        "text: /dev/zero: is a character device, not a regular file");
  CHECK(error_of([&] { read_file_bytes(dir.path, "idx"); }) == "idx: " + dir.path + ": is a directory, not a regular file");
  CHECK(error_of([&] { read_file_bytes(dir.file("none"), "idx"); }) ==
        "idx: " + dir.file("none") + ": cannot open: No such file or directory");
  const InputFile in(file, "t");
  uint8_t buf[4];
  CHECK(error_of([&] { in.read_at(1, buf, 4, "four bytes"); }) ==
        "t: " + file + ": cannot read four bytes: the file ended early (changed while read?)");

  CHECK(file_kind(file) == "a regular file");
  CHECK(file_kind(link) == "a symbolic link");
  CHECK(file_kind(fifo) == "a FIFO");
  CHECK(file_kind(dir.file("none")).empty());
  CHECK(same_file(file, link));
  CHECK(!same_file(file, fifo));
  CHECK(!same_file(file, dir.file("none")));
  CHECK(same_file(dir.file("none"), dir.path + "/./none"));  // not there yet: the same path all the same
  CHECK(!same_file(dir.file("none"), dir.file("other")));
}

TEST_CASE("file io: outputs are never written over what is not a regular file") {
  TempDir dir;
  const std::string file = dir.file("out.bin"), link = dir.file("link.bin"), fifo = dir.file("fifo");
  eng::test::write_file(file, {9});
  REQUIRE(::symlink(file.c_str(), link.c_str()) == 0);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  check_output_path(file, "w");
  check_output_path(dir.file("new.bin"), "w");
  const std::string tail = ", not a regular file: refusing to write over it (remove it first, or give the path of a "
                           "regular file or of a new one)";
  CHECK(error_of([&] { check_output_path(link, "w"); }) == "w: " + link + " is a symbolic link" + tail);
  CHECK(error_of([&] { check_output_path("/dev/null", "png"); }) == "png: /dev/null is a character device" + tail);
  CHECK(error_of([&] { write_file_atomic(fifo, {1}, "svg"); }) == "svg: " + fifo + " is a FIFO" + tail);
  CHECK(error_of([&] { write_file_atomic(dir.path, {1}, "svg"); }) == "svg: " + dir.path + " is a directory" + tail);
  CHECK(read_file_bytes(file, "t") == std::vector<uint8_t>{9});  // the link's target was not touched
  CHECK(names_in(dir.path) == std::vector<std::string>{"fifo", "link.bin", "out.bin"});  // no temporary left
}

TEST_CASE("file io: each writer has its own temporary file; the target is replaced whole") {
  TempDir dir;
  const std::string target = dir.file("ckpt.st");
  {
    AtomicFile a(target, "w"), b(target, "w");  // two writers of one target at once (two runs, two threads)
    a.write("first", 5);
    b.write("second", 6);
    CHECK(names_in(dir.path).size() == 2);  // two distinct temporary files
    a.commit();
    b.commit();
  }
  const std::vector<uint8_t> got = read_file_bytes(target, "t");
  CHECK(std::string(got.begin(), got.end()) == "second");
  CHECK(names_in(dir.path) == std::vector<std::string>{"ckpt.st"});
  {
    AtomicFile c(target, "w");
    c.write("abandoned", 9);  // no commit: an error in the writer
  }
  CHECK(names_in(dir.path) == std::vector<std::string>{"ckpt.st"});
  CHECK(read_file_bytes(target, "t").size() == 6);
  const std::string nowhere = dir.file("no/such/dir/x.st");
  CHECK(error_of([&] { write_file_atomic(nowhere, {1}, "w"); }).rfind("w: " + nowhere + ": cannot create " + nowhere +
                                                                     ".tmp.", 0) == 0);
}

TEST_CASE("file io: stale temporary files of dead writers are removed, a live writer's never") {
  TempDir dir;
  const std::string target = dir.file("x.st");
  pid_t dead = ::fork();  // a pid that certainly exited: a child that was waited for
  if (dead == 0) ::_exit(0);
  REQUIRE(dead > 0);
  int status = 0;
  REQUIRE(::waitpid(dead, &status, 0) == dead);
  const std::string stale = target + ".tmp." + std::to_string(dead) + ".0",
                    live = target + ".tmp." + std::to_string(::getpid()) + ".7", other = target + ".tmp.x.1",
                    unrelated = dir.file("y.st.tmp." + std::to_string(dead) + ".0");
  for (const std::string& f : {stale, live, other, unrelated}) eng::test::write_file(f, {1});
  CHECK(remove_stale_temp_files(target) == 1);
  CHECK(!std::filesystem::exists(stale));
  CHECK(std::filesystem::exists(live));
  CHECK(std::filesystem::exists(other));  // not a name AtomicFile makes
  CHECK(std::filesystem::exists(unrelated));
  // a save cleans up after the writers before it
  eng::test::write_file(stale, {1});
  write_file_atomic(target, {1}, "w");
  CHECK(!std::filesystem::exists(stale));
}

TEST_CASE("file lock: one holder at a time, named when another is refused; released with its holder") {
  TempDir dir;
  const std::string target = dir.file("run.st");
  {
    FileLock first(target, "train: --checkpoint");
    CHECK(std::filesystem::exists(target + ".lock"));
    // flock conflicts between open file descriptions, so a second claim in this process stands for another run
    CHECK(error_of([&] { FileLock second(target, "train: --checkpoint"); }) ==
          "train: --checkpoint " + target + " is in use by another running process (pid " +
              std::to_string(::getpid()) + "; lock file " + target + ".lock): wait for it to finish, or choose another path");
  }
  CHECK(!std::filesystem::exists(target + ".lock"));
  FileLock again(target, "train: --checkpoint");  // free again
  const std::string nowhere = dir.file("no/dir/run.st");
  CHECK(error_of([&] { FileLock l(nowhere, "train: --log"); }) ==
        "train: --log " + nowhere + ": cannot create the lock file " + nowhere + ".lock: No such file or directory");
}
