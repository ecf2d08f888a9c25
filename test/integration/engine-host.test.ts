// The engine host end to end: a real host process speaking the protocol, the real engine on
// the reference model. Greedy output must equal llama.cpp's reference ids.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LonghandError } from '../../app/common/errors.ts';
import { EngineClient } from '../../app/engine/client.ts';
import { haveSharedModel, loadReferenceRuns, STORIES_260K } from '../support/models.ts';

describe.runIf(haveSharedModel())('engine host on stories260K', () => {
  let engine: EngineClient;
  beforeAll(async () => {
    engine = await EngineClient.start();
  });
  afterAll(async () => {
    await engine?.close();
  });

  it('refuses to generate before a model is loaded', async () => {
    const attempt = async () => {
      for await (const _ of engine.generate({ text: 'x' })) void _;
    };
    await expect(attempt()).rejects.toMatchObject({ code: 'ENGINE_NOT_LOADED' });
  });

  it('reports a bad model path as a typed error and stays usable', async () => {
    await expect(engine.load({ modelPath: '/nonexistent/model.gguf' })).rejects.toBeInstanceOf(LonghandError);
    await expect(engine.load({ modelPath: '/nonexistent/model.gguf' })).rejects.toMatchObject({ code: 'MODEL_NOT_FOUND' });
  });

  it('loads, tokenizes and generates the reference greedy ids through the protocol', async () => {
    const progress: { done: number; total: number }[] = [];
    const info = await engine.load({ modelPath: STORIES_260K, threads: 1, kvType: 'fp32', contextLength: 512 }, (p) => progress.push(p));
    expect(info).toMatchObject({ layers: 5, heads: 8, kvHeads: 4, vocabSize: 512, contextLength: 512, device: 'cpu' });
    // one loadProgress event per stage of the forward pass (layers + 1), in order, before 'loaded'
    expect(progress).toEqual(Array.from({ length: 6 }, (_, i) => ({ done: i + 1, total: 6 })));
    const [run] = loadReferenceRuns();
    expect(await engine.tokenize(run!.prompt)).toEqual(run!.promptIds);

    const ids: number[] = [];
    let text = '';
    let done;
    for await (const event of engine.generate({ text: run!.prompt }, { maxTokens: 40, sampling: { temperature: 0 } as never })) {
      if (event.kind === 'prompt') expect(event.ids).toEqual(run!.promptIds);
      else if (event.kind === 'token') {
        ids.push(event.id);
        text += event.text;
      } else if (event.kind === 'done') done = event;
    }
    expect(ids).toEqual(run!.generatedIds.slice(0, 40));
    expect(done).toMatchObject({ stopReason: 'maxTokens', promptTokens: run!.promptIds.length, completionTokens: 40 });
    expect(run!.generatedText.startsWith(text + done!.text)).toBe(true);
  });

  it('cancels a generation and then generates again', async () => {
    const abort = new AbortController();
    let tokens = 0;
    let stopReason;
    for await (const event of engine.generate({ text: 'Once upon a time' }, { maxTokens: 400, sampling: { temperature: 0 } as never }, abort.signal)) {
      if (event.kind === 'token' && ++tokens === 5) abort.abort();
      if (event.kind === 'done') stopReason = event.stopReason;
    }
    expect(stopReason).toBe('cancelled');
    expect(tokens).toBeLessThan(400);
    let after = 0;
    for await (const event of engine.generate({ text: 'Once upon a time' }, { maxTokens: 3 })) if (event.kind === 'token') after++;
    expect(after).toBe(3);
  });

  it('cancels during the prefill of a long prompt, between layers', async () => {
    await engine.load({ modelPath: STORIES_260K, contextLength: 2048, threads: 1 });
    const prompt = { text: 'Once upon a time there was a little dog who liked to run in the park. '.repeat(80) };
    const abort = new AbortController();
    let abortedAt = 0;
    let done;
    for await (const event of engine.generate(prompt, { maxTokens: 10 }, abort.signal)) {
      if (event.kind === 'prompt') {
        expect(event.ids.length).toBeGreaterThan(1500);
        // the host starts the prefill right after this event
        setTimeout(() => {
          abortedAt = performance.now();
          abort.abort();
        }, 30);
      }
      if (event.kind === 'done') done = event;
    }
    const latencyMs = performance.now() - abortedAt;
    console.log(`cancel during prefill: done ${latencyMs.toFixed(1)} ms after abort()`);
    expect(done).toMatchObject({ stopReason: 'cancelled', completionTokens: 0 });
    // Loose bound: it must stop mid-prefill, not after it (the measured figure is printed above).
    expect(latencyMs).toBeLessThan(1000);
    let after = 0;
    for await (const event of engine.generate({ text: 'Once' }, { maxTokens: 2 })) if (event.kind === 'token') after++;
    expect(after).toBe(2);
  });

  it('ends in-flight requests with ENGINE_CRASHED when the host dies', async () => {
    const victim = await EngineClient.start();
    await victim.load({ modelPath: STORIES_260K, contextLength: 256 });
    const stream = victim.generate({ text: 'Once upon a time' }, { maxTokens: 200 });
    await stream.next(); // the prompt event: the generation is running
    victim.kill('SIGKILL');
    await expect((async () => {
      for await (const _ of stream) void _;
    })()).rejects.toMatchObject({ code: 'ENGINE_CRASHED' });
  });
});
