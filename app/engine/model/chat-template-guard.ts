// Rendering a chat template within limits. A chat template is code that comes with a model file
// (GGUF tokenizer.chat_template, tokenizer_config.json...), and @huggingface/jinja runs whatever it
// says, synchronously, in the engine process: `{% for x in range(10**9) %}` allocates a billion
// values before the first iteration, a macro that calls itself twice per level runs for ever, and
// `{% set ns.s = ns.s ~ ns.s %}` in a loop doubles a string until memory runs out. Nothing can
// interrupt a synchronous render from outside, so the limits are checked from inside: the
// interpreter below counts every node it evaluates and checks, after each one, the size of what it
// produced, the nesting depth and the clock. Any limit crossed throws LonghandError
// CHAT_TEMPLATE_INVALID naming the limit, the value reached and the allowed maximum.
//
// What stays unguarded: a single library call that builds a huge value in one step from inputs
// under the limits (`join` over the largest array of the largest strings) may allocate up to V8's
// string maximum (~0.5 G characters) before V8 itself refuses it with a RangeError, which render()
// reports as CHAT_TEMPLATE_INVALID too.
import { Environment as JinjaEnvironment, Interpreter as JinjaInterpreter, type Template } from '@huggingface/jinja';
import { LonghandError } from '../../common/errors.ts';

// The package's index.d.ts re-exports its runtime types from './runtime' without an extension,
// which this project's module resolution cannot follow; so the few shapes used here are restated.
type Program = Template['parsed'];
/** An AST node: the interpreter dispatches on `type`. */
type Statement = { type: string } | undefined;
/** A runtime value (StringValue, ArrayValue, ...): `value` is the JS value inside. */
type RuntimeValue = { type: string; value: unknown };
interface Environment {
  set(name: string, value: unknown): RuntimeValue;
}
const Environment = JinjaEnvironment as unknown as new () => Environment;
const Interpreter = JinjaInterpreter as unknown as new (env: Environment) => {
  run(program: Program): RuntimeValue;
  evaluate(statement: Statement, environment: Environment): RuntimeValue;
};

export interface RenderLimits {
  /** Nodes evaluated, in all. Real templates need a few hundred per message. */
  maxSteps: number;
  /** Characters in any one string the template builds (the output included). */
  maxChars: number;
  /** Items in any one list (range() included). */
  maxItems: number;
  /** Nested evaluations (macro recursion, deeply nested expressions). */
  maxDepth: number;
  /** Wall-clock time for the whole render, in ms. */
  maxMs: number;
  /** Width of the indent and tojson(indent=...) filters, which multiply a string's size. */
  maxIndent: number;
}

/**
 * Limits for a render whose messages hold `inputChars` characters in all: a fixed allowance plus a
 * multiple of the input, so a long document still renders and a runaway template still stops soon.
 */
export function defaultRenderLimits(inputChars: number, messages: number): RenderLimits {
  return {
    maxSteps: 500_000 + 2_000 * messages,
    maxChars: (1 << 20) + 4 * inputChars,
    maxItems: 100_000 + 4 * messages,
    maxDepth: 400,
    maxMs: 5_000,
    maxIndent: 256,
  };
}

const DEADLINE_EVERY = 1024; // steps between clock reads (performance.now() is not free)
const EVALUATED = 'LonghandEvaluated'; // a node whose value is already known (see guardedFilter)

type KnownNode = { type: typeof EVALUATED; value: RuntimeValue };

function limitError(what: string, reached: number, max: number, limit: keyof RenderLimits): LonghandError {
  return new LonghandError('CHAT_TEMPLATE_INVALID', `chat template stopped: ${what} (${reached} > ${max}); a runaway loop, recursion or output in the template?`, { stage: 'render', limit, reached, max });
}

class GuardedInterpreter extends Interpreter {
  private steps = 0;
  private depth = 0;
  private readonly deadline: number;

  constructor(
    env: Environment,
    private readonly limits: RenderLimits,
  ) {
    super(env);
    this.deadline = performance.now() + limits.maxMs;
  }

  /**
   * Counts `n` steps of work. Besides one per node, a loop pays for its items up front and range()
   * for its values, since the library prepares a loop's items (a closure each) before the body
   * runs: without that, nested loops over big lists cost seconds per counted step.
   */
  charge(n: number): void {
    this.steps += n;
    if (this.steps > this.limits.maxSteps) throw limitError('too many evaluation steps', this.steps, this.limits.maxSteps, 'maxSteps');
  }

  override evaluate(statement: Statement, environment: Environment): RuntimeValue {
    if ((statement as unknown as KnownNode | undefined)?.type === EVALUATED) return (statement as unknown as KnownNode).value;
    this.charge(1);
    if (this.steps % DEADLINE_EVERY === 0) {
      const now = performance.now();
      if (now > this.deadline) throw limitError('rendering took too long, in ms', Math.round(now - this.deadline + this.limits.maxMs), this.limits.maxMs, 'maxMs');
    }
    if (++this.depth > this.limits.maxDepth) throw limitError('evaluations nested too deeply', this.depth, this.limits.maxDepth, 'maxDepth');
    try {
      const result =
        statement?.type === 'FilterExpression' ? this.guardedFilter(statement, environment) : statement?.type === 'For' ? this.guardedFor(statement, environment) : super.evaluate(statement, environment);
      this.checkSize(result);
      return result;
    } finally {
      this.depth--;
    }
  }

  private checkSize(value: RuntimeValue): void {
    const inner = value.value;
    if (typeof inner === 'string' && inner.length > this.limits.maxChars) throw limitError('a string grew too long, in characters', inner.length, this.limits.maxChars, 'maxChars');
    if (Array.isArray(inner) && inner.length > this.limits.maxItems) throw limitError('a list grew too long, in items', inner.length, this.limits.maxItems, 'maxItems');
  }

  // (Method names must not collide with the library's own evaluateX methods, which these override.)
  /** A for loop: evaluate its iterable first and charge its length, then run it on that value. */
  private guardedFor(statement: { type: string }, environment: Environment): RuntimeValue {
    const node = statement as unknown as { iterable: { type: string; lhs?: Statement } };
    const select = node.iterable.type === 'SelectExpression';
    const iterable = this.evaluate((select ? node.iterable.lhs : node.iterable) as Statement, environment);
    const inner = iterable.value;
    this.charge(Array.isArray(inner) ? inner.length : inner instanceof Map ? inner.size : 0);
    const known = { type: EVALUATED, value: iterable } as unknown as Statement;
    const rebuilt = { ...node, iterable: select ? { ...node.iterable, lhs: known } : known };
    return super.evaluate(rebuilt as unknown as Statement, environment);
  }

  /**
   * indent(width) and tojson(indent=width) allocate width × lines at once, before any size check
   * could see the result: evaluate their operand and arguments first, refuse a width over the
   * limit or an indent whose result would be too long, then let the library apply the filter to
   * the values already computed (so nothing is evaluated twice).
   */
  private guardedFilter(statement: { type: string }, environment: Environment): RuntimeValue {
    const node = statement as unknown as { operand: Statement; filter: { type: string; callee?: { type: string; value?: unknown }; args?: Statement[] } };
    const filter = node.filter;
    const name = filter.type === 'CallExpression' && filter.callee?.type === 'Identifier' ? filter.callee.value : undefined;
    if ((name !== 'indent' && name !== 'tojson') || !Array.isArray(filter.args) || filter.args.some((arg) => (arg?.type ?? '').includes('Spread'))) {
      return super.evaluate(statement, environment);
    }
    const known = (value: RuntimeValue): Statement => ({ type: EVALUATED, value }) as unknown as Statement;
    const operand = this.evaluate(node.operand, environment);
    let width: unknown;
    const args = filter.args.map((arg, index) => {
      if (arg?.type === 'KeywordArgumentExpression') {
        const keyword = arg as unknown as { key: { value: string }; value: Statement };
        const value = this.evaluate(keyword.value, environment);
        if ((name === 'indent' && keyword.key.value === 'width') || (name === 'tojson' && keyword.key.value === 'indent')) width = value.value;
        return { ...keyword, value: known(value) } as unknown as Statement;
      }
      const value = this.evaluate(arg, environment);
      if (name === 'indent' && index === 0) width = value.value;
      return known(value);
    });
    if (typeof width === 'number') {
      if (width > this.limits.maxIndent) throw limitError(`${name} width too large`, width, this.limits.maxIndent, 'maxIndent');
      if (name === 'indent' && typeof operand.value === 'string') {
        const lines = operand.value.split('\n').length;
        const size = operand.value.length + Math.max(0, width) * lines;
        if (size > this.limits.maxChars) throw limitError('an indent would grow a string too long, in characters', size, this.limits.maxChars, 'maxChars');
      }
    }
    // the interpreter dispatches on `type` strings, so plain copies of the nodes do
    const rebuilt = { ...node, operand: known(operand), filter: { ...filter, args } };
    return super.evaluate(rebuilt as unknown as Statement, environment);
  }
}

/** range() as Python has it, refusing more than `maxItems` values before allocating any. */
function boundedRange(maxItems: number, charge: (n: number) => void) {
  return (start: unknown, stop?: unknown, step: unknown = 1): number[] => {
    let from = start as number;
    let to = stop as number;
    if (stop === undefined) {
      to = from;
      from = 0;
    }
    const by = step as number;
    if (![from, to, by].every((n) => typeof n === 'number' && Number.isFinite(n))) throw new Error('range() takes finite numbers');
    if (by === 0) throw new Error('range() step must not be zero');
    const count = Math.max(0, Math.ceil((to - from) / by));
    if (count > maxItems) throw limitError('range() too long, in items', count, maxItems, 'maxItems');
    charge(count);
    return Array.from({ length: count }, (_, i) => from + i * by);
  };
}

/** strftime_now as @huggingface/jinja defines it (%Y %m %d %b %B %H %M %%, local time). */
function strftimeNow(format: unknown): string {
  if (typeof format !== 'string') throw new Error('strftime_now() takes a format string');
  const date = new Date();
  const pad2 = (n: number): string => String(n).padStart(2, '0');
  const codes: Record<string, () => string> = {
    '%Y': () => String(date.getFullYear()),
    '%m': () => pad2(date.getMonth() + 1),
    '%d': () => pad2(date.getDate()),
    '%b': () => new Intl.DateTimeFormat(undefined, { month: 'short' }).format(date),
    '%B': () => new Intl.DateTimeFormat(undefined, { month: 'long' }).format(date),
    '%H': () => pad2(date.getHours()),
    '%M': () => pad2(date.getMinutes()),
    '%%': () => '%',
  };
  return format.replace(/%[YmdbBHM%]/g, (code) => codes[code]!());
}

/**
 * Template.render(variables) within `limits`. The globals are those @huggingface/jinja's own
 * render sets up (its setupGlobals is not exported), with range() bounded.
 */
export function renderWithLimits(program: Program, variables: Record<string, unknown>, limits: RenderLimits): string {
  const env = new Environment();
  const interpreter = new GuardedInterpreter(env, limits);
  const globals: Record<string, unknown> = {
    false: false,
    true: true,
    none: null,
    False: false,
    True: true,
    None: null,
    raise_exception: (message: unknown) => {
      throw new Error(String(message));
    },
    range: boundedRange(limits.maxItems, (n) => interpreter.charge(n)),
    strftime_now: strftimeNow,
  };
  for (const [name, value] of Object.entries({ ...globals, ...variables })) env.set(name, value);
  const result = interpreter.run(program);
  return result.value as string;
}
