// A model file mapped into memory, read-mostly.
//
// The mapping is MAP_PRIVATE with PROT_READ|PROT_WRITE: a stray write lands on a private
// copy-on-write page (the file on disk never changes) instead of faulting. addon.cc hands the
// bytes to JS as an external ArrayBuffer, or copies them into a V8-owned ArrayBuffer where the
// V8 memory cage forbids external memory (Electron).
#pragma once

#include <cstddef>
#include <cstdint>

#include "status.h"

struct lh_mapped_file {
  void* data;    // (size) bytes of the file, starting on a 2 MiB boundary; null when size == 0 or after close
  size_t size;   // file size in bytes at open time
  int error;     // errno of the failure, 0 when none
  int fd;        // the file, kept open to read owned ranges into huge pages and to map released ones back
  bool has_fd;   // fd is open (false in a zeroed struct: fd 0 is not ours)
};

// Opens and maps `path`, at an address that is a multiple of 2 MiB so that the file's 2 MiB-aligned
// ranges can later sit on huge pages (lh_mapped_file_own). An empty file succeeds with data == null,
// size == 0.
// LH_IO_ERROR: cannot open / stat / map, or not a regular file (file->error has errno).
// LH_OUT_OF_MEMORY: the size does not fit in the address space. On failure nothing stays open.
lh_status lh_mapped_file_open(lh_mapped_file* file, const char* path);

// Unmaps. Idempotent; safe on a zeroed struct.
void lh_mapped_file_close(lh_mapped_file* file);

// Drops the pages that hold bytes [offset, offset + length) of the mapping from this process
// (the file is mapped again over the whole pages covering the range, MAP_FIXED; an owned range is
// anonymous memory, where MADV_DONTNEED would leave zeros): resident memory falls, and a
// later read faults the bytes in again from the file (the page cache, or the disk). Meant for
// ranges already consumed (e.g. weights repacked into another layout). A page written through the
// private mapping would lose that write: the model bytes are never written. Sets *released to the
// bytes of address range advised (whole pages, clipped to the file). LH_BAD_ARGUMENT: closed file
// or a range past the end. LH_IO_ERROR: mmap failed (file->error has errno).
lh_status lh_mapped_file_release(lh_mapped_file* file, size_t offset, size_t length, size_t* released);

// Gives the process its own anonymous copy of the pages that hold bytes [offset, offset + length).
// The range's 2 MiB-aligned interior is read from the file into fresh anonymous memory advised
// MADV_HUGEPAGE and moved onto the same addresses (mremap MREMAP_FIXED), so a decode step streams it
// through 2 MiB pages: a 512 MiB pass took 15.0 ms against 17.5 on 4 KiB pages here (TLB misses),
// and a Q8_0 decode is such a pass per token. The 4 KiB pages at its two ends (and the whole range
// where huge pages cannot be had) take a write fault each on the private mapping: MADV_POPULATE_WRITE,
// or on kernels before 5.14 a byte read and written back per page. The bytes and their addresses do
// not change. Why anonymous at all: pages
// that stay the page cache's are scanned by the kernel's reclaim (and, on VMs like this project's,
// the host's), and a decode step that streams every weight through them runs 3–10x slower now and
// then (a 512 MiB pass: 15 ms usually, 100–300 ms a few times a minute; anonymous pages: never);
// llama.cpp's repacked weights are anonymous too. Resident memory is unchanged (each page is held
// once, now as anonymous memory); the page cache's copy stays reclaimable. lh_mapped_file_release
// still works on an owned range: the copy is dropped and the file's bytes fault in again. Splits
// the range over up to `threads` threads (page copies run at ~1 GB/s per core). Sets *owned to the
// bytes of address range covered (whole pages, clipped to the file). LH_BAD_ARGUMENT: closed file,
// a range past the end, threads 0. LH_IO_ERROR: madvise failed (file->error has errno).
lh_status lh_mapped_file_own(lh_mapped_file* file, size_t offset, size_t length, unsigned threads, size_t* owned);
