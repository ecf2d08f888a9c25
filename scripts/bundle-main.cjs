// Electron cannot load TypeScript: bundle what the desktop app runs into out/ with esbuild.
//   out/main/index.cjs     the main process (electron stays external)
//   out/preload/index.cjs  the sandboxed preload (may only require 'electron'; one CommonJS file)
//   out/engine/host.mjs    the engine host for utilityProcess.fork (ES module: the native loader
//                          uses top-level await). onnxruntime-node and node-llama-cpp stay
//                          external packages; native/index.js stays external too, imported from
//                          its own place, because it finds longhand.node next to itself.
const { buildSync } = require('esbuild');
const { mkdirSync, writeFileSync } = require('node:fs');
const { dirname, join, relative, sep } = require('node:path');

/** Packages the engine host bundle imports at run time (they must ship in node_modules). */
const HOST_EXTERNAL_PACKAGES = ['onnxruntime-node', 'node-llama-cpp', 'electron'];

function outputs(root) {
  return {
    main: join(root, 'out', 'main', 'index.cjs'),
    preload: join(root, 'out', 'preload', 'index.cjs'),
    engineHost: join(root, 'out', 'engine', 'host.mjs'),
  };
}

/**
 * Leaves native/index.js out of the host bundle (esbuild's buildSync takes no plugins): it is
 * marked external as the engine wrote it ('../../../native/index.js' from app/engine/<dir>/),
 * then each such import is pointed at the real file relative to the bundle.
 */
const NATIVE_LOADER_EXTERNAL = '*/native/index.js';
function rewriteNativeImports(code, root, outfile) {
  const target = relative(dirname(outfile), join(root, 'native', 'index.js')).split(sep).join('/');
  return code.replace(/(["'])(?:\.\.\/)+native\/index\.js\1/g, (_match, quote) => `${quote}${target.startsWith('.') ? target : `./${target}`}${quote}`);
}

function bundleMainProcess(root) {
  const outfile = outputs(root).main;
  buildSync({
    entryPoints: [join(root, 'app', 'main', 'index.ts')],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node20',
    external: ['electron'],
    logLevel: 'error',
  });
  return outfile;
}

function bundlePreload(root) {
  const outfile = outputs(root).preload;
  buildSync({
    entryPoints: [join(root, 'app', 'preload', 'index.ts')],
    outfile,
    bundle: true,
    platform: 'browser',
    format: 'cjs',
    target: 'chrome120',
    external: ['electron'],
    logLevel: 'error',
  });
  return outfile;
}

function bundleEngineHost(root) {
  const outfile = outputs(root).engineHost;
  const result = buildSync({
    entryPoints: [join(root, 'app', 'engine', 'host', 'main.ts')],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    external: [...HOST_EXTERNAL_PACKAGES, NATIVE_LOADER_EXTERNAL],
    write: false,
    // CommonJS dependencies inside an ES module bundle still call require().
    banner: { js: "import { createRequire as __longhandCreateRequire } from 'node:module'; const require = __longhandCreateRequire(import.meta.url);" },
    logLevel: 'error',
  });
  mkdirSync(dirname(outfile), { recursive: true });
  writeFileSync(outfile, rewriteNativeImports(result.outputFiles[0].text, root, outfile));
  return outfile;
}

/** Bundles main, preload and engine host; returns their paths. */
function bundleAll(root) {
  return { main: bundleMainProcess(root), preload: bundlePreload(root), engineHost: bundleEngineHost(root) };
}

/** What `npm start` runs: everything bundled; returns the main entry. */
function bundleMain(root) {
  return bundleAll(root).main;
}

module.exports = { bundleMain, bundleAll, outputs, HOST_EXTERNAL_PACKAGES };
