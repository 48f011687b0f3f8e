// A chat page on lash's client API, in the AI SDK's UI message stream
// protocol, with no library and no build step. It keeps the chat's messages
// in sessionStorage, as an app keeps them: after a reload it shows them and
// asks for the response under way, which the API replays from its start
// under the same message id, so it completes without a gap or a repeat.
//
// Open it as chat.html?api=<API base URL>&token=<bearer token>&chat=<id>.
// A real app gets its token from its own backend, never from the URL.
const q = new URLSearchParams(location.search);
const api = q.get('api') ?? 'http://127.0.0.1:8080';
const token = q.get('token') ?? '';
const chatId = q.get('chat') ?? `web-${crypto.randomUUID().slice(0, 8)}`;
const auth = { Authorization: `Bearer ${token}` };
const saved = `lash-chat:${chatId}`;
let messages = JSON.parse(sessionStorage.getItem(saved) ?? 'null');
let busy = false;

document.getElementById('chat-id').textContent = chatId;

function save() {
  sessionStorage.setItem(saved, JSON.stringify(messages));
}

// transcript reads what the session committed, as UI messages: a user
// message each, and the assistant's messages and tool results between
// two user messages as one assistant message.
async function transcript() {
  const out = [];
  for (let from = 0; ; ) {
    const res = await fetch(`${api}/v1/sessions/${chatId}/messages?from=${from}`, { headers: auth });
    if (res.status === 404) return out;
    if (!res.ok) throw new Error(`transcript: ${res.status} ${await res.text()}`);
    const page = await res.json();
    for (const m of page.messages) {
      if (m.role === 'user') {
        out.push({ id: `t${m.index}`, role: 'user', parts: [{ type: 'text', text: m.text }] });
        continue;
      }
      if (m.role === 'system') continue;
      let a = out.at(-1);
      if (a?.role !== 'assistant') out.push((a = { id: `r-${m.turn}`, role: 'assistant', parts: [] }));
      if (m.role === 'assistant') {
        if (m.text) a.parts.push({ type: 'text', text: m.text });
        for (const c of m.tool_calls ?? []) {
          a.parts.push({ type: 'tool', toolCallId: c.id, toolName: c.name, input: c.arguments, state: 'input-available' });
        }
      } else if (m.role === 'tool' && !m.pending) {
        const p = a.parts.find((p) => p.toolCallId === m.call_id);
        if (p) Object.assign(p, m.error ? { state: 'output-error', errorText: m.text } : { state: 'output-available', output: m.text });
      }
    }
    if (!page.more) return out;
    from = page.next;
  }
}

// consume applies a UI message stream. A resume replays the response whole:
// its start resets the message it names.
async function consume(res, resume) {
  if (res.status === 204) return;
  if (!res.ok) throw new Error(`${res.status} ${await res.text()}`);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let msg;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const frame = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const data = frame.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
      if (!data || data === '[DONE]') continue;
      msg = apply(JSON.parse(data), msg, resume);
      save();
      render();
    }
  }
}

function apply(c, msg, resume) {
  const tool = (id) => msg.parts.find((p) => p.type === 'tool' && p.toolCallId === id);
  switch (c.type) {
    case 'start':
      msg = messages.find((m) => m.id === c.messageId);
      if (!msg) messages.push((msg = { id: c.messageId, role: 'assistant', parts: [] }));
      else if (resume) msg.parts = [];
      break;
    case 'text-start':
      msg.parts.push({ type: 'text', id: c.id, text: '' });
      break;
    case 'text-delta':
      msg.parts.find((p) => p.id === c.id).text += c.delta;
      break;
    case 'tool-input-available':
      if (!tool(c.toolCallId)) msg.parts.push({ type: 'tool', toolCallId: c.toolCallId, toolName: c.toolName, input: c.input, state: 'input-available' });
      break;
    case 'tool-approval-request':
      Object.assign(tool(c.toolCallId), { state: 'approval-requested', approvalId: c.approvalId });
      break;
    case 'tool-output-available':
      Object.assign(tool(c.toolCallId), { state: 'output-available', output: c.output });
      break;
    case 'tool-output-error':
      Object.assign(tool(c.toolCallId), { state: 'output-error', errorText: c.errorText });
      break;
    case 'error':
      document.getElementById('error').textContent = c.errorText;
      break;
  }
  return msg;
}

async function post(body, resume = false) {
  busy = true;
  try {
    const res = await fetch(`${api}/v1/ai-sdk/chat`, {
      method: 'POST',
      headers: { ...auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ id: chatId, trigger: 'submit-message', ...body }),
    });
    await consume(res, resume);
  } catch (e) {
    document.getElementById('error').textContent = e.message;
  } finally {
    busy = false;
    render();
  }
}

async function approve(msg, part, approved) {
  part.state = 'approval-responded';
  part.approval = { id: part.approvalId, approved };
  save();
  render();
  const parts = [{ type: `tool-${part.toolName}`, toolCallId: part.toolCallId, state: part.state, approval: part.approval }];
  await post({ messageId: msg.id, messages: [{ id: msg.id, role: 'assistant', parts }] });
}

function render() {
  const root = document.getElementById('messages');
  root.replaceChildren();
  for (const m of messages) {
    const div = document.createElement('div');
    div.className = 'msg';
    div.dataset.role = m.role;
    div.dataset.id = m.id;
    for (const p of m.parts) {
      if (p.type === 'text') {
        const span = document.createElement('span');
        span.className = 'text';
        span.textContent = p.text;
        div.append(span);
        continue;
      }
      const t = document.createElement('div');
      t.className = 'tool';
      t.dataset.state = p.state;
      t.textContent = `${p.toolName}: ${p.state}${p.output !== undefined ? ` → ${p.output}` : ''}${p.errorText ? ` ✗ ${p.errorText}` : ''} `;
      if (p.state === 'approval-requested') {
        for (const [label, yes] of [['Approve', true], ['Deny', false]]) {
          const b = document.createElement('button');
          b.textContent = label;
          b.className = yes ? 'approve' : 'deny';
          b.onclick = () => approve(m, p, yes);
          t.append(b);
        }
      }
      div.append(t);
    }
    root.append(div);
  }
  document.querySelector('#send button').disabled = busy;
}

document.getElementById('send').addEventListener('submit', (e) => {
  e.preventDefault();
  const input = document.getElementById('text');
  const text = input.value.trim();
  if (!text || busy) return;
  input.value = '';
  const msg = { id: crypto.randomUUID(), role: 'user', parts: [{ type: 'text', text }] };
  messages.push(msg);
  save();
  render();
  post({ messages: [msg] });
});

(async () => {
  try {
    messages ??= await transcript();
    save();
    render();
    busy = true;
    render();
    await consume(await fetch(`${api}/v1/ai-sdk/chat/${chatId}/stream`, { headers: auth }), true);
  } catch (e) {
    document.getElementById('error').textContent = e.message;
  } finally {
    busy = false;
    render();
  }
})();
