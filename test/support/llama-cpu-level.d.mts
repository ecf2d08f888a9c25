// Types of llama-cpu-level.mjs (plain JS so that bench/dense.mjs's llama.cpp child, run by plain
// node, can import it).

export type LlamaCpuLevel = 'portable' | 'avx2' | 'avx512' | 'amx';

/** The ggml CPU backend variants (libggml-cpu-<name>.so) each level may load, cumulative. */
export declare const LLAMA_CPU_VARIANTS: Readonly<Record<LlamaCpuLevel, readonly string[]>>;

export declare class LlamaCpuLevelError extends Error {
  readonly code: 'LLAMA_CPU_LEVEL';
  readonly details: { level: unknown; forced?: LlamaCpuLevel };
}

export interface ForcedLlamaCpuLevel {
  level: LlamaCpuLevel;
  /** the temporary directory of links ggml picks the CPU backend from (removed at exit) */
  dir: string;
  /** the variants linked there, filled in when llama-addon.node loads */
  variants: string[];
}

/** llama.cpp bindings loaded later in this process take their CPU backend from `level`'s variants only. */
export declare function forceLlamaCpuLevel(level: string): ForcedLlamaCpuLevel;

/** The CPU features llama.systemInfo lists for the loaded CPU backend (LLAMAFILE, REPACK, OPENMP left out). */
export declare function llamaCpuFeatures(systemInfo: string): string[];
