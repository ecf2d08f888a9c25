// Outputs kept on the device (EngineSessionOptions.keepOnDevice, DeviceTensor): what lets the dense
// stages hand the hidden state from one layer graph to the next without a trip through the host on
// WebGPU (issue 33). Run in a child with the adapter's environment (test/support/webgpu.ts): chaining
// a device output into the next run gives the CPU's values, the output is a DeviceTensor, and reading
// it on the host is a typed error (onnxruntime-node 1.30 would abort the process on getData()).
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../../test/support/models.ts';
import { webgpuForTests } from '../../../test/support/webgpu.ts';
import { createSession } from './session.ts';
import { GraphBuilder } from './graph-builder.ts';

const CHILD = `
import { createSession, DeviceTensor } from './app/engine/onnx/session.ts';
import { GraphBuilder } from './app/engine/onnx/graph-builder.ts';
const g = new GraphBuilder('double');
const x = g.input('h', 'float32', [1, 4]);
g.op('Add', [x, x], {}, { name: 'add', output: 'h_next' });
g.output('h_next', 'float32', [1, 4]);
const last = new GraphBuilder('plus_one');
const y = last.input('h', 'float32', [1, 4]);
last.op('Add', [y, last.initializer('one', { elemType: 'float32', dims: [1], data: Float32Array.of(1) })], {}, { name: 'add', output: 'out' });
last.output('out', 'float32', [1, 4]);
const keep = await createSession(g.toModel(), { executionProviders: ['webgpu'], keepOnDevice: ['h_next'] });
const host = await createSession(last.toModel(), { executionProviders: ['webgpu'] });
const a = (await keep.run({ h: { elemType: 'float32', dims: [1, 4], data: Float32Array.of(1, 2, 3, 4) } })).h_next;
const b = (await keep.run({ h: a })).h_next;
const out = (await host.run({ h: b })).out;
let read = null;
try { void b.data; } catch (e) { read = e.code; }
const result = { aOnDevice: a instanceof DeviceTensor, bOnDevice: b instanceof DeviceTensor, dims: b.dims, out: Array.from(out.data), read };
a.dispose(); b.dispose(); a.dispose();
await keep.release(); await host.release();
console.log(JSON.stringify(result));
`;

describe('outputs kept on the device', () => {
  it('on the CPU provider keepOnDevice changes nothing: host arrays come back', async () => {
    const g = new GraphBuilder('double');
    const x = g.input('h', 'float32', [1, 2]);
    g.op('Add', [x, x], {}, { name: 'add', output: 'h_next' });
    g.output('h_next', 'float32', [1, 2]);
    const s = await createSession(g.toModel(), { keepOnDevice: ['h_next'] });
    const out = (await s.run({ h: { elemType: 'float32', dims: [1, 2], data: Float32Array.of(1, 2) } })).h_next!;
    expect(Array.from(out.data as Float32Array)).toEqual([2, 4]);
    await s.release();
  });

  const setup = webgpuForTests();
  it.skipIf(!setup)(`on WebGPU (${setup?.source ?? 'no adapter'}): chained device outputs compute what the host would; reading one is ONNX_SESSION_FAILED, not an abort`, () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', CHILD], { cwd: PROJECT_ROOT, env: setup!.env, encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    const got = JSON.parse(r.stdout.trim().split('\n').pop()!) as { aOnDevice: boolean; bOnDevice: boolean; dims: number[]; out: number[]; read: string | null };
    expect(got).toEqual({ aOnDevice: true, bOnDevice: true, dims: [1, 4], out: [5, 9, 13, 17], read: 'ONNX_SESSION_FAILED' });
  });
});
