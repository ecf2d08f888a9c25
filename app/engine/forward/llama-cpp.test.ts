// Our forward pass against llama.cpp itself (node-llama-cpp 3.21.1, F32 KV cache) on every GGUF
// fixture kind: next-token distributions over a 64-token teacher-forced sequence must agree.
// F32/F16 weights compute the same math, so their mean KL divergence must be tiny; for quantised
// weights both engines round activations to 8 bits in their own way (llama.cpp's q8 dot products,
// MatMulNBits' accuracy_level 4), so the bound per type is looser and stated below.
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { fixtureSet } from '../../../test/fixtures/index.ts';
import { llamaCppAgreements } from '../../../test/support/llama-cpp-agreement.ts';
import { disposeLlamaCpp } from '../../../test/support/llama-cpp-reference.ts';

const dir = join(tmpdir(), 'longhand-llamacpp-fixtures');
mkdirSync(dir, { recursive: true });
const set = fixtureSet(dir);
afterAll(() => disposeLlamaCpp());

const TOKENS = 64;
// BOS, then a fixed walk through the fixture vocabulary (400 tokens)
const ids = [1, ...Array.from({ length: TOKENS - 1 }, (_, i) => 3 + ((i * 53 + 7) % 390))];

// Bounds per weight type, ~3-10x above what was measured (2026-12-02: F32 KL 3e-14 and top-5
// 1.2e-6; F16 9e-9 / 4.4e-4, llama.cpp rounds activations to fp16 for F16 weights; Q8_0 6.2e-6 /
// 1.1e-2; Q4_0 7.6e-6 / 1.7e-2; Q4_K 1.9e-5 / 1.9e-2). The issue asks for KL < 1e-4 on F32.
const BOUNDS: Record<string, { kl: number; top5: number }> = {
  F32: { kl: 1e-9, top5: 1e-5 },
  F16: { kl: 1e-7, top5: 3e-3 },
  Q8_0: { kl: 5e-5, top5: 5e-2 },
  Q4_0: { kl: 5e-5, top5: 5e-2 },
  Q4_K: { kl: 1e-4, top5: 6e-2 },
};

const cases: [string, string, keyof typeof BOUNDS][] = [
  ...Object.entries(set.gguf.mha).map(([type, path]) => [`llama MHA ${type}`, path, type as keyof typeof BOUNDS] as [string, string, keyof typeof BOUNDS]),
  ...Object.entries(set.gguf.gqa).map(([type, path]) => [`llama GQA ${type}`, path, type as keyof typeof BOUNDS] as [string, string, keyof typeof BOUNDS]),
  ['qwen2 q/k/v bias F16', set.gguf.qwen2Bias, 'F16'],
  ['llama tied output F16', set.gguf.tied, 'F16'],
];

describe('forward pass vs llama.cpp on GGUF fixtures', () => {
  // both dense engines: the native stages (C++ over the file's blocks, what 'auto' picks for every
  // type here) and onnxruntime's graphs (repacked for MatMulNBits), each held to the type's bound
  it.each(cases)('%s', async (name, path, type) => {
    const results = await llamaCppAgreements(path, ids, ['native', 'onnx']);
    expect(results.map((r) => r.dense)).toEqual(['native', 'onnx']);
    for (const { kl, top5, dense } of results) {
      console.log(`${name} (${dense}): mean KL ${kl.toExponential(2)}, max top-5 |Δ log p| ${top5.toExponential(2)}`);
      expect(kl).toBeLessThan(BOUNDS[type]!.kl);
      expect(top5).toBeLessThan(BOUNDS[type]!.top5);
    }
  });
});
