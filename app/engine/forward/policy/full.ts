// Policy 'full' (ARCHITECTURE.md §6, the reference): every layer attends every row of the pool, so it
// never selects, and a decode step under it has no selection figures.
import type { RowPolicy } from './row-policy.ts';

export class FullPolicy implements RowPolicy {
  readonly name = 'full';

  constructor(readonly denseLayers: number) {}

  sparseStep(): boolean {
    return false;
  }

  selects(): boolean {
    return false;
  }

  select(layer: number): Int32Array[] {
    throw new RangeError(`policy 'full' attends every row: layer ${layer} has no selection`);
  }

  figures(): void {}

  selection(): readonly Int32Array[] {
    return [];
  }

  truncate(): void {}
}
