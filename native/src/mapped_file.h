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
  void* data;    // (size) bytes of the file; null when size == 0 or after close
  size_t size;   // file size in bytes at open time
  int error;     // errno of the failure, 0 when none
};

// Opens and maps `path`. An empty file succeeds with data == null, size == 0.
// LH_IO_ERROR: cannot open / stat / map, or not a regular file (file->error has errno).
// LH_OUT_OF_MEMORY: the size does not fit in the address space. On failure nothing stays open.
lh_status lh_mapped_file_open(lh_mapped_file* file, const char* path);

// Unmaps. Idempotent; safe on a zeroed struct.
void lh_mapped_file_close(lh_mapped_file* file);

// Drops the pages that hold bytes [offset, offset + length) of the mapping from this process
// (madvise MADV_DONTNEED over the whole pages covering the range): resident memory falls, and a
// later read faults the bytes in again from the file (the page cache, or the disk). Meant for
// ranges already consumed (e.g. weights repacked into another layout). A page written through the
// private mapping would lose that write: the model bytes are never written. Sets *released to the
// bytes of address range advised (whole pages, clipped to the file). LH_BAD_ARGUMENT: closed file
// or a range past the end. LH_IO_ERROR: madvise failed (file->error has errno).
lh_status lh_mapped_file_release(lh_mapped_file* file, size_t offset, size_t length, size_t* released);

// Gives the process its own anonymous copy of the pages that hold bytes [offset, offset + length)
// (a write fault per page on the private mapping: MADV_POPULATE_WRITE, or on kernels before 5.14 a
// byte read and written back per page). The bytes and their addresses do not change. Why: pages
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
