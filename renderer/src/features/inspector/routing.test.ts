import { describe, expect, it } from 'vitest';
import { addRouting, cellExperts, expertColor, expertLoad, newRouting, parseRouting, routingPixels } from './routing.ts';
import { parseRunsJsonl, runsToJsonl, type Run } from './runs.ts';

// two MoE layers (1 and 3), 8 experts, top 2: a prompt chunk of 3 tokens whose last layer did not
// run the first two (-1), then one decode step
const chunk = { start: 0, layers: [1, 3], k: 2, experts: [5, 2, -1, -1, 5, 7, -1, -1, 0, 5, 6, 1] };
const step = { start: 3, layers: [1, 3], k: 2, experts: [5, 4, 6, 3] };

function routing() {
  const r = newRouting(8, chunk);
  addRouting(r, chunk);
  addRouting(r, step);
  return r;
}

describe('routing figures', () => {
  it('puts each token of an event at its position, layer by layer', () => {
    const r = routing();
    expect(r.positions).toHaveLength(4);
    expect(cellExperts(r, 0, 0)).toEqual([5, 2]);
    expect(cellExperts(r, 0, 1)).toBeUndefined(); // -1: the layer did not run it
    expect(cellExperts(r, 2, 1)).toEqual([6, 1]);
    expect(cellExperts(r, 3, 0)).toEqual([5, 4]);
    expect(cellExperts(r, 9, 0)).toBeUndefined();
  });

  it('counts each layer’s expert load over the tokens it routed', () => {
    const load = expertLoad(routing());
    expect(load.tokens).toBe(4);
    expect(load.routed).toEqual([4, 2]);
    expect(Array.from(load.counts[0]!)).toEqual([1, 0, 1, 0, 1, 4, 0, 1]);
    expect(Array.from(load.counts[1]!)).toEqual([0, 1, 0, 1, 0, 0, 2, 0]);
    expect(load.used).toEqual([5, 3]);
    expect(load.busiest[0]).toEqual({ expert: 5, share: 1 }); // expert 5 in all 4 tokens of layer 1
    expect(load.busiest[1]).toEqual({ expert: 6, share: 1 }); // expert 6 in both tokens layer 3 ran
  });

  it('draws one column per position and one row per layer, by top expert (grey where not run)', () => {
    const px = routingPixels(routing(), 5);
    const at = (p: number, row: number) => Array.from(px.subarray((row * 5 + p) * 4, (row * 5 + p) * 4 + 3));
    expect(at(0, 0)).toEqual(expertColor(5));
    expect(at(2, 0)).toEqual(expertColor(0));
    expect(at(0, 1)).toEqual([44, 44, 52]);
    expect(at(3, 1)).toEqual(expertColor(6));
    expect(at(4, 0)).toEqual([44, 44, 52]); // position 4: not computed
    // neighbouring experts get different colours
    const colours = new Set(Array.from({ length: 128 }, (_, e) => expertColor(e).join(',')));
    expect(colours.size).toBe(128);
  });

  it('refuses an event of another layer set', () => {
    const r = routing();
    expect(() => addRouting(r, { start: 4, layers: [1, 2], k: 2, experts: [0, 1, 2, 3] })).toThrow(/does not match the run's layers \[1,3\]/);
  });
});

describe('routing in the JSON lines export', () => {
  const run: Run = { requestId: 'gen-1', policy: 'full', contextLength: 64, promptIds: [1, 2, 3], pieces: ['a', 'b', 'c'], tokens: [{ id: 9, text: 'x' }, { id: 8, text: 'y' }], samples: [], routing: routing() };

  it('round-trips', () => {
    const [back] = parseRunsJsonl(runsToJsonl([run]));
    expect(back!.routing).toEqual(run.routing);
  });

  it('names what is wrong in a bad routing', () => {
    const line = JSON.parse(runsToJsonl([run]).trim()) as { routing: { positions: unknown[] } };
    line.routing.positions[1] = [9, 0, 1, 2];
    expect(() => parseRunsJsonl(JSON.stringify(line))).toThrow(/line 1.*routing\.positions\[1\] is not 4 expert ids below 8/);
    expect(() => parseRouting({ experts: 8, layers: [], k: 2, positions: [] })).toThrow('routing.layers is not a list of layers');
  });
});
