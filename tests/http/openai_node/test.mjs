// The official OpenAI Node SDK (npm `openai`) against a running `nw serve`: list, retrieve,
// completions, chat, both streaming helpers (`stream: true` iteration and
// `chat.completions.stream()`), logprobs with echo, and the SDK's error classes.
// Usage: node test.mjs BASE_URL MODEL_ID API_KEY   (run.sh starts the server and calls this)
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [baseURL, model, apiKey] = process.argv.slice(2);
if (!baseURL || !model || !apiKey) {
  console.error('usage: node test.mjs BASE_URL MODEL_ID API_KEY');
  process.exit(2);
}
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey, maxRetries: 0, timeout: 120000 });
const prompt = 'The special magic number is';
let passed = 0;
async function check(name, body) {
  await body();
  passed += 1;
  console.log(`ok ${passed} - ${name}`);
}

await check('models.list', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, [model]);
});

await check('models.retrieve', async () => {
  const m = await client.models.retrieve(model);
  assert.equal(m.id, model);
  assert.equal(m.object, 'model');
  assert.equal(m.owned_by, 'needlework');
  await assert.rejects(client.models.retrieve('no-such-model'), (e) => {
    assert.ok(e instanceof OpenAI.NotFoundError, String(e));
    assert.equal(e.code, 'model_not_found');
    return true;
  });
});

const greedy = { model, prompt, max_tokens: 12, temperature: 0, ignore_eos: true };
let completionText;
await check('completions.create', async () => {
  const c = await client.completions.create(greedy);
  assert.equal(c.object, 'text_completion');
  assert.equal(c.choices.length, 1);
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.equal(c.usage.completion_tokens, 12);
  assert.equal(typeof c.created, 'number');
  completionText = c.choices[0].text;
});

await check('completions.create stream: true', async () => {
  const stream = await client.completions.create({
    ...greedy, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let chunks = 0;
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    chunks += 1;
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      text += choice.text;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.equal(text, completionText);
  assert.ok(chunks > 2, `${chunks} chunks`);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 12);
});

await check('completions logprobs with echo (lm-eval loglikelihood)', async () => {
  const c = await client.completions.create({
    model, prompt, max_tokens: 0, logprobs: 2, echo: true, temperature: 0,
  });
  const lp = c.choices[0].logprobs;
  assert.equal(c.choices[0].text, prompt);
  assert.equal(lp.tokens.length, c.usage.prompt_tokens);
  assert.equal(lp.token_logprobs[0], null);
  for (const v of lp.token_logprobs.slice(1)) assert.ok(v <= 0, String(v));
});

const chatRequest = {
  model,
  messages: [{ role: 'user', content: prompt }],
  max_tokens: 10,
  temperature: 0,
  ignore_eos: true,
};
let chatText;
await check('chat.completions.create', async () => {
  const c = await client.chat.completions.create(chatRequest);
  assert.equal(c.object, 'chat.completion');
  assert.equal(c.choices[0].message.role, 'assistant');
  assert.equal(c.choices[0].finish_reason, 'length');
  chatText = c.choices[0].message.content;
  // One user message is its content as is (docs/http.md): the completion's answer, shorter.
  assert.ok(completionText.startsWith(chatText), `${chatText} / ${completionText}`);
});

await check('chat.completions.create stream: true', async () => {
  const stream = await client.chat.completions.create({ ...chatRequest, stream: true });
  let text = '';
  let role = null;
  for await (const chunk of stream) {
    const delta = chunk.choices[0]?.delta ?? {};
    if (delta.role) role = delta.role;
    text += delta.content ?? '';
  }
  assert.equal(role, 'assistant');
  assert.equal(text, chatText);
});

await check('chat.completions.stream() helper', async () => {
  const stream = client.chat.completions.stream(chatRequest);
  let deltas = '';
  stream.on('content', (delta) => { deltas += delta; });
  const final = await stream.finalChatCompletion();
  assert.equal(final.choices[0].message.content, chatText);
  assert.equal(deltas, chatText);
  assert.equal(final.choices[0].finish_reason, 'length');
});

await check('errors', async () => {
  await assert.rejects(
    client.completions.create({ model, prompt, max_tokens: 1 << 30 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_tokens');
  await assert.rejects(
    client.completions.create({ model, prompt, n: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'n');
  await assert.rejects(
    client.chat.completions.create({ ...chatRequest, response_format: { type: 'json_object' } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'response_format');
  await assert.rejects(
    client.completions.create({ ...greedy, model: 'gpt-4' }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  const wrongKey = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrongKey.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  // An error while streaming is requested: the SDK throws before iterating.
  await assert.rejects(
    client.chat.completions.create({ ...chatRequest, max_tokens: 1 << 30, stream: true }),
    (e) => e instanceof OpenAI.BadRequestError);
});

console.log(`all ${passed} checks passed`);
