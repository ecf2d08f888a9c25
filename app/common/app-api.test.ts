import { describe, expect, it } from 'vitest';
import { parseAppRequest, SettingsSchema } from './app-api.ts';

describe('app API contract', () => {
  it('fills settings defaults', () => {
    const settings = SettingsSchema.parse({});
    expect(settings).toMatchObject({ policy: 'full', alpha: 5, partialRatio: 0.3, fetchCap: 0.1, denseLayers: 2, kvType: 'fp16', theme: 'system' });
    expect(settings.remote).toEqual({ enabled: false, baseUrl: '', apiKey: '', model: '' });
    expect(settings.sampling.temperature).toBe(0.8);
  });

  it.each([
    [{ kind: 'documents.get', id: '../etc/passwd' }, /id/],
    [{ kind: 'downloads.start', url: 'file:///etc/passwd' }, /url/],
    [{ kind: 'downloads.start', url: 'https://example.invalid/x', sha256: 'zz' }, /sha256/],
    [{ kind: 'settings.save', settings: { policy: 'magic' } }, /policy/],
    [{ kind: 'fs.read', path: '/' }, /kind/],
  ])('rejects %j', (message, pattern) => {
    expect(() => parseAppRequest(message)).toThrow(pattern);
  });
});
