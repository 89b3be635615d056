import assert from "node:assert/strict";
import { test } from "node:test";

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

test("close() while the first register is in flight rejects start() and deletes nothing", async () => {
  const { client, server } = setup();
  const started = client.start();
  await server.next();
  await client.close();
  await assert.rejects(started, (error) => error.kind === "stopped");
  await server.none();
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
      streamPosition: 109,
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
  assert.equal(first.init.signal.aborted, true);
  await server.none(); // no queue yet: nothing to delete
  win.dispatchEvent(pageshow(true));
  const again = await server.next();
  assert.equal(again.form.resume_from, undefined);
  again.respond(200, registered());
  assert.equal((await started).queue_id, "q1");
  assert.deepEqual(log.resets, [], "start() gave the state; no reset");
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
