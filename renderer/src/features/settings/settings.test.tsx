import { fireEvent, render, screen, waitFor } from '@testing-library/react';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { installServices, uninstallServices } from '../../services.ts';
import { defaultSettings, FakeApi, timeoutFrames } from '../../test/fake-api.ts';
import { SettingsView } from './SettingsView.tsx';
import { resetSettingsStore, useSettingsStore } from './store.ts';

let api: FakeApi;

beforeEach(() => {
  resetSettingsStore();
  api = new FakeApi();
  installServices(api, { schedule: timeoutFrames });
});

afterEach(() => uninstallServices());

describe('settings', () => {
  it('saving sends the edited settings', async () => {
    render(<SettingsView />);
    await screen.findByLabelText('Policy');
    fireEvent.change(screen.getByLabelText('Policy'), { target: { value: 'infinigen' } });
    fireEvent.change(screen.getByLabelText('Alpha (α)'), { target: { value: '4' } });
    fireEvent.change(screen.getByLabelText('Partial ratio (r)'), { target: { value: '0.2' } });
    fireEvent.change(screen.getByLabelText('Fetch cap'), { target: { value: '0.05' } });
    fireEvent.change(screen.getByLabelText('Dense layers'), { target: { value: '3' } });
    fireEvent.change(screen.getByLabelText('Pool budget (MiB)'), { target: { value: '512' } });
    fireEvent.change(screen.getByLabelText('Device'), { target: { value: 'auto' } });
    fireEvent.change(screen.getByLabelText('Threads'), { target: { value: '8' } });
    fireEvent.change(screen.getByLabelText('Context length'), { target: { value: '8192' } });
    fireEvent.change(screen.getByLabelText('Temperature'), { target: { value: '0' } });
    fireEvent.change(screen.getByLabelText('Theme'), { target: { value: 'dark' } });
    fireEvent.click(screen.getByLabelText('Use the remote endpoint'));
    fireEvent.change(screen.getByLabelText('Endpoint URL'), { target: { value: 'https://api.example.com/v1' } });
    fireEvent.change(screen.getByLabelText('API key'), { target: { value: 'sk-test' } });
    fireEvent.change(screen.getByLabelText('Remote model'), { target: { value: 'gpt-x' } });
    fireEvent.click(screen.getByRole('button', { name: 'Save settings' }));

    await waitFor(() => expect(api.calls('settings.save')).toHaveLength(1));
    const defaults = defaultSettings();
    expect(api.calls('settings.save')[0]?.settings).toEqual({
      ...defaults,
      policy: 'infinigen', alpha: 4, partialRatio: 0.2, fetchCap: 0.05, denseLayers: 3, poolBudgetBytes: 512 * 1024 * 1024, device: 'auto', threads: 8, contextLength: 8192,
      sampling: { ...defaults.sampling, temperature: 0 },
      theme: 'dark',
      remote: { enabled: true, baseUrl: 'https://api.example.com/v1', apiKey: 'sk-test', model: 'gpt-x' },
    });
    expect(await screen.findByText('Saved.')).toBeTruthy();
    expect(useSettingsStore.getState().saved?.theme).toBe('dark');
  });

  it('blocks saving a value out of range and says why', async () => {
    render(<SettingsView />);
    await screen.findByLabelText('Policy');
    fireEvent.change(screen.getByLabelText('Top-p'), { target: { value: '1.5' } });
    expect(screen.getByText('top-p is in (0, 1]')).toBeTruthy();
    expect(screen.getByRole('button', { name: 'Save settings' })).toHaveProperty('disabled', true);
    expect(api.calls('settings.save')).toHaveLength(0);
  });

  it('shows the host refusing a save', async () => {
    api.on('settings.save', () => {
      throw Object.assign(new Error('bad app request: alpha: too big'), { code: 'PROTOCOL_BAD_MESSAGE' });
    });
    render(<SettingsView />);
    await screen.findByLabelText('Policy');
    fireEvent.change(screen.getByLabelText('Alpha (α)'), { target: { value: '6' } });
    fireEvent.click(screen.getByRole('button', { name: 'Save settings' }));
    expect(await screen.findByText('Not saved: bad app request: alpha: too big')).toBeTruthy();
  });

  it('revert restores the saved values', async () => {
    render(<SettingsView />);
    await screen.findByLabelText('Policy');
    fireEvent.change(screen.getByLabelText('Threads'), { target: { value: '3' } });
    fireEvent.click(screen.getByRole('button', { name: 'Revert' }));
    expect(screen.getByLabelText('Threads')).toHaveProperty('value', '0');
  });
});
