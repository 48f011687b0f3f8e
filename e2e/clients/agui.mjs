// AG-UI's HttpAgent (@ag-ui/client) against lash's client API: a run with
// a tool call and a streamed answer, and a run interrupted for an approval
// that the next run resumes. Run by e2e/clients_test.go with LASH_API and
// LASH_TOKEN.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { HttpAgent, buildResumeArray } from '@ag-ui/client';

function agent() {
  return new HttpAgent({
    url: `${process.env.LASH_API}/v1/ag-ui`,
    headers: { Authorization: `Bearer ${process.env.LASH_TOKEN}` },
    threadId: `web-agui-${randomUUID()}`,
  });
}

function collector() {
  const c = { text: '', deltas: 0, calls: [], results: [], finished: undefined, errors: [] };
  c.subscriber = {
    onTextMessageContentEvent: ({ event }) => { c.text += event.delta; c.deltas++; },
    onToolCallEndEvent: ({ event, toolCallName, toolCallArgs }) => c.calls.push({ id: event.toolCallId, name: toolCallName, args: toolCallArgs }),
    onToolCallResultEvent: ({ event }) => c.results.push({ id: event.toolCallId, content: event.content }),
    onRunFinishedEvent: (p) => { c.finished = p; },
    onRunErrorEvent: ({ event }) => c.errors.push(event.message),
  };
  return c;
}

const a = agent();
a.addMessage({ id: randomUUID(), role: 'user', content: 'weather?' });
let c = collector();
await a.runAgent({}, c.subscriber);
assert.deepEqual(c.errors, []);
assert.equal(c.finished?.outcome, 'success');
assert.equal(c.text, 'It is cold in Oslo, as usual in winter.');
assert.ok(c.deltas > 1, `the answer came in ${c.deltas} piece(s)`);
assert.deepEqual(c.calls.map((x) => [x.name, x.args]), [['get_weather', { city: 'Oslo' }]]);
assert.deepEqual(c.results, [{ id: c.calls[0].id, content: '-3C in Oslo' }]);
const tool = a.messages.find((m) => m.role === 'tool');
assert.equal(tool?.content, '-3C in Oslo');
assert.ok(a.messages.some((m) => m.role === 'assistant' && m.toolCalls?.[0]?.function.name === 'get_weather'));

const b = agent();
b.addMessage({ id: randomUUID(), role: 'user', content: 'deploy it' });
c = collector();
await b.runAgent({}, c.subscriber);
assert.equal(c.finished?.outcome, 'interrupt');
assert.equal(b.pendingInterrupts.length, 1);
const [interrupt] = b.pendingInterrupts;
assert.equal(interrupt.reason, 'tool_approval');
c = collector();
await b.runAgent({ resume: buildResumeArray(b.pendingInterrupts, { [interrupt.id]: { status: 'resolved' } }) }, c.subscriber);
assert.deepEqual(c.errors, []);
assert.equal(c.finished?.outcome, 'success');
assert.equal(c.text, 'Deployed.');
assert.equal(b.pendingInterrupts.length, 0);
console.log('ag-ui: ok');
