// Streams one chat completion through the gateway with the official openai
// client and prints what it saw as JSON lines on stdout:
//   {"type":"headers","status":200,"headers":{...}}
//   {"type":"chunk","content":"t0 ","finish_reason":null,"usage":null}
//   {"type":"done"}            or   {"type":"error","message":"..."}
// Usage: node client.mjs '{"baseURL":"http://127.0.0.1:8080/v1","model":"m",
//   "prompt":"...","maxTokens":16,"spoof":"6.6.6.6:1"}'
import OpenAI from 'openai';

const args = JSON.parse(process.argv[2]);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');

const client = new OpenAI({ baseURL: args.baseURL, apiKey: 'sk-local-test', maxRetries: 0, timeout: 20000 });
try {
  const headers = {};
  if (args.spoof) headers['x-gateway-destination-endpoint'] = args.spoof; // must never survive the gateway
  const { data: stream, response } = await client.chat.completions
    .create({
      model: args.model,
      messages: [{ role: 'user', content: args.prompt }],
      stream: true,
      max_tokens: args.maxTokens,
      stream_options: { include_usage: true },
    }, { headers })
    .withResponse();
  out({ type: 'headers', status: response.status, headers: Object.fromEntries(response.headers.entries()) });
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    out({ type: 'chunk', content: choice?.delta?.content ?? '', finish_reason: choice?.finish_reason ?? null, usage: chunk.usage ?? null });
  }
  out({ type: 'done' });
} catch (err) {
  out({ type: 'error', message: String(err?.message ?? err) });
  process.exitCode = 1;
}
