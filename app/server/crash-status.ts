// What the window is told when the server's engine process dies: the same reasons as the
// Electron supervisor (app/main/engine-supervisor.ts classifyExit), worked out from what a
// child_process reports (exit code or signal) instead of Electron's child-process-gone.
//   SIGKILL / SIGTERM / SIGINT  → 'killed'  (the OOM killer, a user, another program)
//   a fault signal (SIGSEGV…)   → 'crashed' (a bug in native code or a broken model)
//   any other exit              → 'crashed' with its exit code
// The process's exit cannot tell an OOM kill from any other SIGKILL, so 'oom' is not claimed.
import type { EngineStatus } from '../common/window-api.ts';

export type CrashedStatus = Extract<EngineStatus, { state: 'crashed' }>;

const KILL_SIGNALS = new Set(['SIGKILL', 'SIGTERM', 'SIGINT', 'SIGHUP', 'SIGQUIT']);

/** `during` says what the engine was doing ("while generating", "while loading x.gguf"), or ''. */
export function crashStatus(exit: { code: number | null; signal: string | null }, during = ''): CrashedStatus {
  const when = during ? ` ${during}` : '';
  if (exit.signal && KILL_SIGNALS.has(exit.signal)) {
    return {
      state: 'crashed',
      reason: 'killed',
      message: `The engine process was killed by ${exit.signal}${when} (by the system or another program; often because memory ran low). Restart the engine to go on.`,
      willRestart: false,
    };
  }
  const how = exit.signal ? `with ${exit.signal} (a fault in native code)` : `(exit code ${exit.code})`;
  return { state: 'crashed', reason: 'crashed', message: `The engine crashed ${how}${when}. Restart the engine to go on.`, willRestart: false };
}

/** A restart that could not start a process. */
export function launchFailedStatus(error: unknown): CrashedStatus {
  const why = error instanceof Error ? error.message : String(error);
  return { state: 'crashed', reason: 'launch-failed', message: `The engine could not start: ${why}.`, willRestart: false };
}
