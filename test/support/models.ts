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
}

export function loadReferenceRuns(): ReferenceRun[] {
  const parsed = JSON.parse(readFileSync(REFERENCE_GREEDY, 'utf8')) as { runs: ReferenceRun[] };
  return parsed.runs;
}
