// The two families as declared (llama.ts, opt.ts) on real files: the trained reference model
// stories260K (GGUF llama) and the Hugging Face fixtures of OPT and Qwen2 (test/fixtures), and
// familyOf's refusal of an architecture no family declares. The specs must say what the stages
// compute today: the RoPE a llama spec stands for is the one the runner feeds (stageRope), the
// memory estimate from the specs is the one from the hyperparameters, and buildStage dispatches
// to the family's graphs.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isLonghandError, LonghandError, UsageError } from '../../../common/errors.ts';
import { SMALL_HF, writeHfFolder } from '../../../../test/fixtures/index.ts';
import { haveSharedModel, STORIES_260K } from '../../../../test/support/models.ts';
import { LLAMA_TENSORS } from '../../model/arch/llama.ts';
import { OPT_TENSORS } from '../../model/arch/opt.ts';
import { loadGgufModel } from '../../model/gguf/gguf-model.ts';
import { loadModel } from '../../model/load-model.ts';
import { estimateMemory, kvBytesPerToken, partialKeyBytesPerToken } from '../../model/memory-estimate.ts';
import type { LoadedModel, ModelHyperparameters } from '../../model/types.ts';
import { buildStage, stageRope } from '../graphs.ts';
import { ModelWeights } from '../weights.ts';
import { assertPolicySupported, FAMILIES, familyOf } from './families.ts';
import { kvLayers, nextKvLayer, ropeFrequencies, uniformAttention, type LayerSpec } from './layer-spec.ts';
import { llamaStageGraph } from './llama-graph.ts';
import { LLAMA_FAMILY } from './llama.ts';
import { optStageGraph } from './opt-graph.ts';
import { OPT_FAMILY } from './opt.ts';

/** Every row policy the runner knows (model-runner.ts RUNNER_POLICIES). */
const POLICIES = ['full', 'infinigen', 'h2o', 'streaming', 'quest', 'snapkv', 'oracle'];

const WEIGHTS = { bytesByType: { F32: 1_000_000 }, storedBytes: 1_000_000 };
const MEMORY = { freeBytes: 64 * 2 ** 30, totalBytes: 64 * 2 ** 30 };

/** The memory estimate from the specs equals the one from the hyperparameters alone (all layers have KV today). */
function expectSameMemory(hyper: ModelHyperparameters, layers: readonly LayerSpec[]): void {
  for (const kvType of ['fp16', 'fp32', 'int8'] as const) {
    expect(kvBytesPerToken(hyper, kvType, layers)).toBe(kvBytesPerToken(hyper, kvType));
    expect(estimateMemory(hyper, WEIGHTS, 1000, { ...MEMORY, kvType, layers })).toEqual(estimateMemory(hyper, WEIGHTS, 1000, { ...MEMORY, kvType }));
  }
  expect(partialKeyBytesPerToken(hyper, 0.3, layers)).toBe(partialKeyBytesPerToken(hyper, 0.3));
}

/** The same stage bytes through buildStage (the family's dispatch) as from the family's builder. */
function expectDispatch(model: LoadedModel, direct: (w: ModelWeights, s: number) => { model: Uint8Array; name: string }): void {
  const w = new ModelWeights(model, 4);
  for (const s of [0, 1, model.hyper.layers]) {
    const built = buildStage(w, s, {});
    const own = direct(w, s);
    expect(built.name).toBe(own.name);
    expect(Buffer.from(built.model).equals(Buffer.from(own.model))).toBe(true);
  }
}

describe.skipIf(!haveSharedModel(STORIES_260K))('the llama family on stories260K', () => {
  let model: LoadedModel;
  beforeAll(() => {
    model = loadGgufModel(STORIES_260K);
  });
  afterAll(() => model?.close());

  it('every layer: GQA attention with the file RoPE (interleaved pairs), scale 1/√headDim, no window, sinks, q/k norm or soft-cap; SwiGLU; pre-RMSNorm', () => {
    const hyper = model.hyper;
    const family = familyOf(hyper);
    expect(family).toBe(LLAMA_FAMILY);
    expect(family.tensors).toBe(LLAMA_TENSORS);
    const specs = family.layers(hyper);
    expect(specs).toHaveLength(hyper.layers);
    for (const spec of specs) {
      expect(spec).toEqual({
        attention: {
          kind: 'attention',
          heads: hyper.heads,
          kvHeads: hyper.kvHeads,
          headDim: hyper.headDim,
          scale: 1 / Math.sqrt(hyper.headDim),
          window: undefined,
          sinks: false,
          rope: { base: hyper.ropeTheta, dims: hyper.headDim, layout: 'interleaved', scaling: undefined },
          qkNorm: false,
          softcap: 0,
        },
        ffn: { kind: 'dense', size: hyper.ffnSize, gated: true, activation: 'silu' },
        norm: { kind: 'rms', placement: 'pre', eps: hyper.normEps },
      });
    }
    expect(hyper.kvHeads).toBeLessThan(hyper.heads); // stories260K is GQA: 8 query heads, 4 KV heads
    expect(kvLayers(specs)).toEqual(Array.from({ length: hyper.layers }, (_, l) => l));
    expect(nextKvLayer(specs, 0)).toBe(1);
    const uniform = uniformAttention(specs);
    expect(uniform.reason).toBeUndefined();
    // the RoPE the spec stands for is the one the stages and the runner use, field for field
    expect(ropeFrequencies(uniform.shape!)).toEqual(stageRope(hyper));
  });

  it('token embedding without learned positions or scale; no context limit; every policy; native stages over 7 matrices a layer and the head', () => {
    const family = familyOf(model.hyper);
    expect(family.embedding(model.hyper)).toEqual({ tokenTable: 'token_embd.weight', positions: undefined, scale: 1 });
    expect(model.tensors.has(family.embedding(model.hyper).tokenTable)).toBe(true);
    expect(family.contextLimit(model.hyper)).toBeUndefined();
    for (const policy of POLICIES) expect(family.policyRefusal(policy)).toBeUndefined();
    expect(() => assertPolicySupported(model.hyper, 'infinigen')).not.toThrow();
    expect(family.nativeStages.kind).toBe('native');
    if (family.nativeStages.kind !== 'native') return;
    const names = family.nativeStages.linearNames(model);
    expect(names).toHaveLength(7 * model.hyper.layers + 1);
    expect(names.every((n) => model.tensors.has(n))).toBe(true);
  });

  it('the memory estimate from the specs is the one from the hyperparameters; a layer without KV drops its rows', () => {
    const hyper = model.hyper;
    const specs = familyOf(hyper).layers(hyper);
    expectSameMemory(hyper, specs);
    const oneLess = specs.map((spec, l): LayerSpec => (l === 1 ? { ...spec, attention: { kind: 'none' } } : spec));
    const perLayer = kvBytesPerToken(hyper) / hyper.layers;
    expect(kvBytesPerToken(hyper, 'fp16', oneLess)).toBe(kvBytesPerToken(hyper) - perLayer);
    const e = estimateMemory(hyper, WEIGHTS, 1000, { ...MEMORY, layers: oneLess });
    const full = estimateMemory(hyper, WEIGHTS, 1000, MEMORY);
    expect(e.kvFullBytes).toBe(full.kvFullBytes - 1000 * perLayer);
    expect(e.offload.deviceRowBufferFullBytes).toBe((full.offload.deviceRowBufferFullBytes * (hyper.layers - 1)) / hyper.layers);
    // layer 1 was one of InfiniGen's dense layers (below 2): it held every slot
    expect(e.offload.deviceRowBufferInfinigenBytes).toBe(full.offload.deviceRowBufferInfinigenBytes - full.offload.deviceRowBufferFullBytes / hyper.layers);
  });

  it("buildStage builds the family's graphs", () => {
    expectDispatch(model, (w, s) => llamaStageGraph(w, s, {}));
  });
});

describe('the OPT and Qwen2 families on the Hugging Face fixtures', () => {
  let dir: string;
  let opt: LoadedModel;
  let qwen2: LoadedModel;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'longhand-families-'));
    const base = { dim: SMALL_HF.dim, layers: SMALL_HF.layers, heads: SMALL_HF.heads, kvHeads: SMALL_HF.kvHeads, ffn: SMALL_HF.ffn, context: SMALL_HF.context, vocab: SMALL_HF.vocab, seed: SMALL_HF.seed };
    writeHfFolder(join(dir, 'opt'), { ...base, arch: 'opt', kvHeads: base.heads, dtype: 'F32' });
    writeHfFolder(join(dir, 'qwen2'), { ...base, arch: 'qwen2', dtype: 'F32', tied: true });
    opt = await loadModel(join(dir, 'opt'));
    qwen2 = await loadModel(join(dir, 'qwen2'));
  });
  afterAll(() => {
    opt?.close();
    qwen2?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('OPT: MHA without RoPE, scale 1/√headDim; ungated ReLU MLP; pre-LayerNorm', () => {
    const hyper = opt.hyper;
    const family = familyOf(hyper);
    expect(family).toBe(OPT_FAMILY);
    expect(family.tensors).toBe(OPT_TENSORS);
    const specs = family.layers(hyper);
    expect(specs).toHaveLength(hyper.layers);
    for (const spec of specs) {
      expect(spec).toEqual({
        attention: { kind: 'attention', heads: SMALL_HF.heads, kvHeads: SMALL_HF.heads, headDim: SMALL_HF.dim / SMALL_HF.heads, scale: 1 / Math.sqrt(SMALL_HF.dim / SMALL_HF.heads), window: undefined, sinks: false, rope: undefined, qkNorm: false, softcap: 0 },
        ffn: { kind: 'dense', size: SMALL_HF.ffn, gated: false, activation: 'relu' },
        norm: { kind: 'layer', placement: 'pre', eps: 1e-5 },
      });
    }
    expect(ropeFrequencies(uniformAttention(specs).shape!)).toBeUndefined();
    expectSameMemory(hyper, specs);
  });

  it('OPT: learned positions offset by 2 end the context at the trained length; policy full only, with the message users see; no native stages', () => {
    const family = familyOf(opt.hyper);
    const embedding = family.embedding(opt.hyper);
    expect(embedding).toEqual({ tokenTable: 'token_embd.weight', positions: { table: 'position_embd.weight', offset: 2 }, scale: 1 });
    // the table holds a row for every position up to the limit, after the offset
    expect(opt.tensors.get(embedding.positions!.table)!.shape[0]).toBe(family.contextLimit(opt.hyper)! + embedding.positions!.offset);
    expect(family.contextLimit(opt.hyper)).toBe(SMALL_HF.context);

    expect(family.policyRefusal('full')).toBeUndefined();
    for (const policy of POLICIES.filter((p) => p !== 'full')) {
      expect(family.policyRefusal(policy)).toBe(`policy '${policy}' supports the llama family only (OPT runs with 'full')`);
    }
    const error = (() => {
      try {
        assertPolicySupported(opt.hyper, 'h2o');
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(UsageError);
    expect((error as UsageError).code).toBe('BAD_ARGUMENT');
    expect((error as UsageError).message).toBe("policy 'h2o' supports the llama family only (OPT runs with 'full')");
    expect((error as UsageError).details).toEqual({ field: 'policy', architecture: 'opt' });

    expect(family.nativeStages).toEqual({ kind: 'none', reason: 'the opt architecture has no native dense stages' });
    expectDispatch(opt, (w, s) => optStageGraph(w, s));
  });

  it('Qwen2 is the llama family with RoPE on neox pairs (rotate_half)', () => {
    const family = familyOf(qwen2.hyper);
    expect(family).toBe(LLAMA_FAMILY);
    const uniform = uniformAttention(family.layers(qwen2.hyper));
    expect(uniform.shape?.rope).toEqual({ base: qwen2.hyper.ropeTheta, dims: qwen2.hyper.headDim, layout: 'neox', scaling: undefined });
    expect(uniform.shape?.kvHeads).toBe(SMALL_HF.kvHeads);
    expect(ropeFrequencies(uniform.shape!)).toEqual(stageRope(qwen2.hyper));
    expectDispatch(qwen2, (w, s) => llamaStageGraph(w, s, {}));
  });
});

describe('familyOf', () => {
  it('one family per architecture, each declaring its own', () => {
    for (const [architecture, family] of Object.entries(FAMILIES)) {
      expect(family.architecture).toBe(architecture);
      expect(family.tensors.architecture).toBe(architecture);
    }
  });

  it('an architecture no family declares is a typed MODEL_UNSUPPORTED_ARCHITECTURE', () => {
    const hyper = { architecture: 'mamba' } as unknown as ModelHyperparameters;
    let error: unknown;
    try {
      familyOf(hyper);
    } catch (e) {
      error = e;
    }
    expect(isLonghandError(error)).toBe(true);
    expect(error).toBeInstanceOf(LonghandError);
    expect((error as LonghandError).code).toBe('MODEL_UNSUPPORTED_ARCHITECTURE');
    // what Longhand runs comes from the registry: every family, and nothing else
    expect((error as LonghandError).message).toBe(`architecture 'mamba' has no model family (Longhand runs ${Object.keys(FAMILIES).join(', ')})`);
    expect(Object.keys(FAMILIES)).toEqual(expect.arrayContaining(['llama', 'opt', 'phi3', 'gemma2', 'gemma3', 'gemma4', 'qwen3']));
    expect((error as LonghandError).details).toEqual({ architecture: 'mamba' });
    // an inherited property name is not a family either
    expect(() => familyOf({ architecture: 'toString' } as unknown as ModelHyperparameters)).toThrow(/architecture 'toString' has no model family/);
  });
});
