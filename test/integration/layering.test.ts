// The layering rule of ARCHITECTURE.md §2 is a lint rule; prove it fires (and stays quiet) on
// imports placed in each layer.
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../support/models.ts';

const eslint = new ESLint({ cwd: PROJECT_ROOT });

async function restrictedImportErrors(filePath: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath: `${PROJECT_ROOT}/${filePath}` });
  return (result?.messages ?? [])
    .filter((m) => m.ruleId === 'no-restricted-imports' || m.ruleId === '@typescript-eslint/no-restricted-imports')
    .map((m) => m.message);
}

const cases: { file: string; code: string; allowed: boolean; why: string }[] = [
  { file: 'app/common/probe.ts', code: "import { readFileSync } from 'node:fs';\nexport const x = readFileSync;", allowed: false, why: 'common imports no node built-ins' },
  { file: 'app/common/probe.ts', code: "import type { LoadedModel } from '../engine/model/types.ts';\nexport type X = LoadedModel;", allowed: false, why: 'common imports no other layer' },
  { file: 'app/engine/model/probe.ts', code: "import * as ort from 'onnxruntime-node';\nexport const x = ort;", allowed: false, why: 'only engine/onnx imports ORT' },
  { file: 'app/engine/onnx/probe.ts', code: "import * as ort from 'onnxruntime-node';\nexport const x = ort;", allowed: true, why: 'engine/onnx may import ORT' },
  { file: 'app/engine/probe.ts', code: "import { app } from 'electron';\nexport const x = app;", allowed: false, why: 'the engine never imports electron' },
  { file: 'app/engine/probe.ts', code: "import { mapFile } from '../../native/index.js';\nexport const x = mapFile;", allowed: true, why: 'the engine may use the native facade' },
  { file: 'app/engine/probe.ts', code: "import addon from '../../native/build/Release/longhand.node';\nexport const x = addon;", allowed: false, why: 'only native/index.js loads the binary' },
  { file: 'app/cli/probe.ts', code: "import { mapFile } from '../../native/index.js';\nexport const x = mapFile;", allowed: false, why: 'only the engine imports native' },
  { file: 'app/main/probe.ts', code: "import { loadModel } from '../engine/model/load-model.ts';\nexport const x = loadModel;", allowed: false, why: 'main talks to the engine process, never imports it' },
  { file: 'app/main/probe.ts', code: "import { app } from 'electron';\nexport const x = app;", allowed: true, why: 'main is the electron layer' },
  { file: 'renderer/src/probe.ts', code: "import type { ErrorCode } from '../../app/common/errors.ts';\nexport type X = ErrorCode;", allowed: true, why: 'renderer may import types from common' },
  { file: 'renderer/src/probe.ts', code: "import { ERROR_CODES } from '../../app/common/errors.ts';\nexport const x = ERROR_CODES;", allowed: false, why: 'renderer imports only types from common' },
  { file: 'renderer/src/probe.ts', code: "import { readFileSync } from 'fs';\nexport const x = readFileSync;", allowed: false, why: 'renderer is sandboxed' },
];

describe('layering lint rule', () => {
  it.each(cases)('$file: $why', async ({ file, code, allowed }) => {
    const errors = await restrictedImportErrors(file, code);
    if (allowed) expect(errors).toEqual([]);
    else expect(errors.length).toBeGreaterThan(0);
  });
});
