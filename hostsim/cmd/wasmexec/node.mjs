// node.mjs is wasmexec's twin under V8, the WebAssembly engine Envoy runs
// modules in by default: it runs a GOOS=wasip1 GOARCH=wasm program, typically
// a test binary, in Node.js with its WASI (wasi_snapshot_preview1), so the
// same benchmark can be compared across engines:
//
//   GOOS=wasip1 GOARCH=wasm go test -timeout 0 -exec "node $PWD/hostsim/cmd/wasmexec/node.mjs" -run '^$' -bench . ./scoring
//
// -timeout 0: go test's default timeout arms a timer in the guest, whose
// runtime then sleeps in WASI poll_oneoff while a benchmark runs; Node 20's
// poll_oneoff crashed the process now and then (SIGSEGV, SIGTRAP, V8's
// "unreachable code": 4 of 24 runs of plugin/router's BenchmarkDecision64).
//
// As wasmexec does, it passes the arguments and the environment, mounts the
// module directory (where go.mod is, found from the working directory) and
// the temporary directory at their own paths, answers the proxy-wasm host
// functions (module "env") as a host with nothing in it (every proxy_get_*
// NotFound, every other call Ok) and exits with the guest's code.
// Requires Node.js 20 or later (node:wasi's preview1).
import { readFile, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import process from 'node:process';
import { WASI } from 'node:wasi';

const resultOk = 0;
const resultNotFound = 1;

async function moduleRoot(dir) {
  for (;;) {
    try {
      await stat(join(dir, 'go.mod'));
      return dir;
    } catch {
      const parent = dirname(dir);
      if (parent === dir) return '';
      dir = parent;
    }
  }
}

if (Number(process.versions.node.split('.')[0]) < 20) {
  process.stderr.write(`needs Node.js 20 or later (node:wasi preview1), not ${process.version}\n`);
  process.exit(2);
}
const [path, ...args] = process.argv.slice(2);
if (!path) {
  process.stderr.write('usage: node node.mjs prog.wasm [args...]\n');
  process.exit(2);
}
const wd = process.cwd();
const tmp = tmpdir();
const root = (await moduleRoot(wd)) || wd;
const wasi = new WASI({
  version: 'preview1',
  args: [path, ...args],
  // Go's wasip1 runtime takes its working directory from PWD.
  env: { ...process.env, PWD: wd, TMPDIR: tmp },
  preopens: { [root]: root, [tmp]: tmp },
  // proc_exit ends the process from inside the guest: unwinding it back to
  // start() (returnOnExit) crashed Node 20 too, 1 run in 12 without the
  // timer; none in 32 this way.
  returnOnExit: false,
});
const module = await WebAssembly.compile(await readFile(path));
const imports = wasi.getImportObject();
for (const imp of WebAssembly.Module.imports(module)) {
  if (imp.module !== 'env' || imp.kind !== 'function') continue;
  const answer = imp.name.startsWith('proxy_get_') ? resultNotFound : resultOk;
  (imports.env ??= {})[imp.name] = () => answer;
}
wasi.start(await WebAssembly.instantiate(module, imports));
