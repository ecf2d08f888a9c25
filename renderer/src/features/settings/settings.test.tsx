import { fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { installServices, uninstallServices } from '../../services.ts';
import { defaultSettings, FakeApi, timeoutFrames } from '../../test/fake-api.ts';
import { SettingsView } from './SettingsView.tsx';
import { resetSnapshotsStore } from './snapshots-store.ts';
import { resetSettingsStore, useSettingsStore } from './store.ts';

let api: FakeApi;

beforeEach(() => {
  resetSettingsStore();
  resetSnapshotsStore();
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

describe('settings: document snapshots', () => {
  const MIB = 1024 * 1024;
  const panel = () => screen.getByRole('region', { name: 'Document snapshots' });
  const figure = (name: string) => panel().querySelector(`[data-stat="${name}"]`)?.textContent;

  it('shows the engine folder figures: count, bytes and the cap', async () => {
    api.snapshotFolder!.files = [{ name: 'd-a', bytes: 3 * MIB }, { name: 'd-b', bytes: MIB / 2 }];
    render(<SettingsView />);
    await waitFor(() => expect(figure('snapshot-count')).toBe('2'));
    expect(figure('snapshot-bytes')).toBe('3.50 MiB');
    expect(figure('snapshot-cap')).toBe('2.00 GiB');
    expect(screen.getByLabelText('Snapshot size cap (MiB)')).toHaveProperty('value', '2048');
    expect(panel().textContent).toContain('Kept in /data/kv-snapshots');
    // Asked of the engine, never with a path.
    expect(api.sent.filter((r) => r.kind === 'snapshots')).toEqual([{ kind: 'snapshots', requestId: expect.any(String), action: 'stats' }]);
  });

  it('Save cap sends the cap in bytes; the engine drops the oldest beyond it and the figures follow', async () => {
    api.snapshotFolder!.files = [{ name: 'old', bytes: 6 * MIB }, { name: 'new', bytes: 3 * MIB }];
    render(<SettingsView />);
    await waitFor(() => expect(figure('snapshot-count')).toBe('2'));
    expect(screen.getByRole('button', { name: 'Save cap' })).toHaveProperty('disabled', true); // unchanged
    fireEvent.change(screen.getByLabelText('Snapshot size cap (MiB)'), { target: { value: '8' } });
    fireEvent.click(screen.getByRole('button', { name: 'Save cap' }));
    await waitFor(() => expect(figure('snapshot-count')).toBe('1'));
    expect(api.sent.filter((r) => r.kind === 'snapshots').at(-1)).toMatchObject({ action: 'setCap', capBytes: 8 * MIB });
    expect(figure('snapshot-bytes')).toBe('3.00 MiB');
    expect(figure('snapshot-cap')).toBe('8.00 MiB');
    expect(screen.getByLabelText('Snapshot status').textContent).toBe('Cap saved.');
  });

  it('refuses a fractional or negative cap before asking the engine', async () => {
    render(<SettingsView />);
    await waitFor(() => expect(figure('snapshot-count')).toBe('0'));
    fireEvent.change(screen.getByLabelText('Snapshot size cap (MiB)'), { target: { value: '1.5' } });
    expect(within(panel()).getByRole('alert').textContent).toBe('the cap is a whole number of MiB, 0 or more');
    expect(screen.getByRole('button', { name: 'Save cap' })).toHaveProperty('disabled', true);
    fireEvent.change(screen.getByLabelText('Snapshot size cap (MiB)'), { target: { value: '-1' } });
    expect(screen.getByRole('button', { name: 'Save cap' })).toHaveProperty('disabled', true);
    expect(api.sent.filter((r) => r.kind === 'snapshots' && r.action === 'setCap')).toEqual([]);
  });

  it('Clear deletes them all (disabled when there are none)', async () => {
    api.snapshotFolder!.files = [{ name: 'd-a', bytes: 1000 }];
    render(<SettingsView />);
    await waitFor(() => expect(figure('snapshot-count')).toBe('1'));
    fireEvent.click(screen.getByRole('button', { name: 'Clear snapshots' }));
    await waitFor(() => expect(figure('snapshot-count')).toBe('0'));
    expect(figure('snapshot-bytes')).toBe('0 B');
    expect(api.snapshotFolder!.files).toEqual([]);
    expect(screen.getByLabelText('Snapshot status').textContent).toBe('Snapshots cleared.');
    expect(screen.getByRole('button', { name: 'Clear snapshots' })).toHaveProperty('disabled', true);
  });

  it('says so when the engine keeps none, and shows an engine refusal', async () => {
    api.snapshotFolder = null;
    const { unmount } = render(<SettingsView />);
    expect(await within(await screen.findByRole('region', { name: 'Document snapshots' })).findByText('This engine keeps no document snapshots.')).toBeTruthy();
    expect(screen.queryByRole('button', { name: 'Clear snapshots' })).toBeNull();
    unmount();

    resetSnapshotsStore();
    api.snapshotError = { code: 'NATIVE_INTERNAL', message: 'internal error: EACCES' };
    render(<SettingsView />);
    await waitFor(() => expect(screen.getByLabelText('Snapshot status').textContent).toBe('Could not update the snapshots: internal error: EACCES'));
  });
});
