// The native dense stages (native-stages.ts, native/src/dense_stage.h) against onnxruntime's stage
// graphs on the same files: both trained shared models (F32: the same math in fp32, so the logits
// agree to float rounding) and fixtures of every type with kernels (the activations are rounded to
// 8 bits by both, each its own way: a bound on KL instead). Also what 'auto' picks and why, the
// typed refusals, InfiniGen's speculative query, threads, the weights held once (no copy), and a
// closed model file refused instead of read. llama.cpp agreement of the native path is in
// llama-cpp*.test.ts, stories.test.ts and kjv.test.ts (they run 'auto').
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fixtureSet, writeLlamaGguf } from '../../../test/fixtures/index.ts';
import { haveSharedModel, KJV_HD64, STORIES_260K } from '../../../test/support/models.ts';
import { logSoftmax } from '../../../test/support/reference-forward.ts';
import { loadModel } from '../model/load-model.ts';
import type { LoadedModel } from '../model/types.ts';
import { createModelRunner, type ModelRunnerOptions } from './model-runner.ts';
import { createNativeStages, nativeDenseUnsupported } from './native-stages.ts';
import { ModelWeights } from './weights.ts';

const dir = join(tmpdir(), 'longhand-native-stages');
mkdirSync(dir, { recursive: true });
const set = fixtureSet(dir);

/** Logits of a prefill of `ids` (every position) and of 3 greedy decode steps after it. */
async function logitsOf(model: LoadedModel, ids: number[], options: ModelRunnerOptions): Promise<{ prefill: Float32Array; decode: Float32Array[]; engine: string }> {
  const r = await createModelRunner(model, { kvType: 'fp32', contextLength: 256, prefillChunk: 16, ...options });
  try {
    const prefill = await r.prefill(ids, undefined, { allLogits: true });
    const decode: Float32Array[] = [];
    let last: Float32Array = prefill.slice(prefill.length - model.hyper.vocabSize);
    for (let i = 0; i < 3; i++) {
      let best = 0;
      for (let j = 1; j < last.length; j++) if (last[j]! > last[best]!) best = j;
      last = await r.decode(best);
      decode.push(last);
    }
    return { prefill, decode, engine: r.dense.engine };
  } finally {
    await r.dispose();
  }
}

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

function meanKlRows(p: Float32Array, q: Float32Array, V: number): number {
  let total = 0;
  const rows = p.length / V;
  for (let t = 0; t < rows; t++) {
    const lp = logSoftmax(p.subarray(t * V, (t + 1) * V));
    const lq = logSoftmax(q.subarray(t * V, (t + 1) * V));
    for (let i = 0; i < V; i++) total += Math.exp(lp[i]!) * (lp[i]! - lq[i]!);
  }
  return total / rows;
}

const ids = [1, ...Array.from({ length: 40 }, (_, i) => 3 + ((i * 37 + 11) % 300))];

describe.skipIf(!haveSharedModel(STORIES_260K) || !haveSharedModel(KJV_HD64))('native dense stages on the trained models (F32) vs onnxruntime', () => {
  it.each([
    ['stories260K', STORIES_260K],
    ['kjv-llama-hd64', KJV_HD64],
  ])('%s: logits of a prefill and 3 decode steps agree to float rounding', async (_name, path) => {
    const model = await loadModel(path);
    try {
      expect(nativeDenseUnsupported(model)).toBeUndefined();
      const n = await logitsOf(model, ids, { dense: 'native' });
      const o = await logitsOf(model, ids, { dense: 'onnx' });
      expect([n.engine, o.engine]).toEqual(['native', 'onnx']);
      // fp32 through both: measured 2e-6 .. 6e-6 (logits of magnitude ~10)
      expect(maxAbsDiff(n.prefill, o.prefill)).toBeLessThan(1e-4);
      for (let i = 0; i < 3; i++) expect(maxAbsDiff(n.decode[i]!, o.decode[i]!)).toBeLessThan(1e-4);
      // and the default is the native one
      expect((await logitsOf(model, ids.slice(0, 4), {})).engine).toBe('native');
    } finally {
      model.close();
    }
  });

  it('InfiniGen on native stages: the same speculative queries, so the same selections and text as on onnxruntime', async () => {
    const model = await loadModel(KJV_HD64);
    try {
      const run = async (dense: 'native' | 'onnx'): Promise<number[]> => {
        const r = await createModelRunner(model, { kvType: 'fp32', contextLength: 256, dense, policy: 'infinigen', infinigen: { fetchCap: 0.3, denseLayers: 1 } });
        try {
          let logits = await r.prefill(ids);
          const out: number[] = [];
          for (let i = 0; i < 12; i++) {
            let best = 0;
            for (let j = 1; j < logits.length; j++) if (logits[j]! > logits[best]!) best = j;
            out.push(best);
            logits = await r.decode(best);
          }
          return out;
        } finally {
          await r.dispose();
        }
      };
      expect(await run('native')).toEqual(await run('onnx'));
    } finally {
      model.close();
    }
  });
});

describe('native dense stages on quantised fixtures vs onnxruntime', () => {
  // The two engines quantize activations differently (per 32 / 256 block, their own rounding), so
  // the distributions are compared, not the logits: measured KL 1e-6 .. 2e-5.
  it.each(['F16', 'Q8_0', 'Q4_0', 'Q4_K'] as const)('llama GQA %s: mean KL(onnx ‖ native) < 1e-4 over a prefill', async (type) => {
    const model = await loadModel(set.gguf.gqa[type]);
    try {
      const n = await logitsOf(model, ids, { dense: 'native' });
      const o = await logitsOf(model, ids, { dense: 'onnx' });
      expect(n.engine).toBe('native');
      const kl = meanKlRows(o.prefill, n.prefill, model.hyper.vocabSize);
      console.log(`GQA ${type}: mean KL(onnx ‖ native) ${kl.toExponential(2)}`);
      expect(kl).toBeLessThan(1e-4);
    } finally {
      model.close();
    }
  });

  it('1 and 2 threads give the same bits', async () => {
    const model = await loadModel(set.gguf.mha.Q4_0);
    try {
      const one = await logitsOf(model, ids, { dense: 'native', threads: 1 });
      const two = await logitsOf(model, ids, { dense: 'native', threads: 2 });
      expect(maxAbsDiff(one.prefill, two.prefill)).toBe(0);
      expect(maxAbsDiff(one.decode[2]!, two.decode[2]!)).toBe(0);
    } finally {
      model.close();
    }
  });

  it('holds each weight once: its stages read the mapped file, and count every linear weight byte once', async () => {
    const model = await loadModel(set.gguf.gqa.Q4_K);
    try {
      // the stages make every weight they stream the process's own pages (LoadedModel.ownTensors),
      // each once, a layer's matrices in one call
      const owned: string[] = [];
      const calls: string[][] = [];
      const own = model.ownTensors!.bind(model);
      model.ownTensors = (names, threads) => {
        owned.push(...names);
        calls.push([...names]);
        return own(names, threads);
      };
      const r = await createModelRunner(model, { dense: 'native', contextLength: 64 });
      expect(calls.length).toBe(model.hyper.layers + 1);
      expect(calls[0]!.every((n) => n.startsWith('blk.0.'))).toBe(true);
      expect(owned.length).toBe(new Set(owned).size);
      expect([...owned].sort()).toEqual([...model.tensors.keys()].filter((n) => n.endsWith('.weight') && model.tensors.get(n)!.shape.length === 2 && n !== 'token_embd.weight').sort());
      let linear = 0;
      for (const [name, t] of model.tensors) if (name.endsWith('.weight') && t.shape.length === 2 && name !== 'token_embd.weight') linear += t.bytes().byteLength;
      expect(r.graphWeightBytes).toBe(linear);
      expect(r.dense).toMatchObject({ engine: 'native' });
      await r.dispose();
    } finally {
      model.close();
    }
  });

  it('a closed model file is refused by the next run, never read', async () => {
    const model = await loadModel(set.gguf.gqa.Q8_0);
    const hyper = model.hyper;
    const stages = createNativeStages(new ModelWeights(model, 4), { threads: 1, speculates: Array(hyper.layers + 1).fill(false), onProgress: undefined });
    const half = hyper.headDim / 2;
    const feeds = {
      h: { elemType: 'float32', dims: [1, 1, hyper.hiddenSize], data: new Float32Array(hyper.hiddenSize).fill(0.5) },
      rope_cos: { elemType: 'float32', dims: [1, half], data: new Float32Array(half).fill(1) },
      rope_sin: { elemType: 'float32', dims: [1, half], data: new Float32Array(half) },
    } as const;
    const before = await stages.sessions[0]!.run(feeds);
    expect(before.q!.data.length).toBe(hyper.heads * hyper.headDim);
    model.close();
    await expect(stages.sessions[0]!.run(feeds)).rejects.toMatchObject({ code: 'NATIVE_BAD_ARGUMENT', message: expect.stringMatching(/model file it reads has been closed/) });
    for (const s of stages.sessions) await s.release();
  });
});

describe('which dense engine runs', () => {
  it("'native' where it cannot run is a typed error that says why; 'auto' then takes onnxruntime and says why", async () => {
    const path = join(dir, 'bf16.gguf');
    // BF16 matrices: a type with no native kernels (llama-quantize's fallbacks all have them now)
    writeLlamaGguf(path, { dim: 256, layers: 2, heads: 4, kvHeads: 2, ffn: 384, context: 64, vocab: 400, seed: 3, type: 'BF16' });
    const model = await loadModel(path);
    try {
      expect(nativeDenseUnsupported(model)).toMatch(/\.weight is BF16, which has no native dense kernels/);
      await expect(createModelRunner(model, { dense: 'native', contextLength: 32 })).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/dense 'native' cannot run .*BF16/) });
      const r = await createModelRunner(model, { contextLength: 32 });
      expect(r.dense).toEqual({ engine: 'onnx', whyNotNative: expect.stringMatching(/BF16/) });
      await r.dispose();
      await expect(createModelRunner(model, { dense: 'fast' as never, contextLength: 32 })).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    } finally {
      model.close();
    }
  });

  it('accuracy level 0 (fp32 activations) on quantized weights is onnxruntime’s: auto takes it and says why, native refuses', async () => {
    const model = await loadModel(set.gguf.gqa.Q8_0);
    try {
      expect(nativeDenseUnsupported(model)).toBeUndefined();
      expect(nativeDenseUnsupported(model, { accuracyLevel: 4 })).toBeUndefined();
      expect(nativeDenseUnsupported(model, { accuracyLevel: 0 })).toMatch(/accuracy level 0 .* is Q8_0: the native kernels quantize activations to int8/);
      const r = await createModelRunner(model, { contextLength: 32, accuracyLevel: 0 });
      expect(r.dense).toEqual({ engine: 'onnx', whyNotNative: expect.stringMatching(/accuracy level 0/) });
      await r.dispose();
      await expect(createModelRunner(model, { dense: 'native', accuracyLevel: 0, contextLength: 32 })).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    } finally {
      model.close();
    }
    // float weights have no activation rounding to ask about: native at any accuracy level
    const f32 = await loadModel(set.gguf.gqa.F32);
    try {
      expect(nativeDenseUnsupported(f32, { accuracyLevel: 0 })).toBeUndefined();
    } finally {
      f32.close();
    }
  });

  it('OPT keeps onnxruntime', async () => {
    const model = await loadModel(set.hf.opt);
    try {
      expect(nativeDenseUnsupported(model)).toMatch(/opt architecture/);
    } finally {
      model.close();
    }
  });
});
