// See heap_trim.h.
#include "heap_trim.h"

#include <cstdio>

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <unistd.h>

int lh_heap_trim() {
#if defined(__GLIBC__)
  return malloc_trim(0) == 1 ? 1 : 0;
#else
  return 0;
#endif
}

uint64_t lh_resident_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  const long page = sysconf(_SC_PAGESIZE);
  return got == 2 && page > 0 ? static_cast<uint64_t>(resident) * static_cast<uint64_t>(page) : 0;
}
