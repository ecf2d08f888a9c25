// Phi-3 / Phi-4 (GGUF `phi3`, Hugging Face Phi3ForCausalLM): Hugging Face names → canonical names,
// what must exist, and the fused tensors seen as the llama family's separate ones.
//
// The file fuses what Llama keeps apart (convert_hf_to_gguf.py keeps Hugging Face's fusion):
//
//   attn_qkv.weight  [q + 2·kv, d]   rows 0..q−1 W_q, q..q+kv−1 W_k, q+kv.. W_v   (q = heads·headDim, kv = kvHeads·headDim)
//   ffn_up.weight    [2·ffn, d]      rows 0..ffn−1 W_gate, ffn.. W_up  (SwiGLU: silu(gate) ⊙ up, as llama.cpp's
//                                    LLM_FFN_SWIGLU splits it and Hugging Face's gate_up_proj.chunk(2))
//   rope_factors_short/long.weight [ropeDims/2]  LongRoPE's per-pair divisors (128k models; gguf-model.ts reads them)
//
// Every weight type's blocks run along a row, so a range of rows is a range of bytes: phi3Views
// gives the runner attn_q/attn_k/attn_v and ffn_gate/ffn_up views into the fused tensors' bytes
// (no copy), and both dense engines then run a Phi-3 layer as the llama family's.
import { dequantize } from '../gguf/dequant.ts';
import type { LoadedModel, ModelHyperparameters, TensorView } from '../types.ts';
import { mapName, perLayer, type ArchTensorTable, type ExpectedTensor, type NameTables } from './base.ts';

export const PHI3_NAMES: NameTables = {
  prefixes: ['model.'],
  global: {
    'embed_tokens.weight': 'token_embd.weight',
    'norm.weight': 'output_norm.weight',
    'lm_head.weight': 'output.weight',
  },
  layer: {
    'input_layernorm.weight': 'attn_norm.weight',
    'self_attn.qkv_proj.weight': 'attn_qkv.weight',
    'self_attn.o_proj.weight': 'attn_output.weight',
    'post_attention_layernorm.weight': 'ffn_norm.weight',
    'mlp.gate_up_proj.weight': 'ffn_up.weight',
    'mlp.down_proj.weight': 'ffn_down.weight',
  },
};

export const ROPE_FACTORS_SHORT = 'rope_factors_short.weight';
export const ROPE_FACTORS_LONG = 'rope_factors_long.weight';

export const PHI3_TENSORS: ArchTensorTable = {
  architecture: 'phi3',
  canonicalName: (hfName) => mapName(PHI3_NAMES, hfName),
  expectedTensors(hyper: ModelHyperparameters): ExpectedTensor[] {
    const { hiddenSize: d, vocabSize: vocab, ffnSize: ffn } = hyper;
    const q = hyper.heads * hyper.headDim;
    const kv = hyper.kvHeads * hyper.headDim;
    return [
      { name: 'token_embd.weight', shape: [vocab, d] },
      ...perLayer(hyper.layers, (blk) => [
        { name: `${blk}attn_norm.weight`, shape: [d] },
        { name: `${blk}attn_qkv.weight`, shape: [q + 2 * kv, d] },
        { name: `${blk}attn_output.weight`, shape: [d, q] },
        { name: `${blk}ffn_norm.weight`, shape: [d] },
        { name: `${blk}ffn_up.weight`, shape: [2 * ffn, d] },
        { name: `${blk}ffn_down.weight`, shape: [d, ffn] },
      ]),
      { name: 'output_norm.weight', shape: [d] },
      ...(hyper.tiedEmbeddings ? [] : [{ name: 'output.weight', shape: [vocab, d] }]),
    ];
  },
};

/** Rows [first, first + rows) of a [R, C] tensor as a [rows, C] tensor named `name`: same bytes. */
export function rowRangeView(parent: TensorView, name: string, first: number, rows: number): TensorView {
  const [total, cols] = parent.shape as [number, number];
  if (parent.shape.length !== 2 || first < 0 || rows < 1 || first + rows > total) throw new RangeError(`${parent.name}: rows ${first}..${first + rows - 1} of [${parent.shape.join(', ')}]`);
  const elements = rows * cols;
  const bytes = (): Uint8Array => {
    const all = parent.bytes();
    const rowBytes = all.length / total; // whole blocks per row (the loaders check shapes against block sizes)
    return all.subarray(first * rowBytes, (first + rows) * rowBytes);
  };
  return { name, dtype: parent.dtype, shape: [rows, cols], elements, bytes, toFloat32: () => dequantize(parent.dtype, bytes(), elements) };
}

/**
 * `model` with each layer's fused tensors replaced by views of their row blocks under the llama
 * family's names (attn_q/k/v, ffn_gate/ffn_up), so the stages of either engine read them as they
 * read a Llama file's. Owning a piece's pages owns its fused tensor's (the pieces lie together);
 * a fused tensor's pages are released once every piece of it has been (after the onnx repack).
 */
export function phi3Views(model: LoadedModel): LoadedModel {
  const h = model.hyper;
  const q = h.heads * h.headDim;
  const kv = h.kvHeads * h.headDim;
  const tensors = new Map(model.tensors);
  /** piece name → its fused tensor's name */
  const parentOf = new Map<string, string>();
  const pieces = new Map<string, Set<string>>();
  const split = (fused: string, parts: readonly [string, number, number][]): void => {
    const parent = model.tensors.get(fused);
    if (parent === undefined) return; // checkTensors has already refused a file without it
    tensors.delete(fused);
    pieces.set(fused, new Set(parts.map(([name]) => name)));
    for (const [name, first, rows] of parts) {
      tensors.set(name, rowRangeView(parent, name, first, rows));
      parentOf.set(name, fused);
    }
  };
  for (let l = 0; l < h.layers; l++) {
    const b = `blk.${l}.`;
    split(`${b}attn_qkv.weight`, [
      [`${b}attn_q.weight`, 0, q],
      [`${b}attn_k.weight`, q, kv],
      [`${b}attn_v.weight`, q + kv, kv],
    ]);
    // the fused name is also the up half's: the views replace it
    split(`${b}ffn_up.weight`, [
      [`${b}ffn_gate.weight`, 0, h.ffnSize],
      [`${b}ffn_up.weight`, h.ffnSize, h.ffnSize],
    ]);
  }
  const released = new Map<string, Set<string>>();
  const own = model.ownTensors;
  const release = model.releaseTensor;
  return {
    ...model,
    tensors,
    ...(own ? { ownTensors: (names: readonly string[], threads?: number) => own([...new Set(names.map((n) => parentOf.get(n) ?? n))], threads) } : {}),
    ...(release
      ? {
          releaseTensor: (name: string): number => {
            const fused = parentOf.get(name);
            if (fused === undefined) return release(name);
            const done = released.get(fused) ?? new Set<string>();
            done.add(name);
            released.set(fused, done);
            return done.size === pieces.get(fused)!.size ? release(fused) : 0;
          },
        }
      : {}),
  };
}
