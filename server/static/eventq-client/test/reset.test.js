import assert from "node:assert/strict";
import { test } from "node:test";

import { failed, polled, registered, running } from "./fakes.js";

const LOST = failed("BAD_EVENT_QUEUE_ID", "Bad event queue ID: q1", { queue_id: "q1" });

test("a lost queue is replaced with resume_from and the page keeps its state", async () => {
  const { client, server, log } = await running({
    eventTypes: ["message"],
    fetchEventTypes: ["message", "realm"],
  });
  (await server.next()).respond(200, polled([{ id: 0, type: "message" }], 130));
  (await server.next()).respond(400, LOST);

  const register = await server.next();
  assert.equal(register.path, "/json/register");
  assert.deepEqual(register.form, { event_types: '["message"]', resume_from: "130" });
  assert.equal(client.queueId, null, "the lost queue is forgotten at once");
  register.respond(200, {
    result: "success",
    queue_id: "q2",
    last_event_id: -1,
    stream_position: 140,
    resumed_from: 130,
  });

  const poll = await server.next();
  assert.deepEqual(poll.query, { queue_id: "q2", last_event_id: "-1" });
  assert.equal(poll.query.dont_block, undefined, "a queue that answered is replaced at once");
  // The events up to 140 are in q2, not yet in the page's state.
  assert.deepEqual(log.resets, [
    {
      reloadState: false,
      reason: "queue_lost",
      state: null,
      queueId: "q2",
      streamPosition: 130,
      resumedFrom: 130,
    },
  ]);
  assert.equal(client.streamPosition, 130);
  assert.equal(log.retries.length, 0);
  // The missed events come from the new queue, after the reset.
  poll.respond(200, polled([{ id: 0, type: "message", missed: true }], 141));
  await server.next();
  assert.deepEqual(log.events.at(-1), { id: 0, type: "message", missed: true });
  assert.equal(client.lastEventId, 0);
  assert.equal(client.streamPosition, 141);
});

test("a resumed queue lost again before its first answer resumes from the same position", async () => {
  const { client, server, timers, log } = await running();
  (await server.next()).respond(200, polled([{ id: 0, type: "message" }], 130));
  (await server.next()).respond(400, LOST);
  (await server.next()).respond(
    200,
    registered({ queue_id: "q2", stream_position: 140, resumed_from: 130 }),
  );
  // A second restart (or an eviction) takes q2 before it answered once:
  // the events 131-140 it held were never given to the page.
  (await server.next()).respond(400, { ...LOST, queue_id: "q2" });
  await server.none();
  await timers.advance(log.retries[0].delayMs);
  const again = await server.next();
  assert.equal(again.form.resume_from, "130");
  assert.equal(client.streamPosition, 130);
  again.respond(200, registered({ queue_id: "q3", stream_position: 150, resumed_from: 130 }));
  (await server.next()).respond(200, polled([{ id: 0, type: "message", n: 131 }], 150));
  await server.next();
  assert.equal(client.streamPosition, 150);
  assert.deepEqual(
    log.resets.map((r) => [r.queueId, r.reloadState, r.streamPosition, r.resumedFrom]),
    [
      ["q2", false, 130, 130],
      ["q3", false, 130, 130],
    ],
  );
});

test("a page hidden before a resumed queue's first answer resumes from the same position", async () => {
  const win = new EventTarget();
  const { client, server } = await running({ window: win });
  (await server.next()).respond(200, polled([], 130));
  (await server.next()).respond(400, LOST);
  (await server.next()).respond(
    200,
    registered({ queue_id: "q2", stream_position: 140, resumed_from: 130 }),
  );
  await server.next(); // q2's first poll, unanswered
  win.dispatchEvent(new Event("pagehide"));
  assert.deepEqual((await server.next()).form, { queue_id: "q2" });
  win.dispatchEvent(Object.assign(new Event("pageshow"), { persisted: true }));
  const register = await server.next();
  assert.equal(register.form.resume_from, "130");
  assert.equal(client.streamPosition, 130);
});

test("a resumed queue's first answer moves the position only once the page applied it", async () => {
  let release;
  const gate = new Promise((resolve) => {
    release = resolve;
  });
  let calls = 0;
  const { client, server } = await running({
    onEvents: () => {
      calls += 1;
      return calls === 2 ? gate : undefined;
    },
  });
  (await server.next()).respond(200, polled([{ id: 0, type: "message" }], 130));
  (await server.next()).respond(400, LOST);
  (await server.next()).respond(
    200,
    registered({ queue_id: "q2", stream_position: 140, resumed_from: 130 }),
  );
  (await server.next()).respond(200, polled([{ id: 0, type: "message" }], 142));
  await server.none();
  assert.equal(client.streamPosition, 130, "the page is still applying 131-142");
  release();
  await server.next();
  assert.equal(client.streamPosition, 142);
});

test("a resumed queue's first answer without a position brings the register's", async () => {
  const { client, server } = await running();
  (await server.next()).respond(200, polled([], 130));
  (await server.next()).respond(400, LOST);
  (await server.next()).respond(
    200,
    registered({ queue_id: "q2", stream_position: 140, resumed_from: 130 }),
  );
  (await server.next()).respond(200, {
    result: "success",
    msg: "",
    events: [{ id: 0, type: "x" }],
  });
  const next = await server.next();
  assert.equal(client.streamPosition, 140, "every event up to 140 was in that answer");
  // Later answers without one leave it where it is.
  next.respond(200, { result: "success", msg: "", events: [{ id: 1, type: "x" }] });
  await server.next();
  assert.equal(client.streamPosition, 140);
});

test("without a known position (a Zulip server) a lost queue means a register with state", async () => {
  const { server, log } = await running(
    { eventTypes: ["message"], fetchEventTypes: ["message", "realm"] },
    { stream_position: undefined, last_event_id: 3 },
  );
  (await server.next()).respond(200, { result: "success", msg: "", events: [] });
  (await server.next()).respond(400, LOST);
  const register = await server.next();
  assert.deepEqual(register.form, {
    event_types: '["message"]',
    fetch_event_types: '["message","realm"]',
  });
  const state = registered({ queue_id: "q2", last_event_id: 8, stream_position: undefined });
  register.respond(200, state);
  const poll = await server.next();
  assert.deepEqual(poll.query, { queue_id: "q2", last_event_id: "8" });
  assert.equal(log.resets.length, 1);
  assert.equal(log.resets[0].reloadState, true);
  assert.deepEqual(log.resets[0].state, JSON.parse(JSON.stringify(state)));
  assert.equal(log.resets[0].resumedFrom, null);
});

test("RESUME_EXPIRED falls back to a full register and the page reloads its state", async () => {
  const { client, server, log } = await running({ fetchEventTypes: ["realm"] });
  (await server.next()).respond(200, polled([], 160));
  (await server.next()).respond(400, LOST);
  const resume = await server.next();
  assert.equal(resume.form.resume_from, "160");
  resume.respond(
    400,
    failed("RESUME_EXPIRED", "The events after position 160 are no longer kept", {
      pruned_through: 500,
    }),
  );
  const full = await server.next();
  assert.deepEqual(full.form, { fetch_event_types: '["realm"]' });
  full.respond(200, registered({ queue_id: "q3", stream_position: 900, last_event_id: 2 }));
  const poll = await server.next();
  assert.deepEqual(poll.query, { queue_id: "q3", last_event_id: "2" });
  assert.equal(log.resets.length, 1);
  assert.equal(log.resets[0].reloadState, true);
  assert.equal(log.resets[0].state.queue_id, "q3");
  assert.equal(log.resets[0].streamPosition, 900);
  assert.equal(client.streamPosition, 900);
  assert.equal(log.retries.length, 0, "the fallback is immediate");
});

test("a position the server did not give falls back to a full register at once", async () => {
  const { client, server, log } = await running();
  (await server.next()).respond(200, polled([], 160));
  (await server.next()).respond(400, LOST);
  const resume = await server.next();
  assert.equal(resume.form.resume_from, "160");
  resume.respond(
    400,
    failed("RESUME_POSITION_UNKNOWN", "resume_from 160 is not a position this server gave you"),
  );
  const full = await server.next();
  assert.equal(full.form.resume_from, undefined);
  full.respond(200, registered({ queue_id: "q3", stream_position: 900, last_event_id: 2 }));
  (await server.next()).respond(200, polled([], 900));
  assert.equal(log.resets.length, 1);
  assert.equal(log.resets[0].reloadState, true);
  assert.equal(log.resets[0].resumedFrom, null);
  assert.equal(client.streamPosition, 900);
  assert.equal(log.retries.length, 0, "the fallback is immediate");
});

test("a queue lost before it ever answered is replaced only after a backoff", async () => {
  const { server, timers, log } = await running();
  (await server.next()).respond(200, polled([], 100));
  (await server.next()).respond(400, LOST);
  // A queue that answered: replaced at once.
  (await server.next()).respond(200, registered({ queue_id: "q2", resumed_from: 100 }));
  // This one is lost before answering: the server is losing every queue.
  (await server.next()).respond(400, { ...LOST, queue_id: "q2" });
  await server.none();
  assert.deepEqual(
    log.retries.map((r) => r.delayMs),
    [500],
  );
  await timers.advance(500);
  const register = await server.next();
  assert.equal(register.form.resume_from, "100");
  register.respond(200, registered({ queue_id: "q3", resumed_from: 100 }));
  (await server.next()).respond(400, { ...LOST, queue_id: "q3" });
  await server.none();
  assert.deepEqual(
    log.retries.map((r) => r.delayMs),
    [500, 1000],
    "the backoff grows while no queue answers",
  );
});

test("an asynchronous onReset is awaited before the new queue is polled", async () => {
  let release;
  const gate = new Promise((resolve) => {
    release = resolve;
  });
  const { server, log } = await running({ onReset: () => gate });
  (await server.next()).respond(200, polled([]));
  (await server.next()).respond(400, LOST);
  (await server.next()).respond(200, registered({ queue_id: "q2", resumed_from: 100 }));
  await server.none();
  release();
  const poll = await server.next();
  assert.equal(poll.query.queue_id, "q2");
  assert.equal(log.reported.length, 0);
});

test("a re-register that fails transiently is retried with backoff", async () => {
  const { server, timers, log } = await running();
  (await server.next()).respond(200, polled([], 100));
  (await server.next()).respond(400, LOST);
  (await server.next()).respond(503, failed("DATABASE_UNAVAILABLE"), { "Retry-After": "5" });
  await server.none();
  assert.equal(log.retries[0].delayMs, 5500, "Retry-After plus the jitter");
  await timers.advance(5500);
  const again = await server.next();
  assert.equal(again.form.resume_from, "100");
});
