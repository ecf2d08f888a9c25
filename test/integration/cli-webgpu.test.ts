// `longhand generate --device webgpu` end to end (issue 33): the real bin, engine host and model, on
// the adapter test/support/webgpu.ts finds (SwiftShader where there is no GPU), against --device cpu:
// the same greedy text and ids. The load says which adapter it runs on and why the KV rows are fp32
// (SwiftShader has no float16), and --device auto refuses the software adapter, saying why. A session
// saved on WebGPU and loaded into a new WebGPU process is reused as a prefix, with --device cpu's text.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { haveSharedModel, PROJECT_ROOT, STORIES_260K } from '../support/models.ts';
import { webgpuForTests } from '../support/webgpu.ts';

const BIN = join(PROJECT_ROOT, 'bin', 'longhand.mjs');
const TOKENS = 60;

const setup = webgpuForTests();
const have = setup !== undefined && haveSharedModel();

describe.runIf(have)(`longhand generate --device webgpu (${setup?.source ?? 'no adapter'})`, () => {
  const longhand = (env: NodeJS.ProcessEnv, ...args: string[]) => spawnSync(process.execPath, [BIN, ...args], { cwd: PROJECT_ROOT, env, encoding: 'utf8', timeout: 300_000 });
  const prompt = ['--model', STORIES_260K, '--prompt', 'Once upon a time', '--max-tokens', String(TOKENS), '--temperature', '0', '--json'];

  it(`prints the greedy text of --device cpu on stories260K (${TOKENS} tokens)`, () => {
    const cpu = longhand(process.env, 'generate', ...prompt, '--device', 'cpu');
    expect(cpu.status, cpu.stderr).toBe(0);
    const gpu = longhand(setup!.env, 'generate', ...prompt, '--device', 'webgpu');
    expect(gpu.status, gpu.stderr).toBe(0);
    const [a, b] = [JSON.parse(cpu.stdout), JSON.parse(gpu.stdout)];
    expect(b.tokenIds).toEqual(a.tokenIds);
    expect(b.text).toBe(a.text);
    expect(b.dense).toMatch(/onnxruntime \(the webgpu provider runs onnxruntime graphs\)/);
    const adapter = setup!.adapter!;
    expect(gpu.stderr).toContain(`device webgpu: ${adapter.name}`);
    if (!adapter.float16) expect(gpu.stderr).toMatch(/the adapter has no float16, so the KV rows are fp32/);
  });

  it('a session saved on WebGPU, loaded by another WebGPU process: its prefix is reused and the text is --device cpu\'s (fp32 KV)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'longhand-webgpu-session-'));
    try {
      const file = join(dir, 'story.lhkv');
      const first = ['--model', STORIES_260K, '--prompt', 'Once upon a time', '--max-tokens', '20', '--temperature', '0', '--kv-type', 'fp32', '--json'];
      const saved = longhand(setup!.env, 'generate', ...first, '--device', 'webgpu', '--save-session', file);
      expect(saved.status, saved.stderr).toBe(0);
      const a = JSON.parse(saved.stdout);
      expect(a.savedSession.tokens).toBe(a.promptIds.length + 19); // the last token is sampled, not yet appended
      // the second prompt continues the first generation's text
      const next = ['--model', STORIES_260K, '--prompt', `Once upon a time${a.text}`, '--max-tokens', '20', '--temperature', '0', '--kv-type', 'fp32', '--json'];
      const resumed = longhand(setup!.env, 'generate', ...next, '--device', 'webgpu', '--load-session', file);
      expect(resumed.status, resumed.stderr).toBe(0);
      const b = JSON.parse(resumed.stdout);
      expect(b.cache.reusedTokens).toBeGreaterThan(a.promptIds.length);
      const cpu = longhand(process.env, 'generate', ...next, '--device', 'cpu');
      expect(cpu.status, cpu.stderr).toBe(0);
      expect(b.tokenIds).toEqual(JSON.parse(cpu.stdout).tokenIds);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('--device auto stays on the CPU where the only adapter is a software one, and says why', () => {
    const auto = longhand(setup!.env, 'generate', '--model', STORIES_260K, '--prompt', 'Once upon a time', '--max-tokens', '5', '--temperature', '0', '--device', 'auto');
    expect(auto.status, auto.stderr).toBe(0);
    if (setup!.adapter?.type === 4) {
      expect(auto.stderr).toMatch(/device auto: WebGPU adapter .* is a software rasteriser, slower than the CPU path .*; using cpu/);
      expect(auto.stderr).toMatch(/dense native/);
    }
  });
});
