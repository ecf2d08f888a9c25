// The offload path on onnxruntime's WebGPU provider against the CPU path (issue 33), on both reference
// models, on whatever adapter test/support/webgpu.ts finds (on machines without a GPU: SwiftShader,
// a software Vulkan rasteriser shipped with Debian's chromium; no float16 there, so float32 KV rows).
// The WebGPU runs happen in a child process (offload-webgpu.child.ts) started with the adapter's
// environment; this process runs the same generations on the CPU provider and compares:
//   - greedy ids identical at every step, policies 'full' and 'infinigen' (InfiniGen's skew cache is
//     shared: the CPU run calibrates, the WebGPU run reads the same matrices);
//   - logits within LOGIT_TOLERANCE at every step (measured below ~1e-4: onnxruntime's WebGPU
//     kernels sum in another order than the native CPU kernels; both float32);
//   - per step and layer the same rows attended, the same row-buffer hits and misses and the same
//     K/V bytes uploaded as the CPU provider counts, and the host tensors bound beside them exactly
//     what a device run adds: q and the attention output (heads·headDim·4 bytes each, copied by
//     onnxruntime every run), the int64 rows a miss update overwrites (8 per miss), and at a layer's
//     first update the 16-byte shape of the zero buffer the device makes for itself;
//   - under a pool budget that evicts: the same evictions, ids and bytes;
//   - every comparison policy on stories260K (h2o; quest, whose KV heads list different counts; oracle,
//     snapkv, window).
// The hidden state stays on the device between the layer graphs (stage-sessions.ts keepOnDevice):
// these runs go through it. SwiftShader is slow (~0.15-0.25 s a step on stories260K, ~0.6-1.6 s on
// kjv-llama-hd64, mostly its MatMul shaders, on 2 cores shared with other work), so kjv-llama-hd64
// runs 16 steps on SwiftShader (100 on any other adapter); `longhand generate --device webgpu` was
// checked over 100 (README).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { haveSharedModel, KJV_HD64, KJV_REFERENCE_GREEDY, loadReferenceRuns, REFERENCE_GREEDY, STORIES_260K } from '../../../test/support/models.ts';
import { argmax } from '../../../test/support/reference-forward.ts';
import { runWithWebgpu, webgpuForTests } from '../../../test/support/webgpu.ts';
import { loadModel } from '../model/load-model.ts';
import { createModelRunner, type ModelRunnerOptions } from './model-runner.ts';
import type { ChildRequest, ChildRun } from './offload-webgpu.child.ts';
import type { OffloadStepStats } from './placement/offload-attention.ts';

const LOGIT_TOLERANCE = 2e-3;

interface Case {
  label: string;
  steps: number;
  options: ModelRunnerOptions;
}

interface CpuRun {
  ids: number[];
  logits: Float32Array;
  offload: OffloadStepStats[];
  evictions: number;
}

async function cpuRun(path: string, prompt: readonly number[], c: Case): Promise<CpuRun> {
  const model = await loadModel(path);
  const r = await createModelRunner(model, { ...c.options, offload: true });
  try {
    const vocab = r.vocabSize;
    const logits = new Float32Array(c.steps * vocab);
    const ids: number[] = [];
    const offload: OffloadStepStats[] = [];
    let l = await r.prefill(prompt);
    for (let i = 0; i < c.steps; i++) {
      logits.set(l, i * vocab);
      ids.push(argmax(l));
      l = await r.decode(ids[i]!);
      offload.push(r.lastOffloadStep!()!);
    }
    return { ids, logits, offload, evictions: r.evictions().reduce((a, b) => a + b, 0) };
  } finally {
    await r.dispose();
    model.close();
  }
}

const setup = webgpuForTests();
// SwiftShader takes ~1-1.5 s a kjv-llama-hd64 step here: 16 steps there, 100 on a faster adapter
const KJV_STEPS = /SwiftShader/.test(setup?.adapter?.name ?? '') ? 16 : 100;

for (const [name, path, reference, steps] of [
  ['stories260K', STORIES_260K, REFERENCE_GREEDY, 100],
  ['kjv-llama-hd64', KJV_HD64, KJV_REFERENCE_GREEDY, KJV_STEPS],
] as const) {
  const have = setup !== undefined && haveSharedModel(path) && haveSharedModel(reference);
  describe.skipIf(!have)(`offload mode on WebGPU (${setup?.adapter?.name ?? 'no adapter'}) == the CPU path: ${name}`, () => {
    const dir = mkdtempSync(join(tmpdir(), 'longhand-offload-webgpu-'));
    afterAll(() => rmSync(dir, { recursive: true, force: true }));
    const infinigen = { infinigen: { cacheDir: dir } };

    it(`full and infinigen over ${steps} steps${name === 'stories260K' ? ', infinigen under an evicting budget over 100, h2o and quest over 40, oracle, snapkv and window over 24' : ''}: the CPU provider's ids, logits within ${LOGIT_TOLERANCE}, rows, hits, misses and K/V bytes`, async () => {
      const prompt = loadReferenceRuns(reference)[0]!.promptIds;
      const base: ModelRunnerOptions = { kvType: 'fp32', contextLength: 256 };
      const cases: Case[] = [
        { label: 'full', steps, options: { ...base, policy: 'full' } },
        { label: 'infinigen', steps, options: { ...base, policy: 'infinigen', ...infinigen } },
      ];
      if (name === 'stories260K') {
        // ~72 tokens' worth of pool (sinks 4 + recent 64 protected): from about step 67 on every step evicts one token per layer
        const probe = await loadModel(path);
        const sized = await createModelRunner(probe, { ...base, policy: 'infinigen', ...infinigen });
        const perToken = sized.poolBytes / 256;
        await sized.dispose();
        probe.close();
        cases.push({ label: 'infinigen, evicting budget', steps: 100, options: { ...base, policy: 'infinigen', ...infinigen, poolBudgetBytes: Math.floor(perToken * 72) } });
        // the comparison policies (selection with the real query; Quest's heads keep different counts: the ragged graph),
        // h2o and quest over 40 steps, oracle (true scores), snapkv (kept prompt rows) and window over 24
        for (const policy of ['h2o', 'quest'] as const) cases.push({ label: policy, steps: 40, options: { ...base, policy, sparse: { fetchCap: 0.2 } } });
        for (const policy of ['oracle', 'snapkv', 'window'] as const) cases.push({ label: policy, steps: 24, options: { ...base, policy, sparse: { fetchCap: 0.2 } } });
      }
      // CPU first: InfiniGen calibrates its skew here and the child reads it from the shared cache
      const cpu: CpuRun[] = [];
      for (const c of cases) cpu.push(await cpuRun(path, prompt, c));
      const t0 = performance.now();
      const request: ChildRequest = { modelPath: path, prompt, runs: cases };
      const gpu = runWithWebgpu<ChildRun[]>(setup!, 'app/engine/forward/offload-webgpu.child.ts', [JSON.stringify(request)], 600_000);
      const childMs = performance.now() - t0;
      const model = await loadModel(path);
      const { heads, headDim, kvHeads } = model.hyper;
      model.close();
      const qAndOut = 2 * heads * headDim * 4;
      cases.forEach((c, i) => {
        const want = cpu[i]!;
        const got = gpu[i]!;
        expect(got.label).toBe(c.label);
        expect(got.ids, c.label).toEqual(want.ids);
        const logits = new Float32Array(Buffer.from(got.logits, 'base64').buffer.slice(0));
        expect(logits.length).toBe(want.logits.length);
        let worst = 0;
        for (let j = 0; j < logits.length; j++) worst = Math.max(worst, Math.abs(logits[j]! - want.logits[j]!));
        expect(worst, c.label).toBeLessThan(LOGIT_TOLERANCE);
        expect(got.evictions, c.label).toBe(want.evictions);
        if (c.options.poolBudgetBytes !== undefined) expect(got.evictions, 'the budget evicts').toBeGreaterThan(20 * model.hyper.layers);
        expect(got.offload.length).toBe(c.steps);
        const updated = new Set<number>();
        let kvBytes = 0;
        let ragged = 0;
        got.offload.forEach((step, s) => {
          const cpuStep = want.offload[s]!;
          expect(step.position).toBe(cpuStep.position);
          step.layers.forEach((l, j) => {
            const w = cpuStep.layers[j]!;
            expect([l.layer, l.rows, l.hits, l.misses, l.uploadBytes], `${c.label} step ${s} layer ${l.layer}`).toEqual([w.layer, w.rows, w.hits, w.misses, w.uploadBytes]);
            // every listed row is a hit or a miss; a comparison policy's heads may list fewer than the step's rows (padding)
            if (c.options.policy === 'full' || c.options.policy === 'infinigen') expect(l.hits + l.misses).toBe(kvHeads * l.rows);
            else expect(l.hits + l.misses).toBeLessThanOrEqual(kvHeads * l.rows);
            // what a device run binds beyond the CPU provider's: q and the output, the rows a miss update overwrites, a layer's first zero buffer's shape
            const first = !updated.has(l.layer);
            updated.add(l.layer);
            expect(l.hostTensorBytes, `${c.label} step ${s} layer ${l.layer}`).toBe(w.hostTensorBytes + qAndOut + (l.misses > 0 ? 8 * l.misses : 0) + (first ? 16 : 0));
            expect(l.crossedBytes).toBe(l.uploadBytes + l.hostTensorBytes);
            kvBytes += l.uploadBytes;
            // the ragged graph binds each KV head's length (int32) beside the padded idx
            if (w.hostTensorBytes === kvHeads * l.rows * 4 + kvHeads * 4) ragged++;
          });
        });
        // Quest's pages leave its KV heads with different counts: the ragged graph ran on the device
        if (c.label === 'quest') expect(ragged, 'layer-steps whose KV heads listed different counts').toBeGreaterThan(0);
        console.log(`${name} ${c.label} on WebGPU (${setup!.source}): ${c.steps} steps, ids identical, max |Δ logit| ${worst.toExponential(2)}, K/V bytes uploaded ${kvBytes} (= CPU provider), evictions ${got.evictions}, ragged layer-steps ${ragged}, child run ${(got.ms / 1000).toFixed(1)} s`);
      });
      console.log(`${name}: WebGPU child ${(childMs / 1000).toFixed(1)} s in all`);
    }, 900_000);
  });
}
