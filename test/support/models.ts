// Where tests find the shared reference model. The model is never committed: it sits in
// ../shared/models beside the checkout. Locally a missing model skips the tests that need it,
// with a message; in CI (CI=true) the model must be there, so a missing one fails the run.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const PROJECT_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const SHARED_MODELS_DIR = resolve(PROJECT_ROOT, '..', 'shared', 'models');
export const STORIES_260K = join(SHARED_MODELS_DIR, 'stories260K.gguf');
export const REFERENCE_GREEDY = join(SHARED_MODELS_DIR, 'reference-greedy.json');
/** The second reference model: a KJV-trained Llama with head dim 64, GQA 4q/2kv (shared/models/README.md). */
export const KJV_HD64 = join(SHARED_MODELS_DIR, 'kjv-llama-hd64.gguf');
export const KJV_REFERENCE_GREEDY = join(SHARED_MODELS_DIR, 'kjv-reference-greedy.json');
export const KJV_EVAL_DIR = join(SHARED_MODELS_DIR, 'kjv-eval');

/** True when the model is present. In CI a missing model throws, so the run fails instead of skipping. */
export function haveSharedModel(path: string = STORIES_260K): boolean {
  if (existsSync(path)) return true;
  const message = `reference model missing: ${path} (tests that need it are skipped; put shared/models beside the checkout)`;
  if (process.env.CI) throw new Error(`${message}; CI must have it`);
  console.warn(`SKIP: ${message}`);
  return false;
}

export interface ReferenceStep {
  step: number;
  position: number;
  chosen: number;
  top: { id: number; piece: string; prob: number; logprob: number }[];
}

export interface ReferenceRun {
  prompt: string;
  promptIds: number[];
  generatedIds: number[];
  generatedPieces: string[];
  text: string;
  generatedText: string;
  steps: ReferenceStep[];
  /** kjv-reference-greedy.json only: up to which step llama.cpp with an F16 KV cache picks the same ids */
  kvF16AgreesToStep?: number;
}

export function loadReferenceRuns(path: string = REFERENCE_GREEDY): ReferenceRun[] {
  const parsed = JSON.parse(readFileSync(path, 'utf8')) as { runs: ReferenceRun[] };
  return parsed.runs;
}
