// The AI SDK's chat (package `ai`, its DefaultChatTransport) against
// lash's client API, as an app would use it: a streamed answer with a tool
// call, and an approval asked and answered in the same assistant message.
// Run by e2e/clients_test.go with LASH_API (the API's base URL) and
// LASH_TOKEN (a token granting sessions web-*, decisions included).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  isToolUIPart,
  getToolName,
} from 'ai';

// `ai` ships the chat without a UI framework's state: an array will do.
class State {
  status = 'ready';
  error = undefined;
  messages = [];
  texts = new Set(); // every text the assistant's last part showed
  pushMessage = (m) => { this.messages = this.messages.concat(m); this.seen(m); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (i, m) => { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]; this.seen(m); };
  snapshot = (v) => structuredClone(v);
  seen(m) {
    const t = m.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
    if (t) this.texts.add(t);
  }
}

class Chat extends AbstractChat {
  constructor(init) {
    const state = new State();
    super({ ...init, state });
    this.st = state;
  }
}

const finishes = [];
function chat(id) {
  return new Chat({
    id,
    transport: new DefaultChatTransport({
      api: `${process.env.LASH_API}/v1/ai-sdk/chat`,
      headers: { Authorization: `Bearer ${process.env.LASH_TOKEN}` },
    }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onFinish: ({ finishReason, isError }) => finishes.push(isError ? 'error' : finishReason),
  });
}

async function idle(c) {
  for (let quiet = 0; quiet < 3; ) {
    await new Promise((r) => setTimeout(r, 50));
    quiet = c.status === 'submitted' || c.status === 'streaming' ? 0 : quiet + 1;
  }
  assert.equal(c.status, 'ready', `chat status ${c.status}: ${c.error?.message}`);
}

const textOf = (m) => m.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
const tools = (m) => m.parts.filter(isToolUIPart);

// A streamed answer after a tool call and its result.
const weather = chat(`web-weather-${randomUUID()}`);
await weather.sendMessage({ text: 'weather?' });
await idle(weather);
assert.equal(weather.messages.length, 2);
let answer = weather.messages[1];
assert.equal(answer.role, 'assistant');
assert.equal(textOf(answer), 'It is cold in Oslo, as usual in winter.');
const [call] = tools(answer);
assert.equal(getToolName(call), 'get_weather');
assert.deepEqual(call.input, { city: 'Oslo' });
assert.equal(call.state, 'output-available');
assert.equal(call.output, '-3C in Oslo');
assert.ok(weather.st.texts.size > 2, `the answer came whole, not streamed: ${[...weather.st.texts]}`);
assert.deepEqual(finishes, ['stop']);

// An approval: the stream asks, the user approves, and the answer goes on
// in the same message.
const deploy = chat(`web-deploy-${randomUUID()}`);
await deploy.sendMessage({ text: 'deploy it' });
await idle(deploy);
answer = deploy.messages.at(-1);
const [ask] = tools(answer);
assert.equal(ask.state, 'approval-requested', JSON.stringify(answer.parts));
assert.equal(getToolName(ask), 'wait_for_approval');
assert.deepEqual(finishes, ['stop', 'tool-calls']);
await deploy.addToolApprovalResponse({ id: ask.approval.id, approved: true });
await idle(deploy);
assert.equal(deploy.messages.length, 2, JSON.stringify(deploy.messages));
answer = deploy.messages[1];
assert.equal(tools(answer)[0].state, 'output-available');
assert.equal(textOf(answer), 'Deployed.');
assert.deepEqual(finishes, ['stop', 'tool-calls', 'stop']);
console.log('ai-sdk: ok');
