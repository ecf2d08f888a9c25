// Files of architectures Longhand does not run are refused with MODEL_UNSUPPORTED_ARCHITECTURE, by
// the loaders and, from the header alone, by the probe the Models view shows before loading: the
// message names the architecture and lists what Longhand runs, from the loaders' own tables.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { writePhi3Gguf, writePhi3HfFolder } from '../../../test/fixtures/families/phi3.ts';
import { gv, writeGguf, type GgufValue } from '../../../test/fixtures/gguf-writer.ts';
import { createAppServices } from '../../server/services/app-services.ts';
import { probeModelFile } from '../../server/services/inspect-model.ts';
import { SUPPORTED_GGUF_ARCHITECTURES } from './gguf/gguf-model.ts';
import { SUPPORTED_ARCHITECTURES } from './hf/config.ts';
import { loadModel } from './load-model.ts';
import { ggufArchitecture, probeModel } from './probe.ts';

const root = mkdtempSync(join(tmpdir(), 'longhand-probe-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A GGUF as llama.cpp's converter starts one for `arch` (general.architecture first), with a vocabulary after it and one tensor. */
function foreignGguf(path: string, arch: string, extra: readonly (readonly [string, GgufValue])[] = []): string {
  writeGguf(path, {
    metadata: [
      ['general.architecture', gv.str(arch)],
      ['general.name', gv.str(`${arch} test`)],
      [`${arch}.block_count`, gv.u32(2)],
      [`${arch}.embedding_length`, gv.u32(64)],
      ...extra,
      ['tokenizer.ggml.model', gv.str('gpt2')],
      ['tokenizer.ggml.tokens', gv.arr('string', Array.from({ length: 300 }, (_, i) => `t${i}`))],
    ],
    tensors: [{ name: 'token_embd.weight', type: 'F32', ne: [64, 300], data: new Uint8Array(64 * 300 * 4) }],
  });
  return path;
}

function hfFolder(dir: string, architectures: unknown): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ architectures, model_type: 'x', hidden_size: 64 }));
  writeFileSync(join(dir, 'model.safetensors'), new Uint8Array(16));
  return dir;
}

async function loadError(path: string): Promise<{ code: string; message: string }> {
  try {
    (await loadModel(path)).close();
  } catch (error) {
    return error as { code: string; message: string };
  }
  throw new Error(`${path} loaded`);
}

describe('architectures Longhand does not run', () => {
  it.each([
    ['mamba', []],
    ['deepseek2', [['deepseek2.expert_count', gv.u32(64)]]],
    ['qwen2moe', [['qwen2moe.expert_count', gv.u32(60)]]],
  ] as const)('a GGUF of %s: the probe and the loader refuse it with one message naming it and every architecture Longhand runs', async (arch, extra) => {
    const path = foreignGguf(join(root, `${arch}.gguf`), arch, extra);
    const probe = await probeModel(path);
    expect(probe.architecture).toBe(arch);
    expect(probe.refusal).toContain(`"${arch}"`);
    for (const runs of SUPPORTED_GGUF_ARCHITECTURES) expect(probe.refusal).toContain(runs);
    expect(SUPPORTED_GGUF_ARCHITECTURES).toContain('phi3');
    const error = await loadError(path);
    expect(error.code).toBe('MODEL_UNSUPPORTED_ARCHITECTURE');
    expect(error.message).toContain(probe.refusal);
  });

  it('a Hugging Face folder of an unknown class: refused by name, listing the classes Longhand runs', async () => {
    const dir = hfFolder(join(root, 'mamba-hf'), ['MambaForCausalLM']);
    const probe = await probeModel(dir);
    expect(probe).toMatchObject({ architecture: 'MambaForCausalLM' });
    for (const runs of Object.keys(SUPPORTED_ARCHITECTURES)) expect(probe.refusal).toContain(runs);
    expect(probe.refusal).toContain('Phi3ForCausalLM');
    const error = await loadError(dir);
    expect(error.code).toBe('MODEL_UNSUPPORTED_ARCHITECTURE');
    expect(error.message).toContain(probe.refusal);
  });

  it('Phi-3 files (GGUF phi3, Phi3ForCausalLM) are not refused', async () => {
    const small = { dim: 64, layers: 1, heads: 2, kvHeads: 2, ffn: 64, context: 256, seed: 3 };
    const gguf = join(root, 'phi3.gguf');
    writePhi3Gguf(gguf, { ...small, type: 'F32' });
    expect(await probeModel(gguf)).toEqual({ architecture: 'phi3', refusal: null });
    const folder = join(root, 'phi3-hf');
    writePhi3HfFolder(folder, { ...small, dtype: 'F32' });
    expect(await probeModel(folder)).toEqual({ architecture: 'Phi3ForCausalLM', refusal: null });
  });

  it('what the header does not say is unknown, not refused', async () => {
    writeFileSync(join(root, 'junk.gguf'), 'not a gguf at all');
    expect(await probeModel(join(root, 'junk.gguf'))).toEqual({ architecture: null, refusal: null });
    expect(await probeModel(join(root, 'missing.gguf'))).toEqual({ architecture: null, refusal: null });
    expect(await probeModel(hfFolder(join(root, 'no-arch'), 'Llama'))).toEqual({ architecture: null, refusal: null });
    // general.architecture after a key whose array runs past the bytes read
    const head = new Uint8Array(64);
    head.set([0x47, 0x47, 0x55, 0x46, 3, 0, 0, 0]);
    expect(ggufArchitecture(head)).toBeNull();
  });

  it('models.scan marks each library model with its architecture and the refusal, before anything loads', async () => {
    const home = join(root, 'home');
    const lmstudio = join(home, '.lmstudio', 'models', 'someone');
    mkdirSync(lmstudio, { recursive: true });
    foreignGguf(join(lmstudio, 'falcon-mamba.gguf'), 'mamba');
    writePhi3Gguf(join(lmstudio, 'phi-3-mini.gguf'), { dim: 64, layers: 1, heads: 2, kvHeads: 2, ffn: 64, context: 256, seed: 3, type: 'F32' });
    const services = createAppServices({ dataDir: join(root, 'data'), home, env: {}, probe: probeModelFile });
    try {
      const entries = await services.answer({ kind: 'models.scan' });
      const mamba = entries.find((e) => e.name.endsWith('falcon-mamba.gguf'));
      const phi = entries.find((e) => e.name.endsWith('phi-3-mini.gguf'));
      expect(mamba).toMatchObject({ architecture: 'mamba', refusal: expect.stringContaining('"mamba" is not supported (Longhand runs') });
      expect(phi).toMatchObject({ architecture: 'phi3' });
      expect(phi).not.toHaveProperty('refusal');
    } finally {
      await services.close();
    }
  });
});
