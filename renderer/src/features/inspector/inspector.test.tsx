import { act, fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resetEngineStore, useEngineStore } from '../../engine/store.ts';
import { installServices, services, uninstallServices } from '../../services.ts';
import { cacheReport, FakeApi, stepMetrics, TIMINGS, timeoutFrames } from '../../test/fake-api.ts';
import { resetSettingsStore } from '../settings/store.ts';
import { resetWriterStore, useWriterStore } from '../writer/store.ts';
import { CSV_COLUMNS, toCsv } from './data.ts';
import { InspectorView } from './InspectorView.tsx';
import { resetInspectorStore, snapshots, useInspectorStore } from './store.ts';

let api: FakeApi;

function setup() {
  api = new FakeApi();
  installServices(api, { schedule: timeoutFrames });
  return render(<InspectorView />);
}

beforeEach(() => {
  resetEngineStore();
  resetSettingsStore();
  resetInspectorStore();
  resetWriterStore();
});
afterEach(() => uninstallServices());

describe('cache inspector', () => {
  it('fills the store from every generation`s metrics and shows a layer`s numbers', async () => {
    setup();
    expect(screen.getByLabelText('Inspector state').textContent).toContain('No metrics yet');
    // A generation started elsewhere (e.g. the writer) is observed without taking part.
    const generation = services().engine.generate({ text: 'x' });
    act(() => {
      api.stream(generation.requestId, ['a']);
      api.metrics(generation.requestId, stepMetrics({ step: 1, tokensPerS: 12.5 }, [{}, { selected: 37, candidates: 200, bytesMoved: 4096, reuseHits: 9, reuseMisses: 3, recall: 0.875, speculationMs: 0.25, gatherMs: 0.5, attentionMs: 1.25 }]));
    });
    await waitFor(() => expect(useInspectorStore.getState().latest?.metrics.step).toBe(1));
    expect(snapshots()).toHaveLength(1);
    expect(screen.getByLabelText('Inspector state').textContent).toContain('Live: 1 generation running');

    const row = screen.getByRole('row', { name: 'Layer 1' });
    const cells = within(row).getAllByRole('cell').map((c) => c.textContent);
    expect(cells).toEqual(['1', '37', '200', '18.5%', '4.00 KiB', '9', '3', '75.0%', '87.5%', '0.25 / 0.50 / 1.25']);
    expect(screen.getByTestId('spark-Tokens/s').textContent).toBe('12.5');
    expect(screen.getByLabelText('Memory now')).toBeTruthy();
    expect(screen.getByRole('img', { name: 'Fetch ratio per layer over recent samples' })).toBeTruthy();

    // The final sample arrives with the end of the generation; then the view is idle.
    act(() => {
      api.metrics(generation.requestId, stepMetrics({ step: 2 }));
      api.done(generation.requestId, { completionTokens: 2 });
    });
    await generation.result;
    await waitFor(() => expect(useInspectorStore.getState().latest?.metrics.step).toBe(2));
    expect(screen.getByLabelText('Inspector state').textContent).toContain('Idle');

    // A layer chosen for the heatmap draws its positions (no canvas here: the view still renders).
    fireEvent.change(screen.getByLabelText('Heatmap layer'), { target: { value: '1' } });
    expect(screen.getByRole('img', { name: 'Selected positions of layer 1 over recent samples' })).toBeTruthy();
  });

  it('a remote generation shows the server`s prefix-cache hit rate and KV-cache usage, not the local cache panels', async () => {
    setup();
    const generation = services().engine.generate({ text: 'x' });
    const remote = stepMetrics(
      {
        step: 3, policy: 'remote', fetchRatio: 1, bytesMovedPerToken: 0, reuseHitRate: 0.4, recall: null, tokensPerS: 30,
        timing: { denseMs: 0, attentionMs: 0, speculationMs: 0, gatherMs: 0, otherMs: 0 },
        memory: { weightsBytes: 0, poolBytes: 0, poolBudgetBytes: 0, kvUsedBytes: 0, partialKeyBytes: 0, stagedBytes: 0, rssBytes: 0 },
        remote: { kvCacheUsage: 0.125, prefixCacheHitRate: 0.75 },
      },
      [],
    );
    act(() => api.metrics(generation.requestId, remote));
    await waitFor(() => expect(useInspectorStore.getState().latest?.metrics.policy).toBe('remote'));
    expect(screen.getByTestId('spark-Prefix-cache hit rate').textContent).toBe('75.0%');
    expect(screen.getByTestId('spark-KV-cache usage').textContent).toBe('12.5%');
    expect(screen.getByTestId('spark-Tokens/s').textContent).toBe('30.0');
    expect(screen.queryByTestId('spark-Fetch ratio')).toBeNull();
    expect(screen.queryByTestId('spark-Reuse hit rate')).toBeNull();
    expect(screen.queryByLabelText('Memory now')).toBeNull();
    expect(screen.queryByLabelText('Heatmap layer')).toBeNull();
    expect(screen.queryByRole('heading', { name: /Layers/ })).toBeNull();

    // Without the remote's own figures, the hit rate falls back to reuseHitRate; usage is unknown.
    await new Promise((r) => setTimeout(r, 110)); // past the 10/s cap
    act(() => api.metrics(generation.requestId, { ...remote, step: 4, remote: undefined }));
    await waitFor(() => expect(useInspectorStore.getState().latest?.metrics.step).toBe(4));
    expect(screen.getByTestId('spark-Prefix-cache hit rate').textContent).toBe('40.0%');
    expect(screen.getByTestId('spark-KV-cache usage').textContent).toBe('12.5%'); // the last value reported
    act(() => api.done(generation.requestId));
    await generation.result;
  });

  it('export CSV has a header and one row per snapshot', async () => {
    setup();
    const generation = services().engine.generate({ text: 'x' });
    for (let step = 1; step <= 3; step++) {
      act(() => api.metrics(generation.requestId, stepMetrics({ step })));
      // wait past the 10/s cap so every sample is kept
      await new Promise((r) => setTimeout(r, 110));
    }
    act(() => api.done(generation.requestId));
    await generation.result;
    expect(snapshots().map((s) => s.metrics.step)).toEqual([1, 2, 3]);
    const lines = toCsv(snapshots()).trimEnd().split('\n');
    expect(lines[0]).toBe(CSV_COLUMNS.join(','));
    expect(lines).toHaveLength(4);
    expect(screen.getByRole('button', { name: 'Export CSV' })).toHaveProperty('disabled', false);
  });

  it('compare runs both policies on the loaded model, B on A\'s prompt ids, and shows what each reused', async () => {
    setup();
    const model = await services().engine.load({ modelPath: '/m.gguf', policy: 'full', contextLength: 1024 });
    act(() => useEngineStore.getState().setModel(model));
    const loadsBefore = api.sent.filter((r) => r.kind === 'load').length;
    fireEvent.change(screen.getByLabelText('Compare tokens'), { target: { value: '4' } });
    act(() => useInspectorStore.getState().editCompare({ policyB: 'streaming' }));
    fireEvent.click(screen.getByRole('button', { name: 'Compare' }));

    const PROMPT_IDS = [1, 7, 9, 4, 2];
    const sideRun = async (index: number, ids: number[], tokensPerS: number, ttftMs: number, reused: number) => {
      await waitFor(() => expect(api.generations()).toHaveLength(index + 1));
      const g = api.lastGeneration();
      expect(g.params).toMatchObject({ maxTokens: 4, sampling: { temperature: 0 } });
      act(() => {
        api.emit({ kind: 'prompt', requestId: g.requestId, ids: PROMPT_IDS, contextLength: 1024 });
        ids.forEach((id, i) => api.emit({ kind: 'token', requestId: g.requestId, index: i, id, text: `t${id}` }));
        api.done(g.requestId, { completionTokens: ids.length, promptTokens: PROMPT_IDS.length, timings: { ...TIMINGS, ttftMs, decodeTokensPerS: tokensPerS }, cache: cacheReport(reused, PROMPT_IDS.length) });
      });
      return g;
    };
    const a = await sideRun(0, [10, 11, 12, 13], 20, 300, 0);
    const b = await sideRun(1, [10, 11, 99, 13], 35, 12, 4);
    // Each side chooses its policy for its generation; B runs on the ids A's prompt became.
    expect(a.params).toMatchObject({ policy: 'full' });
    expect(a.prompt).toEqual({ text: 'Once upon a time' });
    expect(b.params).toMatchObject({ policy: 'streaming' });
    expect(b.prompt).toEqual({ ids: PROMPT_IDS });
    expect(a.params).not.toHaveProperty('reusePrefix', false);
    expect(b.params).not.toHaveProperty('reusePrefix', false);

    const result = await screen.findByLabelText('Compare result');
    expect(within(result).getByText('75.0% (3 of 4)')).toBeTruthy();
    expect(within(result).getByText('token 2')).toBeTruthy();
    expect(result.querySelector('[data-stat="rate-a"]')?.textContent).toBe('20.0');
    expect(result.querySelector('[data-stat="rate-b"]')?.textContent).toBe('35.0');
    expect(result.querySelector('[data-stat="ttft-a"]')?.textContent).toBe('300 ms');
    expect(result.querySelector('[data-stat="ttft-b"]')?.textContent).toBe('12 ms');
    expect(result.querySelector('[data-stat="reuse-a"]')?.textContent).toBe('reused 0 of 5 prompt tokens');
    expect(result.querySelector('[data-stat="reuse-b"]')?.textContent).toBe('reused 4 of 5 prompt tokens');
    expect(within(result).getByRole('region', { name: 'Text under streaming (B)' }).textContent).toBe('t10t11t99t13');

    await waitFor(() => expect(useInspectorStore.getState().compare.running).toBe(false));
    // No reloads: the user's model stays as loaded.
    expect(api.sent.filter((r) => r.kind === 'load')).toHaveLength(loadsBefore);
    expect(useEngineStore.getState().model?.policy).toBe('full');
  });

  it('compare says when the policy switch dropped the cache', async () => {
    setup();
    const model = await services().engine.load({ modelPath: '/m.gguf' });
    act(() => useEngineStore.getState().setModel(model));
    fireEvent.click(screen.getByRole('button', { name: 'Compare' }));
    for (const [index, cache] of [cacheReport(0, 3), cacheReport(0, 3, { dropped: 'policySwitch' })].entries()) {
      await waitFor(() => expect(api.generations()).toHaveLength(index + 1));
      const g = api.lastGeneration();
      act(() => {
        api.emit({ kind: 'prompt', requestId: g.requestId, ids: [1, 2, 3], contextLength: 2048 });
        api.done(g.requestId, { completionTokens: 0, promptTokens: 3, cache });
      });
    }
    const result = await screen.findByLabelText('Compare result');
    expect(result.querySelector('[data-stat="reuse-b"]')?.textContent).toBe('reused 0 of 3 prompt tokens · cache dropped: the policy switch needed a new cache');
    expect(api.generations()[1]!.params).toMatchObject({ policy: 'infinigen' });
  });

  it('compare reports a refused policy and runs nothing after it', async () => {
    setup();
    const model = await services().engine.load({ modelPath: '/m.gguf' });
    act(() => useEngineStore.getState().setModel(model));
    act(() => useInspectorStore.getState().editCompare({ policyA: 'h2o' }));
    fireEvent.click(screen.getByRole('button', { name: 'Compare' }));
    await waitFor(() => expect(api.generations()).toHaveLength(1));
    const refused = api.lastGeneration();
    expect(refused.params).toMatchObject({ policy: 'h2o' });
    act(() => api.emit({ kind: 'error', requestId: refused.requestId, error: { code: 'BAD_ARGUMENT', message: "policy 'h2o' cannot run under the loaded pool budget", details: {} } }));
    expect((await screen.findByRole('alert')).textContent).toContain("policy 'h2o' cannot run under the loaded pool budget");
    await waitFor(() => expect(useInspectorStore.getState().compare.running).toBe(false));
    expect(api.generations()).toHaveLength(1);
    expect(api.sent.filter((r) => r.kind === 'load')).toHaveLength(1);
  });

  it('"Use the Writer\'s draft" puts the text before the Writer\'s cursor in the prompt', async () => {
    setup();
    act(() => {
      useWriterStore.setState({ doc: { id: 'd-x', title: 't', text: 'The harbour\n\nat dawn. Gulls.', updatedAt: 1 }, selection: { start: 21, end: 21 } });
    });
    fireEvent.click(screen.getByRole('button', { name: "Use the Writer's draft" }));
    // Line breaks kept: they are tokens of the prefix the engine may hold.
    expect(screen.getByLabelText('Compare prompt')).toHaveProperty('value', 'The harbour\n\nat dawn.');
    expect(useInspectorStore.getState().compare.prompt).toBe('The harbour\n\nat dawn.');
  });
});
