// The model as the rest of the engine sees it, whatever file it came from.
// GGUF files and Hugging Face folders are both read into a `LoadedModel`: hyperparameters
// normalised to one vocabulary, tensors under canonical (GGUF-style) names, and the tokenizer
// and chat template sources. Nothing here copies tensor data: a TensorView points into the
// mapped file until someone asks for floats.

/** Element types we can read. GGUF's quantised block types keep their ggml names. */
export type TensorDType =
  | 'F32'
  | 'F16'
  | 'BF16'
  | 'Q8_0'
  | 'Q4_0'
  | 'Q4_1'
  | 'Q5_0'
  | 'Q5_1'
  | 'Q4_K'
  | 'Q5_K'
  | 'Q6_K'
  | 'MXFP4';

/** How RoPE pairs the dimensions of a head. */
export type RopeLayout =
  | 'interleaved' // pairs (0,1), (2,3)...: llama.cpp's "normal" mode; GGUF llama q/k weights are permuted for it
  | 'neox'; // pairs (i, i + d/2): Hugging Face rotate_half, GGUF qwen2

/** Frequency scaling of RoPE (Llama 3 style), from config.json rope_scaling or GGUF rope.* keys. */
export interface RopeScaling {
  /** 'yarn' (gpt-oss): model/arch/gpt-oss.ts yarnScaling says what its fields mean and how llama.cpp applies them. */
  kind: 'llama3' | 'linear' | 'longrope' | 'yarn';
  factor: number;
  lowFreqFactor?: number;
  highFreqFactor?: number;
  originalContextLength?: number;
  /**
   * LongRoPE (Phi-3/Phi-4, kind 'longrope'): per rotated pair, the divisor of its frequency for a
   * context up to originalContextLength (short) and beyond it (long): [rotaryDims/2] each. Which
   * set a session uses follows from its context length, as llama.cpp decides it (ropeForContext).
   */
  shortFactors?: readonly number[];
  longFactors?: readonly number[];
  /** LongRoPE: multiplies cos and sin (so q·k on the rotated dimensions by its square); 1 = none. YaRN: the mscale cos and sin are multiplied by. */
  attnFactor?: number;
  /** YaRN: the ramp's ends in rotations over the original context (llama.cpp's yarn_beta_fast 32 / yarn_beta_slow 1), and the blend's strength (ext_factor, 1). */
  betaFast?: number;
  betaSlow?: number;
  extFactor?: number;
}

export type Architecture = 'llama' | 'opt' | 'phi3' | 'gemma2' | 'gemma3' | 'gemma4' | 'qwen3' | 'qwen3moe' | 'qwen35' | 'qwen35moe' | 'gpt-oss';

export interface ModelHyperparameters {
  architecture: Architecture;
  /** The family the file names: llama, mistral, qwen2, opt... (display and quirks). */
  family: string;
  hiddenSize: number; // d_model
  layers: number;
  heads: number; // query heads
  kvHeads: number; // key/value heads (== heads for MHA)
  headDim: number;
  ffnSize: number;
  vocabSize: number;
  /** Context length the model was trained with, as the file states it. */
  contextLength: number;
  normEps: number;
  /** llama family only */
  ropeTheta?: number;
  ropeLayout?: RopeLayout;
  ropeScaling?: RopeScaling;
  /** Dimensions of each head that RoPE rotates, when fewer than headDim (partial rotary: Phi-4-mini). */
  ropeDims?: number;
  /** Qwen2-style bias on q/k/v projections. */
  qkvBias: boolean;
  /** Output projection shares the token embedding. */
  tiedEmbeddings: boolean;
  /** OPT only: learned positions are offset by 2. */
  positionOffset?: number;
  /** Gemma 2/3 (and families like them): what their layers add to the llama family's (GemmaHyperparameters below). */
  gemma?: GemmaHyperparameters;
  /** Gemma 4: its per-layer shapes, KV sharing and proportional RoPE (Gemma4Config below; forward/layers/gemma4.ts). */
  gemma4?: Gemma4Config;
  /** Mixture-of-experts feed-forward in every layer (Qwen3-MoE: MoeHyperparameters below). */
  moe?: MoeHyperparameters;
  /** gpt-oss: its banded-window layers (model/arch/gpt-oss.ts). */
  gptOss?: GptOssHyperparameters;
  /** Hybrid models (Qwen3.5): which layers are linear attention and their shape (model/arch/qwen35.ts). */
  linearAttention?: LinearAttentionConfig;
}

/** gpt-oss's attention pattern as llama_model_openai_moe reads it (model/arch/gpt-oss.ts). */
export interface GptOssHyperparameters {
  /** Tokens a sliding-window layer sees (gpt-oss.attention.sliding_window: 128). */
  slidingWindow: number;
  /** Which layers slide: layer l does when l % period < period − 1 (sliding_window_pattern, default 2: even layers). */
  swaPeriod: number;
  /** RoPE base of the sliding-window layers (rope.freq_base_swa; absent: the global base). */
  swaRopeTheta: number;
}

/**
 * A mixture-of-experts model's feed-forward (GGUF <arch>.expert_count, expert_used_count,
 * expert_feed_forward_length; config.json num_experts, num_experts_per_tok, moe_intermediate_size,
 * norm_topk_prob). forward/layers/qwen3moe.ts.
 */
export interface MoeHyperparameters {
  /** Experts per layer (Qwen3-30B-A3B: 128). */
  experts: number;
  /** Experts each token runs (top-k; Qwen3-30B-A3B: 8). */
  expertsUsed: number;
  /** Hidden width of one expert (Qwen3-30B-A3B: 768). */
  expertFfn: number;
  /** The k routing weights renormalised to sum 1 (llama.cpp always does for qwen3moe). */
  normTopK: boolean;
  /**
   * How the router's logits become weights: 'softmax' (default: softmax over every expert, then the
   * top k) or 'softmax_weight' (gpt-oss: the top k logits, router bias added, then a softmax over those k).
   */
  gating?: 'softmax' | 'softmax_weight';
  /** Hidden width of the shared expert every token runs besides the routed ones (Qwen3.5-MoE: expert_shared_feed_forward_length); absent: none. */
  sharedFfn?: number;
}

/**
 * The linear-attention (Gated DeltaNet) layers of a hybrid model, as GGUF's ssm.* keys state them
 * (llama.cpp's qwen35 loader): forward/layers/qwen35.ts turns them into LayerSpecs.
 */
export interface LinearAttentionConfig {
  /** [layer] true where the layer is linear attention, false where it is full attention */
  readonly layers: readonly boolean[];
  /** ssm.group_count: q/k heads */
  readonly keyHeads: number;
  /** ssm.time_step_rank: v heads (a multiple of keyHeads) */
  readonly valueHeads: number;
  /** ssm.state_size: elements per head of q, k and v */
  readonly headDim: number;
  /** ssm.conv_kernel: taps of the causal convolution */
  readonly convKernel: number;
}

/**
 * What Gemma 2 and Gemma 3 files state beyond the llama family's hyperparameters (GGUF gemma2.* /
 * gemma3.* keys, config.json of Gemma2ForCausalLM / Gemma3ForCausalLM). forward/layers/gemma.ts
 * turns them into per-layer LayerSpecs.
 */
export interface GemmaHyperparameters {
  /** Tokens a sliding-window layer sees (its own position and the window − 1 before it). */
  window: number;
  /**
   * [layer] true where the layer attends its sliding window only, false where it is global:
   * llama.cpp's set_swa_pattern(period): layer ℓ is local iff ℓ mod period < period − 1
   * (Gemma 2: period 2, even layers local; Gemma 3: period 6, five local then one global).
   */
  slidingLayers: readonly boolean[];
  /**
   * RoPE of the sliding-window layers; the global layers take ropeTheta and ropeScaling. Gemma 3:
   * θ 10 000 and no scaling (the global layers: θ 1 000 000, linear ×8 on the 4B and larger);
   * Gemma 2: the global layers' own.
   */
  localRope: { readonly theta: number; readonly scaling: RopeScaling | undefined };
  /** Multiplies q·k: 1/√head_dim, or 1/√query_pre_attn_scalar where the file says so. */
  attentionScale: number;
  /** Attention logit soft-cap (Gemma 2: 50); 0 = none. */
  attnSoftcap: number;
  /** Final logit soft-cap (Gemma 2: 30); 0 = none. */
  finalSoftcap: number;
  /** Per-head RMSNorm of q and k before RoPE (Gemma 3). */
  qkNorm: boolean;
}

/**
 * A tensor inside a mapped model file. `shape` is outermost-first (PyTorch order: a weight of a
 * Linear(in, out) is [out, in]); GGUF's ne[] (innermost-first) is reversed to this order.
 */
export interface TensorView {
  readonly name: string;
  readonly dtype: TensorDType;
  readonly shape: readonly number[];
  /** Number of elements (product of shape). */
  readonly elements: number;
  /** Raw bytes of the tensor, a view into the mapped file (no copy). */
  bytes(): Uint8Array;
  /** Dequantised / widened to fp32, row-major in `shape` order. Allocates. */
  toFloat32(): Float32Array;
}

/** What the tokenizer can be built from. */
export type TokenizerSource =
  | { kind: 'gguf'; metadata: ReadonlyMap<string, unknown> }
  | { kind: 'tokenizer.json'; path: string; configPath?: string };

export interface LoadedModel {
  readonly format: 'gguf' | 'safetensors';
  /** The file (GGUF) or folder (Hugging Face) it was loaded from. */
  readonly path: string;
  readonly hyper: ModelHyperparameters;
  /** Canonical names: token_embd.weight, output_norm.weight, output.weight, blk.N.attn_q.weight ... */
  readonly tensors: ReadonlyMap<string, TensorView>;
  readonly tokenizer: TokenizerSource;
  /** Jinja chat template text, when the file carries one. */
  readonly chatTemplate: string | undefined;
  /** Bytes of all tensor data (what the weights occupy as stored). */
  readonly weightBytes: number;
  /** Unmap files. Using tensors afterwards is an error. */
  close(): void;
  /**
   * Drops the resident pages of a tensor's bytes from the process where the file is mapped: a hint
   * for weights already repacked elsewhere (reading the tensor later faults its bytes in again from
   * the file). Returns the bytes advised; 0 (or absent) where the bytes are not a mapping.
   */
  releaseTensor?(name: string): number;
  /**
   * Makes the named tensors' bytes the process's own anonymous pages where the file is mapped (same
   * bytes, same addresses), on 2 MiB pages wherever a whole aligned 2 MiB lies inside: for weights
   * read in place on every step (the native dense stages), since pages left to the page cache slow a
   * pass over them 3–10x now and then, and 4 KiB pages cost a pass ~15% in TLB misses. Tensors that
   * are neighbours in the file (up to 1 MiB apart) are owned as one range, the bytes between them
   * too. Resident memory is unchanged. Returns the bytes covered; 0 (or absent) where the bytes are
   * not a mapping. Unknown names are skipped.
   */
  ownTensors?(names: readonly string[], threads?: number): number;
}

/**
 * What a Gemma 4 file states (GGUF gemma4.* keys and rope_freqs, or config.json): read by
 * model/arch/gemma4.ts, turned into LayerSpecs by forward/layers/gemma4.ts, whose header says what
 * each field means for a layer.
 */
export interface Gemma4Config {
  readonly layers: number;
  readonly hiddenSize: number;
  /** [layer] true: a sliding-window layer */
  readonly windowLayers: readonly boolean[];
  readonly window: number;
  /** [layer] query heads */
  readonly heads: readonly number[];
  /** [layer] KV heads */
  readonly kvHeads: readonly number[];
  readonly headDimGlobal: number;
  readonly headDimWindow: number;
  readonly ropeBaseGlobal: number;
  readonly ropeBaseWindow: number;
  /** rotated dims of a global layer's head (the whole head: rope_freqs does the partial rotation) */
  readonly ropeDimsGlobal: number;
  readonly ropeDimsWindow: number;
  /** [ropeDimsGlobal/2] rope_freqs: the global layers' per-pair frequency divisors, or undefined (all 1) */
  readonly ropeFreqFactors: readonly number[] | undefined;
  /** S: the last S layers read an earlier layer's K/V */
  readonly sharedKvLayers: number;
  /** P: width of the per-layer embedding (0: none) */
  readonly perLayerInput: number;
  /** [layer] MLP width */
  readonly ffnSize: readonly number[];
  /** c of the final logit soft-cap (0: none) */
  readonly finalSoftcap: number;
  readonly normEps: number;
  /** [layer] the layer has its own attn_v (false: v = k before k's norm, "attention_k_eq_v"; false on KV-shared layers) */
  readonly valueProjection: readonly boolean[];
  /** every layer has blk.N.layer_output_scale (a scalar multiplying the layer's output) */
  readonly outputScale: boolean;
}
