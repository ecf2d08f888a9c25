import { act, fireEvent, render, screen, waitFor } from '@testing-library/react';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resetEngineStore, useEngineStore } from '../../engine/store.ts';
import { installServices, uninstallServices } from '../../services.ts';
import { cacheReport, FakeApi, MODEL, timeoutFrames } from '../../test/fake-api.ts';
import { resetSettingsStore } from '../settings/store.ts';
import { partDocumentId, summaryDocumentId } from './document-id.ts';
import { splitEven } from './plan.ts';
import { resetSummariseStore, useSummariseStore } from './store.ts';
import { SummariseView } from './SummariseView.tsx';

// One token per word; "w17" is token 1017, any other word token 2; BOS (addSpecial) is token 1.
// With it the instruction costs 26 tokens (the part prefix, 24 words + BOS, and "Summary:").
function wordTokenizer(text: string, addSpecial: boolean): number[] {
  const ids = text
    .split(/\s+/)
    .filter(Boolean)
    .map((w) => {
      const m = /^w(\d+)$/.exec(w);
      return m ? 1000 + Number(m[1]) : 2;
    });
  return addSpecial ? [1, ...ids] : ids;
}

const words = (count: number): string => Array.from({ length: count }, (_, i) => `w${i + 1}`).join(' ');
const docIds = (count: number): number[] => Array.from({ length: count }, (_, i) => 1001 + i);
const documentTokens = (ids: number[]): number[] => ids.filter((id) => id > 1000);

let api: FakeApi;

function setup(contextLength = 80) {
  api = new FakeApi();
  api.tokenizer = wordTokenizer;
  installServices(api, { schedule: timeoutFrames });
  useEngineStore.getState().setModel({ ...MODEL, contextLength });
  useSummariseStore.getState().setMaxSummaryTokens(10);
  return render(<SummariseView />);
}

const promptIds = (i: number): number[] => {
  const prompt = api.generations()[i]?.prompt;
  if (!prompt || !('ids' in prompt)) throw new Error(`generation ${i} has no id prompt`);
  return prompt.ids;
};

async function answer(i: number, text: string): Promise<void> {
  await waitFor(() => expect(api.generations().length).toBeGreaterThan(i));
  const id = api.generations()[i]!.requestId;
  act(() => {
    api.stream(id, [text]);
    api.done(id, { completionTokens: 3, stopReason: 'eos' });
  });
}

beforeEach(() => {
  resetEngineStore();
  resetSettingsStore();
  resetSummariseStore();
});
afterEach(() => uninstallServices());

describe('summarise', () => {
  it('counts the pasted text in tokens against the model context', async () => {
    setup();
    fireEvent.change(screen.getByLabelText('Text to summarise'), { target: { value: words(100) } });
    // budget = 80 − 26 (instruction) − 10 (summary) = 44
    await waitFor(() => expect(screen.getByLabelText('Token count').textContent).toContain('100 tokens · model context 80 · room for the document: 44'));
    expect(screen.getByLabelText('Overflow').textContent).toContain('Over by 56 tokens');
  });

  it('summarises a document that fits in one generation and streams it', async () => {
    setup();
    fireEvent.change(screen.getByLabelText('Text to summarise'), { target: { value: words(20) } });
    fireEvent.click(screen.getByRole('button', { name: 'Summarise' }));
    await waitFor(() => expect(api.generations()).toHaveLength(1));
    expect(documentTokens(promptIds(0))).toEqual(docIds(20));
    expect(promptIds(0)[0]).toBe(1); // BOS from the instruction prefix
    await answer(0, 'A short list of words.');
    await waitFor(() => expect(screen.getByRole('region', { name: 'Summary text' }).textContent).toBe('A short list of words.'));
    expect(screen.getByRole('button', { name: 'Copy' })).toHaveProperty('disabled', false);
  });

  it('passes a document id made from the text, the same id for the same text, and shows the reuse', async () => {
    setup();
    fireEvent.change(screen.getByLabelText('Text to summarise'), { target: { value: words(20) } });
    fireEvent.click(screen.getByRole('button', { name: 'Summarise' }));
    await waitFor(() => expect(api.generations()).toHaveLength(1));
    const id = summaryDocumentId(words(20));
    expect(id).toMatch(/^s-[0-9a-z]{11,}$/);
    expect(api.generations()[0]!.params).toMatchObject({ document: id });
    const first = api.generations()[0]!.requestId;
    act(() => {
      api.stream(first, ['Words.'], 47);
      api.done(first, { completionTokens: 3, promptTokens: 47, stopReason: 'eos', cache: cacheReport(46, 47, { source: 'snapshot', snapshot: { restored: true, restoreMs: 4, saved: true } }) });
    });
    await waitFor(() => expect(screen.getByRole('region', { name: 'Summary' }).querySelector('[data-stat="cache"]')?.textContent).toBe(' · reused 46 of 47 prompt tokens · restored from snapshot in 4 ms · snapshot saved'));
    await waitFor(() => expect(useSummariseStore.getState().running).toBe(false));

    // Another text, another id; the first text again, the first id.
    fireEvent.change(screen.getByLabelText('Text to summarise'), { target: { value: words(21) } });
    fireEvent.click(screen.getByRole('button', { name: 'Summarise' }));
    await waitFor(() => expect(api.generations()).toHaveLength(2));
    expect(api.generations()[1]!.params?.document).not.toBe(id);
    expect(api.generations()[1]!.params?.document).toBe(summaryDocumentId(words(21)));
    expect(summaryDocumentId(words(20))).toBe(id);
    expect(summaryDocumentId(`${words(20)} `)).not.toBe(id);
  });

  it('overflow policy stop: refuses with a clear message and sends no generate', async () => {
    setup();
    fireEvent.change(screen.getByLabelText('Text to summarise'), { target: { value: words(100) } });
    fireEvent.click(screen.getByRole('button', { name: 'Summarise' }));
    const refused = await screen.findByRole('alert', { name: 'Refused' });
    expect(refused.textContent).toContain('The document is 100 tokens but only 44 fit');
    expect(refused.textContent).toContain('Nothing was sent');
    expect(api.generations()).toHaveLength(0);
  });

  it('overflow policy truncate-middle: says how many tokens were dropped and sends head + tail', async () => {
    setup();
    fireEvent.change(screen.getByLabelText('Text to summarise'), { target: { value: words(100) } });
    fireEvent.click(screen.getByLabelText(/Cut the middle/));
    fireEvent.click(screen.getByRole('button', { name: 'Summarise' }));
    // keep = 44 − 1 (the "[…]" marker) = 43: the first 22 and the last 21 tokens; 57 dropped
    await waitFor(() => expect(screen.getByRole('status', { name: 'Note' }).textContent).toContain('57 tokens were cut from the middle'));
    await waitFor(() => expect(api.generations()).toHaveLength(1));
    const ids = docIds(100);
    expect(documentTokens(promptIds(0))).toEqual([...ids.slice(0, 22), ...ids.slice(100 - 21)]);
    await answer(0, 'Head and tail.');
    await waitFor(() => expect(useSummariseStore.getState().running).toBe(false));
    expect(api.generations()).toHaveLength(1);
  });

  it('overflow policy split: one generate per part, in order, then one that combines them', async () => {
    setup();
    fireEvent.change(screen.getByLabelText('Text to summarise'), { target: { value: words(100) } });
    fireEvent.click(screen.getByLabelText(/Split into parts/));
    fireEvent.click(screen.getByRole('button', { name: 'Summarise' }));
    const parts = splitEven(docIds(100), 44);
    expect(parts.map((p) => p.length)).toEqual([34, 33, 33]);

    await waitFor(() => expect(api.generations()).toHaveLength(1));
    expect(screen.getByLabelText('Progress').textContent).toBe('Summarising part 1 of 3…');
    await answer(0, 'first part w901');
    await waitFor(() => expect(screen.getByLabelText('Progress').textContent).toBe('Summarising part 2 of 3…'));
    await answer(1, 'second part w902');
    await answer(2, 'third part w903');
    await waitFor(() => expect(api.generations()).toHaveLength(4));
    expect(screen.getByLabelText('Progress').textContent).toBe('Combining 3 part summaries…');
    parts.forEach((part, i) => expect(documentTokens(promptIds(i))).toEqual(part));
    // Each part keeps its cache under its own id; the combining prompt (summaries) under none.
    const documentId = summaryDocumentId(words(100));
    expect(api.generations().map((g) => g.params?.document)).toEqual([partDocumentId(documentId, 0), partDocumentId(documentId, 1), partDocumentId(documentId, 2), undefined]);
    expect(partDocumentId(documentId, 1)).toBe(`${documentId}-p2`);
    // The combining prompt holds the three summaries in order.
    expect(documentTokens(promptIds(3))).toEqual([1901, 1902, 1903]);
    await answer(3, 'The whole document.');
    await waitFor(() => expect(useSummariseStore.getState().running).toBe(false));
    expect(api.generations()).toHaveLength(4);
    expect(screen.getByRole('region', { name: 'Summary text' }).textContent).toBe('The whole document.');
    expect(screen.getByRole('region', { name: 'Summary of part 2' }).textContent).toBe('second part w902');
  });

  it('Stop cancels the running generation and sends no further parts', async () => {
    setup();
    fireEvent.change(screen.getByLabelText('Text to summarise'), { target: { value: words(100) } });
    fireEvent.click(screen.getByLabelText(/Split into parts/));
    fireEvent.click(screen.getByRole('button', { name: 'Summarise' }));
    await waitFor(() => expect(api.generations()).toHaveLength(1));
    fireEvent.click(screen.getByRole('button', { name: 'Stop' }));
    const id = api.lastGeneration().requestId;
    expect(api.sent.at(-1)).toMatchObject({ kind: 'cancel', target: id });
    act(() => api.done(id, { stopReason: 'cancelled' }));
    await waitFor(() => expect(useSummariseStore.getState().running).toBe(false));
    expect(api.generations()).toHaveLength(1);
    expect(screen.getByRole('status', { name: 'Note' }).textContent).toContain('Stopped');
  });

  it('opens a .txt file and refuses other kinds', async () => {
    setup();
    const input = screen.getByLabelText('Open a file');
    fireEvent.change(input, { target: { files: [new File(['Hello from a file.'], 'notes.txt', { type: 'text/plain' })] } });
    await waitFor(() => expect(screen.getByLabelText('Text to summarise')).toHaveProperty('value', 'Hello from a file.'));
    expect(screen.getByText('Opened notes.txt')).toBeTruthy();
    fireEvent.change(input, { target: { files: [new File(['x'], 'image.png', { type: 'image/png' })] } });
    expect((await screen.findByRole('alert')).textContent).toContain('image.png is not a .txt, .md or .pdf file');
  });
});
