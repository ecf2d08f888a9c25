// The engine on WebGPU (issue 33): a load with device 'webgpu' on the adapter test/support/webgpu.ts
// finds, in a child with its environment (engine-webgpu.child.ts), against the same requests on the
// CPU in this process: policy switches per request (full → infinigen → streaming → full), prefix
// reuse of the sequence in memory, the model info's adapter, and the same greedy ids for every
// request. Both run fp32 KV (SwiftShader has no float16: the load says so and uses fp32).
import { describe, expect, it } from 'vitest';
import { haveSharedModel, loadReferenceRuns, REFERENCE_GREEDY, STORIES_260K } from '../../test/support/models.ts';
import { runWithWebgpu, webgpuForTests } from '../../test/support/webgpu.ts';
import { runEngineScript, type EngineScript, type EngineScriptResult } from './engine-webgpu.child.ts';

const setup = webgpuForTests();
const have = setup !== undefined && haveSharedModel() && haveSharedModel(REFERENCE_GREEDY);

describe.runIf(have)(`the engine with device webgpu (${setup?.source ?? 'no adapter'})`, () => {
  it('policy switches per request and prefix reuse give the CPU engine\'s ids; the model info names the adapter', async () => {
    const prompt = loadReferenceRuns(REFERENCE_GREEDY)[0]!.promptIds;
    const params = { maxTokens: 24, stopOnEos: false, sampling: { temperature: 0 } };
    const script = (device: 'cpu' | 'webgpu'): EngineScript => ({
      load: { modelPath: STORIES_260K, device, threads: 1, contextLength: 256, kvType: 'fp32', policy: 'full' },
      requests: [
        { prompt, params },
        { prompt, params: { ...params, policy: 'infinigen' } },
        { prompt, params: { ...params, policy: 'streaming', sparse: { fetchCap: 0.25 } } },
        { prompt, params: { ...params, policy: 'full' } },
      ],
    });
    const cpu = await runEngineScript(script('cpu'));
    // the second full request continues the first's text: its prompt is the first prompt and ids
    const gpuScript = script('webgpu');
    const cpuScript = script('cpu');
    const longer = [...prompt, ...cpu.runs[0]!.ids.slice(0, 10)];
    cpuScript.requests.push({ prompt: longer, params: { ...params, policy: 'full' } });
    gpuScript.requests.push({ prompt: longer, params: { ...params, policy: 'full' } });
    const want = await runEngineScript(cpuScript);
    const got = runWithWebgpu<EngineScriptResult>(setup!, 'app/engine/engine-webgpu.child.ts', [JSON.stringify(gpuScript)], 600_000);
    expect(got.info).toMatchObject({ device: 'webgpu', offload: true, kvType: 'fp32', dense: expect.stringMatching(/^onnxruntime/) });
    expect(got.info.adapter?.name).toBe(setup!.adapter!.name);
    expect(want.info.adapter).toBeUndefined();
    expect(got.runs.map((r) => r.policy)).toEqual(['full', 'infinigen', 'streaming', 'full', 'full']);
    got.runs.forEach((r, i) => expect(r.ids, `request ${i} (${r.policy})`).toEqual(want.runs[i]!.ids));
    expect(got.runs.map((r) => r.reusedTokens)).toEqual(want.runs.map((r) => r.reusedTokens));
    // requests after the first reuse tokens of the sequence in memory, as many as on the CPU
    expect(got.runs[4]!.reusedTokens).toBeGreaterThan(0);
    console.log(`engine on WebGPU: ${got.runs.map((r) => `${r.policy} ${r.ids.length} ids (reused ${r.reusedTokens})`).join(', ')}: the CPU engine's ids; adapter ${got.info.adapter!.name}`);
  }, 900_000);
});
