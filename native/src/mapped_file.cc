// mmap of a model file: open, fstat, map privately, close the descriptor (the mapping keeps
// the file alive).
#include "mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

lh_status lh_mapped_file_open(lh_mapped_file* file, const char* path) {
  if (file == nullptr) return LH_BAD_ARGUMENT;
  std::memset(file, 0, sizeof *file);
  if (path == nullptr || path[0] == '\0') return LH_BAD_ARGUMENT;
  // O_NONBLOCK: opening a FIFO (or a device) for reading would otherwise wait for a writer,
  // forever; the S_ISREG check below then refuses it. No effect on regular files or on mmap.
  const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    file->error = errno;
    return LH_IO_ERROR;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    file->error = errno;
    close(fd);
    return LH_IO_ERROR;
  }
  if (!S_ISREG(st.st_mode)) {
    file->error = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    close(fd);
    return LH_IO_ERROR;
  }
  if (st.st_size <= 0) {  // mmap of 0 bytes is an error; an empty file is just empty
    close(fd);
    return LH_OK;
  }
  if (static_cast<uint64_t>(st.st_size) > SIZE_MAX) {
    close(fd);
    return LH_OUT_OF_MEMORY;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  close(fd);
  if (p == MAP_FAILED) {
    file->error = map_errno;
    return map_errno == ENOMEM ? LH_OUT_OF_MEMORY : LH_IO_ERROR;
  }
  file->data = p;
  file->size = size;
  return LH_OK;
}

lh_status lh_mapped_file_release(lh_mapped_file* file, size_t offset, size_t length, size_t* released) {
  if (released != nullptr) *released = 0;
  if (file == nullptr || file->data == nullptr || offset > file->size || length > file->size - offset) return LH_BAD_ARGUMENT;
  if (length == 0) return LH_OK;
  const long page_size = sysconf(_SC_PAGESIZE);
  const size_t page = page_size > 0 ? static_cast<size_t>(page_size) : 4096;
  const size_t start = offset / page * page;  // the mapping starts on a page boundary
  const size_t end = offset + length;         // madvise rounds the length up to whole pages
  char* base = static_cast<char*>(file->data);
  if (madvise(base + start, end - start, MADV_DONTNEED) != 0) {
    file->error = errno;
    return LH_IO_ERROR;
  }
  if (released != nullptr) {
    const size_t whole_end = (end + page - 1) / page * page;
    *released = (whole_end < file->size ? whole_end : file->size) - start;
  }
  return LH_OK;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// Write-faults every page of [begin, end) (page aligned): 0 or an errno.
static int own_pages(char* begin, char* end, size_t page) {
  if (begin >= end) return 0;
  if (madvise(begin, static_cast<size_t>(end - begin), MADV_POPULATE_WRITE) == 0) return 0;
  if (errno != EINVAL) return errno;
  // Older kernel: the same copy-on-write fault by hand; the byte written is the byte read.
  for (char* p = begin; p < end; p += page) {
    volatile char* v = p;
    *v = *v;
  }
  return 0;
}

lh_status lh_mapped_file_own(lh_mapped_file* file, size_t offset, size_t length, unsigned threads, size_t* owned) {
  if (owned != nullptr) *owned = 0;
  if (file == nullptr || file->data == nullptr || offset > file->size || length > file->size - offset || threads == 0) return LH_BAD_ARGUMENT;
  if (length == 0) return LH_OK;
  const long page_size = sysconf(_SC_PAGESIZE);
  const size_t page = page_size > 0 ? static_cast<size_t>(page_size) : 4096;
  const size_t start = offset / page * page;
  const size_t whole_end = (offset + length + page - 1) / page * page;
  // the last page of the mapping may run past the file's end; mmap gave it whole
  char* base = static_cast<char*>(file->data);
  const size_t pages = (whole_end - start) / page;
  // a piece per thread of at least 16 MiB: a thread costs ~100 µs to start on this project's VMs
  const size_t min_pages = (size_t{16} << 20) / page;
  const size_t n = std::max<size_t>(1, std::min<size_t>(threads, pages / min_pages));
  std::atomic<int> error{0};
  auto piece = [&](size_t i) {
    const size_t a = start + pages * i / n * page, b = start + pages * (i + 1) / n * page;
    const int e = own_pages(base + a, base + b, page);
    if (e != 0) error.store(e);
  };
  std::vector<std::thread> helpers;
  for (size_t i = 1; i < n; ++i) helpers.emplace_back(piece, i);
  piece(0);
  for (std::thread& t : helpers) t.join();
  if (error.load() != 0) {
    file->error = error.load();
    return LH_IO_ERROR;
  }
  if (owned != nullptr) *owned = (whole_end < file->size ? whole_end : file->size) - start;
  return LH_OK;
}

void lh_mapped_file_close(lh_mapped_file* file) {
  if (file == nullptr) return;
  if (file->data != nullptr) munmap(file->data, file->size);
  file->data = nullptr;
  file->size = 0;
}
