// A burst the pool cannot serve within its SLO, sent with the official openai npm SDK (run by
// tests/integration/test_openai_sdk.py against a gateway whose sluice policy sheds past a 150 ms TTFT
// SLO). N distinct ~4,000-token prompts at once; prints one JSON line: how many the SDK got served
// with `maxRetries` retries (it honours the gateway's retry-after-ms), the errors' codes, and with
// maxRetries 0 the retry-after-ms values the refusals carried.
//   node shed_burst.mjs <base url> <model> <api key> <n> <maxRetries> <seed>
import OpenAI from 'openai';

const [baseURL, model, apiKey, n, retries, seedArg] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: Number(retries), timeout: 60000 });
const words = 'route token prefix cache replica engine batch queue decode prefill stream budget'.split(' ');
let seed = Number(seedArg);
const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
const prompt = () => Array.from({ length: 2300 }, () => words[Math.floor(rnd() * words.length)]).join(' ').slice(0, 16000);
const prompts = Array.from({ length: Number(n) }, prompt);
const results = await Promise.allSettled(prompts.map(async (content) => {
  const started = Date.now();
  await client.chat.completions.create({ model, max_tokens: 4, messages: [{ role: 'user', content }] });
  return Date.now() - started;
}));
const served = results.filter((r) => r.status === 'fulfilled').map((r) => r.value).sort((a, b) => a - b);
const errors = results.filter((r) => r.status === 'rejected').map((r) => r.reason);
console.log(JSON.stringify({
  served: served.length,
  codes: [...new Set(errors.map((e) => `${e.status} ${e.code}`))],
  retry_after_ms: errors.map((e) => Number(e.headers?.get?.('retry-after-ms') ?? e.headers?.['retry-after-ms'])).filter((x) => x > 0).sort((a, b) => a - b),
  served_p50_ms: served.length ? served[Math.floor(served.length / 2)] : null,
}));
