// Our forward pass against llama.cpp (node-llama-cpp 3.21.1, F32 KV cache) on fixtures with the
// per-tensor type mixes of llama.cpp's Q4_K_M, Q5_K_M and Q6_K files (test/fixtures/quant-mix.ts):
// Q4_K / Q5_K / Q6_K matrices side by side in one file, and, where a row length is not a multiple
// of 256, llama-quantize's Q5_0 / Q5_1 / Q8_0 fallbacks. Same measure as llama-cpp.test.ts: mean
// KL(llama.cpp ‖ ours) over a 64-token teacher-forced sequence and the largest top-5
// log-probability gap, against the bound llama-cpp.test.ts gives Q4_K (KL 1e-4, top-5 6e-2). The
// fixtures are written here; no shared/ model is needed.
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { writeLlamaGguf, type LlamaGgufOptions } from '../../../test/fixtures/index.ts';
import { llamaCppAgreements } from '../../../test/support/llama-cpp-agreement.ts';
import { disposeLlamaCpp } from '../../../test/support/llama-cpp-reference.ts';

const dir = join(tmpdir(), 'longhand-llamacpp-kquant-mix');
mkdirSync(dir, { recursive: true });
afterAll(() => disposeLlamaCpp());

const TOKENS = 64;
const ids = [1, ...Array.from({ length: TOKENS - 1 }, (_, i) => 3 + ((i * 53 + 7) % 390))];

// The weight types the native dense stages have kernels for (native-stages.ts).
const NATIVE_TYPES = ['F32', 'F16', 'Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0', 'Q4_K', 'Q5_K', 'Q6_K'];

// The bound llama-cpp.test.ts uses for Q4_K (~5x what it measured there).
const BOUND = { kl: 1e-4, top5: 6e-2 };

// 8 layers so that use_more_bits picks some layers (0, 3, 6, 7) and not others; ffn 512 keeps every
// row a multiple of 256, ffn 384 sends ffn_down through the fallbacks.
const base = { dim: 256, layers: 8, heads: 4, ffn: 512, context: 256, vocab: 400, seed: 2468 } as const;
const cases: [string, Omit<LlamaGgufOptions, 'context' | 'seed' | 'vocab'>, string[]][] = [
  ['Q4_K_M MHA', { ...base, kvHeads: 4, type: 'Q4_K_M' }, ['F32', 'Q4_K', 'Q6_K']],
  ['Q4_K_M GQA', { ...base, kvHeads: 2, type: 'Q4_K_M' }, ['F32', 'Q4_K', 'Q6_K']],
  ['Q4_K_M GQA, ffn 384 (Q5_0 / Q8_0 ffn_down)', { ...base, kvHeads: 2, ffn: 384, type: 'Q4_K_M' }, ['F32', 'Q4_K', 'Q5_0', 'Q6_K', 'Q8_0']],
  ['Q5_K_M GQA', { ...base, kvHeads: 2, type: 'Q5_K_M' }, ['F32', 'Q5_K', 'Q6_K']],
  ['Q5_K_M MHA, ffn 384 (Q5_1 / Q8_0 ffn_down)', { ...base, kvHeads: 4, ffn: 384, type: 'Q5_K_M' }, ['F32', 'Q5_1', 'Q5_K', 'Q6_K', 'Q8_0']],
  ['Q6_K GQA', { ...base, kvHeads: 2, type: 'Q6_K' }, ['F32', 'Q6_K']],
  ['Q4_1 GQA (every matrix Q4_1: the legacy type with a minimum)', { ...base, kvHeads: 2, type: 'Q4_1' }, ['F32', 'Q4_1']],
  ['Q4_K_M GQA tied (token_embd Q6_K)', { ...base, kvHeads: 2, type: 'Q4_K_M', tied: true }, ['F32', 'Q4_K', 'Q6_K']],
];

describe('forward pass vs llama.cpp on mixed K-quant fixtures', () => {
  it.each(cases)('%s', async (name, o, dtypes) => {
    const path = join(dir, `${name.replace(/[^A-Za-z0-9]+/g, '-').toLowerCase()}.gguf`);
    writeLlamaGguf(path, { ...o, context: base.context, vocab: base.vocab, seed: base.seed });
    // 'auto' takes the native stages when every type has kernels (every file here: the Q5_0 / Q5_1
    // fallbacks have them, quant_dot_q5.cc / quant_dot_q1.cc), and onnxruntime is held to the same
    // bound on every file
    const results = await llamaCppAgreements(path, ids, ['auto', 'onnx']);
    const nativeTypes = dtypes.every((t) => NATIVE_TYPES.includes(t));
    expect(results.map((r) => r.dense)).toEqual([nativeTypes ? 'native' : 'onnx', 'onnx']);
    for (const r of results) {
      console.log(`${name} (${r.dense}): ${r.dtypes.join('/')}, mean KL ${r.kl.toExponential(2)}, max top-5 |Δ log p| ${r.top5.toExponential(2)}`);
      expect(r.dtypes).toEqual(dtypes);
      expect(r.kl).toBeLessThan(BOUND.kl);
      expect(r.top5).toBeLessThan(BOUND.top5);
    }
  });
});
