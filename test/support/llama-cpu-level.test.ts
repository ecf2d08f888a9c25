// forceLlamaCpuLevel (llama-cpu-level.mjs): node-llama-cpp's prebuilt llama.cpp loads the CPU
// backend variant of the asked level, seen in llama.systemInfo's feature list. Each level runs in
// a child process (the choice is made once per process, when the binding loads).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { cpuLevel } from '../../native/index.js';
import { forceLlamaCpuLevel, LlamaCpuLevelError, LLAMA_CPU_VARIANTS, llamaCpuFeatures } from './llama-cpu-level.mjs';

const HELPER_URL = new URL('./llama-cpu-level.mjs', import.meta.url).href;
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
// the scripts live in a temporary directory, outside node_modules' reach: import the package by URL
const LLAMA_URL = pathToFileURL(createRequire(join(ROOT, 'package.json')).resolve('node-llama-cpp')).href;

// Children run script files: node-llama-cpp tests its binary in a fork() of the process, which
// inherits the parent's execArgv (a `-e` script would run again instead of its test).
const scripts = mkdtempSync(join(tmpdir(), 'llama-cpu-level-test-'));
afterAll(() => rmSync(scripts, { recursive: true, force: true }));
let scriptCount = 0;

function runScript(script: string) {
  const file = join(scripts, `child-${scriptCount++}.mjs`);
  writeFileSync(file, script);
  return spawnSync(process.execPath, [file], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
}

/** The features of the CPU backend llama.cpp loads in a child (level undefined: as node-llama-cpp chooses). */
function childFeatures(level: string | undefined): { features: string[]; variants?: string[] } {
  const script = `
    const h = await import(${JSON.stringify(HELPER_URL)});
    const forced = ${level === undefined ? 'undefined' : `h.forceLlamaCpuLevel(${JSON.stringify(level)})`};
    const { getLlama, LlamaLogLevel } = await import(${JSON.stringify(LLAMA_URL)});
    const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
    console.log(JSON.stringify({ features: h.llamaCpuFeatures(llama.systemInfo), variants: forced?.variants }));
    await llama.dispose();`;
  const r = runScript(script);
  if (r.status !== 0) throw new Error(`child exited ${r.status ?? r.signal}: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { features: string[]; variants?: string[] };
}

const cpu = cpuLevel().cpu;

describe('llama.cpp at a forced CPU level', () => {
  it.skipIf(cpu === 'portable')('avx2: the haswell build (AVX2, FMA, F16C; no AVX-512, no AVX-VNNI), where the default loads the best', () => {
    const forced = childFeatures('avx2');
    expect(forced.variants).toEqual(expect.arrayContaining(['haswell']));
    expect(forced.variants).not.toContain('alderlake');
    expect(forced.features).toEqual(expect.arrayContaining(['AVX2', 'FMA', 'F16C']));
    expect(forced.features.filter((f) => f.startsWith('AVX512') || f.startsWith('AMX') || f === 'AVX_VNNI')).toEqual([]);
    const best = childFeatures(undefined);
    // on an AVX-512 host the default build has it: the switch is what took it away
    if (cpu === 'avx512' || cpu === 'amx') expect(best.features).toContain('AVX512');
  });

  it('portable: an SSE build without AVX', () => {
    const forced = childFeatures('portable');
    expect(forced.features).not.toContain('AVX');
    expect(forced.features).not.toContain('AVX2');
  });

  it('refuses an unknown level, and a second different level in one process, with a typed error', () => {
    expect(() => forceLlamaCpuLevel('AVX2')).toThrow(LlamaCpuLevelError);
    expect(() => forceLlamaCpuLevel('AVX2')).toThrow(/one of portable, avx2, avx512, amx, got "AVX2"/);
    // forcing wraps this process's dlopen for good: in a child, not in this test worker
    const script = `
      const h = await import(${JSON.stringify(HELPER_URL)});
      const first = h.forceLlamaCpuLevel('avx512');
      let second;
      try { h.forceLlamaCpuLevel('avx2'); } catch (e) { second = { name: e.name, code: e.code, message: e.message }; }
      console.log(JSON.stringify({ same: h.forceLlamaCpuLevel('avx512') === first, second }));`;
    const r = runScript(script);
    expect(JSON.parse(r.stdout)).toEqual({
      same: true,
      second: { name: 'LlamaCpuLevelError', code: 'LLAMA_CPU_LEVEL', message: "llama.cpp's CPU level is already avx512 in this process; asked for avx2" },
    });
  });

  it('reads the feature list of llama.systemInfo', () => {
    expect(llamaCpuFeatures('CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 0 | LLAMAFILE = 1 | REPACK = 1 | \n')).toEqual(['SSE3', 'AVX', 'AVX2']);
    expect(llamaCpuFeatures('no cpu line')).toEqual([]);
    expect(LLAMA_CPU_VARIANTS.amx).toContain('sapphirerapids');
    expect(LLAMA_CPU_VARIANTS.avx512).not.toContain('sapphirerapids');
  });
});
