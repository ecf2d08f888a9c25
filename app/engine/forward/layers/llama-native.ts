// The llama family's dense stages in C++ (native-stages.ts says how they run): per stage s the
// tensors layers/llama-graph.ts reads, as views of the mapped file (linear weights) and fp32
// vectors (norms, biases), handed to native/src/dense_stage.h. RMSNorm, SwiGLU, RoPE in the file's
// layout; with `speculates[s]`, layer s+1's query from layer s's input too (InfiniGen).
import { availableParallelism } from 'node:os';
import { createDenseStage, type DenseStageMatrix } from '../../../../native/index.js';
import type { LoadedModel } from '../../model/types.ts';
import type { ModelWeights } from '../weights.ts';
import { KERNEL_TYPES, NativeStage, type DenseKernelName, type NativeStageOptions, type NativeStages, type StageRunner } from './native-stage.ts';
import { blk, stageName, type StageGraph, type StageInput } from './stage-graph.ts';

/** The matrices of one layer, the bytes its stages stream (owned together). */
const LAYER_MATRICES = ['attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];

/** The linear weights of a llama-family model (every tensor the stages multiply by). */
export function llamaLinearNames(model: LoadedModel): string[] {
  const names: string[] = [];
  for (let l = 0; l < model.hyper.layers; l++) for (const m of LAYER_MATRICES) names.push(blk(l, m));
  names.push(model.tensors.has('output.weight') ? 'output.weight' : 'token_embd.weight');
  return names;
}

const NO_BYTES = new Uint8Array(0);

/** What a family built on the llama stages adds to stage s's config (Qwen3: its per-head q/k norms). */
export type StageConfigExtra = (s: number, speculates: boolean) => Partial<Parameters<typeof createDenseStage>[0]>;

/**
 * The MLP of layer p as a family other than the dense SwiGLU one gives it to stage p + 1 (Qwen3-MoE:
 * its router and expert tensors, qwen3moe-native.ts), in place of ffnGate / ffnUp / ffnDown; with
 * ffnNorm when its norm is not blk.p.ffn_norm.weight (gpt-oss).
 */
export type StageMlp = (p: number) => Partial<Parameters<typeof createDenseStage>[0]>;

/** L + 1 native stages over `weights`' mapped file. The file must stay open while they live (runs check). */
export function createLlamaNativeStages(weights: ModelWeights, options: NativeStageOptions, extra?: StageConfigExtra, mlp?: StageMlp): NativeStages {
  const model = weights.model;
  const hyper = model.hyper;
  const L = hyper.layers;
  // Every step streams these bytes: make them the process's own pages on huge pages, not the page
  // cache's (LoadedModel.ownTensors says why); a layer's matrices at once, so the pages between
  // them are huge too. ~1 GB/s per thread, the load's only real work, so it runs on every core the
  // process may use, whatever the decode's thread count: on this project's VMs a fresh 2 MiB page
  // costs the host ~5 ms on first touch (2.5-2.9 s per GiB on one thread; 4 KiB pages 0.4), and
  // two threads fault them in faster.
  const loadThreads = Math.max(options.threads, availableParallelism());
  const ownedLayers = new Set<number>();  // a speculating stage reads layer s+1's W_q before stage s+1 does
  const ownLayer = (l: number): void => {
    if (ownedLayers.has(l)) return;
    ownedLayers.add(l);
    model.ownTensors?.(LAYER_MATRICES.map((m) => blk(l, m)), loadThreads);
  };
  /** A weight matrix's view; `layer`: the layer it belongs to (owned as a whole), else owned alone (the LM head). */
  const matrix = (name: string, biasName: string | undefined, layer?: number): DenseStageMatrix => {
    if (layer !== undefined) ownLayer(layer);
    else model.ownTensors?.([name], loadThreads);
    const v = weights.view(name);
    const t = KERNEL_TYPES[v.dtype]!;
    const bias = biasName === undefined ? undefined : weights.optionalVector(biasName);
    return { data: v.bytes(), type: t.id, rows: v.shape[0]!, cols: v.shape[1]!, ...(bias ? { bias } : {}) };
  };
  const sessions: StageRunner[] = [];
  const graphs: StageGraph[] = [];
  let graphWeightBytes = 0;
  let kernel: DenseKernelName = 'amx';
  const rank = { scalar: 0, avx2: 1, avx512: 2, amx: 3, auto: 4 } as const;
  try {
    for (let s = 0; s <= L; s++) {
      const config: Parameters<typeof createDenseStage>[0] = {
        stage: s,
        layers: L,
        hidden: hyper.hiddenSize,
        heads: hyper.heads,
        kvHeads: hyper.kvHeads,
        headDim: hyper.headDim,
        ffn: hyper.ffnSize,
        vocab: hyper.vocabSize,
        eps: hyper.normEps,
        ropeLayout: (hyper.ropeLayout ?? 'neox') === 'interleaved' ? 1 : 0,
        rotaryDim: hyper.ropeDims ?? hyper.headDim,
        threads: options.threads,
        impl: options.impl ?? 'auto',
        norm: weights.vector(s === L ? 'output_norm.weight' : blk(s, 'attn_norm.weight')),
      };
      const inputs: StageInput[] = ['h'];
      if (s > 0) {
        const p = s - 1;
        inputs.push('attn');
        const ownMlp = mlp
          ? mlp(p)
          : { ffnGate: matrix(blk(p, 'ffn_gate.weight'), undefined, p), ffnUp: matrix(blk(p, 'ffn_up.weight'), undefined, p), ffnDown: matrix(blk(p, 'ffn_down.weight'), undefined, p) };
        Object.assign(config, {
          // the MLP's norm: ffn_norm, unless the family's MLP names its own (gpt-oss: post_attention_norm)
          ffnNorm: ownMlp.ffnNorm ?? weights.vector(blk(p, 'ffn_norm.weight')),
          attnOutput: matrix(blk(p, 'attn_output.weight'), blk(p, 'attn_output.bias'), p),
          ...ownMlp,
        });
      }
      if (s < L) {
        inputs.push('rope_cos', 'rope_sin');
        Object.assign(config, {
          q: matrix(blk(s, 'attn_q.weight'), blk(s, 'attn_q.bias'), s),
          k: matrix(blk(s, 'attn_k.weight'), blk(s, 'attn_k.bias'), s),
          v: matrix(blk(s, 'attn_v.weight'), blk(s, 'attn_v.bias'), s),
          ...(options.speculates[s] === true && s + 1 < L ? { qSpec: matrix(blk(s + 1, 'attn_q.weight'), blk(s + 1, 'attn_q.bias'), s + 1) } : {}),
        });
      } else {
        inputs.push('rows');
        config.lmHead = matrix(model.tensors.has('output.weight') ? 'output.weight' : 'token_embd.weight', undefined);
      }
      if (extra !== undefined) Object.assign(config, extra(s, config.qSpec !== undefined));
      const stage = createDenseStage(config);
      sessions.push(new NativeStage(stage, s, hyper.heads * hyper.headDim, hyper.kvHeads * hyper.headDim, hyper.hiddenSize, hyper.vocabSize));
      if (rank[stage.impl] < rank[kernel]) kernel = stage.impl;
      // the weights this stage reads (a speculating stage reads layer s+1's W_q twice: once here)
      const own = [config.attnOutput, config.ffnGate, config.ffnUp, config.ffnDown, config.q, config.k, config.v, config.lmHead, config.router, config.gateExps, config.upExps, config.downExps].flat();
      const weightBytes = own.reduce((n, m) => n + (m?.data.byteLength ?? 0), 0);
      graphs.push({ name: `native.${stageName(s, L)}`, model: NO_BYTES, weightBytes, inputs });
      graphWeightBytes += weightBytes;
      options.onProgress?.({ done: s + 1, total: L + 1 });
    }
  } catch (error) {
    for (const x of sessions) void x.release();
    throw error;
  }
  return { sessions, graphs, graphWeightBytes, kernel };
}

