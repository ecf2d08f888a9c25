// A KV pool whose layers do not share one row shape (typed in ./index.d.ts: LayeredKvPool).
//
// The native pool (src/kv_pool.h) has one row width: kv_heads × head_dim for every layer. Gemma 4
// has two (window layers: e.g. 8 KV heads × 256; global layers: 2 × 512) and KV-shared layers that
// keep no rows at all and read an earlier layer's. Rather than give every kernel a per-layer width,
// a LayeredKvPool holds one native pool per distinct row shape (a "group"; its layers in model order)
// and routes each model layer ℓ to (group pool, layer index inside it):
//
//   model layer ℓ ─ owns rows ─► groups[group[ℓ]], local[ℓ]
//                 ├ kvSource s ► the route of s (reads only: appends, projections and imports go to s)
//                 └ rows 'none' ► no route: a linear-attention layer (Qwen3.5) keeps a recurrent state
//                                 beside the pool, no rows; a question about its rows is refused
//
// index.js resolves the route in every native entry point that takes (pool, layer), so the kernels
// and the callers stay as they are; a caller that asks the whole pool for one kvHeads / headDim /
// partialDim gets an error naming the per-layer question instead of a wrong number.
//
// Sizes: with `tokens` every owning layer holds exactly that many slots (its group's layerCapacity);
// with `budgetBytes` (eviction) the budget is split over the groups in proportion to what one token
// costs each, and each group's pool plans its own capacity inside its share (so capacities may differ
// by the few tokens alignment padding costs). byteLength and bytesPerToken are the sums: a KV-shared
// layer costs nothing.
//
// Rings (a sliding-window layer keeps only its window, kv_pool.h "Rings"): layerCapacity and
// ringLayers are given by model layer, and each group's pool gets its layers' entries. A KV-shared
// layer reading a ring reads it through the route like any other question (isRing, ringStart,
// lastSlot, layerCapacityTokens answer its source's), so its window attention walks the source's
// ring: the layer runs after its source in the same step, when the ring holds the same rows.

/** One layer of a LayeredKvPool: a row shape of its own, or the earlier layer whose rows it reads. */
function isSource(shape) {
  return shape !== null && typeof shape === 'object' && 'kvSource' in shape;
}

/** A layer without rows of any kind (`{ rows: 'none' }`). */
function isNone(shape) {
  return shape !== null && typeof shape === 'object' && shape.rows === 'none';
}

/** group[ℓ] of a layer without rows */
const NO_ROWS = -2;

export class LayeredKvPool {
  /**
   * @param create (options) => native KvPool
   * @param error (code, message, details) => Error
   * @param options LayeredKvPoolOptions (index.d.ts)
   */
  constructor(create, error, options) {
    const shapes = options.layerShapes;
    if (!Array.isArray(shapes) || shapes.length === 0) throw error('NATIVE_BAD_ARGUMENT', 'layerShapes must list at least one layer', {});
    if (shapes.every(isNone)) throw error('NATIVE_BAD_ARGUMENT', 'layerShapes must have at least one layer with rows', {});
    const L = shapes.length;
    this.layers = L;
    this.error = error;
    /** [layer] group index, -1 for a KV-shared layer, NO_ROWS for a layer without rows */
    this.group = new Int32Array(L);
    /** [layer] layer index inside its group's pool (a shared layer: its source's) */
    this.local = new Int32Array(L);
    /** [layer] the layer whose rows ℓ reads (ℓ itself when it owns rows) */
    this.owner = new Int32Array(L);
    const keys = new Map(); // "kvHeads×headDim×p" -> group
    const groupShapes = []; // [group] { kvHeads, headDim, partialDim, layers: model layers }
    for (let l = 0; l < L; l++) {
      const s = shapes[l];
      if (isNone(s)) {
        this.group[l] = NO_ROWS;
        this.owner[l] = -1;
        continue;
      }
      if (isSource(s)) {
        const src = s.kvSource;
        if (!Number.isInteger(src) || src < 0 || src >= l || isSource(shapes[src]) || isNone(shapes[src])) {
          throw error('NATIVE_BAD_ARGUMENT', `layer ${l}: kvSource ${String(src)} is not an earlier layer with rows of its own`, { layer: l, kvSource: src });
        }
        this.group[l] = -1;
        this.owner[l] = src;
        continue;
      }
      const p = s.partialDim ?? 0;
      const key = `${s.kvHeads}x${s.headDim}x${p}`;
      let g = keys.get(key);
      if (g === undefined) {
        g = groupShapes.length;
        keys.set(key, g);
        groupShapes.push({ kvHeads: s.kvHeads, headDim: s.headDim, partialDim: p, layers: [] });
      }
      this.group[l] = g;
      this.local[l] = groupShapes[g].layers.length;
      this.owner[l] = l;
      groupShapes[g].layers.push(l);
    }
    for (let l = 0; l < L; l++) {
      if (this.group[l] === -1) {
        const src = this.owner[l];
        this.local[l] = this.local[src];
      }
    }
    this.shapes = groupShapes;
    const kvType = options.kvType ?? 'fp16';
    const elem = kvType === 'fp32' ? 4 : kvType === 'int8' ? 1 : 2;
    const rowBytes = (d) => d * elem + (kvType === 'int8' ? 4 : 0);
    // what one token costs a group across its layers (kv_pool.cc per_token_bytes)
    const perToken = groupShapes.map((s) => s.layers.length * (s.kvHeads * (2 * rowBytes(s.headDim) + 4 + 2 * s.partialDim) + (options.eviction ? 5 : 0)));
    const total = perToken.reduce((a, b) => a + b, 0);
    if ((options.tokens === undefined) === (options.budgetBytes === undefined)) {
      throw error('NATIVE_BAD_ARGUMENT', 'a LayeredKvPool takes exactly one of tokens (slots per layer) and budgetBytes', {});
    }
    this.pools = [];
    try {
      for (let g = 0; g < groupShapes.length; g++) {
        const s = groupShapes[g];
        const caps = options.layerCapacity ? s.layers.map((l) => options.layerCapacity[l]) : undefined;
        const rings = options.ringLayers ? s.layers.map((l) => options.ringLayers[l] === true) : undefined;
        const common = {
          layers: s.layers.length,
          kvHeads: s.kvHeads,
          headDim: s.headDim,
          kvType,
          ...(s.partialDim > 0 ? { partialDim: s.partialDim } : {}),
          ...(options.eviction ? { eviction: options.eviction } : {}),
          ...(options.hugePages !== undefined ? { hugePages: options.hugePages } : {}),
          ...(rings && rings.some(Boolean) ? { ringLayers: rings } : {}),
        };
        if (options.tokens !== undefined) {
          // every layer exactly `tokens` slots (or its own capacity): the budget only has to hold them
          const fixed = caps ? caps.map((c) => c || options.tokens) : new Array(s.layers.length).fill(options.tokens);
          const rows = fixed.reduce((a, c) => a + c, 0);
          const budgetBytes = rows * (perToken[g] / s.layers.length) + (s.layers.length + 16) * 64 + s.layers.length * s.kvHeads * s.headDim * s.partialDim * 4 + s.layers.length * 8 * 2 * s.partialDim * s.kvHeads + 64 * 64;
          this.pools.push(create({ ...common, budgetBytes: Math.ceil(budgetBytes), layerCapacity: fixed }));
        } else {
          const share = Math.floor((options.budgetBytes * perToken[g]) / total);
          this.pools.push(create({ ...common, budgetBytes: share, ...(caps ? { layerCapacity: caps } : {}) }));
        }
      }
    } catch (e) {
      for (const p of this.pools) p.free();
      throw e;
    }
  }

  // ─── routing ─────────────────────────────────────────────────────────────────────────────

  /** [native pool, its layer] whose rows model layer `layer` reads. */
  route(layer) {
    if (!Number.isInteger(layer) || layer < 0 || layer >= this.layers) throw this.error('NATIVE_BAD_ARGUMENT', `layer ${String(layer)} is outside 0..${this.layers - 1}`, { layer });
    if (this.group[layer] === NO_ROWS) throw this.error('NATIVE_BAD_ARGUMENT', `layer ${layer} keeps no KV rows (a linear-attention layer: its state is held beside the pool)`, { layer });
    const owner = this.owner[layer];
    return [this.pools[this.group[owner]], this.local[layer]];
  }

  /** Whether `layer` has rows at all, its own or a source's (false: a layer without rows). */
  hasRows(layer) {
    if (!Number.isInteger(layer) || layer < 0 || layer >= this.layers) throw this.error('NATIVE_BAD_ARGUMENT', `layer ${String(layer)} is outside 0..${this.layers - 1}`, { layer });
    return this.group[layer] !== NO_ROWS;
  }

  /** Whether `layer` keeps rows of its own (false: a KV-shared layer reading kvSource(layer)'s, or a layer without rows). */
  owns(layer) {
    if (!this.hasRows(layer)) return false;
    return this.group[layer] !== -1;
  }

  /** The layer whose rows `layer` reads (itself when it owns rows). */
  kvSource(layer) {
    this.route(layer);
    return this.owner[layer];
  }

  layerKvHeads(layer) {
    return this.route(layer)[0].kvHeads;
  }

  layerHeadDim(layer) {
    return this.route(layer)[0].headDim;
  }

  layerPartialDim(layer) {
    return this.route(layer)[0].partialDim;
  }

  /** The native pool and layer an append to `layer` writes; a KV-shared layer has none. */
  writable(layer, what) {
    const r = this.route(layer);
    if (this.group[layer] === -1) {
      throw this.error('NATIVE_BAD_ARGUMENT', `${what}: layer ${layer} keeps no rows (it reads layer ${this.owner[layer]}'s)`, { layer, kvSource: this.owner[layer] });
    }
    return r;
  }

  uniform(field) {
    const v = this.pools[0][field];
    if (this.pools.every((p) => p[field] === v)) return v;
    throw this.error('NATIVE_BAD_ARGUMENT', `the pool's layers differ in ${field}: ask layer${field[0].toUpperCase()}${field.slice(1)}(layer)`, { field });
  }

  // ─── the KvPool interface ─────────────────────────────────────────────────────────────────

  get capacityTokens() {
    return Math.max(...this.pools.map((p) => p.capacityTokens));
  }

  layerCapacityTokens(layer) {
    const [p, l] = this.route(layer);
    return p.layerCapacityTokens(l);
  }

  get byteLength() {
    return this.pools.reduce((a, p) => a + p.byteLength, 0);
  }

  get bytesPerToken() {
    return this.pools.reduce((a, p) => a + p.bytesPerToken, 0);
  }

  get kvHeads() {
    return this.uniform('kvHeads');
  }

  get headDim() {
    return this.uniform('headDim');
  }

  get partialDim() {
    return this.uniform('partialDim');
  }

  get freed() {
    return this.pools[0].freed;
  }

  get kvType() {
    return this.pools[0].kvType;
  }

  get evicting() {
    return this.pools[0].evicting;
  }

  get hugePages() {
    return this.pools.every((p) => p.hugePages);
  }

  setPartialProjection(layer, proj) {
    const [p, l] = this.writable(layer, 'setPartialProjection');
    p.setPartialProjection(l, proj);
  }

  readPartialK(layer, kvHead, slot) {
    const [p, l] = this.route(layer);
    return p.readPartialK(l, kvHead, slot);
  }

  append(layer, k, v, position) {
    const [p, l] = this.writable(layer, 'append');
    return p.append(l, k, v, position);
  }

  appendBatch(layer, k, v, firstPosition) {
    const [p, l] = this.writable(layer, 'appendBatch');
    return p.appendBatch(l, k, v, firstPosition);
  }

  truncate(tokens) {
    for (const p of this.pools) p.truncate(tokens);
  }

  length(layer) {
    const [p, l] = this.route(layer);
    return p.length(l);
  }

  // rings (a sliding-window layer's rows, ringLayers): answered by the owning pool, so a KV-shared
  // layer sees its source's ring; a write (clearLayer, import) goes to a layer that keeps rows only

  isRing(layer) {
    if (!this.hasRows(layer)) return false; // no rows, no ring
    const [p, l] = this.route(layer);
    return p.isRing(l);
  }

  ringStart(layer) {
    const [p, l] = this.route(layer);
    return p.ringStart(l);
  }

  clearLayer(layer) {
    const [p, l] = this.writable(layer, 'clearLayer');
    p.clearLayer(l);
  }

  exportRows(layer, first, tokens, out) {
    const [p, l] = this.route(layer);
    p.exportRows(l, first, tokens, out);
  }

  readK(layer, kvHead, slot) {
    const [p, l] = this.route(layer);
    return p.readK(l, kvHead, slot);
  }

  readV(layer, kvHead, slot) {
    const [p, l] = this.route(layer);
    return p.readV(l, kvHead, slot);
  }

  position(layer, slot) {
    const [p, l] = this.route(layer);
    return p.position(l, slot);
  }

  reset() {
    for (const p of this.pools) p.reset();
  }

  /** A layer's snapshot section: its group's layout; 0 bytes for a KV-shared layer (nothing of its own). */
  snapshotLayerBytes(tokens, layer) {
    if (layer === undefined) {
      const sizes = this.pools.map((p) => p.snapshotLayerBytes(tokens));
      if (sizes.every((s) => s === sizes[0])) return sizes[0];
      throw this.error('NATIVE_BAD_ARGUMENT', "the pool's layers differ in row shape: snapshotLayerBytes(tokens, layer)", {});
    }
    if (!this.hasRows(layer)) return 0;
    const [p] = this.route(layer);
    return this.group[layer] === -1 ? 0 : p.snapshotLayerBytes(tokens);
  }

  exportLayer(layer, tokens, out) {
    if (!this.hasRows(layer)) {
      if (out.byteLength !== 0) throw this.error('NATIVE_BAD_ARGUMENT', `exportLayer: layer ${layer} keeps no rows; its section is 0 bytes, got ${out.byteLength}`, { layer });
      return;
    }
    const [p, l] = this.route(layer);
    if (this.group[layer] === -1) {
      if (out.byteLength !== 0) throw this.error('NATIVE_BAD_ARGUMENT', `exportLayer: layer ${layer} keeps no rows; its section is 0 bytes, got ${out.byteLength}`, { layer });
      return;
    }
    p.exportLayer(l, tokens, out);
  }

  importLayer(layer, tokens, data) {
    if (!this.hasRows(layer)) {
      if (data.byteLength !== 0) throw this.error('NATIVE_BAD_ARGUMENT', `importLayer: layer ${layer} keeps no rows; its section is 0 bytes, got ${data.byteLength}`, { layer });
      return;
    }
    const [p, l] = this.route(layer);
    if (this.group[layer] === -1) {
      if (data.byteLength !== 0) throw this.error('NATIVE_BAD_ARGUMENT', `importLayer: layer ${layer} keeps no rows; its section is 0 bytes, got ${data.byteLength}`, { layer });
      return;
    }
    p.importLayer(l, tokens, data);
  }

  /** Evictions of the layer's own rows (a KV-shared layer evicts nothing itself). */
  evictions(layer) {
    if (!this.hasRows(layer)) return 0;
    const [p, l] = this.route(layer);
    return this.group[layer] === -1 ? 0 : p.evictions(l);
  }

  evictionsTotal() {
    return this.pools.reduce((a, p) => a + p.evictionsTotal(), 0);
  }

  lastSlot(layer) {
    const [p, l] = this.route(layer);
    return p.lastSlot(l);
  }

  lastEvicted(layer) {
    const [p, l] = this.route(layer);
    return p.lastEvicted(l);
  }

  counter(layer, slot) {
    const [p, l] = this.route(layer);
    return p.counter(l, slot);
  }

  free() {
    for (const p of this.pools) p.free();
  }

  dispose() {
    this.free();
  }
}

/**
 * InfiniGen's speculator over a LayeredKvPool: one native speculator per group (its partial rows,
 * skew projections and staging are per group), each model layer routed to its group's. The knobs are
 * the caller's, given per group: denseLayers counts the group's layers below the model's denseLayers,
 * layerAttention is the group's entries, and without `scale` each group scores at 1/√(its head dim).
 * A KV-shared layer has no partial rows of its own to speculate over: begin/attend on it is refused
 * (the plan runs those layers dense).
 */
export class LayeredSpeculator {
  constructor(create, pool, options) {
    this.pool = pool;
    this.specs = [];
    try {
      for (const s of pool.shapes) {
        const dense = options.denseLayers === undefined ? undefined : s.layers.filter((l) => l < options.denseLayers).length;
        this.specs.push(
          create(pool.pools[this.specs.length], {
            ...options,
            ...(dense !== undefined ? { denseLayers: dense } : {}),
            ...(options.layerAttention ? { layerAttention: s.layers.map((l) => options.layerAttention[l]) } : {}),
          }),
        );
      }
    } catch (e) {
      for (const sp of this.specs) sp.free();
      throw e;
    }
  }

  at(layer, what) {
    const [, l] = this.pool.route(layer);
    if (!this.pool.owns(layer)) throw this.pool.error('NATIVE_BAD_ARGUMENT', `${what}: layer ${layer} reads layer ${this.pool.kvSource(layer)}'s rows and has no partial keys of its own`, { layer });
    return [this.specs[this.pool.group[layer]], l];
  }

  begin(layer, qSpec) {
    const [s, l] = this.at(layer, 'begin');
    s.begin(l, qSpec);
  }

  attend(layer, q, out, threads) {
    const [s, l] = this.at(layer, 'attend');
    if (threads === undefined) s.attend(l, q, out);
    else s.attend(l, q, out, threads);
  }

  attendReference(layer, q, out) {
    const [s, l] = this.at(layer, 'attendReference');
    s.attendReference(l, q, out);
  }

  recall(layer, q) {
    const [s, l] = this.at(layer, 'recall');
    return s.recall(l, q);
  }

  selected(layer, kvHead) {
    const [s, l] = this.at(layer, 'selected');
    return s.selected(l, kvHead);
  }

  stats(layer) {
    const [s, l] = this.at(layer, 'stats');
    return s.stats(l);
  }

  drain() {
    for (const s of this.specs) s.drain();
  }

  clearStaging() {
    for (const s of this.specs) s.clearStaging();
  }

  free() {
    for (const s of this.specs) s.free();
  }
}
