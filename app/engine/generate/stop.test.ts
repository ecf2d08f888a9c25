import { describe, expect, it } from 'vitest';
import { UsageError } from '../../common/errors.ts';
import { StopMatcher } from './stop.ts';

/** Feeds the pieces; returns what was emitted (plus flush when no stop) and whether it stopped. */
function run(stops: string[], pieces: string[]): { text: string; stopped: boolean; steps: string[]; matched: string | undefined } {
  const m = new StopMatcher(stops);
  const steps: string[] = [];
  let stopped = false;
  for (const piece of pieces) {
    const step = m.push(piece);
    steps.push(step.emit);
    if (step.stopped) {
      stopped = true;
      break;
    }
  }
  if (!stopped) steps.push(m.flush());
  return { text: steps.join(''), stopped, steps, matched: m.matched };
}

/** Reference: the text before the stop that ends first (longest among equal ends). */
function reference(stops: string[], text: string): { text: string; stopped: boolean } {
  for (let end = 1; end <= text.length; end++) {
    const hits = stops.filter((s) => s.length <= end && text.slice(end - s.length, end) === s);
    if (hits.length > 0) {
      const longest = Math.max(...hits.map((s) => s.length));
      return { text: text.slice(0, end - longest), stopped: true };
    }
  }
  return { text, stopped: false };
}

/** Every way of cutting text into pieces (2^(n-1) of them). */
function* splits(text: string): Generator<string[]> {
  const n = text.length;
  for (let mask = 0; mask < 1 << (n - 1); mask++) {
    const pieces: string[] = [];
    let start = 0;
    for (let i = 1; i < n; i++) {
      if (mask & (1 << (i - 1))) {
        pieces.push(text.slice(start, i));
        start = i;
      }
    }
    pieces.push(text.slice(start));
    yield pieces;
  }
}

describe('StopMatcher', () => {
  it('passes text through when no stop string could start', () => {
    expect(run(['STOP'], ['hello', ' world'])).toMatchObject({ text: 'hello world', stopped: false, steps: ['hello', ' world', ''] });
    expect(run([], ['a', 'b'])).toMatchObject({ text: 'ab', stopped: false });
  });

  it('holds back a possible start and releases it when it turns out not to be one', () => {
    const m = new StopMatcher(['</s>']);
    expect(m.push('Hello <')).toEqual({ emit: 'Hello ', stopped: false });
    expect(m.pending).toBe('<');
    expect(m.push('/')).toEqual({ emit: '', stopped: false });
    expect(m.push('p>')).toEqual({ emit: '</p>', stopped: false });
    expect(m.push(' <')).toEqual({ emit: ' ', stopped: false });
    expect(m.flush()).toBe('<'); // end of stream: the held text is final
  });

  it('a stop split across pieces is never emitted, the text before it is', () => {
    expect(run(['</s>'], ['The end', '<', '/', 's', '>', 'junk'])).toMatchObject({
      text: 'The end',
      stopped: true,
      steps: ['The end', '', '', '', ''],
      matched: '</s>',
    });
    expect(run(['\n\nUser:'], ['Sure.\n', '\nUs', 'er: hi'])).toMatchObject({ text: 'Sure.', stopped: true });
    expect(run(['STOP'], ['xxSTOPyy'])).toMatchObject({ text: 'xx', stopped: true, steps: ['xx'] });
  });

  it('overlapping stops: the one that ends first wins, however the text is cut', () => {
    expect(run(['ab', 'abc'], ['xabc'])).toMatchObject({ text: 'x', matched: 'ab' });
    expect(run(['abc', 'ab'], ['x', 'a', 'b', 'c'])).toMatchObject({ text: 'x', matched: 'ab' });
    // "c" ends before "abcd" could
    expect(run(['abcd', 'c'], ['abcd'])).toMatchObject({ text: 'ab', matched: 'c' });
    // equal ends: the longer one (it starts earlier)
    expect(run(['bc', 'abc'], ['xabc'])).toMatchObject({ text: 'x', matched: 'abc' });
    // a stop whose prefix repeats
    expect(run(['aab'], ['a', 'a', 'a', 'b', '!'])).toMatchObject({ text: 'a', stopped: true });
  });

  it('matches the reference for every way of cutting the text', () => {
    const cases: Array<[string[], string]> = [
      [['ab', 'abc'], 'xabcab'],
      [['aab', 'b'], 'aaaab'],
      [['abab'], 'xabababy'],
      [['ba', 'aab'], 'caaabz'],
      [['xyz'], 'xyxyxy'],
      [['。', '\n\n'], 'ok\n.\n\n'],
    ];
    for (const [stops, text] of cases) {
      const want = reference(stops, text);
      for (const pieces of splits(text)) {
        const got = run(stops, pieces);
        expect({ text: got.text, stopped: got.stopped }, `${JSON.stringify(stops)} ${JSON.stringify(pieces)}`).toEqual(want);
      }
    }
  });

  it('unicode: multi-unit characters in stops and text', () => {
    expect(run(['🛑'], ['go ', '🚦', ' ', '🛑', ' no'])).toMatchObject({ text: 'go 🚦 ', stopped: true });
    expect(run(['終わり'], ['物語は', '終', 'わ', 'り', 'です'])).toMatchObject({ text: '物語は', stopped: true });
    // 🛑 and 🛒 share their high surrogate: no false match, and no half character is emitted
    const m = new StopMatcher(['🛑']);
    expect(m.push('a🛒')).toEqual({ emit: 'a🛒', stopped: false });
    expect(run(['é'], ['cafe\u0301'])).toMatchObject({ text: 'cafe\u0301', stopped: false }); // no normalisation
    expect(run(['né'], ['ca', 'fé n', 'é!'])).toMatchObject({ text: 'café ', stopped: true });
  });

  it('after a stop further pieces are ignored and flush gives nothing', () => {
    const m = new StopMatcher(['.']);
    expect(m.push('a.b')).toEqual({ emit: 'a', stopped: true });
    expect(m.stopped).toBe(true);
    expect(m.push('more')).toEqual({ emit: '', stopped: true });
    expect(m.flush()).toBe('');
  });

  it('rejects empty or non-string stop strings', () => {
    expect(() => new StopMatcher([''])).toThrow(UsageError);
    expect(() => new StopMatcher(['ok', 3 as unknown as string])).toThrow(UsageError);
  });
});
