#!/usr/bin/env node
// The `longhand` command. The project runs its TypeScript sources directly (no build step):
// tsx's loader is registered here, then the CLI entry is imported.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../app/cli/main.ts');
process.exitCode = await main(process.argv.slice(2));
