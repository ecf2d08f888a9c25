// mmap of a model file: open, fstat, map privately at a 2 MiB-aligned address, keep the
// descriptor (owned ranges are read through it into huge pages; released ranges are mapped again
// from it).
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

static constexpr size_t kHugePage = size_t{2} << 20;  // x86-64's PMD page; THP allocates these

static size_t page_bytes() {
  const long page_size = sysconf(_SC_PAGESIZE);
  return page_size > 0 ? static_cast<size_t>(page_size) : 4096;
}

// Anonymous read-write memory of `bytes` (a multiple of kHugePage) at a kHugePage-aligned address:
// an over-sized reservation with the ends cut off. MAP_FAILED (errno set) when there is none.
static char* map_anonymous_aligned(size_t bytes, int flags) {
  void* reserve = mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
  if (reserve == MAP_FAILED) return static_cast<char*>(MAP_FAILED);
  char* r = static_cast<char*>(reserve);
  char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(r) + kHugePage - 1) / kHugePage * kHugePage);
  if (aligned > r) munmap(r, static_cast<size_t>(aligned - r));
  if (r + bytes + kHugePage > aligned + bytes) munmap(aligned + bytes, static_cast<size_t>(r + bytes + kHugePage - (aligned + bytes)));
  return aligned;
}

// The whole file mapped MAP_PRIVATE at a kHugePage-aligned address, so file offset x sits at
// address base + x and the file's 2 MiB-aligned ranges are 2 MiB-aligned in memory. MAP_FAILED
// (errno set) on failure.
static void* map_aligned(int fd, size_t size) {
  const size_t page = page_bytes();
  const size_t mapped = (size + page - 1) / page * page;
  const size_t reserved = (mapped + kHugePage - 1) / kHugePage * kHugePage;
  // the reservation holds the address range; the file mapping replaces its first `mapped` bytes
  char* base = map_anonymous_aligned(reserved, MAP_NORESERVE);
  if (base == MAP_FAILED) return MAP_FAILED;
  if (mmap(base, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0) == MAP_FAILED) {
    const int e = errno;
    munmap(base, reserved);
    errno = e;
    return MAP_FAILED;
  }
  if (reserved > mapped) munmap(base + mapped, reserved - mapped);
  return base;
}

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
  void* p = map_aligned(fd, size);
  const int map_errno = errno;
  if (p == MAP_FAILED) {
    close(fd);
    file->error = map_errno;
    return map_errno == ENOMEM ? LH_OUT_OF_MEMORY : LH_IO_ERROR;
  }
  file->data = p;
  file->size = size;
  file->fd = fd;
  file->has_fd = true;
  return LH_OK;
}

lh_status lh_mapped_file_release(lh_mapped_file* file, size_t offset, size_t length, size_t* released) {
  if (released != nullptr) *released = 0;
  if (file == nullptr || file->data == nullptr || offset > file->size || length > file->size - offset) return LH_BAD_ARGUMENT;
  if (length == 0) return LH_OK;
  const size_t page = page_bytes();
  const size_t start = offset / page * page;  // the mapping starts on a page boundary
  const size_t whole_end = (offset + length + page - 1) / page * page;
  char* base = static_cast<char*>(file->data);
  // Map the file again over the range: whatever was there (page-cache pages, private copies,
  // owned huge pages) is dropped and the file's bytes fault in anew. MADV_DONTNEED would do the
  // same on the file's own mapping, but an owned range is anonymous memory there and would read 0.
  const int ok = file->has_fd ? (mmap(base + start, whole_end - start, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, file->fd,
                                      static_cast<off_t>(start)) != MAP_FAILED)
                              : (madvise(base + start, whole_end - start, MADV_DONTNEED) == 0);
  if (!ok) {
    file->error = errno;
    return LH_IO_ERROR;
  }
  if (released != nullptr) *released = (whole_end < file->size ? whole_end : file->size) - start;
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

// Bytes [a, b) of the file (kHugePage-aligned offsets) become anonymous memory on huge pages at
// base + a: read from the file into a fresh MADV_HUGEPAGE mapping, which then replaces the file's
// pages there (mremap moves whole page tables, huge pages included). 0 or an errno, with nothing
// changed at base + a on failure.
static int own_huge(const lh_mapped_file* file, size_t a, size_t b) {
  const size_t bytes = b - a;
  char* fresh = map_anonymous_aligned(bytes, 0);
  if (fresh == MAP_FAILED) return errno;
  // without THP in the kernel this fails (EINVAL) and the copy is just anonymous 4 KiB pages
  (void)madvise(fresh, bytes, MADV_HUGEPAGE);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t got = pread(file->fd, fresh + done, bytes - done, static_cast<off_t>(a + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int e = errno;
      munmap(fresh, bytes);
      return e;
    }
    if (got == 0) break;  // past the end of the file: the mapping reads zeros there, and so does `fresh`
    done += static_cast<size_t>(got);
  }
  if (mremap(fresh, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, static_cast<char*>(file->data) + a) == MAP_FAILED) {
    const int e = errno;
    munmap(fresh, bytes);
    return e;
  }
  return 0;
}

// Pieces of the huge-page interior: small enough to spread over threads and to bound the memory a
// piece holds twice (its copy, and the page cache's pages until the copy replaces them).
static constexpr size_t kHugePiece = size_t{32} << 20;

lh_status lh_mapped_file_own(lh_mapped_file* file, size_t offset, size_t length, unsigned threads, size_t* owned) {
  if (owned != nullptr) *owned = 0;
  if (file == nullptr || file->data == nullptr || offset > file->size || length > file->size - offset || threads == 0) return LH_BAD_ARGUMENT;
  if (length == 0) return LH_OK;
  const size_t page = page_bytes();
  const size_t start = offset / page * page;
  const size_t whole_end = (offset + length + page - 1) / page * page;
  // the last page of the mapping may run past the file's end; mmap gave it whole
  char* base = static_cast<char*>(file->data);
  // the huge-page interior [huge_start, huge_end), in pieces; the 4 KiB pages before and after it
  const bool aligned_base = reinterpret_cast<uintptr_t>(base) % kHugePage == 0;
  size_t huge_start = (start + kHugePage - 1) / kHugePage * kHugePage;
  size_t huge_end = whole_end / kHugePage * kHugePage;
  if (!file->has_fd || !aligned_base || huge_end <= huge_start) huge_start = huge_end = start;
  const size_t huge_pieces = (huge_end - huge_start + kHugePiece - 1) / kHugePiece;
  const size_t pages = (whole_end - start - (huge_end - huge_start)) / page;
  // work shared over threads: one unit per huge piece or per 16 MiB of 4 KiB pages, and a thread
  // per unit at most (a thread costs ~100 µs to start on this project's VMs)
  const size_t min_pages = (size_t{16} << 20) / page;
  const size_t units = huge_pieces + pages / min_pages;
  const size_t n = std::max<size_t>(1, std::min<size_t>(threads, units));
  std::atomic<int> error{0};
  auto own_small = [&](size_t a, size_t b) {  // [a, b) of 4 KiB pages, split i of n
    if (b <= a) return;
    const int e = own_pages(base + a, base + b, page);
    if (e != 0) error.store(e);
  };
  auto piece = [&](size_t i) {
    // thread i: its share of the pages below and above the interior, then every n-th huge piece
    const size_t below = (huge_start - start) / page, above = (whole_end - huge_end) / page;
    own_small(start + below * i / n * page, start + below * (i + 1) / n * page);
    own_small(huge_end + above * i / n * page, huge_end + above * (i + 1) / n * page);
    for (size_t k = i; k < huge_pieces; k += n) {
      const size_t a = huge_start + k * kHugePiece, b = std::min(huge_end, a + kHugePiece);
      // no huge pages to be had (no memory for the copy, an old kernel): own the 4 KiB pages instead
      if (own_huge(file, a, b) != 0) own_small(a, b);
    }
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
  if (file->has_fd) close(file->fd);
  file->has_fd = false;
  file->data = nullptr;
  file->size = 0;
}
