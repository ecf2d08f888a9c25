// A mixture-of-experts run's routing as the inspector records it: for every position the engine
// ran, which experts each layer sent its token to (the engine's `routing` events, one per forward
// call: a prompt chunk or a decode step). From it come the routing view's figures, all pure so
// they are tested without a canvas: the token × layer map (a cell's colour is the expert with the
// largest routing weight), each layer's expert load over the run, and a cell's tooltip.
// Positions a run did not compute (a reused prefix, a restored snapshot) have no routing.

export interface RunRouting {
  /** Experts per layer (the model's). */
  experts: number;
  /** The layers that have experts, ascending. */
  layers: number[];
  /** Experts each token runs on per layer. */
  k: number;
  /**
   * [position] the token's experts, [layers.length * k] layer by layer, largest weight first (-1: the
   * layer did not run the token: a prompt chunk that needs no logits skips the last layer's MLP);
   * undefined where the run computed nothing (a reused prefix).
   */
  positions: (number[] | undefined)[];
}

export interface RoutingEventLike {
  start: number;
  layers: number[];
  k: number;
  experts: number[];
}

/** A run's routing from its first event (`experts`: the model's experts per layer). */
export function newRouting(experts: number, event: RoutingEventLike): RunRouting {
  return { experts, layers: [...event.layers], k: event.k, positions: [] };
}

/** Adds one routing event's tokens; an event of another layer set or k (a different model) is refused. */
export function addRouting(routing: RunRouting, event: RoutingEventLike): void {
  if (event.k !== routing.k || event.layers.length !== routing.layers.length || event.layers.some((l, i) => l !== routing.layers[i])) {
    throw new Error(`routing event of layers [${event.layers.join(',')}] k ${event.k} does not match the run's layers [${routing.layers.join(',')}] k ${routing.k}`);
  }
  const width = routing.layers.length * routing.k;
  for (let t = 0; t * width < event.experts.length; t++) routing.positions[event.start + t] = event.experts.slice(t * width, (t + 1) * width);
}

/** The experts layer `layerIndex` (an index into routing.layers) sent `position`'s token to, largest weight first; undefined where it did not run the token. */
export function cellExperts(routing: RunRouting, position: number, layerIndex: number): number[] | undefined {
  const cell = routing.positions[position]?.slice(layerIndex * routing.k, (layerIndex + 1) * routing.k);
  return cell && cell[0]! >= 0 ? cell : undefined;
}

export interface ExpertLoad {
  /** Positions the run computed (a routing row). */
  tokens: number;
  /** [layer index] tokens the layer routed (the last layer skips prompt tokens whose logits were not needed). */
  routed: number[];
  /** [layer index][expert] times the expert was among a token's k. */
  counts: Int32Array[];
  /** [layer index] experts chosen at least once. */
  used: number[];
  /** [layer index] the most chosen expert and its share of the layer's tokens. */
  busiest: { expert: number; share: number }[];
}

export function expertLoad(routing: RunRouting): ExpertLoad {
  const counts = routing.layers.map(() => new Int32Array(routing.experts));
  const routed = routing.layers.map(() => 0);
  let tokens = 0;
  for (const row of routing.positions) {
    if (!row) continue;
    tokens++;
    for (let li = 0; li < routing.layers.length; li++) {
      if (row[li * routing.k]! < 0) continue;
      routed[li]! += 1;
      for (let j = 0; j < routing.k; j++) {
        const e = row[li * routing.k + j]!;
        if (e >= 0 && e < routing.experts) counts[li]![e]! += 1;
      }
    }
  }
  const used = counts.map((c) => c.reduce((n, v) => n + (v > 0 ? 1 : 0), 0));
  const busiest = counts.map((c, li) => {
    let expert = 0;
    for (let e = 1; e < c.length; e++) if (c[e]! > c[expert]!) expert = e;
    return { expert, share: routed[li]! > 0 ? c[expert]! / routed[li]! : 0 };
  });
  return { tokens, routed, counts, used, busiest };
}

/**
 * An expert's colour: hues spread by the golden angle so neighbouring ids differ, with three
 * lightness steps so 128 experts stay tellable apart. [r, g, b] in 0..255.
 */
export function expertColor(expert: number): [number, number, number] {
  const h = (expert * 137.508) % 360;
  const l = [0.55, 0.4, 0.7][expert % 3]!;
  const s = 0.75;
  const c = (1 - Math.abs(2 * l - 1)) * s;
  const x = c * (1 - Math.abs(((h / 60) % 2) - 1));
  const m = l - c / 2;
  const [r, g, b] = h < 60 ? [c, x, 0] : h < 120 ? [x, c, 0] : h < 180 ? [0, c, x] : h < 240 ? [0, x, c] : h < 300 ? [x, 0, c] : [c, 0, x];
  return [Math.round((r + m) * 255), Math.round((g + m) * 255), Math.round((b + m) * 255)];
}

const EMPTY: [number, number, number] = [44, 44, 52];

/** The map as RGBA pixels: one column per position, one row per MoE layer (first layer on top), coloured by each cell's top expert. */
export function routingPixels(routing: RunRouting, positions: number): Uint8ClampedArray<ArrayBuffer> {
  const rows = routing.layers.length;
  const px = new Uint8ClampedArray(positions * rows * 4);
  for (let p = 0; p < positions; p++) {
    const row = routing.positions[p];
    for (let li = 0; li < rows; li++) {
      const top = row ? row[li * routing.k]! : -1;
      const [r, g, b] = top >= 0 ? expertColor(top) : EMPTY;
      const i = (li * positions + p) * 4;
      px[i] = r;
      px[i + 1] = g;
      px[i + 2] = b;
      px[i + 3] = 255;
    }
  }
  return px;
}

const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;

/** The routing of a run line in an export (throws with what is wrong; `undefined` stays undefined). */
export function parseRouting(value: unknown): RunRouting | undefined {
  if (value === undefined) return undefined;
  const o = value as Partial<Record<keyof RunRouting, unknown>>;
  if (typeof value !== 'object' || value === null) throw new Error('routing is not an object');
  if (!isInt(o.experts) || o.experts === 0) throw new Error('routing.experts is not a positive count');
  if (!Array.isArray(o.layers) || o.layers.length === 0 || !o.layers.every(isInt)) throw new Error('routing.layers is not a list of layers');
  if (!isInt(o.k) || o.k === 0) throw new Error('routing.k is not a positive count');
  if (!Array.isArray(o.positions)) throw new Error('routing.positions is not a list');
  const width = o.layers.length * o.k;
  const experts = o.experts;
  const positions = o.positions.map((row, p): number[] | undefined => {
    if (row === null || row === undefined) return undefined;
    if (!Array.isArray(row) || row.length !== width || !row.every((e) => e === -1 || (isInt(e) && e < experts))) throw new Error(`routing.positions[${p}] is not ${width} expert ids below ${experts} (or -1)`);
    return row as number[];
  });
  return { experts, layers: o.layers as number[], k: o.k, positions };
}

/** The routing as an export writes it (positions not routed as null). */
export function routingToJson(routing: RunRouting): object {
  return { experts: routing.experts, layers: routing.layers, k: routing.k, positions: Array.from(routing.positions, (row) => row ?? null) };
}
