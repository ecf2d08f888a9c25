// The `longhand` command line: one entry, one module per command under commands/.
// Every failure ends as one clear line on stderr and a non-zero exit code.
import { isLonghandError, UsageError } from '../common/errors.ts';
import { runEvalCommand } from './commands/eval.ts';
import { runGenerate } from './commands/generate.ts';
import { runInspect } from './commands/inspect.ts';
import { runServe } from './commands/serve.ts';

const USAGE = `usage: longhand <command> [options]

commands:
  inspect <path> [--json] [--context N] [--kv-type fp16|fp32|int8]
      what a GGUF file or Hugging Face folder holds and what it will cost in memory
  generate --model PATH --prompt TEXT [--max-tokens N] [--temperature T] [--json] …
      generate text with the engine (streams to stdout; --json prints ids, text and timings)
  serve [--model PATH] [--port N] [--open] [--context N] [--threads N]
      OpenAI-compatible API and browser mode on 127.0.0.1 (prints the URL with its token first)
  eval --model PATH --text-file F --policy full|infinigen|streaming|h2o|quest|oracle|snapkv|window [--json] …
      accuracy of a KV policy against full: perplexity, top-1 agreement, KL, fetch ratio

run 'longhand <command> --help' for a command's options`;

type Command = (args: string[], io: CliIO) => Promise<number>;

export interface CliIO {
  out: (text: string) => void;
  err: (text: string) => void;
}

const COMMANDS: Record<string, Command> = {
  inspect: runInspect,
  generate: runGenerate,
  serve: runServe,
  eval: runEvalCommand,
};

const defaultIO: CliIO = {
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
};

/** Runs the CLI and returns the exit code (0 ok, 1 failure, 2 bad usage). */
export async function main(argv: string[], io: CliIO = defaultIO): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    io.out(`${USAGE}\n`);
    return name === undefined ? 2 : 0;
  }
  const command = COMMANDS[name];
  if (!command) {
    io.err(`longhand: unknown command '${name}'\n${USAGE}\n`);
    return 2;
  }
  try {
    return await command(rest, io);
  } catch (error) {
    if (error instanceof UsageError) {
      io.err(`longhand ${name}: ${error.message}\n`);
      return 2;
    }
    if (isLonghandError(error)) {
      io.err(`longhand ${name}: ${error.code}: ${error.message}\n`);
      return 1;
    }
    const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
    io.err(`longhand ${name}: internal error: ${message}\n`);
    return 1;
  }
}
