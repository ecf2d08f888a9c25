// One lint setup for the whole tree. Besides the usual TypeScript checks it enforces the
// layering of ARCHITECTURE.md §2 with import restrictions per folder:
//   app/common   imports nothing from node, electron or other layers
//   renderer     imports only *types* from app/common (and nothing from node/electron/engine)
//   app/engine   never imports electron; only app/engine/onnx imports onnxruntime-node
//   native       only native/index.js loads the compiled .node file; only app/engine (and tests,
//                bench) import native/
//   app/main, app/preload  never import the engine (it runs in its own process)
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const NODE_BUILTINS = ['node:*', 'fs', 'fs/*', 'path', 'os', 'child_process', 'worker_threads', 'net', 'http', 'https', 'crypto', 'url', 'module', 'process', 'stream', 'util', 'events', 'buffer'];
const NATIVE_BINARY = { group: ['**/*.node', '**/native/build/**'], message: 'Only native/index.js loads the compiled addon; import native/index.js instead.' };
const ONNX = { group: ['onnxruntime-node', 'onnxruntime-node/*', 'onnxruntime-common'], message: 'Only app/engine/onnx imports onnxruntime (ARCHITECTURE.md §2).' };
const ELECTRON = { group: ['electron', 'electron/*'], message: 'This layer must not import electron (ARCHITECTURE.md §2).' };
const ENGINE = { group: ['**/engine/**', '**/app/engine', '**/native/**', '**/native'], message: 'The engine runs in its own process: talk to it through the protocol in app/common.' };
const OTHER_LAYERS = { group: ['**/engine/**', '**/main/**', '**/preload/**', '**/server/**', '**/cli/**', '**/renderer/**', '**/native/**'], message: 'app/common imports nothing from other layers.' };
// The renderer has its own src/engine/ (the client over the bridge), so its rule names the app's engine by path.
const APP_ENGINE = { group: ['**/app/engine/**', '**/app/engine', '**/native/**', '**/native'], message: 'The engine runs in its own process: the renderer talks to it through the window API (renderer/src/engine/client.ts).' };
const NATIVE_OUTSIDE_ENGINE = { group: ['**/native/**', '**/native', '**/native/index.js'], message: 'Only app/engine imports the native addon.' };

/** @param {object[]} patterns @param {string[]} paths */
const restrict = (patterns, paths = []) => ['error', { patterns, paths: paths.map((name) => ({ name, message: 'Not allowed in this layer (ARCHITECTURE.md §2).' })) }];

export default tseslint.config(
  { ignores: ['node_modules/**', 'native/build/**', 'dist/**', 'renderer/dist/**', 'out/**', 'test-results/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { ecmaVersion: 2023, sourceType: 'module', globals: { console: 'readonly', process: 'readonly', URL: 'readonly', Buffer: 'readonly', setTimeout: 'readonly', clearTimeout: 'readonly', TextDecoder: 'readonly', TextEncoder: 'readonly', AbortController: 'readonly', AbortSignal: 'readonly', performance: 'readonly', fetch: 'readonly', setInterval: 'readonly', clearInterval: 'readonly', setImmediate: 'readonly', queueMicrotask: 'readonly' } },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
      'no-restricted-imports': restrict([NATIVE_BINARY]),
    },
  },
  {
    files: ['app/common/**'],
    rules: { 'no-restricted-imports': restrict([NATIVE_BINARY, ELECTRON, ONNX, OTHER_LAYERS, { group: NODE_BUILTINS, message: 'app/common runs in the renderer too: no node built-ins.' }]) },
  },
  {
    files: ['app/engine/**'],
    ignores: ['app/engine/onnx/**'],
    rules: { 'no-restricted-imports': restrict([NATIVE_BINARY, ELECTRON, ONNX]) },
  },
  {
    files: ['app/engine/onnx/**'],
    rules: { 'no-restricted-imports': restrict([NATIVE_BINARY, ELECTRON]) },
  },
  {
    files: ['app/main/**', 'app/preload/**'],
    rules: { 'no-restricted-imports': restrict([NATIVE_BINARY, ONNX, ENGINE]) },
  },
  {
    files: ['app/server/**', 'app/cli/**'],
    rules: { 'no-restricted-imports': restrict([NATIVE_BINARY, ELECTRON, ONNX, NATIVE_OUTSIDE_ENGINE]) },
  },
  {
    // The renderer may use app/common's types, never its values, and nothing of node or electron.
    // (renderer/vite.config.ts is build tooling that runs in node, not renderer code.)
    files: ['renderer/**'],
    ignores: ['renderer/vite.config.ts'],
    rules: {
      'no-restricted-imports': 'off',
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            NATIVE_BINARY, ELECTRON, ONNX, APP_ENGINE,
            { group: NODE_BUILTINS, message: 'The renderer is sandboxed: no node built-ins.' },
            { group: ['**/app/common/**', '**/app/common'], allowTypeImports: true, message: 'The renderer imports only types from app/common.' },
          ],
        },
      ],
    },
  },
  {
    files: ['native/index.js'],
    rules: { 'no-restricted-imports': 'off' },
  },
  {
    files: ['**/*.mjs', '**/*.cjs', '**/*.js'],
    languageOptions: { globals: { require: 'readonly', module: 'writable', __dirname: 'readonly' } },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
);
