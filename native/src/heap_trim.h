// Giving the C library's free heap memory back to the system (glibc's malloc_trim).
//
// onnxruntime frees a layer's unpacked weights after MatMulNBits prepacks them; glibc keeps those
// blocks in its heap (mapped, counted in RSS) until something trims it. The runner calls this after
// each stage's session is built, instead of fixing the mmap threshold low (which maps every large
// allocation afresh and faults its pages in on every run: slower loads and prefill).
#pragma once

#include <cstdint>

// malloc_trim(0): every free block of the heaps, not only their tops, is returned (madvise). Returns
// 1 if memory was released, 0 if none was or the C library is not glibc (then it does nothing).
int lh_heap_trim();

// Resident set size of this process in bytes (/proc/self/statm; 0 where unavailable).
uint64_t lh_resident_bytes();
