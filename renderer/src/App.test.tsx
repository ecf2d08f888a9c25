import { act, fireEvent, render, screen, waitFor } from '@testing-library/react';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { App } from './App.tsx';
import { resetEngineStore, useEngineStore } from './engine/store.ts';
import { resetModelsStore } from './features/models/store.ts';
import { resetSettingsStore } from './features/settings/store.ts';
import { resetWriterStore } from './features/writer/store.ts';
import { installServices, uninstallServices } from './services.ts';
import { resetShellStore } from './shell/store.ts';
import { defaultSettings, FakeApi, MODEL, timeoutFrames } from './test/fake-api.ts';

let api: FakeApi;

beforeEach(() => {
  resetEngineStore();
  resetSettingsStore();
  resetWriterStore();
  resetModelsStore();
  resetShellStore();
  api = new FakeApi();
  api.on('documents.list', () => [{ id: 'd-1', title: 'Draft', updatedAt: 1, words: 2 }]);
  api.on('documents.get', () => ({ id: 'd-1', title: 'Draft', text: 'My draft', updatedAt: 1 }));
  installServices(api, { schedule: timeoutFrames });
});

afterEach(() => uninstallServices());

describe('app shell', () => {
  it('navigates between the five sections', async () => {
    render(<App />);
    const nav = screen.getByRole('navigation', { name: 'Sections' });
    expect([...nav.querySelectorAll('button')].map((b) => b.textContent)).toEqual(['Writer', 'Summarise', 'Models', 'Inspector', 'Settings']);
    await screen.findByLabelText('Document text');
    fireEvent.click(screen.getByRole('button', { name: 'Summarise' }));
    expect(screen.getByLabelText('Text to summarise')).toBeTruthy();
    fireEvent.click(screen.getByRole('button', { name: 'Inspector' }));
    expect(screen.getByRole('heading', { name: 'Cache inspector' })).toBeTruthy();
    fireEvent.click(screen.getByRole('button', { name: 'Models' }));
    expect(screen.getByRole('heading', { name: 'Models' })).toBeTruthy();
    fireEvent.click(screen.getByRole('button', { name: 'Settings' }));
    expect(await screen.findByLabelText('Policy')).toBeTruthy();
  });

  it('applies the saved theme to <html>', async () => {
    api.on('settings.get', () => ({ settings: { ...defaultSettings(), theme: 'dark' }, warning: null }));
    render(<App />);
    await waitFor(() => expect(document.documentElement.dataset.theme).toBe('dark'));
  });

  it('shows a crash with its reason and a Restart button; the draft stays', async () => {
    render(<App />);
    const editor = (await screen.findByLabelText('Document text')) as HTMLTextAreaElement;
    await waitFor(() => expect(editor.value).toBe('My draft'));
    fireEvent.change(editor, { target: { value: 'My draft, edited' } });
    act(() => api.setStatus({ state: 'crashed', reason: 'oom', message: 'the engine used 31 GiB and was stopped', willRestart: false }));
    const alert = screen.getByRole('alert');
    expect(alert.textContent).toContain('The engine ran out of memory');
    expect(alert.textContent).toContain('the engine used 31 GiB and was stopped');
    expect(alert.textContent).toContain('Your drafts are safe');
    expect((screen.getByLabelText('Document text') as HTMLTextAreaElement).value).toBe('My draft, edited');
    fireEvent.click(screen.getByRole('button', { name: 'Restart engine' }));
    await waitFor(() => expect(api.restartEngine).toHaveBeenCalledTimes(1));
    await waitFor(() => expect(screen.queryByRole('alert')).toBeNull());
    expect((screen.getByLabelText('Document text') as HTMLTextAreaElement).value).toBe('My draft, edited');
  });
});

describe('a model the server already has', () => {
  it('shows as loaded without pressing Load (browser mode announces it on connect)', () => {
    const api = new FakeApi();
    installServices(api);
    api.emit({ kind: 'loaded', requestId: 'server:current-model', model: { ...MODEL, path: '/models/already.gguf' } });
    expect(useEngineStore.getState().model?.path).toBe('/models/already.gguf');
  });
});
