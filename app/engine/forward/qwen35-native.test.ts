// Qwen3.5 on the native engine (layers/qwen35-native.ts: the C++ dense stages with the gated
// attention and the linear layers' projections; native/src/gated_delta_net.h: the recurrence,
// chunked in prefill) against llama.cpp itself and against the onnxruntime path (onnx stages, the
// TypeScript float64 recurrence), on the converter-written fixtures (test/fixtures/families/qwen35.ts):
//   - native == onnx: the logits of a 64-token prefill and of 8 decode steps after it;
//   - greedy: 200 greedy tokens from three chat prompts (one of ~600 tokens) and from one of ~3,000
//     on the F32 file, each llama.cpp's argmax at every step (teacher-forced), top-5 log-probs within
//     the F32 bound;
//   - next-token distributions over 64 teacher-forced tokens on F32, Q8_0 and Q4_K, mean KL and
//     top-5 gaps per type, within the onnx path's bounds (qwen35-llama-cpp.test.ts says why they are
//     what they are);
//   - prefill chunks of 1 (the exact recurrence), 7 and 64 (the chunked form) give the same logits;
//   - 1 and 3 threads give the same logits.
// Prefix reuse, snapshots and the policies on the native engine: qwen35-hybrid.test.ts (the
// runner's default engine there is the native one).
import { afterAll, describe, expect, it } from 'vitest';
import { qwen35GgufFixture, type Qwen35FileType } from '../../../test/fixtures/families/qwen35.ts';
import { greedyAgreement } from '../../../test/support/greedy-agreement.ts';
import { llamaCppAgreements } from '../../../test/support/llama-cpp-agreement.ts';
import { disposeLlamaCpp } from '../../../test/support/llama-cpp-reference.ts';
import { logSoftmax } from '../../../test/support/reference-forward.ts';
import { isNativeAvailable } from '../../../native/index.js';
import { ChatTemplate } from '../model/chat-template.ts';
import { loadModel } from '../model/load-model.ts';
import { createTokenizer } from '../model/tokenizer/tokenizer.ts';
import { createModelRunner } from './model-runner.ts';

afterAll(() => disposeLlamaCpp());

// ~3x above what this file measured (2026-12-07, native stages, the 8 positions of the onnx test):
// F32 KL 5.1e-13 (top-5 3.2e-6), F16 1.2e-6 (3.9e-3), Q8_0 7.0e-4 (9.1e-2), Q4_K 1.1e-4 (4.2e-2). The
// native kernels quantize activations to q8_K as llama.cpp does, so Q4_K agrees 30x closer than
// onnxruntime's MatMulNBits (3.6e-3); Q8_0 and F16 as the onnx path (qwen35-llama-cpp.test.ts says
// why this sharp model's figures are ~20x the Qwen3 fixture's). Rounding the q8_0 activation scale
// to fp16 as ggml does (native/src/quant_dot_q.cc), which took Qwen3's Q8_0 from 3.5e-5 to 5.9e-6,
// left this file's Q8_0 at 6.95e-4: its gap comes from elsewhere. F32 as the onnx path's bound.
const BOUNDS: Record<Qwen35FileType, { kl: number; top5: number }> = {
  F32: { kl: 1e-9, top5: 3e-5 },
  F16: { kl: 4e-6, top5: 1.2e-2 },
  Q8_0: { kl: 2e-3, top5: 3e-1 },
  Q4_K: { kl: 3e-4, top5: 1.3e-1 },
};

const TOKENS = 64;
const ids = Array.from({ length: TOKENS }, (_, i) => (i * 7919 + 13) % 151669);
const POSITIONS = Array.from({ length: TOKENS / 8 }, (_, j) => 8 * j + 7);

const maxAbsDiff = (a: ArrayLike<number>, b: ArrayLike<number>): number => {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
  return worst;
};

const native = isNativeAvailable();

describe.skipIf(!native)('Qwen3.5 native == onnx', () => {
  it('a 64-token prefill (every position) and 8 greedy decode steps after it give the logits of the onnx path', async () => {
    const model = await loadModel(qwen35GgufFixture('F32'));
    try {
      const results: { engine: string; prefill: Float32Array; decode: Float32Array[] }[] = [];
      const fed: number[] = []; // the tokens decoded: the native run's greedy picks, fed to the onnx run too
      for (const dense of ['native', 'onnx'] as const) {
        const runner = await createModelRunner(model, { kvType: 'fp32', contextLength: 128, prefillChunk: 32, dense });
        const prefill = await runner.prefill(ids, undefined, { allLogits: true });
        let last: Float32Array = prefill.slice((ids.length - 1) * model.hyper.vocabSize);
        const decode: Float32Array[] = [];
        for (let i = 0; i < 8; i++) {
          fed[i] ??= argmaxOf(last);
          last = await runner.decode(fed[i]!);
          decode.push(last);
        }
        results.push({ engine: runner.dense.engine, prefill, decode });
        await runner.dispose();
      }
      expect(results.map((r) => r.engine)).toEqual(['native', 'onnx']);
      const prefillGap = maxAbsDiff(results[0]!.prefill, results[1]!.prefill);
      const decodeGap = Math.max(...results[0]!.decode.map((d, i) => maxAbsDiff(d, results[1]!.decode[i]!)));
      console.log(`qwen35 F32 native vs onnx: max |Δ logit| ${prefillGap.toExponential(2)} over 64 prefill positions, ${decodeGap.toExponential(2)} over 8 decode steps`);
      // F32 weights: both engines compute in fp32 (the onnx path's recurrence in float64): measured 2.5e-5
      // and 1.5e-5, bounded 10x above; a wrong gate,
      // norm, layout or state would move logits by order 1
      expect(prefillGap).toBeLessThan(2.5e-4);
      expect(decodeGap).toBeLessThan(2.5e-4);
    } finally {
      model.close();
    }
  }, 600_000);
});

function argmaxOf(logits: Float32Array): number {
  let best = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i]! > logits[best]!) best = i;
  return best;
}

const LONG_TEXT = [
  'The lighthouse stood on a spit of black rock where the river met the sea, and for forty years the same family had kept its lamp.',
  'Every evening the keeper climbed one hundred and twelve steps, trimmed the wick, polished the lens and wrote the weather in a ledger.',
  'In winter the storms came from the north-east; the spray reached the gallery and froze there, so that by morning the tower wore a coat of ice.',
  'Ships passed at night without a word: colliers bound for the capital, fishing boats, once a liner lit from stem to stern like a street.',
  'The keeper\'s daughter learned the lights of every vessel by heart — red to port, green to starboard, white at the masthead — and counted them.',
  'When the new electric lamp arrived the ledger ended; the last page reads: "Wind NE 6, sea rough, visibility good, lamp lit 16:42, all well."',
].join(' ');

describe.skipIf(!native)('Qwen3.5 native vs llama.cpp: greedy on the F32 fixture', () => {
  const prompts = [
    [{ role: 'user' as const, content: 'Write a short story about a lighthouse keeper.' }],
    [{ role: 'system' as const, content: 'You answer in Chinese.' }, { role: 'user' as const, content: '今天天气怎么样？😀' }],
    [{ role: 'user' as const, content: `${LONG_TEXT}\n\n${LONG_TEXT.split(' ').reverse().join(' ')}\n\n${LONG_TEXT.toUpperCase()}\n\nSummarise the passage above.` }],
  ];

  it("200 greedy tokens from three chat prompts (one of ~600 tokens) are llama.cpp's argmax at every step; top-5 log-probs close", async () => {
    const path = qwen35GgufFixture('F32');
    const model = await loadModel(path);
    const tokenizer = await createTokenizer(model.tokenizer);
    const template = ChatTemplate.forTokenizer(model.chatTemplate, tokenizer);
    const runner = await createModelRunner(model, { kvType: 'fp32', contextLength: 1024, prefillChunk: 64, dense: 'native' });
    try {
      expect(runner.dense.engine).toBe('native');
      const lengths: number[] = [];
      for (const messages of prompts) {
        const rendered = template.render(messages);
        const prompt = tokenizer.encode(rendered, template.encodeOptionsFor(rendered));
        lengths.push(prompt.length);
        const { generated, matched, top5 } = await greedyAgreement(runner, path, prompt, { checkAt: [0, 1, 99, 199] });
        console.log(`qwen35 F32 greedy (native) ${prompt.length}-token prompt ${JSON.stringify(messages.at(-1)!.content.slice(0, 24))}: ${matched}/200 ids match llama.cpp, max top-5 |Δ log p| ${top5.toExponential(2)}, distinct ids ${new Set(generated).size}`);
        expect(matched).toBe(200);
        expect(top5).toBeLessThan(BOUNDS.F32.top5);
        expect(new Set(generated).size).toBeGreaterThanOrEqual(20);
      }
      expect(Math.max(...lengths)).toBeGreaterThan(400);
    } finally {
      await runner.dispose();
      model.close();
    }
  }, 600_000);
});

describe.skipIf(!native)('Qwen3.5 native vs llama.cpp: greedy after a 3,000-token prompt', () => {
  it("200 greedy tokens after a ~3,000-token chat prompt (chunks of 64 through the chunked recurrence) are llama.cpp's argmax at every step", async () => {
    const path = qwen35GgufFixture('F32');
    const model = await loadModel(path);
    const tokenizer = await createTokenizer(model.tokenizer);
    const template = ChatTemplate.forTokenizer(model.chatTemplate, tokenizer);
    const runner = await createModelRunner(model, { kvType: 'fp32', contextLength: 4096, prefillChunk: 64, dense: 'native' });
    try {
      expect(runner.dense.engine).toBe('native');
      // the passage's sentences in twelve orders, each paragraph numbered: long, and not one repeated block
      const sentences = LONG_TEXT.split('. ');
      const paragraphs = Array.from({ length: 12 }, (_, i) => `${i + 1}. ${[...sentences.slice(i % sentences.length), ...sentences.slice(0, i % sentences.length)].join('. ')}`);
      const rendered = template.render([{ role: 'user', content: `${paragraphs.join('\n\n')}\n\n${paragraphs.slice(0, 3).join(' ').toUpperCase()}\n\nSummarise the passage above.` }]);
      const prompt = tokenizer.encode(rendered, template.encodeOptionsFor(rendered));
      expect(prompt.length).toBeGreaterThan(2900);
      expect(prompt.length + 200).toBeLessThanOrEqual(4096);
      const { generated, matched, top5 } = await greedyAgreement(runner, path, prompt, { checkAt: [0, 199] });
      console.log(`qwen35 F32 greedy (native) ${prompt.length}-token prompt: ${matched}/200 ids match llama.cpp, max top-5 |Δ log p| ${top5.toExponential(2)}, distinct ids ${new Set(generated).size}`);
      expect(matched).toBe(200);
      expect(top5).toBeLessThan(BOUNDS.F32.top5);
      expect(new Set(generated).size).toBeGreaterThanOrEqual(20);
    } finally {
      await runner.dispose();
      model.close();
    }
  }, 600_000);
});

describe.skipIf(!native)('Qwen3.5 native vs llama.cpp: next-token distributions per file type', () => {
  // F16 (measured 1.2e-6, top-5 3.9e-3) is left to the onnx file: this file's time goes to the 3,000-token run
  it.each(['F32', 'Q8_0', 'Q4_K'] as const)('%s', async (type) => {
    const results = await llamaCppAgreements(qwen35GgufFixture(type), ids, ['native'], POSITIONS);
    for (const { kl, top5, dense, dtypes } of results) {
      console.log(`qwen35 ${type} [${dtypes.join(', ')}] (${dense}): mean KL ${kl.toExponential(2)}, max top-5 |Δ log p| ${top5.toExponential(2)}`);
      expect(dense).toBe('native');
      expect(kl).toBeLessThan(BOUNDS[type].kl);
      expect(top5).toBeLessThan(BOUNDS[type].top5);
    }
  }, 600_000);
});

describe.skipIf(!native)('Qwen3.5 native: prefill chunks and threads', () => {
  it('chunks of 1 (the exact recurrence), 7 and 64 (the chunked form) give the same logits at every position; 1 and 3 threads the same bits', async () => {
    const model = await loadModel(qwen35GgufFixture('F32'));
    try {
      const run = async (prefillChunk: number, threads: number): Promise<Float32Array> => {
        const runner = await createModelRunner(model, { kvType: 'fp32', contextLength: 128, prefillChunk, threads, dense: 'native' });
        try {
          expect(runner.dense.engine).toBe('native');
          return await runner.prefill(ids.slice(0, 48), undefined, { allLogits: true });
        } finally {
          await runner.dispose();
        }
      };
      const one = await run(1, 1);
      for (const chunk of [7, 64]) {
        const gap = maxAbsDiff(await run(chunk, 1), one);
        console.log(`qwen35 native prefill chunks of ${chunk} vs token by token: max |Δ logit| ${gap.toExponential(2)} over 48 positions`);
        // the dense stages' matmuls over T rows and the chunked recurrence: float rounding only
        expect(gap).toBeLessThan(1e-3);
      }
      const three = await run(64, 3);
      expect(maxAbsDiff(three, await run(64, 1))).toBe(0);
      // log-probs, not only logits: the argmax and the distribution agree
      const V = model.hyper.vocabSize;
      expect(maxAbsDiff(logSoftmax(one.subarray(47 * V)), logSoftmax(three.subarray(47 * V)))).toBeLessThan(1e-3);
    } finally {
      model.close();
    }
  }, 600_000);
});
