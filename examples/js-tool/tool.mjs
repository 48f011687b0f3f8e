// A lash tool served over NATS from JavaScript with the plain NATS client:
// js_propose reserves an entry in a durable step (recorded once, whatever
// runs the call again), mints an event key for a person's approval, parks
// the call on it, and answers when the key's value comes. Everything it
// asks of lash is NATS request-reply with JSON on the node API, with the
// ticket each call's request carries (header Lash-Call-Ticket).
//
//   NATS_URL=nats://127.0.0.1:4222 node tool.mjs
//
// It prints one line per event on stdout: "reserve ...", "approval
// key=...", "approved ...".
import { connect, headers } from "nats";

const prefix = process.env.LASH_PREFIX || "lash";
const nc = await connect({ servers: process.env.NATS_URL || "127.0.0.1:4222", name: "lash js-tool" });
const enc = new TextEncoder();
const dec = new TextDecoder();

// api asks any node: one request, one JSON answer; a refusal carries the
// micro error headers.
async function api(endpoint, body) {
  const m = await nc.request(`${prefix}.api.${endpoint}`, enc.encode(JSON.stringify(body)), { timeout: 10000 });
  const code = m.headers?.get("Nats-Service-Error-Code");
  if (code) throw new Error(`${endpoint}: ${code} ${m.headers.get("Nats-Service-Error")}`);
  return JSON.parse(dec.decode(m.data));
}

// fail answers a call with a micro error: code 409 with a pending ticket
// parks it; any other code is a failed call the model reads.
function fail(msg, code, text) {
  const h = headers();
  h.set("Nats-Service-Error-Code", code);
  h.set("Nats-Service-Error", text.replace(/\s+/g, " "));
  msg.respond(enc.encode(text), { headers: h });
}

async function propose(msg) {
  const { entry } = JSON.parse(dec.decode(msg.data));
  const ticket = msg.headers?.get("Lash-Call-Ticket");
  const key = msg.headers?.get("Lash-Idempotency-Key");
  if (!ticket) return fail(msg, "500", "no Lash-Call-Ticket header: the deployment has no secret");
  const step = await api("step", { ticket, id: "reserve" });
  if (!step.recorded) {
    console.log(`reserve key=${key} entry=${entry}`);
    await api("step", { ticket, id: "reserve", value: entry });
  }
  const { key: eventKey } = await api("event_key", { ticket, name: "approval" });
  const ev = await api("await_event", { ticket, name: "approval" });
  if (ev.status === "pending") {
    console.log(`approval key=${eventKey}`);
    return fail(msg, "409", ev.pending);
  }
  if (ev.status !== "resolved") return msg.respond(enc.encode(`not approved: ${ev.status}`));
  console.log(`approved key=${key} value=${JSON.stringify(ev.value)}`);
  msg.respond(enc.encode(`approved ${JSON.stringify(ev.value)}: ${entry}`));
}

const srv = await nc.services.add({ name: "lash-js-ledger", version: "1.0.0", description: "An example lash tool in JavaScript" });
srv.addEndpoint("js_propose", {
  subject: `${prefix}.tool.js_propose`,
  metadata: {
    "lash.description": "Propose an entry: it is accepted once a person approves it.",
    "lash.schema": JSON.stringify({ type: "object", properties: { entry: { type: "string" } }, required: ["entry"], additionalProperties: false }),
  },
  handler: (err, msg) => {
    if (err) return;
    propose(msg).catch((e) => fail(msg, "500", String(e.message || e)));
  },
});
console.error(`js-tool: serving js_propose on ${prefix}.tool.js_propose`);
process.on("SIGTERM", async () => { await nc.drain(); process.exit(0); });
await nc.closed();
