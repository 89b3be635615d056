import assert from "node:assert/strict";
import { test } from "node:test";

import { DEFAULT_APPLY_WAIT_MS } from "../eventq.js";
import { failed, polled, registered, running, setup } from "./fakes.js";

function pageshow(persisted) {
  return Object.assign(new Event("pageshow"), { persisted });
}

test("close() aborts the poll and deletes the queue with keepalive and the CSRF token", async () => {
  const { client, server, log } = await running();
  const poll = await server.next();
  const closed = client.close();
  assert.equal(poll.init.signal.aborted, true);
  const deletion = await server.next();
  assert.equal(deletion.method, "DELETE");
  assert.equal(deletion.url, "/json/events");
  assert.deepEqual(deletion.form, { queue_id: "q1" });
  assert.equal(deletion.init.keepalive, true);
  assert.equal(deletion.init.credentials, "same-origin");
  assert.equal(deletion.headers["X-CSRFToken"], "tok+en");
  assert.equal(deletion.headers["Content-Type"], "application/x-www-form-urlencoded");
  deletion.respond(200, { result: "success", msg: "" });
  assert.equal(await closed, undefined);
  assert.equal(client.queueId, null);
  assert.equal(client.status, "stopped");
  assert.equal(log.errors.length, 0);
  // Once only.
  await client.close();
  await server.none();
});

test("close() with api auth sends the credentials, and never rejects", async () => {
  const { client, server } = await running({ auth: { email: "a@demo.example", apiKey: "key" } });
  await server.next();
  const closed = client.close();
  const deletion = await server.next();
  assert.equal(deletion.url, "/api/v1/events");
  assert.match(deletion.headers.Authorization, /^Basic /);
  assert.equal("X-CSRFToken" in deletion.headers, false);
  deletion.fail();
  assert.equal(await closed, undefined);
});

test("close() before start() sends nothing", async () => {
  const { client, server } = setup();
  await client.close();
  await server.none();
  assert.equal(client.status, "stopped");
});

test("close() while the first register is in flight deletes the queue it still makes", async () => {
  const { client, server } = setup();
  const started = client.start();
  const register = await server.next();
  let closed = false;
  const closing = client.close().then(() => {
    closed = true;
  });
  await assert.rejects(started, (error) => error.kind === "stopped");
  // Not aborted: the server may have made the queue already.
  assert.equal(register.init.signal.aborted, false);
  await server.none();
  assert.equal(closed, false, "close() waits for the register's queue to be deleted");
  register.respond(200, registered({ queue_id: "q9" }));
  const deletion = await server.next();
  assert.equal(deletion.method, "DELETE");
  assert.deepEqual(deletion.form, { queue_id: "q9" });
  assert.equal(deletion.init.keepalive, true);
  assert.equal(deletion.headers["X-CSRFToken"], "tok+en");
  deletion.respond(200, { result: "success", msg: "" });
  await closing;
  assert.equal(client.queueId, null, "the late queue was never the client's");
  assert.equal(client.status, "stopped");
  await server.none();
});

test("close() while a register is in flight that then fails deletes nothing", async () => {
  const { client, server, timers, log } = setup();
  client.start().catch(() => undefined);
  const register = await server.next();
  const closing = client.close();
  register.respond(503, failed("SERVER_SHUTTING_DOWN"), { "Retry-After": "1" });
  await closing;
  await timers.advance(120_000);
  await server.none();
  assert.deepEqual(log.retries, []);
});

test("a register still unanswered at its timeout is abandoned after stop()", async () => {
  const { client, server, timers } = setup({ requestTimeoutMs: 10_000 });
  client.start().catch(() => undefined);
  const register = await server.next();
  client.stop();
  assert.deepEqual(timers.pending(), [10_000]);
  await timers.advance(10_000);
  assert.equal(register.init.signal.aborted, true);
  assert.deepEqual(timers.pending(), []);
  await server.none();
});

test("close() ends at the request timeout when fetch ignores aborts and never answers", async () => {
  const { client, server, timers } = setup({ ignoreAbort: true, requestTimeoutMs: 10_000 });
  client.start().catch(() => undefined);
  const register = await server.next();
  let closed = false;
  const closing = client.close().then(() => {
    closed = true;
  });
  await timers.advance(9_999);
  assert.equal(closed, false);
  await timers.advance(1);
  assert.equal(register.init.signal.aborted, true);
  await closing;
  await server.none();
  assert.deepEqual(timers.pending(), []);
});

test("close() waits for a DELETE that is never answered only the request timeout", async () => {
  const { client, server, timers } = await running({ ignoreAbort: true, requestTimeoutMs: 10_000 });
  await server.next();
  let closed = false;
  const closing = client.close().then(() => {
    closed = true;
  });
  const deletion = await server.next();
  assert.equal(deletion.method, "DELETE");
  await timers.advance(9_999);
  assert.equal(closed, false);
  await timers.advance(1);
  await closing;
  assert.equal(deletion.init.signal.aborted, true);
  assert.deepEqual(timers.pending(), []);
});

test("stop() stops polling and keeps the queue; close() then deletes it", async () => {
  const { client, server, log } = await running();
  const poll = await server.next();
  client.stop();
  assert.equal(poll.init.signal.aborted, true);
  await server.none();
  assert.equal(client.status, "stopped");
  assert.equal(client.queueId, "q1");
  client.stop(); // idempotent
  assert.deepEqual(log.statuses, ["connecting", "connected", "stopped"]);
  client.close();
  const deletion = await server.next();
  assert.deepEqual(deletion.form, { queue_id: "q1" });
});

test("after a fatal error close() still deletes the queue", async () => {
  const { client, server } = await running();
  (await server.next()).respond(400, failed("BAD_REQUEST"));
  await server.none();
  client.close();
  assert.equal((await server.next()).method, "DELETE");
});

test("pagehide deletes the queue with keepalive; pageshow from the cache resumes", async () => {
  const win = new EventTarget();
  const { client, server, log } = await running({ window: win });
  (await server.next()).respond(200, polled([{ id: 0, type: "test" }], 105));
  const poll = await server.next();
  win.dispatchEvent(new Event("pagehide"));
  assert.equal(poll.init.signal.aborted, true);
  const deletion = await server.next();
  assert.equal(deletion.method, "DELETE");
  assert.deepEqual(deletion.form, { queue_id: "q1" });
  assert.equal(deletion.init.keepalive, true);
  assert.equal(deletion.headers["X-CSRFToken"], "tok+en");
  assert.equal(client.status, "suspended");
  assert.equal(client.queueId, null);
  await server.none();

  win.dispatchEvent(pageshow(false)); // a fresh load of a page is not this one
  await server.none();
  win.dispatchEvent(pageshow(true));
  const register = await server.next();
  assert.equal(register.form.resume_from, "105");
  register.respond(200, registered({ queue_id: "q2", stream_position: 109, resumed_from: 105 }));
  const next = await server.next();
  assert.deepEqual(next.query, { queue_id: "q2", last_event_id: "-1" });
  assert.deepEqual(log.resets, [
    {
      reloadState: false,
      reason: "page_restored",
      state: null,
      queueId: "q2",
      streamPosition: 105,
      resumedFrom: 105,
    },
  ]);
});

test("a page hidden during the first register finishes start() when it comes back", async () => {
  const win = new EventTarget();
  const { client, server, log } = setup({ window: win });
  const started = client.start();
  const first = await server.next();
  win.dispatchEvent(new Event("pagehide"));
  assert.equal(first.init.signal.aborted, false);
  await server.none(); // no queue known yet: nothing to delete
  win.dispatchEvent(pageshow(true));
  const again = await server.next();
  assert.equal(again.form.resume_from, undefined);
  // The first register answers late: its queue is deleted, not used.
  first.respond(200, registered({ queue_id: "q0" }));
  const deletion = await server.next();
  assert.equal(deletion.method, "DELETE");
  assert.deepEqual(deletion.form, { queue_id: "q0" });
  again.respond(200, registered());
  assert.equal((await started).queue_id, "q1");
  assert.equal((await server.next()).query.queue_id, "q1");
  assert.deepEqual(log.resets, [], "start() gave the state; no reset");
});

test("a page hidden during a re-register deletes the queue that register makes", async () => {
  const win = new EventTarget();
  const { client, server } = await running({ window: win });
  (await server.next()).respond(200, polled([], 120));
  (await server.next()).respond(400, failed("BAD_EVENT_QUEUE_ID"));
  const register = await server.next();
  assert.equal(register.form.resume_from, "120");
  win.dispatchEvent(new Event("pagehide"));
  await server.none();
  register.respond(200, registered({ queue_id: "q2", resumed_from: 120 }));
  assert.deepEqual((await server.next()).form, { queue_id: "q2" });
  assert.equal(client.queueId, null);
  win.dispatchEvent(pageshow(true));
  const again = await server.next();
  assert.equal(again.form.resume_from, "120");
});

test("a stopped client deletes its queue on pagehide and does not come back", async () => {
  const win = new EventTarget();
  const { client, server } = await running({ window: win });
  await server.next();
  client.stop();
  win.dispatchEvent(new Event("pagehide"));
  assert.equal((await server.next()).method, "DELETE");
  win.dispatchEvent(pageshow(true));
  await server.none();
  assert.equal(client.status, "stopped");
});

test("close() removes the page listeners", async () => {
  const win = new EventTarget();
  const added = [];
  const removed = [];
  win.addEventListener = ((add) => (type, fn) => {
    added.push(type);
    add.call(win, type, fn);
  })(win.addEventListener);
  win.removeEventListener = ((remove) => (type, fn) => {
    removed.push(type);
    remove.call(win, type, fn);
  })(win.removeEventListener);
  const { client, server } = await running({ window: win });
  await server.next();
  assert.deepEqual(added, ["pagehide", "pageshow"]);
  client.close();
  await server.next();
  assert.deepEqual(removed, ["pagehide", "pageshow"]);
  win.dispatchEvent(new Event("pagehide"));
  win.dispatchEvent(pageshow(true));
  await server.none();
});

test("a page restored while a listener still applies events resumes after what it applied", async () => {
  const win = new EventTarget();
  let release;
  const gate = new Promise((resolve) => {
    release = resolve;
  });
  const { client, server } = await running({ window: win, onEvents: () => gate });
  (await server.next()).respond(200, polled([{ id: 0, type: "slow" }], 130));
  await server.none();
  win.dispatchEvent(new Event("pagehide"));
  assert.equal((await server.next()).method, "DELETE");
  win.dispatchEvent(pageshow(true));
  await server.none(); // the position the page will have is not known yet
  release();
  const register = await server.next();
  assert.equal(register.form.resume_from, "130");
  assert.equal(client.streamPosition, 130);
});

test("stop() from inside a listener ends polling after that batch", async () => {
  const { client, server, log } = await running({
    onEvents: () => client.stop(),
  });
  (await server.next()).respond(200, polled([{ id: 0, type: "last" }], 140));
  await server.none();
  assert.equal(client.status, "stopped");
  assert.equal(client.lastEventId, 0);
  assert.equal(client.streamPosition, 140, "the page applied the batch");
  assert.equal(log.reported.length, 0);
});

test("a listener that never settles holds a replacement back only applyWaitMs", async () => {
  const win = new EventTarget();
  let calls = 0;
  const { client, server, timers, log } = await running({
    window: win,
    onEvents: () => {
      calls += 1;
      return calls === 1 ? new Promise(() => undefined) : undefined;
    },
  });
  (await server.next()).respond(200, polled([{ id: 0, type: "stuck" }], 130));
  await server.none();
  win.dispatchEvent(new Event("pagehide"));
  assert.equal((await server.next()).method, "DELETE");
  win.dispatchEvent(pageshow(true));
  await timers.advance(DEFAULT_APPLY_WAIT_MS - 1);
  await server.none();
  await timers.advance(1);
  const register = await server.next();
  // The stuck answer counts as not applied: its events come again.
  assert.equal(register.form.resume_from, "100");
  assert.equal(log.reported.length, 1);
  assert.match(log.reported[0].message, /has not settled in 30000 ms/);
  register.respond(200, registered({ queue_id: "q2", stream_position: 135, resumed_from: 100 }));
  (await server.next()).respond(200, polled([{ id: 0, type: "stuck", again: true }], 136));
  await server.next();
  assert.equal(client.streamPosition, 136);
  assert.equal(calls, 2);
});

test("the applyWaitMs option sets the bound, and stop() ends the wait", async () => {
  const win = new EventTarget();
  const { client, server, timers } = await running({
    window: win,
    applyWaitMs: 2000,
    onEvents: () => new Promise(() => undefined),
  });
  (await server.next()).respond(200, polled([{ id: 0, type: "stuck" }], 130));
  await server.none();
  win.dispatchEvent(new Event("pagehide"));
  (await server.next()).respond(200, { result: "success", msg: "" }); // the DELETE
  win.dispatchEvent(pageshow(true));
  await server.none();
  assert.deepEqual(timers.pending(), [2000]);
  client.stop();
  assert.deepEqual(timers.pending(), []);
  await timers.advance(120_000);
  await server.none();
});
