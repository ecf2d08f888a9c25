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
