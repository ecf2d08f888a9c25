// The sampler's random numbers: xoshiro128** (Blackman & Vigna, 2018) with its 128-bit state
// filled from the seed by splitmix64, as the xoshiro authors recommend. Only 32-bit integer
// arithmetic (Math.imul, >>>) on the hot path, so one seed gives the same sequence on every
// platform and Node version. Not for cryptography.
import { UsageError } from '../../common/errors.ts';

const MASK64 = (1n << 64n) - 1n;

/** splitmix64: the seeding generator. Returns the next 64-bit output and the new state. */
function splitmix64(state: bigint): { value: bigint; state: bigint } {
  const next = (state + 0x9e3779b97f4a7c15n) & MASK64;
  let z = next;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64;
  return { value: z ^ (z >> 31n), state: next };
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

export class Rng {
  /** The seed this generator started from (a non-negative safe integer). */
  readonly seed: number;
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;

  /** `seed`: any integer in [0, 2^53). Throws UsageError otherwise. */
  constructor(seed: number) {
    if (!Number.isSafeInteger(seed) || seed < 0) {
      throw new UsageError(`seed must be an integer in [0, 2^53), got ${String(seed)}`, { field: 'seed', value: String(seed) });
    }
    this.seed = seed;
    const a = splitmix64(BigInt(seed));
    const b = splitmix64(a.state);
    this.s0 = Number(a.value & 0xffffffffn);
    this.s1 = Number(a.value >> 32n);
    this.s2 = Number(b.value & 0xffffffffn);
    this.s3 = Number(b.value >> 32n);
    // xoshiro must not start from the all-zero state (splitmix64 never yields it, but be sure).
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1;
  }

  /** The next 32-bit output, an integer in [0, 2^32). */
  nextUint32(): number {
    const s0 = this.s0;
    const s1 = this.s1;
    const result = Math.imul(rotl(Math.imul(s1, 5) >>> 0, 7), 9) >>> 0;
    const t = (s1 << 9) >>> 0;
    let s2 = this.s2 ^ s0;
    let s3 = this.s3 ^ s1;
    this.s1 = (s1 ^ s2) >>> 0;
    this.s0 = (s0 ^ s3) >>> 0;
    s2 = (s2 ^ t) >>> 0;
    s3 = rotl(s3 >>> 0, 11);
    this.s2 = s2;
    this.s3 = s3;
    return result;
  }

  /** A float in [0, 1): the next 32-bit output divided by 2^32 (exact in a double, never 1). */
  nextFloat(): number {
    return this.nextUint32() / 4294967296;
  }
}

/** A fresh seed for callers that did not give one (reported back so a run can be repeated). */
export function randomSeed(): number {
  return Math.floor(Math.random() * 4294967296);
}
