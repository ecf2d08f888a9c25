import { act, fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { DownloadState } from '../../../../app/common/app-api.ts';
import { resetEngineStore, useEngineStore } from '../../engine/store.ts';
import { installServices, uninstallServices } from '../../services.ts';
import { defaultSettings, FakeApi, MODEL, timeoutFrames } from '../../test/fake-api.ts';
import { resetSettingsStore, useSettingsStore } from '../settings/store.ts';
import { MemoryBar } from './MemoryBar.tsx';
import { readMemory } from './memory.ts';
import { ModelsView } from './ModelsView.tsx';
import { resetModelsStore, useModelsStore } from './store.ts';

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

function report(freeBytes: number) {
  return {
    path: '/models/a.gguf', format: 'gguf', architecture: 'llama', layers: 22, heads: 32, kvHeads: 4, trainedContext: 2048, chatTemplate: true,
    memory: { contextTokens: 4096, kvType: 'fp16', weightsBytes: 2 * GiB, kvFullBytes: 512 * MiB, partialKeyBytes: 64 * MiB, stagedKvBytes: 32 * MiB, freeBytes, totalBytes: 16 * GiB, maxContextThatFits: 1024 },
  };
}

let api: FakeApi;

beforeEach(async () => {
  resetEngineStore();
  resetSettingsStore();
  resetModelsStore();
  api = new FakeApi();
  api.on('models.scan', () => [{ path: '/models/a.gguf', name: 'a.gguf', source: 'lmstudio', format: 'gguf', bytes: 1.5 * GiB }]);
  api.on('models.inspect', (r) => ({ ...report(8 * GiB), path: r.path }));
  installServices(api, { schedule: timeoutFrames });
  await useSettingsStore.getState().load();
});

afterEach(() => uninstallServices());

describe('memory bar', () => {
  it('warns when the total does not fit in free memory', () => {
    const memory = readMemory(report(2 * GiB))!;
    render(<MemoryBar memory={memory} />);
    const alert = screen.getByRole('alert');
    expect(alert.textContent).toContain('Will not fit');
    expect(alert.textContent).toContain('2.00 GiB is free');
    expect(alert.textContent).toContain('1,024 tokens');
  });

  it('says it fits (and shows no warning) when the total is below free memory', () => {
    render(<MemoryBar memory={readMemory(report(8 * GiB))!} />);
    expect(screen.queryByRole('alert')).toBeNull();
    expect(screen.getByText(/fits in the 8.00 GiB free/)).toBeTruthy();
    // one segment per part: weights, KV, partial keys, staged rows
    expect(document.querySelectorAll('.memory-seg')).toHaveLength(4);
    expect(screen.getByText(/KV cache at 4,096 tokens: 512 MiB/)).toBeTruthy();
  });

  it('a model with sliding-window layers: their rings + checkpoints are their own segment, named with the layer pattern', () => {
    const r = report(8 * GiB);
    const kvLayers = [
      ...Array.from({ length: 5 }, (_, layer) => ({ layer, kind: 'window', window: 1024, slots: 1279, rowBytes: 10 * MiB, poolBytes: 11 * MiB, checkpointBytes: 8 * MiB })),
      { layer: 5, kind: 'global', slots: 4096, rowBytes: 422 * MiB, poolBytes: 430 * MiB, checkpointBytes: 0 },
    ];
    const memory = readMemory({ ...r, memory: { ...(r.memory as object), kvLayers } })!;
    expect(memory.kvWindowBytes).toBe(90 * MiB);
    expect(memory.layerKinds).toEqual({ window: 5, global: 1, windows: [1024] });
    render(<MemoryBar memory={memory} />);
    expect(document.querySelectorAll('.memory-seg')).toHaveLength(5);
    expect(screen.getByText(/KV cache at 4,096 tokens, 1 global layers: 422 MiB/)).toBeTruthy();
    expect(screen.getByText(/KV of 5 window layers \(window 1024: rings \+ checkpoints\): 90.0 MiB/)).toBeTruthy();
  });

  it('reads no figures from a report without a memory estimate', () => {
    expect(readMemory({ path: 'x' })).toBeNull();
    expect(readMemory({ memory: { weightsBytes: 'lots' } })).toBeNull();
  });
});

describe('models view', () => {
  it('lists scanned models with size and type, inspects the picked one and loads it', async () => {
    render(<ModelsView />);
    const library = await screen.findByRole('table');
    const row = within(library).getByText('a.gguf').closest('tr')!;
    expect(row.textContent).toContain('1.50 GiB');
    expect(row.textContent).toContain('gguf');
    fireEvent.click(within(library).getByText('a.gguf'));
    expect(screen.getByLabelText('Model path')).toHaveProperty('value', '/models/a.gguf');

    fireEvent.click(screen.getByRole('button', { name: 'Inspect' }));
    await screen.findByLabelText('Memory estimate');
    expect(api.calls('models.inspect')[0]).toEqual({ kind: 'models.inspect', path: '/models/a.gguf', contextTokens: 4096 });

    fireEvent.click(screen.getByRole('button', { name: 'Load' }));
    await screen.findByRole('region', { name: 'Loaded model' });
    expect(api.sent.find((r) => r.kind === 'load')).toMatchObject({ options: { modelPath: '/models/a.gguf', device: 'cpu', kvType: 'fp16', contextLength: 4096 } });
    expect(useEngineStore.getState().model?.path).toBe('/models/a.gguf');
    // The last model path is remembered.
    await waitFor(() => expect(api.calls('settings.save').at(-1)?.settings).toMatchObject({ lastModelPath: '/models/a.gguf' }));
  });

  it('shows the refusal of a model Longhand does not run before loading it, and keeps Load off', async () => {
    const refusal = 'architecture "mamba" is not supported (Longhand runs llama, qwen2, phi3)';
    api.on('models.scan', () => [
      { path: '/models/a.gguf', name: 'a.gguf', source: 'lmstudio', format: 'gguf', bytes: 1.5 * GiB, architecture: 'llama' },
      { path: '/models/m.gguf', name: 'falcon-mamba.gguf', source: 'lmstudio', format: 'gguf', bytes: 4 * GiB, architecture: 'mamba', refusal },
    ]);
    render(<ModelsView />);
    const library = await screen.findByRole('table');
    const row = within(library).getByText('falcon-mamba.gguf').closest('tr')!;
    expect(within(row).getByRole('note').textContent).toBe(`Not supported: ${refusal}`);
    expect(row.textContent).toContain('mamba');
    expect(within(within(library).getByText('a.gguf').closest('tr')!).queryByRole('note')).toBeNull();

    fireEvent.click(within(library).getByText('falcon-mamba.gguf'));
    expect(screen.getByRole('alert', { name: 'Unsupported model' }).textContent).toBe(`Longhand cannot run this model: ${refusal}`);
    expect(screen.getByRole('button', { name: 'Load' })).toHaveProperty('disabled', true);
    // a model it runs: no refusal, Load on
    fireEvent.click(within(library).getByText('a.gguf'));
    expect(screen.queryByRole('alert', { name: 'Unsupported model' })).toBeNull();
    expect(screen.getByRole('button', { name: 'Load' })).toHaveProperty('disabled', false);
  });

  it('starts from the last model path in settings, listed with its size', async () => {
    resetSettingsStore();
    api.on('settings.get', () => ({ settings: { ...defaultSettings(), lastModelPath: '/old/b.gguf' }, warning: null }));
    // as models.scan answers: the recent model first, with the file's size
    api.on('models.scan', () => [{ path: '/old/b.gguf', name: 'b.gguf', source: 'recent', format: 'gguf', bytes: 3 * GiB }]);
    await useSettingsStore.getState().load();
    render(<ModelsView />);
    await waitFor(() => expect(screen.getByLabelText('Model path')).toHaveProperty('value', '/old/b.gguf'));
    const row = (await within(await screen.findByRole('table')).findByText('b.gguf')).closest('tr')!;
    expect(row.textContent).toContain('3.00 GiB');
    expect(row.textContent).toContain('recent');
  });

  it('lists a model just loaded by path as recent with its real size, not "–"', async () => {
    // The server's models.scan: the scanned models plus settings.lastModelPath with its size.
    let lastModelPath = '';
    api.on('settings.save', (r) => {
      lastModelPath = (r.settings as { lastModelPath: string }).lastModelPath;
      return { settings: r.settings as ReturnType<typeof defaultSettings> };
    });
    api.on('models.scan', () => [
      ...(lastModelPath ? [{ path: lastModelPath, name: 'stories260K.gguf', source: 'recent' as const, format: 'gguf' as const, bytes: 1_185_376 }] : []),
      { path: '/models/a.gguf', name: 'a.gguf', source: 'lmstudio', format: 'gguf', bytes: 1.5 * GiB },
    ]);
    render(<ModelsView />);
    const library = await screen.findByRole('table');
    fireEvent.change(screen.getByLabelText('Model path'), { target: { value: '/shared/stories260K.gguf' } });
    fireEvent.click(screen.getByRole('button', { name: 'Load' }));
    await screen.findByRole('region', { name: 'Loaded model' });
    const row = (await within(library).findByText('stories260K.gguf')).closest('tr')!;
    expect(row.textContent).toContain('1.13 MiB');
    expect(row.textContent).toContain('recent');
    for (const cell of within(library).getAllByRole('cell')) expect(cell.textContent).not.toBe('–');
  });

  it('shows a load failure from the engine', async () => {
    api.autoLoad = false;
    render(<ModelsView />);
    fireEvent.change(screen.getByLabelText('Model path'), { target: { value: '/nope.gguf' } });
    fireEvent.click(screen.getByRole('button', { name: 'Load' }));
    const load = api.sent.find((r) => r.kind === 'load')!;
    act(() => api.emit({ kind: 'error', requestId: load.requestId, error: { code: 'MODEL_NOT_FOUND', message: '/nope.gguf: no such file', details: {} } }));
    expect((await screen.findByText(/Load failed/)).textContent).toContain('no such file');
  });

  it('shows the GPU adapter a WebGPU load runs on (software, no float16)', async () => {
    api.autoLoad = false;
    render(<ModelsView />);
    fireEvent.change(screen.getByLabelText('Model path'), { target: { value: '/models/a.gguf' } });
    fireEvent.click(screen.getByRole('button', { name: 'Load' }));
    const load = api.sent.find((r) => r.kind === 'load')!;
    const adapter = { name: 'SwiftShader Device (Subzero)', vendor: 'Google', software: true, float16: false, note: 'no float16: KV rows and graphs run in float32' };
    act(() => api.emit({ kind: 'loaded', requestId: load.requestId, model: { ...MODEL, device: 'webgpu', kvType: 'fp32', offload: true, adapter } }));
    const loaded = await screen.findByRole('region', { name: 'Loaded model' });
    expect(loaded.textContent).toContain('webgpu · ');
    expect(within(loaded).getByText('GPU adapter').nextElementSibling!.textContent).toBe('SwiftShader Device (Subzero) (Google; software; float16 no) — no float16: KV rows and graphs run in float32');
  });

  it('shows the load progress the engine reports, and takes the bar away once loaded', async () => {
    api.autoLoad = false;
    render(<ModelsView />);
    fireEvent.change(screen.getByLabelText('Model path'), { target: { value: '/models/a.gguf' } });
    expect(screen.queryByRole('progressbar')).toBeNull();
    fireEvent.click(screen.getByRole('button', { name: 'Load' }));
    // Before the first figure: an indeterminate bar.
    const waiting = await screen.findByRole('progressbar', { name: 'Loading model' });
    expect(waiting.hasAttribute('value')).toBe(false);
    const { requestId } = api.sent.find((r) => r.kind === 'load')!;

    act(() => api.emit({ kind: 'loadProgress', requestId, done: 2, total: 6 }));
    const bar = screen.getByRole('progressbar', { name: 'Loading model: 2 of 6 stages' });
    expect(bar).toHaveProperty('max', 6);
    expect(bar).toHaveProperty('value', 2);
    expect(useModelsStore.getState().loadProgress).toEqual({ done: 2, total: 6 });
    // Another request's figures and figures a bar cannot show leave it as it is.
    act(() => api.emit({ kind: 'loadProgress', requestId: 'load-someone-else', done: 5, total: 6 }));
    act(() => api.emit({ kind: 'loadProgress', requestId, done: 7, total: 6 }));
    expect(useModelsStore.getState().loadProgress).toEqual({ done: 2, total: 6 });

    act(() => api.emit({ kind: 'loadProgress', requestId, done: 6, total: 6 }));
    expect(screen.getByRole('progressbar', { name: 'Loading model: 6 of 6 stages' })).toHaveProperty('value', 6);
    act(() => api.emit({ kind: 'loaded', requestId, model: { ...MODEL, path: '/models/a.gguf' } }));
    await screen.findByRole('region', { name: 'Loaded model' });
    expect(screen.queryByRole('progressbar')).toBeNull();
    expect(useModelsStore.getState().loadProgress).toBeNull();
  });

  it('takes the progress bar away when the load fails', async () => {
    api.autoLoad = false;
    render(<ModelsView />);
    fireEvent.change(screen.getByLabelText('Model path'), { target: { value: '/models/a.gguf' } });
    fireEvent.click(screen.getByRole('button', { name: 'Load' }));
    const { requestId } = api.sent.find((r) => r.kind === 'load')!;
    act(() => api.emit({ kind: 'loadProgress', requestId, done: 3, total: 6 }));
    expect(screen.getByRole('progressbar', { name: 'Loading model: 3 of 6 stages' })).toBeTruthy();
    act(() => api.emit({ kind: 'error', requestId, error: { code: 'ENGINE_CRASHED', message: 'The engine crashed while loading a.gguf.', details: {} } }));
    await screen.findByText(/Load failed/);
    expect(screen.queryByRole('progressbar')).toBeNull();
    expect(useModelsStore.getState().loadProgress).toBeNull();
  });

  it('lists downloads with progress and pauses and resumes them', async () => {
    const running: DownloadState = { id: 'dl1', url: 'https://example.com/m.gguf', path: '/models/m.gguf', status: 'running', receivedBytes: 256 * MiB, totalBytes: 1024 * MiB, sha256: null, error: null };
    api.on('downloads.list', () => [running]);
    api.on('downloads.pause', (r) => ({ ...running, id: r.id, status: 'paused' }));
    api.on('downloads.resume', (r) => ({ ...running, id: r.id, status: 'running' }));
    render(<ModelsView />);
    const downloads = await screen.findByRole('region', { name: 'Downloads' });
    await within(downloads).findByText(/256 MiB of 1.00 GiB \(25%\)/);
    expect(within(downloads).getByLabelText('Progress of /models/m.gguf')).toHaveProperty('value', 0.25);
    fireEvent.click(within(downloads).getByRole('button', { name: 'Pause' }));
    await within(downloads).findByRole('button', { name: 'Resume' });
    expect(api.calls('downloads.pause')).toEqual([{ kind: 'downloads.pause', id: 'dl1' }]);
    fireEvent.click(within(downloads).getByRole('button', { name: 'Resume' }));
    await within(downloads).findByRole('button', { name: 'Pause' });
    expect(api.calls('downloads.resume')).toEqual([{ kind: 'downloads.resume', id: 'dl1' }]);
  });
});
