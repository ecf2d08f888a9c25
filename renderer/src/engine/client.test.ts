import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { FakeApi, stepMetrics, TIMINGS } from '../test/fake-api.ts';
import { EngineClient, EngineError, onEngineClientCreated, type GenerationEvent, type GenerationMetrics, type StepMetricsEvent } from './client.ts';
import { TextBatcher, Throttle } from './schedule.ts';

/** A frame scheduler the test advances by hand. */
function manualFrames() {
  const queue: (() => void)[] = [];
  return {
    schedule: (cb: () => void) => {
      queue.push(cb);
      return () => {
        const i = queue.indexOf(cb);
        if (i >= 0) queue.splice(i, 1);
      };
    },
    frame: () => queue.splice(0).forEach((cb) => cb()),
    pending: () => queue.length,
  };
}

let api: FakeApi;
beforeEach(() => {
  api = new FakeApi();
});
afterEach(() => vi.useRealTimers());

describe('EngineClient generations', () => {
  it('delivers streamed text once per animation frame, not once per token', async () => {
    const frames = manualFrames();
    const client = new EngineClient(api, { schedule: frames.schedule });
    const onText = vi.fn();
    const generation = client.generate({ text: 'Hi' }, { maxTokens: 8 }, { onText });
    api.stream(generation.requestId, ['a', 'b', 'c', 'd']);
    expect(onText).not.toHaveBeenCalled();
    expect(frames.pending()).toBe(1);
    frames.frame();
    expect(onText).toHaveBeenCalledTimes(1);
    expect(onText).toHaveBeenLastCalledWith('abcd');
    api.stream(generation.requestId, ['e'], 5, 2048, 4);
    api.done(generation.requestId, { text: '!', completionTokens: 5 });
    // done flushes what is pending (the held-back text included) without waiting for a frame
    expect(onText).toHaveBeenLastCalledWith('e!');
    const result = await generation.result;
    expect(result.text).toBe('abcde!');
    expect(result.stopReason).toBe('maxTokens');
    expect(result.metrics).toMatchObject({ done: true, completionTokens: 5, promptTokens: 5, ttftMs: TIMINGS.ttftMs, tokensPerS: TIMINGS.decodeTokensPerS, contextLength: 2048 });
  });

  it('throttles live metrics to at most 10 per second and always sends the final one', async () => {
    vi.useFakeTimers();
    let now = 0;
    const client = new EngineClient(api, { schedule: manualFrames().schedule, now: () => now });
    const metrics: GenerationMetrics[] = [];
    const generation = client.generate({ text: 'x' }, {}, { onMetrics: (m) => metrics.push(m) });
    api.stream(generation.requestId, []);
    for (let i = 0; i < 100; i++) {
      now += 5; // a token every 5 ms: 200 tokens/s for half a second
      api.stream(generation.requestId, ['t'], 5, 2048, i);
      vi.advanceTimersByTime(5);
    }
    expect(metrics.length).toBeLessThanOrEqual(6);
    expect(metrics.length).toBeGreaterThanOrEqual(4);
    api.done(generation.requestId, { completionTokens: 100 });
    await generation.result;
    expect(metrics.at(-1)).toMatchObject({ done: true, completionTokens: 100, stopReason: 'maxTokens' });
  });

  it('cancel sends a cancel request that targets the generation', async () => {
    const client = new EngineClient(api, { schedule: manualFrames().schedule });
    const generation = client.generate({ text: 'x' });
    generation.cancel();
    expect(api.sent.at(-1)).toMatchObject({ kind: 'cancel', target: generation.requestId });
    api.done(generation.requestId, { stopReason: 'cancelled' });
    expect((await generation.result).stopReason).toBe('cancelled');
    generation.cancel(); // after done: nothing more is sent
    expect(api.sent.filter((r) => r.kind === 'cancel')).toHaveLength(1);
  });

  it('rejects with a typed EngineError when the engine refuses the request', async () => {
    const client = new EngineClient(api, { schedule: manualFrames().schedule });
    const generation = client.generate({ text: 'x' });
    api.emit({ kind: 'error', requestId: generation.requestId, error: { code: 'ENGINE_NOT_LOADED', message: 'no model', details: {} } });
    await expect(generation.result).rejects.toMatchObject({ name: 'EngineError', code: 'ENGINE_NOT_LOADED', message: 'no model' });
  });

  it('fails everything in flight with ENGINE_CRASHED when the engine dies', async () => {
    const client = new EngineClient(api, { schedule: manualFrames().schedule });
    api.autoLoad = false;
    const generation = client.generate({ text: 'x' });
    const load = client.load({ modelPath: '/m.gguf' });
    api.setStatus({ state: 'crashed', reason: 'oom', message: 'out of memory', willRestart: false });
    await expect(generation.result).rejects.toBeInstanceOf(EngineError);
    await expect(load).rejects.toMatchObject({ code: 'ENGINE_CRASHED', message: 'out of memory' });
  });

  it('routes events by request id and ignores other requests', async () => {
    const client = new EngineClient(api, { schedule: manualFrames().schedule });
    const onText = vi.fn();
    const a = client.generate({ text: 'a' }, {}, { onText });
    api.stream('someone-else', ['zzz']);
    api.done(a.requestId, { text: 'ok' });
    expect((await a.result).text).toBe('ok');
    expect(onText).toHaveBeenCalledWith('ok');
  });

  it('lets other views subscribe to every generation (events and metrics)', async () => {
    const client = new EngineClient(api, { schedule: manualFrames().schedule });
    const events: GenerationEvent[] = [];
    const metrics = vi.fn();
    client.onGenerationEvent((e) => events.push(e));
    client.onMetrics(metrics);
    const g = client.generate({ text: 'a' });
    api.stream(g.requestId, ['b']);
    api.done(g.requestId, { completionTokens: 1 });
    await g.result;
    expect(events.map((e) => e.kind)).toEqual(['prompt', 'token', 'done']);
    expect(metrics).toHaveBeenLastCalledWith(expect.objectContaining({ requestId: g.requestId, done: true }));
  });

  it('surfaces the engine step metrics at most 10 a second, the final one always', async () => {
    vi.useFakeTimers();
    let now = 0;
    const client = new EngineClient(api, { schedule: manualFrames().schedule, now: () => now });
    const own: StepMetricsEvent[] = [];
    const all: StepMetricsEvent[] = [];
    client.onStepMetrics((e) => all.push(e));
    const g = client.generate({ text: 'x' }, {}, { onStepMetrics: (e) => own.push(e) });
    for (let step = 1; step <= 50; step++) {
      now += 10; // 100 samples a second for half a second
      api.metrics(g.requestId, stepMetrics({ step }));
      vi.advanceTimersByTime(10);
    }
    expect(own.length).toBeLessThanOrEqual(7);
    expect(own.length).toBeGreaterThanOrEqual(4);
    api.metrics(g.requestId, stepMetrics({ step: 51 }));
    api.done(g.requestId, { completionTokens: 51 });
    await g.result;
    expect(own.at(-1)).toMatchObject({ requestId: g.requestId, metrics: { step: 51 } });
    expect(all).toEqual(own);
    // A sample that arrives after done still reaches observers.
    api.metrics(g.requestId, stepMetrics({ step: 52 }));
    expect(all.at(-1)?.metrics.step).toBe(52);
    expect(own.at(-1)?.metrics.step).toBe(51);
  });

  it('announces new clients and remembers the last successful load', async () => {
    const seen: EngineClient[] = [];
    const off = onEngineClientCreated((c) => seen.push(c));
    const client = new EngineClient(api, { schedule: manualFrames().schedule });
    off();
    expect(seen.at(-1)).toBe(client);
    expect(client.lastLoadOptions).toBeNull();
    await client.load({ modelPath: '/x.gguf', policy: 'infinigen' });
    expect(client.lastLoadOptions).toEqual({ modelPath: '/x.gguf', policy: 'infinigen' });
    client.dispose();
  });

  it('load and tokenize resolve with their answers', async () => {
    const client = new EngineClient(api, { schedule: manualFrames().schedule });
    expect((await client.load({ modelPath: '/x.gguf' })).path).toBe('/x.gguf');
    const ids = client.tokenize('hello');
    const request = api.sent.at(-1)!;
    api.emit({ kind: 'tokenized', requestId: request.requestId, ids: [1, 2] });
    expect(await ids).toEqual([1, 2]);
  });

  it('turns a send that throws (closed connection) into a rejected request', async () => {
    const client = new EngineClient(api, { schedule: manualFrames().schedule });
    api.engineSend = () => {
      throw Object.assign(new Error('closed'), { code: 'ENGINE_CRASHED' });
    };
    await expect(client.generate({ text: 'x' }).result).rejects.toMatchObject({ code: 'ENGINE_CRASHED' });
  });
});

describe('render-rate helpers', () => {
  it('TextBatcher concatenates pushes until the frame fires', () => {
    const frames = manualFrames();
    const out: string[] = [];
    const batcher = new TextBatcher((t) => out.push(t), frames.schedule);
    batcher.push('a');
    batcher.push('');
    batcher.push('b');
    frames.frame();
    batcher.push('c');
    batcher.flush();
    frames.frame();
    expect(out).toEqual(['ab', 'c']);
  });

  it('Throttle fires leading and trailing values within the interval', () => {
    vi.useFakeTimers();
    let now = 1000;
    const seen: number[] = [];
    const throttle = new Throttle<number>((v) => seen.push(v), 100, () => now);
    throttle.push(1);
    throttle.push(2);
    throttle.push(3);
    expect(seen).toEqual([1]);
    now += 100;
    vi.advanceTimersByTime(100);
    expect(seen).toEqual([1, 3]);
  });
});
