// llama.cpp (node-llama-cpp 3.21.1's prebuilt binaries) at a chosen instruction-set level, so that
// bench/dense.mjs --cpu-level avx2 compares Longhand's AVX2 kernels (LONGHAND_CPU_LEVEL=avx2) with
// llama.cpp's AVX2 build on a host that has more (issue 35).
//
// Why it is possible: the linux-x64 package ships ggml's CPU backend once per x86 ISA level
// (GGML_CPU_ALL_VARIANTS: bins/linux-x64/libggml-cpu-{x64,sse42,sandybridge,ivybridge,piledriver,
// haswell,alderlake,skylakex,cannonlake,cascadelake,cooperlake,icelake,zen4,sapphirerapids}.so),
// and which one runs is decided at load: Llama's constructor calls the binding's
// loadBackends(dirname(llama-addon.node)), i.e. ggml_backend_load_all_from_path(dir), whose
// ggml_backend_load_best("cpu") dlopens every libggml-cpu-*.so in that one directory and keeps the
// one whose ggml_backend_score() (its required CPU features, checked by cpuid) is highest.
//
// Why it needs this: nothing in node-llama-cpp or ggml narrows that choice. getLlama() has no
// option for the binaries' directory (it resolves @node-llama-cpp/linux-x64's bins itself), the
// score reads cpuid, and GGML_BACKEND_PATH only loads one more backend after the best CPU one is
// registered (llama.cpp then still runs the first CPU device). So: process.dlopen is wrapped, and
// when llama-addon.node loads, its binding's loadBackends(dir) is pointed at a temporary directory
// holding symbolic links to only the variants at or below the level; ggml's own scoring then picks
// the best of those for this CPU. The addon, libllama and libggml-base load from the package as
// always; only the CPU backend's directory changes. llama.systemInfo ("CPU : SSE3 = 1 | ... |
// AVX2 = 1 | ...") lists the features the loaded variant was built with: llamaCpuFeatures() below.
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';

/**
 * The ggml CPU variants of each level, cumulative. avx2 stops at haswell (AVX2 + FMA + F16C + BMI2):
 * alderlake adds AVX-VNNI, which Longhand's avx2 level does not use. avx512 takes every AVX-512 build
 * but sapphirerapids (AMX).
 */
const PORTABLE = ['x64', 'sse42'];
const AVX2 = [...PORTABLE, 'sandybridge', 'ivybridge', 'piledriver', 'haswell'];
const AVX512 = [...AVX2, 'alderlake', 'skylakex', 'cannonlake', 'cascadelake', 'cooperlake', 'icelake', 'zen4'];
export const LLAMA_CPU_VARIANTS = Object.freeze({ portable: PORTABLE, avx2: AVX2, avx512: AVX512, amx: [...AVX512, 'sapphirerapids'] });

/** A level this module does not know, or a second, different level in one process. */
export class LlamaCpuLevelError extends Error {
  constructor(message, details) {
    super(message);
    this.name = 'LlamaCpuLevelError';
    this.code = 'LLAMA_CPU_LEVEL';
    this.details = details;
  }
}

let forced;

/**
 * From now on, llama.cpp bindings loaded in this process load their CPU backend from the variants
 * of `level` only (call before getLlama()). Returns { level, dir, variants }: the temporary
 * directory (removed when the process exits) and the variants linked into it (those the package
 * has). Throws LlamaCpuLevelError for an unknown level, or a different level than an earlier call.
 */
export function forceLlamaCpuLevel(level) {
  if (!Object.hasOwn(LLAMA_CPU_VARIANTS, level))
    throw new LlamaCpuLevelError(`llama.cpp CPU level must be one of ${Object.keys(LLAMA_CPU_VARIANTS).join(', ')}, got ${JSON.stringify(level)}`, { level });
  if (forced !== undefined) {
    if (forced.level === level) return forced;
    throw new LlamaCpuLevelError(`llama.cpp's CPU level is already ${forced.level} in this process; asked for ${level}`, { level, forced: forced.level });
  }
  const dir = mkdtempSync(join(tmpdir(), `llama-cpu-${level}-`));
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  forced = { level, dir, variants: [] };
  const dlopen = process.dlopen;
  process.dlopen = function dlopenAtLevel(module, filename, ...rest) {
    const out = dlopen.call(this, module, filename, ...rest);
    if (basename(filename) === 'llama-addon.node') {
      for (const v of LLAMA_CPU_VARIANTS[level]) {
        const name = `libggml-cpu-${v}.so`;
        try {
          symlinkSync(join(dirname(filename), name), join(dir, name));
          forced.variants.push(v);
        } catch (error) {
          if (error?.code !== 'EEXIST') throw error;
        }
      }
      // the binding's properties are read-only (napi_default): a wrapper object over it instead
      const binding = module.exports;
      const wrapped = Object.create(binding);
      Object.defineProperty(wrapped, 'loadBackends', {
        // no argument: node-llama-cpp's first call, which only counts the registered backends
        value: (path) => (path === undefined ? binding.loadBackends() : binding.loadBackends(dir)),
      });
      module.exports = wrapped;
    }
    return out;
  };
  return forced;
}

/** The CPU features llama.systemInfo lists as built into the loaded CPU backend, e.g. ['SSE3', 'AVX', 'AVX2', 'F16C', 'FMA', 'BMI2']. */
export function llamaCpuFeatures(systemInfo) {
  const line = String(systemInfo)
    .split('\n')
    .find((l) => l.trimStart().startsWith('CPU :'));
  if (line === undefined) return [];
  return [...line.matchAll(/([A-Z0-9_]+) = 1/g)].map((m) => m[1]).filter((f) => f !== 'LLAMAFILE' && f !== 'REPACK' && f !== 'OPENMP');
}
