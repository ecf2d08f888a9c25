// Electron's main process cannot load TypeScript: bundle app/main (and the preload) into
// out/ with esbuild before starting it. electron itself stays external.
const { buildSync } = require('esbuild');
const { join } = require('node:path');

function bundleMain(root) {
  const outfile = join(root, 'out', 'main', 'index.cjs');
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

module.exports = { bundleMain };
