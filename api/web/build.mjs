// Builds the page into an output directory (default dist/): app.js bundled and minified by the
// pinned esbuild, index.html and style.css copied. Deterministic, so tests/web.rs can rebuild
// into a temp dir and require byte equality with the committed dist/.
import { build } from 'esbuild';
import { copyFileSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] ?? join(here, 'dist');
mkdirSync(out, { recursive: true });
await build({
  entryPoints: [join(here, 'src/main.ts')],
  bundle: true,
  format: 'esm',
  target: 'es2020',
  minify: true,
  legalComments: 'none',
  outfile: join(out, 'app.js'),
  logLevel: 'warning',
});
for (const f of ['index.html', 'style.css', 'api-docs.html', 'api-docs.js']) copyFileSync(join(here, f), join(out, f));
// dist/scalar.js (the API reference's renderer) is vendored by vendor-scalar.sh, not built here.
console.log(`built ${out}`);
