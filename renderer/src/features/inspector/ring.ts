// A fixed-capacity ring buffer: pushing past capacity overwrites the oldest item. Reads come
// out oldest first. No allocation per push once full.

export class RingBuffer<T> {
  private readonly items: (T | undefined)[];
  private start = 0;
  private count = 0;

  constructor(readonly capacity: number) {
    if (!Number.isInteger(capacity) || capacity <= 0) throw new RangeError('capacity must be a positive integer');
    this.items = new Array<T | undefined>(capacity);
  }

  get length(): number {
    return this.count;
  }

  push(item: T): void {
    if (this.count < this.capacity) {
      this.items[(this.start + this.count) % this.capacity] = item;
      this.count += 1;
    } else {
      this.items[this.start] = item;
      this.start = (this.start + 1) % this.capacity;
    }
  }

  /** The i-th item, oldest first (negative: from the newest, -1 = newest). */
  at(index: number): T | undefined {
    const i = index < 0 ? this.count + index : index;
    if (i < 0 || i >= this.count) return undefined;
    return this.items[(this.start + i) % this.capacity];
  }

  /** The newest `n` items (all when n is omitted), oldest first. */
  toArray(n = this.count): T[] {
    const take = Math.max(0, Math.min(n, this.count));
    const out: T[] = [];
    for (let i = this.count - take; i < this.count; i++) out.push(this.items[(this.start + i) % this.capacity] as T);
    return out;
  }

  clear(): void {
    this.items.fill(undefined);
    this.start = 0;
    this.count = 0;
  }
}
