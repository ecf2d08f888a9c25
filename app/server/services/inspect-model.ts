// models.inspect for browser mode: the same report as `longhand inspect --json`. Kept apart from
// app-services.ts because it imports app/engine, which the Electron main process must not.
import { inspectModel } from '../../engine/model/inspect.ts';
import { loadModel } from '../../engine/model/load-model.ts';

/** models.scan's header-only look at each model (probe.ts): the Library marks what would be refused. */
export { probeModel as probeModelFile } from '../../engine/model/probe.ts';

export async function inspectModelFile(path: string, contextTokens: number | undefined): Promise<Record<string, unknown>> {
  const model = await loadModel(path);
  try {
    return { ...inspectModel(model, contextTokens === undefined ? {} : { contextTokens }) };
  } finally {
    model.close();
  }
}
