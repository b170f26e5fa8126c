// requestpath.mjs runs BenchmarkRequestPathGuest64's scenario (plugin/router)
// with the module under V8, the WebAssembly engine Envoy runs modules in by
// default, instead of wazero: one Envoy of two worker VMs (the third argument
// sets how many: BenchmarkRequestPathGuest64W8 has 8), 64 vLLM replicas
// scraped every tick, a tick every 100 requests, 16 requests in flight, each
// a ~32 KB chat body, a response of four SSE token events and [DONE]. It is a
// benchmark host, not an emulation of Envoy: it implements the proxy-wasm ABI
// v0.2.1 calls the module makes on that path and nothing else (hostsim is the
// host the tests trust). Per request it times the module's callbacks with the
// host functions they call, which are a few JavaScript lines each here.
//
//   node --no-liftoff hostsim/v8/requestpath.mjs build/gpuroute.wasm [requests] [workers]
//
// --no-liftoff compiles every function with TurboFan up front, as
// proxy-wasm-cpp-host's V8 integration does (src/v8/v8.cc turns Liftoff off).
// It prints one JSON object: per-request percentiles in µs, and counts the
// run checked (every request routed to a configured replica, nothing logged
// at error level, one decision counted per request).
import { readFile } from 'node:fs/promises';
import process from 'node:process';
import { WASI } from 'node:wasi';

const replicas = 64;
const window = 16; // requests in flight (a multiple of the workers)
const tickEvery = 100; // requests per tick
const warmup = 3000;
const systems = 6; // distinct system prompts
const bodyBytes = 32 << 10;
const model = 'meta-llama/Llama-3.1-8B-Instruct';
const destinationHeader = 'x-gateway-destination-endpoint';

// proxy-wasm ABI v0.2.1 values.
const Ok = 0;
const NotFound = 1;
const CasMismatch = 8;
const Empty = 7;
const InternalFailure = 10;
const BufferType = { RequestBody: 0, ResponseBody: 1, HttpCallResponseBody: 4, VmConfiguration: 6, PluginConfiguration: 7 };
const MapType = { RequestHeaders: 0, ResponseHeaders: 2, HttpCallResponseHeaders: 6 };
const LogError = 4;

const enc = new TextEncoder();
const dec = new TextDecoder();

// The workload: BenchmarkRequestPathGuest64's bodies, metrics and config.
const words = ('the replica cache prefix token model request queue batch decode prefill ' +
  'kernel tensor adapter memory latency throughput schedule policy context window answer tool').split(' ');

function bodies(n) {
  const sys = [];
  for (let s = 0; s < systems; s++) {
    let b = `You are assistant ${s}. Follow the policy below.\n`;
    for (let i = 0; b.length < bodyBytes - 2048; i++) {
      b += words[(i * 7 + s * 3) % words.length] + (i % 13 === 12 ? '.\n' : ' ');
    }
    sys.push(b);
  }
  const out = [];
  for (let i = 0; i < n; i++) {
    let q = `Question ${i}: `;
    for (let j = 0; q.length < 1024 + (i % 8) * 128; j++) q += words[(i + j * 5) % words.length] + ' ';
    out.push(enc.encode(JSON.stringify({
      model, messages: [{ role: 'system', content: sys[i % systems] }, { role: 'user', content: q }],
      max_tokens: 256, stream: true,
    })));
  }
  return out;
}

function metrics(i) {
  const m = `{model_name="${model}"}`;
  return enc.encode(`# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting${m} ${i % 5}\n` +
    `# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running${m} ${8 + (i % 17)}\n` +
    `# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc${m} 0.${10 + (i % 80)}\n` +
    'vllm:cache_config_info{block_size="16",num_gpu_blocks="25000"} 1\n' +
    `# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total${m} ${1000000 + i}\n`);
}

function config() {
  const hw = ['h100', 'a100', 'l40s', 'h100'];
  const rs = [];
  for (let i = 0; i < replicas; i++) {
    rs.push({ name: `r${i}`, address: replicaAddress(i), metrics_cluster: `r${i}-metrics`, hardware: hw[i % hw.length] });
  }
  return enc.encode(JSON.stringify({ tick_ms: 100, replicas: rs }));
}

function replicaAddress(i) {
  return `10.0.${Math.floor(i / 250)}.${(i % 250) + 1}:8000`;
}

const sseChunk = enc.encode(`data: {"id":"cmpl-1","object":"chat.completion.chunk","model":"${model}",` +
  '"choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}\n\n');
const sseDone = enc.encode('data: [DONE]\n\n');
const requestHeaders = [
  [':method', 'POST'], [':path', '/v1/chat/completions'], [':authority', 'gateway'], [':scheme', 'https'],
  ['content-type', 'application/json'], ['user-agent', 'openai-python/1.40'],
  ['x-request-id', '5f0c7f3e-1d3b-4b8e-9f1a-3c2f6b9d8e71'],
];
const responseHeaders = [[':status', '200'], ['content-type', 'text/event-stream']];

// start is the virtual clock's start (hostsim's DefaultStart), in ns.
const start = BigInt(Date.UTC(2026, 0, 1)) * 1000000n;
const tickNanos = 100000000n;

// Host state shared by the VMs of one Envoy.
class Host {
  constructor() {
    // The module's clocks (WASI realtime and monotonic) read a virtual time
    // that moves a tick period per tick, as hostsim's does: the runs see the
    // same times, so they do the same work.
    this.clock = start;
    this.shared = new Map(); // key -> { value: Uint8Array, cas }
    // Shared queues by name (one vm_id here) and by id; the
    // benchmark's traffic never holds a request, so a message waits for a
    // dequeue (no proxy_on_queue_ready is delivered).
    this.queueIds = new Map();
    this.queues = [];
    this.cas = 0;
    this.metrics = []; // id -> { name, value }
    this.metricIds = new Map();
    this.errors = [];
    this.nextContext = 1;
  }
}

// A worker VM: one instance of the module and its root context.
class VM {
  constructor(host, module, pluginConfig) {
    this.host = host;
    this.pluginConfig = pluginConfig;
    this.calls = []; // http calls made, answered at the end of advance
    this.nextCallout = 1;
    this.cur = null; // the stream or call whose data the host functions read
    this.wasi = new WASI({ version: 'preview1', args: [], env: {}, returnOnExit: false });
    const wasiImports = this.wasi.getImportObject();
    const preview1 = { ...wasiImports.wasi_snapshot_preview1 };
    preview1.clock_time_get = (id, precision, retPtr) => {
      this.views().view.setBigUint64(retPtr, host.clock, true);
      return 0;
    };
    this.instance = new WebAssembly.Instance(module, { wasi_snapshot_preview1: preview1, env: this.hostFunctions() });
    this.x = this.instance.exports;
    this.wasi.initialize(this.instance);
    this.root = host.nextContext++;
    this.x.proxy_on_context_create(this.root, 0);
    if (!this.x.proxy_on_vm_start(this.root, 0)) throw new Error('proxy_on_vm_start failed');
    if (!this.x.proxy_on_configure(this.root, pluginConfig.length)) {
      throw new Error('proxy_on_configure failed: ' + host.errors.join('; '));
    }
  }

  // views returns the module's memory as bytes and as a DataView, made
  // anew only when the memory grew (a view per call is garbage for V8's
  // collector, whose pauses would land in the times measured).
  views() {
    const buf = this.x.memory.buffer;
    if (buf !== this.buf) {
      this.buf = buf;
      this.mem = new Uint8Array(buf);
      this.view = new DataView(buf);
    }
    return this;
  }

  bytes(ptr, len) { return this.views().mem.subarray(ptr, ptr + len); }
  string(ptr, len) { return dec.decode(this.bytes(ptr, len)); }
  u32(ptr, v) { this.views().view.setUint32(ptr, v, true); }

  // give copies b into memory the module allocates and stores its address
  // and length at retPtr and retLen.
  give(b, retPtr, retLen) {
    const p = this.x.proxy_on_memory_allocate(b.length);
    if (p === 0 && b.length > 0) return InternalFailure;
    this.views().mem.set(b, p);
    this.u32(retPtr, p);
    this.u32(retLen, b.length);
    return Ok;
  }

  headerMap(t) {
    const c = this.cur;
    if (!c) return null;
    if (t === MapType.RequestHeaders) return c.requestHeaders;
    if (t === MapType.ResponseHeaders) return c.responseHeaders;
    if (t === MapType.HttpCallResponseHeaders) return c.callHeaders;
    return null;
  }

  hostFunctions() {
    const host = this.host;
    return {
      proxy_log: (level, p, n) => {
        if (level >= LogError) host.errors.push(this.string(p, n));
        return Ok;
      },
      proxy_set_tick_period_milliseconds: () => Ok,
      proxy_get_buffer_bytes: (t, start, max, retPtr, retLen) => {
        let b;
        switch (t) {
          case BufferType.PluginConfiguration: b = this.pluginConfig; break;
          case BufferType.VmConfiguration: b = new Uint8Array(0); break;
          case BufferType.RequestBody: b = this.cur?.body; break;
          case BufferType.ResponseBody: b = this.cur?.chunk; break;
          case BufferType.HttpCallResponseBody: b = this.cur?.callBody; break;
        }
        if (!b) return NotFound;
        return this.give(start === 0 && max >= b.length ? b : b.subarray(start, start + max), retPtr, retLen);
      },
      proxy_get_header_map_value: (t, kp, kn, retPtr, retLen) => {
        const m = this.headerMap(t);
        const k = this.string(kp, kn).toLowerCase();
        const e = m?.find(([name]) => name === k);
        if (!e) return NotFound;
        return this.give(enc.encode(e[1]), retPtr, retLen);
      },
      proxy_replace_header_map_value: (t, kp, kn, vp, vn) => {
        const m = this.headerMap(t);
        if (!m) return NotFound;
        const k = this.string(kp, kn).toLowerCase();
        const v = this.string(vp, vn);
        const i = m.findIndex(([name]) => name === k);
        if (i < 0) m.push([k, v]); else m[i] = [k, v];
        for (let j = m.length - 1; j > i && i >= 0; j--) if (m[j][0] === k) m.splice(j, 1);
        return Ok;
      },
      proxy_remove_header_map_value: (t, kp, kn) => {
        const m = this.headerMap(t);
        if (!m) return NotFound;
        const k = this.string(kp, kn).toLowerCase();
        for (let j = m.length - 1; j >= 0; j--) if (m[j][0] === k) m.splice(j, 1);
        return Ok;
      },
      proxy_close_stream: () => {
        if (this.cur) this.cur.closed = true;
        return Ok;
      },
      proxy_send_local_response: (status) => {
        if (this.cur) this.cur.localReply = status;
        return Ok;
      },
      proxy_http_call: (up, un, hp, hn, bp, bn, tp, tn, timeout, retID) => {
        const id = this.nextCallout++;
        this.calls.push({ id, cluster: this.string(up, un) });
        this.u32(retID, id);
        return Ok;
      },
      proxy_get_shared_data: (kp, kn, retPtr, retLen, retCas) => {
        const e = host.shared.get(this.string(kp, kn));
        if (!e) return NotFound;
        const st = this.give(e.value, retPtr, retLen);
        this.u32(retCas, e.cas);
        return st;
      },
      proxy_set_shared_data: (kp, kn, vp, vn, cas) => {
        const k = this.string(kp, kn);
        const e = host.shared.get(k);
        if (e && cas !== 0 && e.cas !== cas) return CasMismatch; // a new key takes any cas, as in Envoy
        if (e && e.value.length === vn) {
          e.value.set(this.bytes(vp, vn)); // readers hold copies in their own memory
          e.cas = ++host.cas;
        } else {
          host.shared.set(k, { value: this.bytes(vp, vn).slice(), cas: ++host.cas });
        }
        return Ok;
      },
      proxy_define_metric: (type, np, nn, retID) => {
        const name = this.string(np, nn);
        let id = host.metricIds.get(name);
        if (id === undefined) {
          id = host.metrics.length;
          host.metrics.push({ name, value: 0n });
          host.metricIds.set(name, id);
        }
        this.u32(retID, id);
        return Ok;
      },
      proxy_increment_metric: (id, delta) => {
        const m = host.metrics[id];
        if (!m) return NotFound;
        m.value += delta;
        return Ok;
      },
      proxy_record_metric: (id, v) => {
        const m = host.metrics[id];
        if (!m) return NotFound;
        m.value = v;
        return Ok;
      },
      proxy_get_metric: (id, retPtr) => {
        const m = host.metrics[id];
        if (!m) return NotFound;
        this.views().view.setBigUint64(retPtr, BigInt.asUintN(64, m.value), true);
        return Ok;
      },
      proxy_register_shared_queue: (np, nn, retID) => {
        const name = this.string(np, nn);
        let id = host.queueIds.get(name);
        if (id === undefined) {
          id = host.queues.length + 1;
          host.queues.push([]);
          host.queueIds.set(name, id);
        }
        this.u32(retID, id);
        return Ok;
      },
      proxy_resolve_shared_queue: (vp, vn, np, nn, retID) => {
        const id = host.queueIds.get(this.string(np, nn));
        if (id === undefined) return NotFound;
        this.u32(retID, id);
        return Ok;
      },
      proxy_enqueue_shared_queue: (id, vp, vn) => {
        const q = host.queues[id - 1];
        if (!q) return NotFound;
        q.push(this.bytes(vp, vn).slice());
        return Ok;
      },
      proxy_dequeue_shared_queue: (id, retPtr, retLen) => {
        const q = host.queues[id - 1];
        if (!q) return NotFound;
        if (q.length === 0) return Empty;
        return this.give(q.shift(), retPtr, retLen);
      },
      proxy_continue_stream: () => Ok,
      proxy_get_property: () => NotFound,
      proxy_set_effective_context: () => Ok,
    };
  }

  // tick runs the root's tick, then answers the metrics calls it made.
  tick(metricsByCluster) {
    this.cur = null;
    this.x.proxy_on_tick(this.root);
    const calls = this.calls;
    this.calls = [];
    for (const c of calls) {
      const body = metricsByCluster.get(c.cluster);
      this.cur = body
        ? { callHeaders: [[':status', '200']], callBody: body }
        : { callHeaders: [[':status', '503']], callBody: new Uint8Array(0) };
      this.x.proxy_on_http_call_response(this.root, c.id, 1, this.cur.callBody.length, 0);
    }
    this.cur = null;
  }
}

function percentile(sorted, p) {
  if (sorted.length === 0) return 0;
  const i = Math.round(p * sorted.length) - 1;
  return sorted[Math.min(Math.max(i, 0), sorted.length - 1)];
}

// run drives one Envoy of workers VMs through warmup + requests requests
// and returns each measured request's time (µs, in request order) and what
// it checked.
function run(module, bs, requests, workers) {
  const host = new Host();
  const cfg = config();
  const vms = [];
  for (let w = 0; w < workers; w++) vms.push(new VM(host, module, cfg));
  const metricsByCluster = new Map();
  for (let i = 0; i < replicas; i++) metricsByCluster.set(`r${i}-metrics`, metrics(i));
  const addresses = new Set(Array.from({ length: replicas }, (_, i) => replicaAddress(i)));
  const open = new Array(window).fill(null);
  const now = () => process.hrtime.bigint();
  const r = { whole: new Array(requests).fill(0), opened: [], openedAfterTick: [], ticks: [], routed: 0, misrouted: 0 };
  let measuring = false;

  const advance = () => {
    host.clock += tickNanos;
    const t0 = now();
    for (const vm of vms) vm.tick(metricsByCluster);
    if (measuring) r.ticks.push(Number(now() - t0) / 1e3);
  };

  // finish runs a stream's response and end, returning its time in ns.
  const finish = (s) => {
    const vm = s.vm;
    const x = vm.x;
    let t = 0n;
    const call = (f) => {
      vm.cur = s;
      const t0 = now();
      f();
      t += now() - t0;
    };
    s.responseHeaders = responseHeaders.map((h) => [...h]);
    call(() => x.proxy_on_response_headers(s.id, s.responseHeaders.length, 0));
    for (let i = 0; i < 4; i++) {
      s.chunk = sseChunk;
      call(() => x.proxy_on_response_body(s.id, sseChunk.length, 0));
    }
    s.chunk = sseDone;
    call(() => x.proxy_on_response_body(s.id, sseDone.length, 1));
    call(() => {
      if (x.proxy_on_done(s.id)) {
        x.proxy_on_log(s.id);
        x.proxy_on_delete(s.id);
      }
    });
    vm.cur = null;
    return t;
  };

  const total = warmup + requests;
  for (let k = 0; k < total; k++) {
    if (k === warmup) {
      measuring = true;
      host.errors.length = 0;
    }
    if (k > 0 && k % tickEvery === 0) advance();
    const slot = k % window;
    const vm = vms[k % workers];
    if (open[slot]) {
      const s = open[slot];
      const t = s.openNs + finish(s);
      if (s.index >= 0) r.whole[s.index] = Number(t) / 1e3;
    }
    const s = {
      vm, id: host.nextContext++, body: bs[k % bs.length], index: measuring ? k - warmup : -1,
      requestHeaders: requestHeaders.map((h) => [...h]),
    };
    vm.cur = s;
    const t0 = now();
    vm.x.proxy_on_context_create(s.id, vm.root);
    vm.x.proxy_on_request_headers(s.id, s.requestHeaders.length, 0);
    vm.x.proxy_on_request_body(s.id, s.body.length, 1);
    s.openNs = now() - t0;
    vm.cur = null;
    if (measuring) {
      (k % tickEvery === 0 ? r.openedAfterTick : r.opened).push(Number(s.openNs) / 1e3);
      const dst = s.requestHeaders.filter(([name]) => name === destinationHeader);
      if (dst.length === 1 && addresses.has(dst[0][1]) && s.localReply === undefined) r.routed++;
      else r.misrouted++;
    }
    open[slot] = s;
  }
  // The last window of requests is still open: they are not counted.
  r.whole.length = Math.max(requests - window, 0);
  const stat = (name) => Number(host.metrics.find((m) => m.name === name)?.value ?? 0);
  r.scrapes = stat('gpuroute_scrapes_total');
  r.scrapeFailures = stat('gpuroute_scrape_failures_total');
  // The module passes each routed request's counts to the host at a tick.
  measuring = false;
  advance();
  r.decisions = stat('gpuroute_decisions_total');
  r.prefixHitShare = stat('gpuroute_prefix_hit_tokens_total') / Math.max(stat('gpuroute_prompt_tokens_total'), 1);
  r.errors = host.errors.slice(0, 5);
  return r;
}

async function main() {
  if (Number(process.versions.node.split('.')[0]) < 20) {
    process.stderr.write(`needs Node.js 20 or later (node:wasi preview1), not ${process.version}\n`);
    process.exit(2);
  }
  const [wasmPath, n = '20000', w = '2'] = process.argv.slice(2);
  const requests = Number(n);
  const workers = Number(w);
  if (!wasmPath || !(requests > window) || !(workers >= 1 && window % workers === 0)) {
    process.stderr.write(`usage: node --no-liftoff requestpath.mjs gpuroute.wasm [requests > ${window}] [workers dividing ${window}]\n`);
    process.exit(2);
  }
  const module = await WebAssembly.compile(await readFile(wasmPath));
  const bs = bodies(4096);
  // Each request's shortest time over replayRuns identical runs (same
  // inputs, same virtual clock): what the machine adds to one run rarely
  // hits the same request in all (BenchmarkRequestPathReplay64's method).
  const replayRuns = 3;
  const runs = [];
  for (let i = 0; i < replayRuns; i++) runs.push(run(module, bs, requests, workers));
  const first = runs[0];
  const best = first.whole.map((t, i) => Math.min(...runs.map((r) => r.whole[i])));
  const sorted = (v) => [...v].sort((a, b) => a - b);
  const round = (v) => Math.round(v * 100) / 100;
  const whole = sorted(first.whole);
  const bestSorted = sorted(best);
  const out = {
    engine: `V8 ${process.versions.v8}`,
    workers,
    requests,
    routed: first.routed,
    misrouted: runs.reduce((m, r) => m + r.misrouted, 0),
    decisions: first.decisions,
    scrapes: first.scrapes,
    'scrape-failures': first.scrapeFailures,
    'prefix-hit-share': round(first.prefixHitShare),
    errors: runs.flatMap((r) => r.errors).slice(0, 5),
    'p50-µs': round(percentile(whole, 0.5)),
    'p99-µs': round(percentile(whole, 0.99)),
    'max-µs': round(whole[whole.length - 1] ?? 0),
    'min-p50-µs': round(percentile(bestSorted, 0.5)),
    'min-p99-µs': round(percentile(bestSorted, 0.99)),
    'open-p50-µs': round(percentile(sorted(first.opened), 0.5)),
    'after-tick-open-p50-µs': round(percentile(sorted(first.openedAfterTick), 0.5)),
    'tick-p50-µs': round(percentile(sorted(first.ticks), 0.5)),
  };
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(out.misrouted === 0 && out.errors.length === 0 ? 0 : 1);
}

await main();
