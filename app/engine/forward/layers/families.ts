// Which family runs a model: one line per family (family.ts says what a family declares). Shared
// code calls familyOf(hyper) and then asks the family, never `hyper.architecture`.
import { LonghandError, UsageError } from '../../../common/errors.ts';
import type { Architecture, ModelHyperparameters } from '../../model/types.ts';
import type { ModelFamily } from './family.ts';
import { GEMMA2_FAMILY, GEMMA3_FAMILY } from './gemma.ts';
import { GEMMA4_FAMILY } from './gemma4.ts';
import { LLAMA_FAMILY } from './llama.ts';
import { OPT_FAMILY } from './opt.ts';
import { PHI3_FAMILY } from './phi3.ts';
import { QWEN3_FAMILY } from './qwen3.ts';
import { QWEN3MOE_FAMILY } from './qwen3moe.ts';
import { GPT_OSS_FAMILY } from './gpt-oss.ts';
import { QWEN35_FAMILY } from './qwen35.ts';
import { QWEN35MOE_FAMILY } from './qwen35moe.ts';

export type { EmbeddingSpec, ModelFamily, NativeStageSupport } from './family.ts';

/** Every family, by the architecture it runs. */
export const FAMILIES: Readonly<Record<Architecture, ModelFamily>> = {
  llama: LLAMA_FAMILY,
  opt: OPT_FAMILY,
  phi3: PHI3_FAMILY,
  gemma2: GEMMA2_FAMILY,
  gemma3: GEMMA3_FAMILY,
  qwen3: QWEN3_FAMILY,
  gemma4: GEMMA4_FAMILY,
  qwen3moe: QWEN3MOE_FAMILY,
  'gpt-oss': GPT_OSS_FAMILY,
  qwen35: QWEN35_FAMILY,
  qwen35moe: QWEN35MOE_FAMILY,
};

/**
 * The family that runs `hyper`'s architecture. An architecture no family declares (hyperparameters
 * built by hand, a loader that learned a new one first) is a typed MODEL_UNSUPPORTED_ARCHITECTURE.
 */
export function familyOf(hyper: Pick<ModelHyperparameters, 'architecture'>): ModelFamily {
  const architecture: string = hyper.architecture;
  const family = Object.hasOwn(FAMILIES, architecture) ? FAMILIES[architecture as Architecture] : undefined;
  if (family === undefined) {
    throw new LonghandError('MODEL_UNSUPPORTED_ARCHITECTURE', `architecture '${architecture}' has no model family (Longhand runs ${Object.keys(FAMILIES).join(', ')})`, { architecture });
  }
  return family;
}

/** Throws the UsageError a request for row policy `policy` on `hyper`'s family gets when the family cannot run it. */
export function assertPolicySupported(hyper: Pick<ModelHyperparameters, 'architecture'>, policy: string): void {
  const why = familyOf(hyper).policyRefusal(policy);
  if (why !== undefined) throw new UsageError(why, { field: 'policy', architecture: hyper.architecture });
}
