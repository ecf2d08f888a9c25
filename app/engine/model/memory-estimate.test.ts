import { describe, expect, it } from 'vitest';
import { assertFits, estimateMemory, kvBytesPerToken, kvRowBytes, partialKeyBytesPerToken } from './memory-estimate.ts';
import type { ModelHyperparameters } from './types.ts';
import { qwen3moeGgufFixture } from '../../../test/fixtures/families/qwen3moe.ts';
import { inspectModel, summariseWeights } from './inspect.ts';
import { loadModel } from './load-model.ts';

// A Llama-2-7B-shaped model: 32 layers, 32 KV heads of 128 dims. Its fp16 KV cache is the
// well-known 512 KiB per token (2 · 32 · 32 · 128 · 2 bytes).
const llama7b: ModelHyperparameters = {
  architecture: 'llama', family: 'llama', hiddenSize: 4096, layers: 32, heads: 32, kvHeads: 32, headDim: 128,
  ffnSize: 11008, vocabSize: 32000, contextLength: 4096, normEps: 1e-5, ropeTheta: 10000, ropeLayout: 'interleaved',
  qkvBias: false, tiedEmbeddings: false,
};

describe('memory estimate', () => {
  it('counts K and V rows per layer and KV head', () => {
    expect(kvBytesPerToken(llama7b)).toBe(524_288);
    expect(kvBytesPerToken(llama7b, 'fp32')).toBe(1_048_576);
    expect(kvBytesPerToken({ ...llama7b, kvHeads: 8 })).toBe(131_072); // GQA 4:1
  });

  it('counts int8 rows at one byte per element plus one fp32 scale per row', () => {
    expect(kvRowBytes('int8', 128)).toBe(132);
    expect(kvRowBytes('fp16', 128)).toBe(256);
    expect(kvBytesPerToken(llama7b, 'int8')).toBe(2 * 32 * 32 * 132); // 270,336: 51.6% of fp16
    expect(estimateMemory(llama7b, { bytesByType: {}, storedBytes: 0 }, 1000, { kvType: 'int8', freeBytes: 1e12, totalBytes: 1e12 }).kvFullBytes).toBe(270_336_000);
  });

  it('adds ⌊0.3·d⌋ fp16 partial-key columns per layer and KV head for InfiniGen', () => {
    // ⌊0.3 · 128⌋ = 38 columns · 32 layers · 32 heads · 2 bytes
    expect(partialKeyBytesPerToken(llama7b)).toBe(38 * 32 * 32 * 2);
  });

  it('widens fp16 weights to fp32 on CPU and keeps quantised blocks packed', () => {
    const estimate = estimateMemory(llama7b, { bytesByType: { F16: 1000, Q4_0: 500, F32: 10 }, storedBytes: 1510 }, 1000, { freeBytes: 1e12, totalBytes: 1e12 });
    expect(estimate.weightsBytes).toBe(2000 + 500 + 10);
  });

  it('offload mode: weights and row buffer on the device, the pool (and partial keys) on the host', () => {
    const weights = { bytesByType: { Q4_0: 4_000_000_000 }, storedBytes: 4_000_000_000 };
    const e = estimateMemory(llama7b, weights, 4096, { freeBytes: 1e12, totalBytes: 1e12, fetchCap: 0.2 });
    const row = 2 * 32 * 128 * 2; // K+V, fp16, per layer and slot over 32 KV heads
    expect(e.offload.deviceWeightsBytes).toBe(4_000_000_000);
    expect(e.offload.deviceRowBufferFullBytes).toBe(32 * 4096 * row);
    // 2 dense layers hold every slot, 30 sparse ones ⌈0.2·4096⌉ + 2 = 822
    expect(e.offload.deviceRowBufferInfinigenBytes).toBe((2 * 4096 + 30 * 822) * row);
    expect(e.offload.hostKvBytes).toBe(e.kvFullBytes);
    expect(e.offload.hostKvInfinigenBytes).toBe(e.kvFullBytes + e.partialKeyBytes);
    // fp32 and int8 pools: fp32 rows in the buffer
    expect(estimateMemory(llama7b, weights, 4096, { kvType: 'int8', freeBytes: 1e12, totalBytes: 1e12 }).offload.deviceRowBufferFullBytes).toBe(32 * 4096 * 2 * row);
  });

  it('says whether it fits and the largest context that does', () => {
    const weights = { bytesByType: { Q4_0: 4_000_000_000 }, storedBytes: 4_000_000_000 };
    const estimate = estimateMemory(llama7b, weights, 4096, { freeBytes: 6_000_000_000, totalBytes: 8e9 });
    expect(estimate.kvFullBytes).toBe(4096 * 524_288);
    expect(estimate.partialKeyBytes).toBe(4096 * 38 * 32 * 32 * 2);
    expect(estimate.stagedKvBytes).toBe(Math.ceil(4096 * 524_288 * 0.1));
    expect(estimate.totalFullBytes).toBe(4_000_000_000 + 4096 * 524_288);
    // 4 GB of weights + 2.147 GB of KV is more than 6 GB free
    expect(estimate.fitsFull).toBe(false);
    expect(estimate.fitsInfinigen).toBe(false);
    // (6e9 − 4e9) / (524288 + 77824 + 52428.8) bytes per token
    expect(estimate.maxContextThatFits).toBe(3055);
    const roomy = estimateMemory(llama7b, weights, 2048, { freeBytes: 6_000_000_000, totalBytes: 8e9 });
    expect(roomy.fitsFull).toBe(true);
    expect(roomy.fitsInfinigen).toBe(true);
  });
});

describe('refusing a load that cannot fit', () => {
  const weights = { bytesByType: { Q4_0: 4_000_000_000 }, storedBytes: 4_000_000_000 };

  it('names what is needed, what is free and the context that would fit', () => {
    const estimate = estimateMemory(llama7b, weights, 8192, { freeBytes: 6_000_000_000, totalBytes: 8e9 });
    let error: unknown;
    try {
      assertFits(estimate, 'llama-7b.gguf');
    } catch (e) {
      error = e;
    }
    expect(error).toMatchObject({ code: 'MEMORY_INSUFFICIENT' });
    // (6e9 − 4e9) / 524288 bytes per token
    expect((error as { details: Record<string, number> }).details).toMatchObject({ neededBytes: 4e9 + 8192 * 524_288, availableBytes: 6e9, suggestedContext: 3814 });
    expect((error as Error).message).toMatch(/llama-7b\.gguf needs 7\.73 GiB .* 5\.59 GiB is free; a context of 3814 tokens would fit/);
  });

  it('counts a pool budget instead of the full cache when it is smaller', () => {
    const estimate = estimateMemory(llama7b, weights, 8192, { freeBytes: 6_000_000_000, totalBytes: 8e9 });
    expect(() => assertFits(estimate, 'm', 1_500_000_000)).not.toThrow();
    expect(() => assertFits(estimate, 'm', 2_500_000_000)).toThrow(/needs/);
  });

  it('a mixture-of-experts file: refused before loading when its experts cannot stay in RAM, saying so', () => {
    // Qwen3-30B-A3B in Q4_K_M: 18.6 GB, of which 17.7 GB are the 48 layers x 128 experts
    const moe = { bytesByType: { Q4_K: 15_000_000_000, Q6_K: 3_600_000_000 }, storedBytes: 18_600_000_000, expertBytes: 17_700_000_000 };
    const estimate = estimateMemory(llama7b, moe, 4096, { freeBytes: 16_000_000_000, totalBytes: 24e9 });
    expect(estimate.expertBytes).toBe(17_700_000_000);
    expect(() => assertFits(estimate, 'qwen3-30b-a3b.gguf')).toThrow(/qwen3-30b-a3b\.gguf needs 19\.32 GiB \(weights 17\.32 GiB \+ KV cache 2\.00 GiB at 4096 tokens\) but 14\.90 GiB is free; even a short context will not fit: choose a smaller or more quantised model\. Its experts are 16\.48 GiB of the weights: read in place from the file, not copied, but any step may route to any of them, so they must stay in RAM/);
    try {
      assertFits(estimate, 'm');
    } catch (error) {
      expect((error as { details: Record<string, number> }).details.expertBytes).toBe(17_700_000_000);
    }
    expect(() => assertFits(estimateMemory(llama7b, moe, 4096, { freeBytes: 22_000_000_000, totalBytes: 24e9 }), 'm')).not.toThrow();
  });

  it('takes the expert bytes from the file: the Qwen3-MoE fixture’s routers and stacked experts, as inspect counts them', async () => {
    const model = await loadModel(qwen3moeGgufFixture('F32'));
    try {
      const { summary } = summariseWeights(model);
      const experts = inspectModel(model).moe!.expertBytes;
      // 3 layers: router 256 x 16 + gate, up, down 16 x 256 x 256 each, F32
      expect(experts).toBe(3 * (256 * 16 + 3 * 16 * 256 * 256) * 4);
      expect(summary.expertBytes).toBe(experts);
      expect(estimateMemory(model.hyper, summary, 256).expertBytes).toBe(experts);
    } finally {
      model.close();
    }
  });

  it('lets a load that fits through', () => {
    expect(() => assertFits(estimateMemory(llama7b, weights, 2048, { freeBytes: 6_000_000_000, totalBytes: 8e9 }), 'm')).not.toThrow();
  });
});
