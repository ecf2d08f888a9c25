// Status codes returned by every function of the native core (kv_pool, mapped_file, attention).
//
// The core is plain C++17 compiled without exceptions: a function either succeeds and returns
// LH_OK, or fails, returns one of the codes below and leaves its outputs as documented next to
// the function (in general: untouched). addon.cc maps each code to a JS error `code`:
//
//   LH_OK               0  success
//   LH_BAD_ARGUMENT     1  the caller broke a documented precondition (null pointer, zero or
//                          oversized dimension, index out of range, freed object, overlap).
//                          Nothing was written.                          -> NATIVE_BAD_ARGUMENT
//   LH_OUT_OF_MEMORY    2  mmap/malloc failed, or a size does not fit in the address space.
//                          Nothing was allocated.                        -> NATIVE_OUT_OF_MEMORY
//   LH_POOL_FULL        3  the KV pool has no free slot left in that layer (its byte budget
//                          is spent). The pool is unchanged.             -> NATIVE_OUT_OF_MEMORY
//   LH_IO_ERROR         4  a file could not be opened, stat'ed, read or mapped; errno is kept
//                          by the caller where it matters.               -> NATIVE_IO
//   LH_INTERNAL         5  an invariant broke: a bug in Longhand.        -> NATIVE_INTERNAL
#pragma once

enum lh_status : int {
  LH_OK = 0,
  LH_BAD_ARGUMENT = 1,
  LH_OUT_OF_MEMORY = 2,
  LH_POOL_FULL = 3,
  LH_IO_ERROR = 4,
  LH_INTERNAL = 5,
};

// A short stable name for logs and tests ("ok", "bad argument", ...). Never null.
inline const char* lh_status_name(lh_status s) {
  switch (s) {
    case LH_OK: return "ok";
    case LH_BAD_ARGUMENT: return "bad argument";
    case LH_OUT_OF_MEMORY: return "out of memory";
    case LH_POOL_FULL: return "pool full";
    case LH_IO_ERROR: return "io error";
    case LH_INTERNAL: return "internal error";
  }
  return "unknown status";
}
