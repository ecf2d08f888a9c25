import { describe, expect, it } from 'vitest';
import { parseEngineEvent, parseEngineRequest } from './protocol.ts';

describe('engine protocol', () => {
  it('fills defaults so every side sees the same request', () => {
    const request = parseEngineRequest({ kind: 'generate', requestId: 'g1', prompt: { text: 'Once' } });
    expect(request).toEqual({
      kind: 'generate',
      requestId: 'g1',
      prompt: { text: 'Once' },
      params: {
        maxTokens: 256, stopStrings: [], stopOnEos: true, reusePrefix: true,
        sampling: { temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, penaltyLastN: 64 },
      },
    });
    const load = parseEngineRequest({ kind: 'load', requestId: 'l', options: { modelPath: '/m.gguf' } });
    expect(load).toMatchObject({ options: { device: 'cpu', kvType: 'fp16', prefillChunk: 64 } });
  });

  it.each([
    [{ kind: 'generate', requestId: 'g', prompt: { text: 'x' }, params: { maxTokens: 0 } }, /params\.maxTokens/],
    [{ kind: 'generate', requestId: 'g', prompt: { text: 'x' }, params: { sampling: { temperature: -1 } } }, /params\.sampling\.temperature/],
    [{ kind: 'generate', requestId: 'g', prompt: { text: 'x' }, params: { sampling: { topP: 0 } } }, /topP/],
    [{ kind: 'generate', requestId: 'g', prompt: { ids: [] } }, /prompt/],
    [{ kind: 'generate', requestId: 'g', prompt: { text: 'x' }, extra: 1 }, /extra|Unrecognized/],
    [{ kind: 'load', requestId: 'l', options: { modelPath: '/m', device: 'tpu' } }, /options\.device/],
    [{ kind: 'cancel', requestId: 'c' }, /target/],
    [{ kind: 'generate', requestId: 'g', prompt: { text: 'x' }, params: { document: '../etc/passwd' } }, /params\.document/],
    [{ kind: 'sessionFile', requestId: 's', action: 'save', path: '/tmp/x' }, /kind/], // only hosts started by the CLI parse it
    [{ kind: 'explode', requestId: 'x' }, /kind/],
    ['not an object', /bad request/],
  ])('rejects %j naming the field', (message, pattern) => {
    let error: unknown;
    try {
      parseEngineRequest(message);
    } catch (e) {
      error = e;
    }
    expect(error).toMatchObject({ code: 'PROTOCOL_BAD_MESSAGE' });
    expect((error as Error).message).toMatch(pattern);
  });

  it('checks events too, including error codes', () => {
    expect(parseEngineEvent({ kind: 'token', requestId: 'g', index: 0, id: 5, text: 'a' })).toMatchObject({ id: 5 });
    expect(() => parseEngineEvent({ kind: 'error', requestId: 'g', error: { code: 'NOT_A_CODE', message: 'x' } })).toThrow(/error\.code/);
    expect(() => parseEngineEvent({ kind: 'done', requestId: 'g', stopReason: 'tired', promptTokens: 1, completionTokens: 0, timings: {} })).toThrow(/stopReason/);
  });

  it('load progress: done of total stages, never more than total', () => {
    expect(parseEngineEvent({ kind: 'loadProgress', requestId: 'l', done: 0, total: 17 })).toMatchObject({ done: 0, total: 17 });
    expect(parseEngineEvent({ kind: 'loadProgress', requestId: 'l', done: 17, total: 17 })).toMatchObject({ done: 17 });
    expect(() => parseEngineEvent({ kind: 'loadProgress', requestId: 'l', done: 18, total: 17 })).toThrow(/done must not exceed total/);
    expect(() => parseEngineEvent({ kind: 'loadProgress', requestId: 'l', done: 1, total: 0 })).toThrow(/total/);
  });
});
