// A model family (ARCHITECTURE.md §3, issue 29): everything about a model that depends on which
// family wrote it, declared in one object so that shared code (the runner, the stage builders'
// callers, the memory estimate) asks the family instead of testing `architecture`:
//
//   ModelFamily ─ tensors        the tensor table (names, shapes from the hyperparameters)
//               ├ layers(hyper)  what each layer computes (layer-spec.ts)
//               ├ embedding      token table, learned positions, scale
//               ├ contextLimit   where positions end (learned tables), if anywhere
//               ├ policyRefusal  row policies it cannot run, and why
//               ├ onnxStage      its onnxruntime stage graphs (graphs.ts draws them)
//               └ nativeStages   its native dense stages, or why it has none
//
// One file per family (llama.ts, opt.ts); families.ts maps an architecture to its family.
import type { ArchTensorTable } from '../../model/arch/base.ts';
import type { Architecture, LoadedModel, ModelHyperparameters } from '../../model/types.ts';
import type { LayerSpec } from './layer-spec.ts';
import type { NativeStageBuilder } from './native-stage.ts';
import type { OnnxStageBuilder } from './stage-graph.ts';

/** How token ids become the residual stream's first rows. */
export interface EmbeddingSpec {
  /** Canonical name of the token table [vocab, d] (also the LM head when the file ties them). */
  readonly tokenTable: string;
  /**
   * Learned absolute positions added to each token's row (OPT), or undefined: positions enter as
   * RoPE inside attention instead. `offset`: the table row of position 0 (OPT's first two rows are
   * unused, a fairseq leftover), so position p reads row p + offset.
   */
  readonly positions: { readonly table: string; readonly offset: number } | undefined;
  /** Multiplies the embedded row (Gemma: √d); 1 = no multiply, so the rows' bits are the table's. */
  readonly scale: number;
  /**
   * A second token table [vocab, L·P] whose rows stage 0 takes as `ple_tok` [1, T, L·P] (Gemma 4
   * E2B/E4B's per-layer embeddings); stage 0 then outputs `ple` [1, T, L·P] and stage ℓ+1 takes
   * layer ℓ's slice as `ple` [1, T, P]. Undefined for the families without one.
   */
  readonly perLayerTable?: string;
}

/** A family's native dense stages, or why it has none (the model then runs onnxruntime's). */
export type NativeStageSupport =
  | {
      readonly kind: 'native';
      /** Every tensor the stages multiply by: each must have kernels (native-stages.ts nativeDenseUnsupported). */
      linearNames(model: LoadedModel): string[];
      readonly create: NativeStageBuilder;
    }
  | { readonly kind: 'none'; readonly reason: string };

export interface ModelFamily {
  /** The `architecture` of the hyperparameters this family runs. */
  readonly architecture: Architecture;
  /** The family in messages ('llama family', 'OPT'). */
  readonly name: string;
  /** Which tensors the model has and their shapes (model/arch). */
  readonly tensors: ArchTensorTable;
  /** What each layer ℓ = 0..L−1 computes. */
  layers(hyper: ModelHyperparameters): LayerSpec[];
  /** How ids become the first hidden rows. */
  embedding(hyper: ModelHyperparameters): EmbeddingSpec;
  /**
   * The most positions a sequence may have, or undefined when the family sets none (RoPE runs past
   * the trained length; quality is the user's call). OPT: its learned position table ends at the
   * trained length, so a longer context would read past it.
   */
  contextLimit(hyper: ModelHyperparameters): number | undefined;
  /**
   * Why row policy `policy` cannot run this family, as the message a user sees, or undefined when
   * it can. (A family whose layers the speculation and the comparison policies were not written
   * for keeps 'full' until they are.)
   */
  policyRefusal(policy: string): string | undefined;
  /** Its onnxruntime stage graphs, stage s = 0..L (graphs.ts). */
  readonly onnxStage: OnnxStageBuilder;
  /** Its native dense stages, or why it has none (native-stages.ts). */
  readonly nativeStages: NativeStageSupport;
  /**
   * Layer ℓ's learned attention-sink logits [heads] (gpt-oss: blk.ℓ.attn_sinks.weight), read for the
   * layers whose AttentionSpec has `sinks`; every attention path takes them (attention-args.ts).
   */
  attentionSinks?(model: LoadedModel, layer: number): Float32Array;
}
