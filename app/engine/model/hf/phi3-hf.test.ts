// A Phi3ForCausalLM folder and the GGUF convert_hf_to_gguf.py makes of it (written from the same
// seed: test/fixtures/families/phi3.ts) are the same model: same hyperparameters, the fused tensors
// split into the same views, and the same logits from both dense engines — with LongRoPE, partial
// rotary and tied embeddings (Phi-4-mini's shape), where config.json's factors and attention
// factor must come out as the GGUF's float32 values.
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { writePhi3Gguf, writePhi3HfFolder, type Phi3Options } from '../../../../test/fixtures/families/phi3.ts';
import { createModelRunner, type DenseEngine } from '../../forward/model-runner.ts';
import { loadModel } from '../load-model.ts';
import type { LoadedModel } from '../types.ts';

const dir = join(tmpdir(), 'longhand-phi3-hf');
mkdirSync(dir, { recursive: true });

const SHAPES: [string, Phi3Options][] = [
  ['Phi-4-mini-like (GQA, 0.75 rotary, tied, LongRoPE)', { dim: 128, layers: 2, heads: 4, kvHeads: 2, ffn: 256, context: 8192, seed: 9, rotaryFraction: 0.75, tied: true, outStd: 0.5, longRope: { original: 64 } }],
  ['Phi-3-mini-like (MHA, untied, sliding_window key)', { dim: 128, layers: 2, heads: 4, kvHeads: 4, ffn: 256, context: 4096, seed: 8, slidingWindow: 2047 }],
];

async function logits(model: LoadedModel, ids: number[], dense: DenseEngine): Promise<Float32Array> {
  const runner = await createModelRunner(model, { kvType: 'fp32', contextLength: 128, dense });
  try {
    return await runner.prefill(ids, undefined, { allLogits: true });
  } finally {
    await runner.dispose();
  }
}

describe('Phi-3 Hugging Face folder == its GGUF', () => {
  it.each(SHAPES)('%s: hyperparameters, tensors and logits (native and onnx)', async (name, o) => {
    const ggufPath = join(dir, `${o.seed}.gguf`);
    const folder = join(dir, `${o.seed}-hf`);
    writePhi3Gguf(ggufPath, { ...o, type: 'F32' });
    writePhi3HfFolder(folder, { ...o, dtype: 'F32' });
    const gguf = await loadModel(ggufPath);
    const hf = await loadModel(folder);
    try {
      const { family: _g, ...gh } = gguf.hyper;
      const { family: _h, ...hh } = hf.hyper;
      // the GGUF stores ε as float32; the stages compute with float32 ε from either
      expect({ ...hh, normEps: Math.fround(hh.normEps) }).toEqual(gh);
      expect(hf.hyper.architecture).toBe('phi3');
      expect([...hf.tensors.keys()].filter((n) => !n.startsWith('rope_factors')).sort()).toEqual([...gguf.tensors.keys()].filter((n) => !n.startsWith('rope_factors')).sort());
      expect(hf.tensors.get('blk.1.attn_k.weight')!.toFloat32()).toEqual(gguf.tensors.get('blk.1.attn_k.weight')!.toFloat32());
      const ids = [1, 32010, ...Array.from({ length: 90 }, (_, i) => 500 + ((i * 7717) % 31000)), 32007, 32001];
      for (const dense of ['native', 'onnx'] as const) {
        const a = await logits(gguf, ids, dense);
        const b = await logits(hf, ids, dense);
        let max = 0;
        for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs(a[i]! - b[i]!));
        console.log(`${name} (${dense}): max |Δ logit| folder vs GGUF over ${ids.length} positions ${max.toExponential(2)}`);
        expect(max).toBe(0);
      }
    } finally {
      gguf.close();
      hf.close();
    }
  }, 120_000);
});
