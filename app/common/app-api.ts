// What the window may ask of the app besides the engine: documents, settings, the model
// library and downloads. One contract, two carriers: Electron's preload (IPC to the main
// process) and browser mode (HTTP on 127.0.0.1 with the run's token). Both validate every
// request with these schemas before a handler runs; the renderer's window API type is derived
// from here, never written twice.
import { z } from 'zod';
import { DeviceSchema, KV_POLICIES, KvTypeSchema, SamplingSchema } from './protocol.ts';

// ── documents (autosaved drafts in the app's data folder) ──────────────────────────────────

export const DocumentIdSchema = z.string().regex(/^[a-z0-9-]{1,64}$/, 'a document id is 1-64 of a-z, 0-9 and -');

export const DocumentSchema = z.strictObject({
  id: DocumentIdSchema,
  title: z.string().max(200),
  text: z.string().max(20_000_000),
  updatedAt: z.number(), // ms since epoch
});
export type Document = z.infer<typeof DocumentSchema>;
export type DocumentSummary = Omit<Document, 'text'> & { words: number };

// ── settings ────────────────────────────────────────────────────────────────────────────────


export const SettingsSchema = z.strictObject({
  policy: z.enum(KV_POLICIES).default('full'),
  /** InfiniGen knobs (ARCHITECTURE.md §4). */
  alpha: z.number().min(0).max(50).default(5),
  partialRatio: z.number().gt(0).max(1).default(0.3),
  fetchCap: z.number().gt(0).max(1).default(0.1),
  denseLayers: z.int().nonnegative().max(256).default(2),
  /** KV pool budget in bytes; 0 = the full cache at the context length. */
  poolBudgetBytes: z.int().nonnegative().default(0),
  kvType: KvTypeSchema.default('fp16'),
  device: DeviceSchema.default('cpu'),
  threads: z.int().nonnegative().max(256).default(0), // 0 = all cores
  contextLength: z.int().nonnegative().default(0), // 0 = min(trained, 4096)
  sampling: SamplingSchema.prefault({}),
  theme: z.enum(['light', 'dark', 'system']).default('system'),
  /** A remote OpenAI-compatible endpoint instead of the local engine. */
  remote: z
    .strictObject({ enabled: z.boolean().default(false), baseUrl: z.string().max(2048).default(''), apiKey: z.string().max(4096).default(''), model: z.string().max(256).default('') })
    .prefault({}),
  lastModelPath: z.string().max(4096).default(''),
});
export type Settings = z.infer<typeof SettingsSchema>;

// ── model library ───────────────────────────────────────────────────────────────────────────

export const ModelSourceSchema = z.enum(['recent', 'lmstudio', 'huggingface', 'ollama', 'folder']);

export const ModelEntrySchema = z.strictObject({
  path: z.string(),
  name: z.string(),
  source: ModelSourceSchema,
  format: z.enum(['gguf', 'safetensors']),
  bytes: z.number().nonnegative(),
  /** From the file's header without loading it (where the carrier can read headers): the architecture it names. */
  architecture: z.string().optional(),
  /** Why Longhand will refuse to load it (names the architecture and what Longhand runs). */
  refusal: z.string().optional(),
});
export type ModelEntry = z.infer<typeof ModelEntrySchema>;

export const DownloadStateSchema = z.strictObject({
  id: z.string(),
  url: z.string(),
  path: z.string(),
  status: z.enum(['running', 'paused', 'done', 'failed']),
  receivedBytes: z.number().nonnegative(),
  totalBytes: z.number().nonnegative().nullable(),
  sha256: z.string().nullable(),
  error: z.string().nullable(),
});
export type DownloadState = z.infer<typeof DownloadStateSchema>;

// ── requests and their answers ──────────────────────────────────────────────────────────────

export const AppRequestSchema = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('documents.list') }),
  z.strictObject({ kind: z.literal('documents.get'), id: DocumentIdSchema }),
  z.strictObject({ kind: z.literal('documents.save'), document: DocumentSchema }),
  z.strictObject({ kind: z.literal('documents.delete'), id: DocumentIdSchema }),
  z.strictObject({ kind: z.literal('settings.get') }),
  z.strictObject({ kind: z.literal('settings.save'), settings: SettingsSchema }),
  z.strictObject({ kind: z.literal('models.scan') }),
  /** The inspect report (app/engine/model/inspect.ts ModelReport) for the memory bar. */
  z.strictObject({ kind: z.literal('models.inspect'), path: z.string().min(1).max(4096), contextTokens: z.int().positive().optional() }),
  z.strictObject({ kind: z.literal('downloads.start'), url: z.url({ protocol: /^https?$/ }), sha256: z.string().regex(/^[0-9a-f]{64}$/).optional() }),
  z.strictObject({ kind: z.literal('downloads.pause'), id: z.string() }),
  z.strictObject({ kind: z.literal('downloads.resume'), id: z.string() }),
  z.strictObject({ kind: z.literal('downloads.list') }),
]);
export type AppRequest = z.infer<typeof AppRequestSchema>;
export type AppRequestInput = z.input<typeof AppRequestSchema>;

/** What each request kind answers. Handlers and clients share this map. */
export interface AppResponses {
  'documents.list': DocumentSummary[];
  'documents.get': Document;
  'documents.save': { updatedAt: number };
  'documents.delete': { deleted: boolean };
  'settings.get': { settings: Settings; warning: string | null };
  'settings.save': { settings: Settings };
  'models.scan': ModelEntry[];
  'models.inspect': Record<string, unknown>;
  'downloads.start': DownloadState;
  'downloads.pause': DownloadState;
  'downloads.resume': DownloadState;
  'downloads.list': DownloadState[];
}

export function parseAppRequest(message: unknown): AppRequest {
  const parsed = AppRequestSchema.safeParse(message);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const where = issue && issue.path.length > 0 ? issue.path.join('.') : '(message)';
  throw Object.assign(new Error(`bad app request: ${where}: ${issue?.message ?? 'does not match the contract'}`), { code: 'PROTOCOL_BAD_MESSAGE' as const });
}
