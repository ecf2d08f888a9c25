// Runs @doyensec/electronegativity's scanner on one folder and writes its SARIF results file.
// Why not its CLI: electronegativity 1.10.3 does not declare `commander` among its dependencies,
// so its CLI picks up whatever commander npm hoists (here 10.x, whose parsed options are no
// longer properties of the program) and prints its usage instead of scanning. The scanner itself
// (dist/runner.js) takes plain options, so this calls it directly.
//
// Why LANG: the tool looks its messages up by process.env.LANG and knows only en-US, es-ES and
// fr-FR; with LANG=C.UTF-8 its messages come out as bare keys. It also tries to download updated
// translations (a 1 s request to S3); the test runs this script with test/support/no-network.ts
// loaded, so that request is refused and the bundled en-US messages are used.
//
// Usage: node --import tsx --import ./test/support/no-network.ts test/security/run-electronegativity.cjs
//          <input folder> <output.sarif> <electron version>
// Prints one JSON line: { input, files, issues, errors: [{ file, message, tolerable }] }.
'use strict';
const path = require('node:path');

process.env.LANG = 'en-US';

async function main() {
  const [input, output, electronVersion] = process.argv.slice(2);
  if (!input || !output || !electronVersion) throw new Error('usage: run-electronegativity.cjs <input folder> <output.sarif> <electron version>');
  const run = require('@doyensec/electronegativity/dist/runner.js');
  const result = await run({
    input: path.resolve(input),
    output: path.resolve(output),
    isSarif: true,
    customScan: [],
    excludeFromScan: [],
    isRelative: true,
    isVerbose: false,
    electronVersionOverride: electronVersion,
    parserPlugins: [],
  }, false);
  const { list_files } = require('@doyensec/electronegativity/dist/util/file.js');
  const files = await list_files(path.resolve(input));
  process.stdout.write(`${JSON.stringify({ input, files: files.length, issues: result.issues.length, errors: result.errors })}\n`);
}

main().catch((error) => {
  process.stderr.write(`${error && error.stack ? error.stack : String(error)}\n`);
  process.exit(1);
});
