import { act, fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { resetEngineStore, useEngineStore } from '../../engine/store.ts';
import { installServices, uninstallServices } from '../../services.ts';
import { cacheReport, defaultSettings, FakeApi, MODEL, TIMINGS, timeoutFrames } from '../../test/fake-api.ts';
import { resetSettingsStore, useSettingsStore } from '../settings/store.ts';
import { AUTOSAVE_MS, AUTOSAVE_RETRY_MS, resetWriterStore, useWriterStore } from './store.ts';
import { WriterView } from './WriterView.tsx';

const DOC = { id: 'd-one', title: 'Harbour', text: 'The boats came in at dawn.', updatedAt: 1 };

let api: FakeApi;

function setup(options: { model?: boolean } = {}) {
  api = new FakeApi();
  api.on('documents.list', () => [{ id: DOC.id, title: DOC.title, updatedAt: DOC.updatedAt, words: 6 }]);
  api.on('documents.get', () => ({ ...DOC }));
  installServices(api, { schedule: timeoutFrames });
  if (options.model !== false) useEngineStore.getState().setModel(MODEL);
  return render(<WriterView />);
}

const editor = () => screen.getByLabelText('Document text') as HTMLTextAreaElement;
const suggestionRegion = () => screen.getByRole('region', { name: 'Suggested text' });

async function openAndContinue(): Promise<string> {
  await waitFor(() => expect(editor().value).toBe(DOC.text));
  fireEvent.click(screen.getByRole('button', { name: 'Continue writing' }));
  return api.lastGeneration().requestId;
}

beforeEach(() => {
  resetEngineStore();
  resetSettingsStore();
  resetWriterStore();
});

afterEach(() => {
  vi.useRealTimers();
  uninstallServices();
});

describe('writer', () => {
  it('opens the most recent document on start', async () => {
    setup();
    await waitFor(() => expect(editor().value).toBe(DOC.text));
    expect(screen.getByLabelText('Title')).toHaveProperty('value', 'Harbour');
    expect(screen.getByLabelText('Word count').textContent).toBe('6 words');
  });

  it('continues from the text before the cursor and streams tokens into a suggestion', async () => {
    setup();
    const id = await openAndContinue();
    expect(api.lastGeneration().prompt).toEqual({ text: DOC.text });
    act(() => api.stream(id, [' Gulls', ' followed', ' them.']));
    await waitFor(() => expect(suggestionRegion().textContent).toBe(' Gulls followed them.'));
    // The draft is untouched until the user accepts.
    expect(editor().value).toBe(DOC.text);
    expect(editor().readOnly).toBe(true);
  });

  it('accept inserts the suggestion at the cursor', async () => {
    setup();
    await waitFor(() => expect(editor().value).toBe(DOC.text));
    // Put the cursor after "The boats".
    act(() => useWriterStore.getState().setSelection(9, 9));
    fireEvent.click(screen.getByRole('button', { name: 'Continue writing' }));
    const id = api.lastGeneration().requestId;
    expect(api.lastGeneration().prompt).toEqual({ text: 'The boats' });
    act(() => {
      api.stream(id, [' and', ' nets']);
      api.done(id, { completionTokens: 2, stopReason: 'maxTokens' });
    });
    const accept = await screen.findByRole('button', { name: 'Accept' });
    await waitFor(() => expect(accept).toHaveProperty('disabled', false));
    fireEvent.click(accept);
    expect(editor().value).toBe('The boats and nets came in at dawn.');
    expect(screen.queryByRole('region', { name: 'Suggested text' })).toBeNull();
    expect(editor().readOnly).toBe(false);
  });

  it('reject discards the suggestion and leaves the text as it was', async () => {
    setup();
    const id = await openAndContinue();
    act(() => {
      api.stream(id, [' Rain.']);
      api.done(id, { completionTokens: 1, stopReason: 'eos' });
    });
    const reject = await screen.findByRole('button', { name: 'Reject' });
    await waitFor(() => expect(reject).toHaveProperty('disabled', false));
    fireEvent.click(reject);
    expect(screen.queryByRole('region', { name: 'Suggested text' })).toBeNull();
    expect(editor().value).toBe(DOC.text);
  });

  it('Stop sends an engine cancel for the running generation', async () => {
    setup();
    const id = await openAndContinue();
    act(() => api.stream(id, [' The']));
    fireEvent.click(screen.getByRole('button', { name: 'Stop' }));
    const cancel = api.sent.find((r) => r.kind === 'cancel');
    expect(cancel).toMatchObject({ kind: 'cancel', target: id });
    act(() => api.done(id, { stopReason: 'cancelled', completionTokens: 1 }));
    await waitFor(() => expect(screen.getByRole('button', { name: 'Stop' })).toHaveProperty('disabled', true));
    expect(within(screen.getByLabelText('Generation stats')).getByText('stopped')).toBeTruthy();
  });

  it('shows tokens, TTFT, tokens/s, context used and the stop reason after done', async () => {
    setup();
    const id = await openAndContinue();
    act(() => {
      api.stream(id, [' a', ' b', ' c'], 7, 2048);
      api.done(id, { completionTokens: 3, promptTokens: 7, stopReason: 'maxTokens', timings: TIMINGS });
    });
    const stats = await screen.findByLabelText('Generation stats');
    await waitFor(() => expect(stats.querySelector('[data-stat="stop"]')?.textContent).toBe('token limit'));
    expect(stats.querySelector('[data-stat="tokens"]')?.textContent).toBe('3');
    expect(stats.querySelector('[data-stat="ttft"]')?.textContent).toBe('42 ms');
    expect(stats.querySelector('[data-stat="rate"]')?.textContent).toBe('31.5');
    expect(stats.querySelector('[data-stat="context"]')?.textContent).toBe('10 of 2,048');
  });

  it('sends the document id with Continue and long-form, never with rewrites or instructions', async () => {
    setup();
    const id = await openAndContinue();
    expect(api.lastGeneration().params).toMatchObject({ document: 'd-one', maxTokens: 256 });
    act(() => api.done(id, { completionTokens: 0, stopReason: 'maxTokens' }));
    fireEvent.click(await screen.findByRole('button', { name: 'Reject' }));
    act(() => useWriterStore.getState().setSelection(4, 9));
    fireEvent.click(screen.getByRole('button', { name: 'Rewrite selection' }));
    expect(api.lastGeneration().params).not.toHaveProperty('document');
    act(() => api.done(api.lastGeneration().requestId, { completionTokens: 0, stopReason: 'eos' }));
    fireEvent.click(await screen.findByRole('button', { name: 'Reject' }));
    fireEvent.change(screen.getByLabelText('Instruction'), { target: { value: 'Describe the gulls' } });
    fireEvent.click(screen.getByRole('button', { name: 'Write' }));
    expect(api.lastGeneration().params).not.toHaveProperty('document');
    act(() => api.done(api.lastGeneration().requestId, { completionTokens: 0, stopReason: 'eos' }));
    fireEvent.click(await screen.findByRole('button', { name: 'Reject' }));
    fireEvent.click(screen.getByRole('button', { name: 'Long-form' }));
    expect(api.lastGeneration().params).toMatchObject({ document: 'd-one' });
  });

  it('shows "reused N of M prompt tokens" from done.cache, with where they came from', async () => {
    setup();
    const first = await openAndContinue();
    act(() => {
      api.stream(first, [' a'], 7, 2048);
      api.done(first, { completionTokens: 1, promptTokens: 7, stopReason: 'maxTokens', cache: cacheReport(0, 7, { snapshot: { restored: false, saved: true, saveMs: 3, bytes: 3 * 1024 * 1024 } }) });
    });
    const stats = await screen.findByLabelText('Generation stats');
    await waitFor(() => expect(stats.querySelector('[data-stat="cache"]')?.textContent).toBe('reused 0 of 7 prompt tokens · snapshot saved (3.00 MiB)'));

    fireEvent.click(screen.getByRole('button', { name: 'Reject' }));
    fireEvent.click(screen.getByRole('button', { name: 'Continue writing' }));
    const second = api.lastGeneration().requestId;
    // While it runs nothing is claimed about the cache.
    act(() => api.stream(second, [' b'], 1234, 2048));
    await waitFor(() => expect(screen.getByLabelText('Generation stats').querySelector('[data-stat="tokens"]')?.textContent).toBe('1'));
    expect(screen.getByLabelText('Generation stats').querySelector('[data-stat="cache"]')).toBeNull();
    act(() => api.done(second, { completionTokens: 1, promptTokens: 1234, stopReason: 'maxTokens', cache: cacheReport(1233, 1234, { source: 'snapshot', snapshot: { restored: true, restoreMs: 18.4, saved: false } }) }));
    await waitFor(() => expect(screen.getByLabelText('Generation stats').querySelector('[data-stat="cache"]')?.textContent).toBe('reused 1,233 of 1,234 prompt tokens · restored from snapshot in 18 ms'));

    fireEvent.click(screen.getByRole('button', { name: 'Reject' }));
    fireEvent.click(screen.getByRole('button', { name: 'Continue writing' }));
    const third = api.lastGeneration().requestId;
    act(() => api.done(third, { completionTokens: 0, promptTokens: 40, stopReason: 'maxTokens', cache: cacheReport(0, 40, { dropped: 'otherDocument', snapshot: { restored: false, saved: true, error: { code: 'SNAPSHOT_MISMATCH', message: 'made with another model file', details: {} } } }) }));
    await waitFor(() =>
      expect(screen.getByLabelText('Generation stats').querySelector('[data-stat="cache"]')?.textContent).toBe(
        'reused 0 of 40 prompt tokens · cache dropped: the cache held another document · snapshot not used (SNAPSHOT_MISMATCH): made with another model file · snapshot saved',
      ),
    );
  });

  it('says nothing about the cache when the engine reports none (a remote endpoint)', async () => {
    setup();
    const id = await openAndContinue();
    act(() => api.done(id, { completionTokens: 0, promptTokens: 7, stopReason: 'maxTokens' }));
    const stats = await screen.findByLabelText('Generation stats');
    await waitFor(() => expect(stats.querySelector('[data-stat="stop"]')?.textContent).toBe('token limit'));
    expect(stats.querySelector('[data-stat="cache"]')).toBeNull();
  });

  it('renders model output as inert text (no element from markup in a suggestion)', async () => {
    setup();
    const id = await openAndContinue();
    const hostile = '<img src=x onerror=alert(1)><script>alert(2)</script> javascript:alert(3)';
    act(() => {
      api.stream(id, [hostile]);
      api.done(id, { completionTokens: 1 });
    });
    await waitFor(() => expect(suggestionRegion().textContent).toBe(hostile));
    expect(document.querySelector('img')).toBeNull();
    expect(document.querySelector('script')).toBeNull();
    expect(document.querySelector('a')).toBeNull();
  });

  it('rewrites the selection with a chat prompt and accept replaces it', async () => {
    setup();
    await waitFor(() => expect(editor().value).toBe(DOC.text));
    act(() => useWriterStore.getState().setSelection(4, 9)); // "boats"
    fireEvent.click(screen.getByRole('button', { name: 'Rewrite selection' }));
    const request = api.lastGeneration();
    expect(request.prompt).toMatchObject({ messages: [{ role: 'system' }, { role: 'user', content: 'boats' }] });
    act(() => {
      api.stream(request.requestId, ['ships']);
      api.done(request.requestId, { completionTokens: 1, stopReason: 'eos' });
    });
    const accept = await screen.findByRole('button', { name: 'Accept' });
    await waitFor(() => expect(accept).toHaveProperty('disabled', false));
    fireEvent.click(accept);
    expect(editor().value).toBe('The ships came in at dawn.');
  });

  it('writes from an instruction with {messages}', async () => {
    setup();
    await waitFor(() => expect(editor().value).toBe(DOC.text));
    fireEvent.change(screen.getByLabelText('Instruction'), { target: { value: 'Describe the gulls' } });
    fireEvent.click(screen.getByRole('button', { name: 'Write' }));
    const prompt = api.lastGeneration().prompt as { messages: { role: string; content: string }[] };
    expect(prompt.messages.at(-1)?.content).toContain('Instruction: Describe the gulls');
    expect(prompt.messages.at(-1)?.content).toContain(DOC.text);
  });

  it('long-form keeps generating in steps until the target word count is reached', async () => {
    setup();
    await waitFor(() => expect(editor().value).toBe(DOC.text));
    fireEvent.change(screen.getByLabelText('Target words'), { target: { value: '4' } });
    fireEvent.click(screen.getByRole('button', { name: 'Long-form' }));
    const first = api.lastGeneration().requestId;
    act(() => {
      api.stream(first, [' one', ' two']);
      api.done(first, { completionTokens: 2, stopReason: 'maxTokens' });
    });
    await waitFor(() => expect(api.generations()).toHaveLength(2));
    const second = api.lastGeneration();
    expect(second.prompt).toEqual({ text: `${DOC.text} one two` });
    act(() => {
      api.stream(second.requestId, [' three', ' four']);
      api.done(second.requestId, { completionTokens: 2, stopReason: 'maxTokens' });
    });
    await waitFor(() => expect(screen.getByRole('button', { name: 'Accept' })).toHaveProperty('disabled', false));
    expect(api.generations()).toHaveLength(2);
    expect(suggestionRegion().textContent).toBe(' one two three four');
    expect(screen.getByLabelText('Generation stats').querySelector('[data-stat="steps"]')?.textContent).toBe('2');
  });

  it('keeps actions disabled until a model is loaded', async () => {
    setup({ model: false });
    await waitFor(() => expect(editor().value).toBe(DOC.text));
    expect(screen.getByRole('button', { name: 'Continue writing' })).toHaveProperty('disabled', true);
    expect(screen.getByText('Load a model on the Models page to generate, or turn on a remote endpoint in Settings.')).toBeTruthy();
  });

  it('generates without a local model when a remote endpoint is on in Settings', async () => {
    setup({ model: false });
    await waitFor(() => expect(editor().value).toBe(DOC.text));
    act(() => useSettingsStore.setState({ saved: { ...defaultSettings(), remote: { enabled: true, baseUrl: 'http://127.0.0.1:9000', apiKey: '', model: '' } } }));
    expect(screen.getByRole('button', { name: 'Continue writing' })).toHaveProperty('disabled', false);
    expect(screen.getByText('Generating with the remote endpoint from Settings.')).toBeTruthy();
  });

  it('autosaves the draft with a debounced documents.save', async () => {
    setup();
    await waitFor(() => expect(editor().value).toBe(DOC.text));
    vi.useFakeTimers();
    fireEvent.change(editor(), { target: { value: 'The boats' } });
    fireEvent.change(editor(), { target: { value: 'The boats came' } });
    await act(async () => {
      await vi.advanceTimersByTimeAsync(AUTOSAVE_MS - 100);
    });
    expect(api.calls('documents.save')).toHaveLength(0);
    await act(async () => {
      await vi.advanceTimersByTimeAsync(200);
    });
    const saves = api.calls('documents.save');
    expect(saves).toHaveLength(1);
    expect(saves[0]?.document).toMatchObject({ id: DOC.id, title: DOC.title, text: 'The boats came' });
    expect(screen.getByLabelText('Save state').textContent).toBe('Saved');
  });

  it('keeps the draft and retries when a save fails', async () => {
    setup();
    await waitFor(() => expect(editor().value).toBe(DOC.text));
    let fail = true;
    api.on('documents.save', (r) => {
      if (fail) throw Object.assign(new Error('disk full'), { code: 'INTERNAL' });
      return { updatedAt: r.document.updatedAt };
    });
    vi.useFakeTimers();
    fireEvent.change(editor(), { target: { value: 'Keep me' } });
    await act(async () => {
      await vi.advanceTimersByTimeAsync(AUTOSAVE_MS);
    });
    expect(screen.getByLabelText('Save state').textContent).toContain('disk full');
    expect(editor().value).toBe('Keep me');
    fail = false;
    await act(async () => {
      await vi.advanceTimersByTimeAsync(AUTOSAVE_RETRY_MS);
    });
    expect(api.calls('documents.save').at(-1)?.document.text).toBe('Keep me');
    expect(screen.getByLabelText('Save state').textContent).toBe('Saved');
  });

  it('a reload finds the saved draft', async () => {
    // First window: type, let autosave run.
    const stored = new Map<string, typeof DOC>();
    setup();
    api.on('documents.save', (r) => {
      stored.set(r.document.id, r.document);
      return { updatedAt: r.document.updatedAt };
    });
    await waitFor(() => expect(editor().value).toBe(DOC.text));
    fireEvent.change(editor(), { target: { value: 'A new draft' } });
    await act(() => useWriterStore.getState().flushSave());
    uninstallServices();
    resetWriterStore();
    document.body.innerHTML = '';
    // Second window over the same store of documents.
    api = new FakeApi();
    api.on('documents.list', () => [...stored.values()].map((d) => ({ id: d.id, title: d.title, updatedAt: d.updatedAt, words: 3 })));
    api.on('documents.get', (r) => stored.get(r.id)!);
    installServices(api, { schedule: timeoutFrames });
    render(<WriterView />);
    await waitFor(() => expect(editor().value).toBe('A new draft'));
  });

  it('surfaces an engine error for a generation that never started', async () => {
    setup();
    const id = await openAndContinue();
    act(() => api.emit({ kind: 'error', requestId: id, error: { code: 'CONTEXT_OVERFLOW', message: 'the prompt does not fit', details: {} } }));
    expect(await screen.findByText('the prompt does not fit')).toBeTruthy();
    expect(editor().value).toBe(DOC.text);
  });
});
