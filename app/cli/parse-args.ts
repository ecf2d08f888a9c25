// Strict option parsing shared by the commands: an unknown option or a bad value is a
// UsageError naming it, never a silently ignored flag.
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { UsageError } from '../common/errors.ts';

export function parseCommandArgs<T extends NonNullable<ParseArgsConfig['options']>>(args: string[], options: T) {
  try {
    return parseArgs({ args, options, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message.split('\n')[0]! : String(error));
  }
}

/** A positive integer option; `name` appears in the error. */
export function positiveInteger(value: string | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value) || Number(value) <= 0 || !Number.isSafeInteger(Number(value))) {
    throw new UsageError(`${name} must be a positive integer, got '${value}'`);
  }
  return Number(value);
}

export function oneOf<const T extends readonly string[]>(value: string | undefined, allowed: T, name: string): T[number] | undefined {
  if (value === undefined) return undefined;
  if (!allowed.includes(value)) throw new UsageError(`${name} must be one of ${allowed.join(', ')}, got '${value}'`);
  return value as T[number];
}
