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
import { createTokenizer } from '../tokenizer/tokenizer.ts';
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

describe('Phi-3 and Phi-4-mini tokenizer.json == the GGUF vocabulary', () => {
  const texts = [
    'Hello world', ' leading', 'trailing ', 'a  b   c', 'x\n\n  y', '\tTab', 'camelCaseWord HTTPServer 12345678', "DON'T they're", 'ÉCOLE über 😀 世界',
    'def f(x):\n    return x * 2\n', '<|user|>\nHi<|end|>\n<|assistant|>\n', '<|system|>S<|end|><|user|>U<|end|><|assistant|>', '<|endoftext|>', '3.14159, 1,000,000',
  ];
  it.each([['Phi-3', 'phi3'], ['Phi-4-mini', 'phi4-mini']] as const)('%s: the same ids from both, special tokens parsed', async (_name, vocab) => {
    const o = { vocab, dim: 64, layers: 1, heads: 2, kvHeads: 2, ffn: 64, context: 256, seed: 5, tied: true } as const;
    const ggufPath = join(dir, `tok-${vocab}.gguf`);
    const folder = join(dir, `tok-${vocab}-hf`);
    writePhi3Gguf(ggufPath, { ...o, type: 'F16' });
    writePhi3HfFolder(folder, { ...o, dtype: 'F16' });
    const gguf = await loadModel(ggufPath);
    const hf = await loadModel(folder);
    try {
      const a = await createTokenizer(gguf.tokenizer);
      const b = await createTokenizer(hf.tokenizer);
      const mismatches = texts.filter((t) => JSON.stringify(a.encode(t, { addSpecial: false, parseSpecial: true })) !== JSON.stringify(b.encode(t, { addSpecial: false, parseSpecial: true })));
      expect(mismatches).toEqual([]);
      expect(b.eosIds).toEqual(expect.arrayContaining(a.eosIds.filter((id) => id !== 2)));
    } finally {
      gguf.close();
      hf.close();
    }
  }, 120_000);
});
