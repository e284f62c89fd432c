// The official openai npm SDK against a sluice gateway (run by tests/integration/test_openai_sdk.py,
// which starts the gateway and the simulated replicas). Each check prints one JSON line; the last
// line is "N passed, N failed". Exit status 1 when any check failed.
//   node openai_sdk.mjs <base url> <model> <alias>
import OpenAI from 'openai';

const [baseURL, model, alias] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'sk-unused', maxRetries: 0, timeout: 20000 });
let passed = 0, failed = 0;

function check(cond, what) {
  if (!cond) throw new Error('expected: ' + what);
}

async function run(name, fn) {
  try {
    const detail = await fn();
    passed++;
    console.log(JSON.stringify({ check: name, ok: true, detail }));
  } catch (e) {
    failed++;
    console.log(JSON.stringify({ check: name, ok: false, error: String(e && e.stack || e) }));
  }
}

await run('responses.create', async () => {
  const r = await client.responses.create({ model: alias, input: 'Say hello', instructions: 'Be brief.', max_output_tokens: 8 });
  check(r.object === 'response' && r.id.startsWith('resp_'), 'a response object');
  check(r.model === alias, `model echoed as the alias, got ${r.model}`);
  check(r.output_text.length > 0, 'output_text assembled by the SDK');
  check(r.usage.output_tokens === 8 && r.usage.input_tokens > 0, 'usage');
  return { id: r.id, output_tokens: r.usage.output_tokens };
});

await run('responses.create stream', async () => {
  const stream = await client.responses.create({ model, input: [{ role: 'user', content: 'Stream it' }], stream: true, max_output_tokens: 6 });
  let text = '', types = [], completed = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed') completed = ev.response;
  }
  check(types[0] === 'response.created', 'response.created first');
  check(completed !== null, 'response.completed');
  check(completed.output[0].content[0].text === text, 'deltas assembled = final text');
  check(completed.usage && completed.usage.output_tokens === 6, 'usage in response.completed');
  return { events: types.length, chars: text.length };
});

await run('responses.stream helper + previous_response_id', async () => {
  const first = await client.responses.create({ model, input: 'Remember: blue.' });
  const stream = client.responses.stream({ model, input: 'What colour?', previous_response_id: first.id, max_output_tokens: 4 });
  let deltas = '';
  stream.on('response.output_text.delta', (ev) => { deltas += ev.delta; });
  const final = await stream.finalResponse();
  check(final.previous_response_id === first.id, 'the follow-up names the first response');
  check(final.output_text === deltas, 'finalResponse text = deltas');
  return { first: first.id, follow_up: final.id };
});

await run('models.retrieve slashed id', async () => {
  const m = await client.models.retrieve(model);
  check(m.id === model && m.object === 'model', `the model entry, got ${JSON.stringify(m)}`);
  return { id: m.id };
});

await run('chat.completions.create n=2', async () => {
  const c = await client.chat.completions.create({ model, n: 2, max_tokens: 5, messages: [{ role: 'user', content: 'Two answers' }] });
  check(c.choices.length === 2 && c.choices[1].index === 1, 'two choices');
  check(c.usage.completion_tokens === 10, `usage counts both, got ${c.usage.completion_tokens}`);
  return { choices: c.choices.length, completion_tokens: c.usage.completion_tokens };
});

await run('aborted streaming response', async () => {
  const controller = new AbortController();
  const stream = await client.responses.create({ model, input: 'A long one', stream: true, max_output_tokens: 400 },
                                               { signal: controller.signal });
  let deltas = 0, completed = false;
  try {
    for await (const ev of stream) {
      if (ev.type === 'response.output_text.delta' && ++deltas === 3) controller.abort();
      if (ev.type === 'response.completed') completed = true;
    }
  } catch (e) {  // depending on the version the SDK ends the iteration or raises the abort
    if (!(e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError')) throw e;
  }
  check(controller.signal.aborted && !completed && deltas === 3, `the stream ended at the abort (${deltas} deltas)`);
  // The gateway is still fine afterwards.
  const again = await client.chat.completions.create({ model, max_tokens: 2, messages: [{ role: 'user', content: 'ok?' }] });
  check(again.choices.length === 1, 'a request after the abort');
  return { deltas_before_abort: deltas };
});

await run('error object of an unknown model', async () => {
  try {
    await client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] });
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, `NotFoundError, got ${e && e.constructor && e.constructor.name}`);
    check(e.status === 404 && e.code === 'model_not_found' && e.param === 'model', 'status, code and param');
    check(/does not exist/.test(e.message), 'the message');
    return { status: e.status, code: e.code };
  }
  throw new Error('no error raised');
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
