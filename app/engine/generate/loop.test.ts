import { describe, expect, it } from 'vitest';
import { LonghandError, NativeError, UsageError } from '../../common/errors.ts';
import type { Tokenizer } from '../model/tokenizer/tokenizer.ts';
import { tokenizerDecoder } from './decoder.ts';
import { generate, type DoneEvent, type GenerationEvent, type TokenEvent, type TokenRunner, type TokenTextDecoder } from './loop.ts';
import type { GenerationOptions } from './stop-reason.ts';

// A deterministic "model": a hand-written bigram table. Each id's logits put 10 on its successor,
// 5 on a runner-up and 0 elsewhere, so greedy decoding walks the table.
const VOCAB: ReadonlyArray<string | Uint8Array> = [
  '<s>', //  0 BOS
  '', //  1 EOS (renders as nothing)
  'Once', //  2
  ' upon', //  3
  ' a', //  4
  ' time', //  5
  '.', //  6
  ' The', //  7
  ' end', //  8
  '<', //  9
  '/', // 10
  'stop', // 11
  '>', // 12
  Uint8Array.of(0xc3), // 13: first byte of "é"
  Uint8Array.of(0xa9), // 14: second byte of "é"
  ' caf', // 15
  'x', // 16
];
const V = VOCAB.length;
const NEXT: Record<number, number> = { 0: 2, 2: 3, 3: 4, 4: 5, 5: 6, 6: 7, 7: 8, 8: 1, 9: 10, 10: 11, 11: 12, 12: 16, 15: 13, 13: 14, 14: 6, 16: 16, 1: 2 };
const RUNNER_UP: Record<number, number> = { 2: 7, 16: 6 };

function logitsAfter(id: number): Float32Array {
  const logits = new Float32Array(V);
  const next = NEXT[id];
  if (next !== undefined) logits[next] = 10;
  const second = RUNNER_UP[id];
  if (second !== undefined) logits[second] = 5;
  return logits;
}

interface FakeRunner extends TokenRunner {
  prefills: number[][];
  decodes: number[];
  /** Tokens in the fake KV cache. */
  cached: number;
  maxCached: number;
}

function fakeRunner(options: { contextLength?: number; failDecodeAt?: number; failWith?: unknown; failPrefill?: unknown; onDecode?: (n: number) => void } = {}): FakeRunner {
  const runner: FakeRunner = {
    contextLength: options.contextLength ?? 64,
    eosIds: [1],
    prefills: [],
    decodes: [],
    cached: 0,
    maxCached: 0,
    async prefill(ids, signal) {
      if (options.failPrefill !== undefined) throw options.failPrefill;
      if (signal?.aborted) throw new Error('aborted');
      runner.prefills.push([...ids]);
      runner.cached = ids.length;
      runner.maxCached = Math.max(runner.maxCached, runner.cached);
      return logitsAfter(ids[ids.length - 1]!);
    },
    async decode(id) {
      runner.decodes.push(id);
      options.onDecode?.(runner.decodes.length);
      if (options.failDecodeAt !== undefined && runner.decodes.length === options.failDecodeAt) throw options.failWith;
      runner.cached++;
      runner.maxCached = Math.max(runner.maxCached, runner.cached);
      return logitsAfter(id);
    },
  };
  return runner;
}

/** ids → bytes → text through a streaming UTF-8 decoder, like the tokenizer's StreamDecoder. */
const fakeDecoder: TokenTextDecoder = {
  createStreamDecoder() {
    const utf8 = new TextDecoder('utf-8');
    const encoder = new TextEncoder();
    return {
      push: (id: number) => {
        const piece = VOCAB[id]!;
        return utf8.decode(typeof piece === 'string' ? encoder.encode(piece) : piece, { stream: true });
      },
      flush: () => utf8.decode(),
    };
  },
};

const GREEDY: GenerationOptions = { sampling: { temperature: 0 } };

async function collect(iterable: AsyncIterable<GenerationEvent>, onToken?: (e: TokenEvent) => void): Promise<{ tokens: TokenEvent[]; done: DoneEvent; text: string }> {
  const tokens: TokenEvent[] = [];
  let done: DoneEvent | undefined;
  for await (const event of iterable) {
    expect(done, 'nothing after done').toBeUndefined();
    if (event.type === 'token') {
      tokens.push(event);
      onToken?.(event);
    } else done = event;
  }
  expect(done).toBeDefined();
  return { tokens, done: done!, text: tokens.map((t) => t.text).join('') + done!.text };
}

describe('generate', () => {
  it('walks the bigram greedily until EOS, which is not emitted', async () => {
    const runner = fakeRunner();
    const { tokens, done, text } = await collect(generate(runner, fakeDecoder, [0], GREEDY));
    expect(tokens.map((t) => t.id)).toEqual([2, 3, 4, 5, 6, 7, 8]);
    expect(tokens.map((t) => t.index)).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(text).toBe('Once upon a time. The end');
    expect(done).toMatchObject({ stopReason: 'eos', promptTokens: 1, completionTokens: 7, text: '' });
    expect(runner.prefills).toEqual([[0]]);
    expect(runner.decodes).toEqual([2, 3, 4, 5, 6, 7, 8]); // the EOS itself is never decoded
  });

  it('stopOnEos false: EOS is an ordinary token (rendered as nothing)', async () => {
    const { tokens, done } = await collect(generate(fakeRunner(), fakeDecoder, [0], { ...GREEDY, stopOnEos: false, maxTokens: 10 }));
    expect(tokens.map((t) => t.id)).toEqual([2, 3, 4, 5, 6, 7, 8, 1, 2, 3]);
    expect(tokens[7]!.text).toBe('');
    expect(done.stopReason).toBe('maxTokens');
  });

  it('maxTokens: exactly that many tokens, the last one not decoded', async () => {
    const runner = fakeRunner();
    const { tokens, done, text } = await collect(generate(runner, fakeDecoder, [0], { ...GREEDY, maxTokens: 3 }));
    expect(tokens).toHaveLength(3);
    expect(text).toBe('Once upon a');
    expect(done).toMatchObject({ stopReason: 'maxTokens', completionTokens: 3 });
    expect(runner.decodes).toEqual([2, 3]);
  });

  it('stop string split across tokens: the text before it is emitted, no part of it', async () => {
    // 9 → "<" "/" "stop" ">" "x"...
    const { tokens, done, text } = await collect(generate(fakeRunner(), fakeDecoder, [7, 9], { ...GREEDY, stopStrings: ['/stop>'] }));
    expect(tokens.map((t) => t.text)).toEqual(['', '', '']); // "/", "stop", ">": held back, then cut
    expect(text).toBe('');
    expect(done).toMatchObject({ stopReason: 'stopString', completionTokens: 3, text: '' });
    const upon = await collect(generate(fakeRunner(), fakeDecoder, [0], { ...GREEDY, stopStrings: ['me.', 'e. T'] }));
    expect(upon.text).toBe('Once upon a ti');
    expect(upon.done.stopReason).toBe('stopString');
  });

  it('held-back text is released at the end when the stop never completes', async () => {
    // " upon a time." then maxTokens: the held "." (could start ". The!") comes in done.text
    const { tokens, done, text } = await collect(generate(fakeRunner(), fakeDecoder, [0], { ...GREEDY, maxTokens: 5, stopStrings: ['. The!'] }));
    expect(tokens.map((t) => t.text)).toEqual(['Once', ' upon', ' a', ' time', '']);
    expect(done).toMatchObject({ stopReason: 'maxTokens', text: '.' });
    expect(text).toBe('Once upon a time.');
    // on EOS too
    const eos = await collect(generate(fakeRunner(), fakeDecoder, [0], { ...GREEDY, stopStrings: [' endless'] }));
    expect(eos.done).toMatchObject({ stopReason: 'eos', text: ' end' });
    expect(eos.text).toBe('Once upon a time. The end');
  });

  it('multi-byte characters: nothing until complete; an incomplete one ends as U+FFFD', async () => {
    const { tokens, text } = await collect(generate(fakeRunner(), fakeDecoder, [15], { ...GREEDY, maxTokens: 3 }));
    expect(tokens.map((t) => t.text)).toEqual(['', 'é', '.']);
    expect(text).toBe('é.');
    const cut = await collect(generate(fakeRunner(), fakeDecoder, [15], { ...GREEDY, maxTokens: 1 }));
    expect(cut.done).toMatchObject({ stopReason: 'maxTokens', text: '\uFFFD' });
  });

  describe('context', () => {
    it('stops with contextLimit when one more token would not fit, never exceeding it', async () => {
      const runner = fakeRunner({ contextLength: 5 });
      const { tokens, done } = await collect(generate(runner, fakeDecoder, [0, 2], GREEDY));
      expect(tokens.map((t) => t.id)).toEqual([3, 4, 5]); // 2 + 3 = 5
      expect(done).toMatchObject({ stopReason: 'contextLimit', promptTokens: 2, completionTokens: 3 });
      expect(runner.maxCached).toBeLessThanOrEqual(5);
      expect(runner.decodes).toEqual([3, 4]);
    });

    it('a prompt that fills the context: contextLimit at once, no prefill', async () => {
      const runner = fakeRunner({ contextLength: 2 });
      const { tokens, done } = await collect(generate(runner, fakeDecoder, [0, 2], GREEDY));
      expect(tokens).toEqual([]);
      expect(done).toMatchObject({ stopReason: 'contextLimit', completionTokens: 0 });
      expect(runner.prefills).toEqual([]);
    });

    it('a prompt longer than the context throws a LonghandError before any work', () => {
      const runner = fakeRunner({ contextLength: 2 });
      let caught: unknown;
      try {
        generate(runner, fakeDecoder, [0, 2, 3], GREEDY);
      } catch (error) {
        caught = error;
      }
      expect(caught).toBeInstanceOf(LonghandError);
      expect((caught as LonghandError).code).toBe('CONTEXT_OVERFLOW');
      expect((caught as LonghandError).details).toMatchObject({ promptTokens: 3, contextLength: 2 });
      expect(runner.prefills).toEqual([]);
    });

    it('an empty prompt or bad params throw at the call', () => {
      expect(() => generate(fakeRunner(), fakeDecoder, [], GREEDY)).toThrow(LonghandError);
      expect(() => generate(fakeRunner(), fakeDecoder, [0], { maxTokens: 0 })).toThrow(UsageError);
      expect(() => generate(fakeRunner(), fakeDecoder, [0], { sampling: { temperature: -1 } })).toThrow(UsageError);
    });
  });

  describe('cancellation', () => {
    it('an abort between tokens ends with cancelled before the next decode', async () => {
      const controller = new AbortController();
      const runner = fakeRunner();
      const { tokens, done } = await collect(generate(runner, fakeDecoder, [0], GREEDY, controller.signal), (t) => {
        if (t.index === 1) controller.abort();
      });
      expect(tokens.map((t) => t.id)).toEqual([2, 3]);
      expect(done).toMatchObject({ stopReason: 'cancelled', completionTokens: 2 });
      expect(runner.decodes).toEqual([2]);
    });

    it('a runner that never waits on I/O still lets a timer abort it mid-generation (the loop gives the event loop a turn per token)', async () => {
      // the bigram's 16 → 16 loop never reaches EOS; decode resolves at once, like the native dense stages
      const controller = new AbortController();
      const runner = fakeRunner({ contextLength: 1_000_000 });
      const timer = setTimeout(() => controller.abort(), 20);
      const { tokens, done } = await collect(generate(runner, fakeDecoder, [16], { ...GREEDY, maxTokens: 500_000 }, controller.signal));
      clearTimeout(timer);
      expect(done.stopReason).toBe('cancelled');
      expect(tokens.length).toBeGreaterThan(0);
      expect(tokens.length).toBeLessThan(500_000);
    });

    it('an abort during a decode ends with cancelled, not error', async () => {
      const controller = new AbortController();
      const runner = fakeRunner({ failDecodeAt: 2, failWith: new Error('interrupted'), onDecode: (n) => n === 2 && controller.abort() });
      const { done } = await collect(generate(runner, fakeDecoder, [0], GREEDY, controller.signal));
      expect(done.stopReason).toBe('cancelled');
      expect(done.error).toBeUndefined();
    });

    it('an aborted signal: no prefill; the prefill receives the signal', async () => {
      const controller = new AbortController();
      controller.abort();
      const runner = fakeRunner();
      const { done } = await collect(generate(runner, fakeDecoder, [0], GREEDY, controller.signal));
      expect(done).toMatchObject({ stopReason: 'cancelled', completionTokens: 0 });
      expect(runner.prefills).toEqual([]);

      const during = new AbortController();
      const slow: TokenRunner = {
        ...fakeRunner(),
        prefill: (_ids, signal) =>
          new Promise((_resolve, reject) => {
            signal?.addEventListener('abort', () => reject(new Error('prefill aborted')));
            setTimeout(() => during.abort(), 1);
          }),
      };
      const r = await collect(generate(slow, fakeDecoder, [0], GREEDY, during.signal));
      expect(r.done).toMatchObject({ stopReason: 'cancelled', completionTokens: 0 });
    });
  });

  describe('errors', () => {
    it('a runner failure after tokens ends the stream with error and its code; the iterator does not throw', async () => {
      const runner = fakeRunner({ failDecodeAt: 3, failWith: new NativeError('NATIVE_INTERNAL', 'pool corrupted', { slot: 7 }) });
      const { tokens, done } = await collect(generate(runner, fakeDecoder, [0], GREEDY));
      expect(tokens.map((t) => t.id)).toEqual([2, 3, 4]);
      expect(done).toMatchObject({ stopReason: 'error', completionTokens: 3, error: { code: 'NATIVE_INTERNAL', message: 'pool corrupted', details: { slot: 7 } } });
      const plain = await collect(generate(fakeRunner({ failDecodeAt: 1, failWith: new TypeError('boom') }), fakeDecoder, [0], GREEDY));
      expect(plain.done).toMatchObject({ stopReason: 'error', error: { code: 'INTERNAL', message: 'boom' } });
    });

    it('bad logits mid-generation end with error (SamplingError code)', async () => {
      const base = fakeRunner();
      const runner: TokenRunner = { ...base, decode: async () => new Float32Array(V).fill(Number.NaN) };
      const { tokens, done } = await collect(generate(runner, fakeDecoder, [0], GREEDY));
      expect(tokens).toHaveLength(1);
      expect(done).toMatchObject({ stopReason: 'error', error: { code: 'GENERATION_INVALID_LOGITS' } });
    });

    it('a failure before the first token is thrown', async () => {
      const failing = fakeRunner({ failPrefill: new NativeError('NATIVE_OUT_OF_MEMORY', 'no memory') });
      await expect(collect(generate(failing, fakeDecoder, [0], GREEDY))).rejects.toMatchObject({ code: 'NATIVE_OUT_OF_MEMORY' });
      const nanRunner: TokenRunner = { ...fakeRunner(), prefill: async () => new Float32Array(V).fill(Number.NaN) };
      await expect(collect(generate(nanRunner, fakeDecoder, [0], GREEDY))).rejects.toBeInstanceOf(LonghandError);
    });
  });

  it('sampling: the same seed gives the same tokens; penalties see prompt and generated ids', async () => {
    const params: GenerationOptions = { maxTokens: 12, sampling: { temperature: 3, topK: 0, topP: 1, minP: 0, seed: 99 } };
    const a = await collect(generate(fakeRunner(), fakeDecoder, [16], params));
    const b = await collect(generate(fakeRunner(), fakeDecoder, [16], params));
    expect(a.tokens.map((t) => t.id)).toEqual(b.tokens.map((t) => t.id));
    expect(a.done.seed).toBe(99);
    // 16 → 16 (10) or 6 (5): a huge frequency penalty on the prompt's 16 makes greedy pick 6
    const p = await collect(generate(fakeRunner(), fakeDecoder, [16], { maxTokens: 1, sampling: { temperature: 0, frequencyPenalty: 100 } }));
    expect(p.tokens.map((t) => t.id)).toEqual([6]);
  });

  it('reports timings', async () => {
    const { done } = await collect(generate(fakeRunner(), fakeDecoder, [0, 2], { ...GREEDY, maxTokens: 4 }));
    const t = done.timings;
    for (const value of Object.values(t)) expect(value).toBeGreaterThanOrEqual(0);
    expect(t.ttftMs).toBeGreaterThanOrEqual(t.prefillMs);
    expect(t.totalMs).toBeGreaterThanOrEqual(t.ttftMs);
    expect(done.promptTokens).toBe(2);
  });
});

describe('tokenizerDecoder', () => {
  it('wraps the tokenizer StreamDecoder (byte path), one per generation', () => {
    const bytes = [Uint8Array.of(0x41), Uint8Array.of(0xe2, 0x82), Uint8Array.of(0xac), Uint8Array.of()];
    const tokenizer = { tokenBytes: (id: number) => bytes[id]!, decode: () => '' } as unknown as Tokenizer;
    const decoder = tokenizerDecoder(tokenizer);
    const s = decoder.createStreamDecoder();
    expect([s.push(0), s.push(1), s.push(2), s.push(3), s.flush()]).toEqual(['A', '', '€', '', '']);
    const t = decoder.createStreamDecoder();
    expect([t.push(1), t.flush()]).toEqual(['', '\uFFFD']);
  });
});
