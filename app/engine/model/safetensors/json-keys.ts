// JSON.parse keeps the last of two equal keys without a word. Model headers must not do that
// (which of two tensors called the same is the real one?), so after JSON.parse has accepted a
// text, this scan walks it once more and reports the first key that repeats inside one object.

export interface DuplicateKey {
  /** The repeated key, decoded. */
  key: string;
  /** Keys of the enclosing objects, outermost first ('' entries for array elements). */
  path: string[];
  /** Character index of the second occurrence. */
  index: number;
}

interface Frame {
  keys: Set<string> | undefined; // undefined for arrays
  expectKey: boolean;
  name: string; // key under which this container sits in its parent
}

/** Finds a repeated key in a JSON text that JSON.parse already accepted; undefined when none. */
export function findDuplicateKey(text: string): DuplicateKey | undefined {
  const stack: Frame[] = [];
  let pendingName = ''; // the last key read, i.e. the name of the next value
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      const start = i;
      i++;
      while (i < text.length && text.charCodeAt(i) !== 0x22) {
        if (text.charCodeAt(i) === 0x5c /* \ */) i++;
        i++;
      }
      const top = stack[stack.length - 1];
      if (top?.keys !== undefined && top.expectKey) {
        const key = JSON.parse(text.slice(start, i + 1)) as string;
        if (top.keys.has(key)) return { key, path: stack.slice(1).map((frame) => frame.name), index: start };
        top.keys.add(key);
        top.expectKey = false;
        pendingName = key;
      }
    } else if (c === 0x7b /* { */) {
      stack.push({ keys: new Set(), expectKey: true, name: pendingName });
    } else if (c === 0x5b /* [ */) {
      stack.push({ keys: undefined, expectKey: false, name: pendingName });
      pendingName = '';
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
      pendingName = '';
    } else if (c === 0x2c /* , */) {
      const top = stack[stack.length - 1];
      if (top?.keys !== undefined) top.expectKey = true;
      else pendingName = '';
    }
  }
  return undefined;
}
