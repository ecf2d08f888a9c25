// The C library settings an engine process starts with.
//
// glibc.malloc.hugetlb=1 makes glibc's malloc ask for transparent huge pages (madvise) on the
// memory it maps. A model load writes ~4 GB of fresh memory for a 1 GB model (repacked weights,
// the encoded graphs, onnxruntime's copy and its prepacked copy), and on this project's VMs the
// first write to a 4 KiB page costs ~15 µs, so with 2 MiB pages the load of the 953 M-param Q8_0
// fixture took 6.5–7.1 s instead of 13.1–16.3 s and a 64-token prefill 65 instead of 44–49 tok/s,
// with the same logits and peak RSS (helper-12's A/B through the real runner, issue 11). Tunables
// are read once at process start, so they go into the environment of the process we fork; glibc
// older than 2.35 and other C libraries ignore the entry.
export const HEAP_TUNABLE = 'glibc.malloc.hugetlb=1';

/** `env` with glibc.malloc.hugetlb=1 added to GLIBC_TUNABLES, unless it already sets hugetlb (kept as given). */
export function withHeapTunables(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const current = env.GLIBC_TUNABLES ?? '';
  const entries = current.split(':').filter((e) => e.length > 0);
  if (entries.some((e) => e.startsWith('glibc.malloc.hugetlb='))) return env;
  return { ...env, GLIBC_TUNABLES: [...entries, HEAP_TUNABLE].join(':') };
}
