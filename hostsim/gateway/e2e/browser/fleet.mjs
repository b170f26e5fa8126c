// Loads the gateway's fleet page in headless Chromium (playwright-core
// driving /usr/bin/chromium, never a downloaded browser), waits until it
// shows the replicas and has polled a few times, reads the numbers twice a
// few seconds apart, takes a full-page screenshot and prints one JSON line:
//   {"rows":[...], "decisions":[first,last], "inFlight":[...], "chart":{x,y,width,height}, "missing":"...", "errors":[...]}
// Usage: node fleet.mjs '{"url":"http://127.0.0.1:8080/gpuroute/fleet?every=250","screenshot":"build/fleet.png"}'
import { chromium } from 'playwright-core';

const args = JSON.parse(process.argv[2]);
const browser = await chromium.launch({
  executablePath: args.chromium || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const out = { errors: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on('pageerror', (e) => out.errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') out.errors.push(m.text()); });
  await page.goto(args.url, { waitUntil: 'load' });
  await page.waitForSelector('#replicas tbody tr', { timeout: 15000 });
  const read = () => page.evaluate(() => ({
    rows: [...document.querySelectorAll('#replicas tbody tr')].map((tr) => tr.dataset.replica),
    decisions: Number(document.querySelector('[data-summary="decisions"] b')?.textContent ?? NaN),
    polls: Number(document.querySelector('[data-summary="polls"] b')?.textContent ?? NaN),
    inFlight: [...document.querySelectorAll('#replicas td[data-field="in_flight"]')].map((td) => td.textContent),
    legend: [...document.querySelectorAll('#legend [data-reason]')].map((s) => s.dataset.reason),
    missing: document.getElementById('missing').textContent,
    error: document.getElementById('error').textContent,
    chart: (({ x, y, width, height }) => ({ x, y, width, height }))(document.getElementById('chart').getBoundingClientRect()),
  }));
  await page.waitForFunction(() => Number(document.querySelector('[data-summary="polls"] b')?.textContent) >= 3, null, { timeout: 15000 });
  const first = await read();
  await page.waitForTimeout(args.waitMs || 3000);
  const last = await read();
  await page.screenshot({ path: args.screenshot, fullPage: true });
  Object.assign(out, { rows: last.rows, decisions: [first.decisions, last.decisions], polls: [first.polls, last.polls],
    inFlight: [first.inFlight, last.inFlight], legend: last.legend, missing: last.missing, pageError: last.error, chart: last.chart });
} catch (e) {
  out.errors.push(String(e?.message ?? e));
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(out) + '\n');
