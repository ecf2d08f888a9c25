// Fuzz target: mapping a model file (src/mapped_file.h), the first thing the addon does with a
// path the user picked.
//
// Input: the kind of path (regular file with the input's bytes, empty file, directory, missing
// path, symlink to the file, FIFO, /dev/null) and the file's bytes.
// Invariants: a regular file maps to exactly its bytes (size and content); an empty file
// succeeds with no mapping; everything else fails with LH_IO_ERROR and errno, leaves nothing
// mapped, and returns promptly (a FIFO with no writer must not block: -timeout catches a hang);
// close is idempotent.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

#include "../src/mapped_file.h"
#include "fuzz_input.h"

namespace {

std::string scratch_dir() {
  static std::string dir;
  if (dir.empty()) {
    char tmpl[] = "/tmp/longhand-fuzz-mapped-XXXXXX";
    FUZZ_CHECK(mkdtemp(tmpl) != nullptr, "mkdtemp: %s", std::strerror(errno));
    dir = tmpl;
  }
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string dir = scratch_dir();
  const uint32_t kind = data[0] % 7;
  const uint8_t* body = data + 1;
  const size_t body_size = size - 1;
  const std::string file = dir + "/model.bin", link = dir + "/link.bin", fifo = dir + "/fifo", sub = dir + "/sub";
  unlink(file.c_str());
  {
    const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    FUZZ_CHECK(fd >= 0, "create %s: %s", file.c_str(), std::strerror(errno));
    const size_t n = kind == 1 ? 0 : body_size;
    FUZZ_CHECK(n == 0 || write(fd, body, n) == static_cast<ssize_t>(n), "write");
    close(fd);
  }
  std::string path;
  bool regular = false;
  switch (kind) {
    case 0: case 1: path = file; regular = true; break;
    case 2: mkdir(sub.c_str(), 0700); path = sub; break;
    case 3: path = dir + "/missing"; break;
    case 4: unlink(link.c_str()); FUZZ_CHECK(symlink(file.c_str(), link.c_str()) == 0, "symlink"); path = link; regular = true; break;
    case 5: if (access(fifo.c_str(), F_OK) != 0) FUZZ_CHECK(mkfifo(fifo.c_str(), 0600) == 0, "mkfifo"); path = fifo; break;
    default: path = "/dev/null"; break;
  }
  lh_mapped_file f;
  std::memset(&f, 0x5a, sizeof f);
  // libFuzzer's -timeout alarm interrupts a blocked open() (EINTR) once a second, which would hide
  // a hang as a slow failure: time the call instead.
  timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  const lh_status st = lh_mapped_file_open(&f, path.c_str());
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
  FUZZ_CHECK(secs < 0.5, "opening %s took %.2f s (status %d, errno %d): it blocked", path.c_str(), secs, st, f.error);
  const size_t expect = kind == 1 ? 0 : body_size;
  if (regular) {
    FUZZ_CHECK(st == LH_OK && f.size == expect && f.error == 0, "open %s (%zu bytes): status %d size %zu", path.c_str(), expect, st, f.size);
    if (expect == 0) FUZZ_CHECK(f.data == nullptr, "an empty file is not mapped");
    else FUZZ_CHECK(f.data != nullptr && std::memcmp(f.data, body, expect) == 0, "mapped bytes differ from the file");
  } else {
    FUZZ_CHECK(st == LH_IO_ERROR && f.error != 0 && f.data == nullptr && f.size == 0, "open %s: status %d errno %d data %p", path.c_str(),
               st, f.error, f.data);
  }
  lh_mapped_file_close(&f);
  lh_mapped_file_close(&f);
  FUZZ_CHECK(f.data == nullptr && f.size == 0, "close leaves the struct zeroed");
  FUZZ_CHECK(lh_mapped_file_open(&f, "") == LH_BAD_ARGUMENT && lh_mapped_file_open(nullptr, path.c_str()) == LH_BAD_ARGUMENT,
             "empty / null arguments");
  return 0;
}
