// Byte ranges of a file, sorted and joined where they sit close: the tensors one stage reads
// are neighbours in a GGUF file, and owning them as one range lets the 2 MiB pages that straddle
// two of them sit on huge pages too (MappedFile.own reads a range's 2 MiB-aligned interior into
// huge pages; the pages at its two ends stay 4 KiB).

/** [start, end) in bytes of the file. */
export type ByteRange = readonly [start: number, end: number];

/**
 * The ranges sorted by start, with any two whose gap is at most `maxGap` bytes (overlapping ones
 * included) joined into one that covers both and the gap. Empty ranges are dropped.
 */
export function joinNearRanges(ranges: readonly ByteRange[], maxGap: number): ByteRange[] {
  if (!(maxGap >= 0)) throw new RangeError(`maxGap must be a number >= 0, got ${maxGap}`);
  const sorted = ranges.filter(([a, b]) => b > a).sort((x, y) => x[0] - y[0]);
  const joined: [number, number][] = [];
  for (const [a, b] of sorted) {
    const last = joined[joined.length - 1];
    if (last !== undefined && a - last[1] <= maxGap) last[1] = Math.max(last[1], b);
    else joined.push([a, b]);
  }
  return joined;
}
