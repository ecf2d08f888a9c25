// LONGHAND_CPU_LEVEL (native/src/cpu_level.h): read as the addon loads, it caps every kernel choice
// at a level, so an AVX-512 or AMX host runs the kernels an AVX2 CPU runs. This process has no such
// variable (its kernels are the CPU's best, as always); the forced levels run in child processes
// (plain node loading native/index.js), which report the kernels they chose and hold attention
// against the scalar reference there.
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { CPU_LEVEL_ENV, attentionKernel, cpuLevel, denseKernel, measureDotPeak, type CpuLevelInfo, type CpuLevelName } from './index.js';

const INDEX_URL = new URL('./index.js', import.meta.url).href;
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const LEVELS: CpuLevelName[] = ['portable', 'avx2', 'avx512', 'amx'];
const GGML_TYPES = { F32: 0, F16: 1, Q4_0: 2, Q8_0: 8, Q4_K: 12, Q5_K: 13, Q6_K: 14, MXFP4: 39, Q4_1: 3, Q5_0: 6, Q5_1: 7 } as const;

interface ChildReport {
  info?: CpuLevelInfo;
  attentionKernel?: string;
  /** relative squared error of attend (AUTO) against attendReference (the scalar C++ reference), GQA 4, headDim 64, 257 tokens */
  attentionError?: number;
  peakKernel?: string;
  error?: { name: string; code: string; message: string; details: Record<string, unknown> };
}

/** Loads the facade in a child with LONGHAND_CPU_LEVEL=`level` and reports what it chose and computed. */
function runChild(level: string): ChildReport {
  const env = { ...process.env, [CPU_LEVEL_ENV]: level };
  const script = `
    const m = await import(${JSON.stringify(INDEX_URL)});
    const random = (n, seed) => { const a = new Float32Array(n); let s = seed >>> 0 || 1;
      for (let i = 0; i < n; i++) { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; a[i] = (s / 2 ** 32) * 2 - 1; } return a; };
    try {
      const info = m.cpuLevel();
      const kvHeads = 2, heads = 8, headDim = 64, tokens = 257;
      const pool = m.createKvPool({ budgetBytes: 1 << 24, layers: 1, kvHeads, headDim });
      for (let t = 0; t < tokens; t++) pool.append(0, random(kvHeads * headDim, 2 * t + 1), random(kvHeads * headDim, 2 * t + 2), t);
      const q = random(heads * headDim, 99), out = new Float32Array(heads * headDim), ref = new Float32Array(heads * headDim);
      m.attend(pool, 0, q, heads, out);
      m.attendReference(pool, 0, q, heads, ref);
      let num = 0, den = 0;
      for (let i = 0; i < out.length; i++) { num += (out[i] - ref[i]) ** 2; den += ref[i] ** 2; }
      pool.free();
      console.log(JSON.stringify({ info, attentionKernel: m.attentionKernel(), attentionError: num / den, peakKernel: m.measureDotPeak(12, 1).kernel }));
    } catch (e) { console.log(JSON.stringify({ error: { name: e.name, code: e.code, message: e.message, details: e.details } })); }`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, env, encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) throw new Error(`child (${CPU_LEVEL_ENV}=${level}) exited ${r.status ?? r.signal}: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as ChildReport;
}

const here = cpuLevel();
const below = (level: CpuLevelName) => LEVELS.indexOf(level) <= LEVELS.indexOf(here.cpu);

describe('cpuLevel without LONGHAND_CPU_LEVEL', () => {
  it("is the CPU's own level, and names the kernels attentionKernel() and denseKernel() name", () => {
    expect(process.env[CPU_LEVEL_ENV]).toBeUndefined();
    expect(here.forced).toBe(false);
    expect(here.level).toBe(here.cpu);
    expect(here.attention).toBe(attentionKernel());
    for (const [name, type] of Object.entries(GGML_TYPES)) expect(here.dense[name as keyof typeof GGML_TYPES]).toBe(denseKernel(type));
  });

  it('measureDotPeak measures the kernels DenseStage runs, at a positive rate', () => {
    const p = measureDotPeak(GGML_TYPES.Q4_0, 1);
    expect(p.kernel).toBe(denseKernel(GGML_TYPES.Q4_0));
    expect(p.tokens).toBe(p.kernel === 'amx' ? 256 : 64);
    expect(p.macsPerSecond).toBeGreaterThan(1e8);
  });
});

describe('LONGHAND_CPU_LEVEL in a child process', () => {
  const cases: [CpuLevelName, string, string][] = [
    ['avx2', 'avx2', 'avx2-fma-f16c'],
    ['portable', 'scalar', 'portable'],
  ];
  for (const [level, dense, attention] of cases) {
    it.skipIf(!below(level))(`${level}: every dispatch runs the ${level} kernels, and attention still equals the scalar reference`, () => {
      const r = runChild(level);
      expect(r.error).toBeUndefined();
      expect(r.info).toMatchObject({ level, cpu: here.cpu, forced: level !== here.cpu, attention });
      for (const name of Object.keys(GGML_TYPES)) expect(r.info!.dense[name as keyof typeof GGML_TYPES]).toBe(dense);
      expect(r.attentionKernel).toBe(attention);
      expect(r.peakKernel).toBe(dense);
      expect(r.attentionError).toBeLessThan(1e-10);
    });
  }

  it('an unknown name fails the load with a typed NATIVE_BAD_ARGUMENT naming the variable and the levels', () => {
    const r = runChild('AVX2');
    expect(r.error).toMatchObject({
      name: 'NativeError',
      code: 'NATIVE_BAD_ARGUMENT',
      message: expect.stringContaining("got 'AVX2'"),
      details: { variable: CPU_LEVEL_ENV, value: 'AVX2', reason: 'unknown-level', cpuLevel: here.cpu },
    });
    expect(r.error!.message).toContain('portable, avx2, avx512, amx');
  });

  it.skipIf(here.cpu === 'amx')('a level this CPU lacks fails the load with a typed NATIVE_BAD_ARGUMENT', () => {
    const r = runChild('amx');
    expect(r.error).toMatchObject({
      name: 'NativeError',
      code: 'NATIVE_BAD_ARGUMENT',
      message: expect.stringContaining(`it has ${here.cpu} at most`),
      details: { variable: CPU_LEVEL_ENV, value: 'amx', reason: 'cpu-lacks-level', cpuLevel: here.cpu },
    });
  });

  it("the CPU's own level is no cap: the same kernels as without the variable", () => {
    const r = runChild(here.cpu);
    expect(r.error).toBeUndefined();
    expect(r.info).toEqual(here);
  });
});
