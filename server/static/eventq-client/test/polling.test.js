import assert from "node:assert/strict";
import { test } from "node:test";

import { failed, polled, running, settle } from "./fakes.js";

test("polls the queue from register's last_event_id and acknowledges what it received", async () => {
  const { client, server, log } = await running({}, { last_event_id: 4 });
  const first = await server.next();
  assert.equal(first.method, "GET");
  assert.equal(first.path, "/json/events");
  assert.deepEqual(first.query, { queue_id: "q1", last_event_id: "4" });
  assert.equal(first.init.body, undefined);
  assert.equal("X-CSRFToken" in first.headers, false, "a GET carries no CSRF token");

  first.respond(
    200,
    polled(
      [
        { id: 5, type: "message" },
        { id: 7, type: "typing" },
      ],
      120,
    ),
  );
  const second = await server.next();
  assert.deepEqual(second.query, { queue_id: "q1", last_event_id: "7" });
  assert.deepEqual(log.events, [
    { id: 5, type: "message" },
    { id: 7, type: "typing" },
  ]);
  assert.deepEqual(log.infos, [{ queueId: "q1", streamPosition: 120 }]);
  assert.equal(client.lastEventId, 7);
  assert.equal(client.streamPosition, 120);
});

test("heartbeats reach no listener but are acknowledged", async () => {
  const { client, server, log } = await running();
  // Zulip's heartbeat has an id of its own, which must be sent back.
  (await server.next()).respond(200, polled([{ id: 0, type: "heartbeat" }], 101));
  const next = await server.next();
  assert.equal(next.query.last_event_id, "0");
  // eventq's carries the newest acknowledged id: nothing moves.
  next.respond(200, polled([{ id: 0, type: "heartbeat" }], 102));
  const after = await server.next();
  assert.equal(after.query.last_event_id, "0");
  assert.deepEqual(log.events, []);
  assert.equal(log.infos.length, 0);
  assert.equal(client.streamPosition, 102, "a heartbeat's answer still moves the position");
});

test("events already received are not delivered twice", async () => {
  const { server, log } = await running({}, { last_event_id: 2 });
  (await server.next()).respond(
    200,
    polled([
      { id: 2, type: "old" },
      { id: 3, type: "new" },
    ]),
  );
  (await server.next()).respond(
    200,
    polled([
      { id: 3, type: "new" },
      { id: 4, type: "newer" },
    ]),
  );
  await server.next();
  assert.deepEqual(
    log.events.map((e) => e.id),
    [3, 4],
  );
});

test("an asynchronous listener is awaited before the next poll and the position moves after it", async () => {
  let release;
  const gate = new Promise((resolve) => {
    release = resolve;
  });
  const { client, server } = await running({ onEvents: () => gate });
  (await server.next()).respond(200, polled([{ id: 0, type: "test" }], 150));
  await server.none();
  assert.equal(client.lastEventId, 0, "received at once");
  assert.equal(client.streamPosition, 100, "the page has not applied the events yet");
  release();
  const next = await server.next();
  assert.equal(next.query.last_event_id, "0");
  assert.equal(client.streamPosition, 150);
});

test("a listener that throws is reported and the client goes on", async () => {
  const boom = new Error("page bug");
  const { client, server, log } = await running({
    onEvents: () => {
      throw boom;
    },
  });
  const other = [];
  client.onEvents((events) => other.push(...events));
  const rejecting = client.onEvents(async () => {
    throw new Error("async page bug");
  });
  (await server.next()).respond(200, polled([{ id: 0, type: "test" }]));
  const next = await server.next();
  assert.equal(next.query.last_event_id, "0");
  assert.deepEqual(other, [{ id: 0, type: "test" }]);
  assert.deepEqual(
    log.reported.map((e) => e.message),
    ["page bug", "async page bug"],
  );
  assert.equal(client.status, "connected");
  rejecting();
});

test("a listener can be removed with the function onEvents returned", async () => {
  const { client, server } = await running();
  const seen = [];
  const remove = client.onEvents((events) => seen.push(...events));
  (await server.next()).respond(200, polled([{ id: 0, type: "a" }]));
  const second = await server.next();
  remove();
  second.respond(200, polled([{ id: 1, type: "b" }]));
  await server.next();
  assert.deepEqual(
    seen.map((e) => e.type),
    ["a"],
  );
});

test("an empty answer (a displaced poll) delivers nothing and polls again", async () => {
  const { server, log } = await running();
  (await server.next()).respond(200, polled([], 100, { displaced: true }));
  const next = await server.next();
  assert.equal(next.query.last_event_id, "-1");
  assert.equal(log.infos.length, 0);
});

test("the poll times out after register's event_queue_longpoll_timeout_seconds", async () => {
  const { server, timers, log } = await running({}, { event_queue_longpoll_timeout_seconds: 60 });
  const poll = await server.next();
  await timers.advance(59_999);
  assert.equal(poll.init.signal.aborted, false);
  await timers.advance(1);
  assert.equal(poll.init.signal.aborted, true);
  assert.equal(log.retries.length, 1);
  assert.equal(log.retries[0].error.kind, "timeout");
  await timers.advance(log.retries[0].delayMs);
  const retry = await server.next();
  assert.equal(retry.query.dont_block, "true");
});

test("the pollTimeoutMs option overrides the server's timeout", async () => {
  const { server, timers } = await running({ pollTimeoutMs: 5_000 });
  const poll = await server.next();
  assert.deepEqual(timers.pending(), [5_000]);
  poll.respond(200, polled([]));
  await settle();
  assert.deepEqual(timers.pending(), [5_000], "the answered poll's timer is cleared");
});

test("an error answer other than the queue's loss is fatal", async () => {
  const { client, server, log } = await running();
  (await server.next()).respond(
    400,
    failed("BAD_REQUEST", "An event newer than 3 has already been pruned!"),
  );
  await server.none();
  assert.equal(client.status, "failed");
  assert.equal(log.errors.length, 1);
  assert.equal(log.errors[0].code, "BAD_REQUEST");
  assert.equal(log.errors[0].status, 400);
  assert.equal(log.errors[0].retryable, false);
});

test("a 401 is fatal, reported to onError, and nothing is sent after it", async () => {
  const { client, server, log } = await running();
  (await server.next()).respond(
    401,
    failed("UNAUTHORIZED", "Not logged in: API authentication or user session required"),
  );
  await server.none();
  assert.deepEqual(log.statuses.slice(-1), ["failed"]);
  assert.match(log.errors[0].message, /Not logged in/);
  assert.equal(log.errors[0].kind, "http");
  assert.equal(client.queueId, "q1", "the queue is still there for close() to delete");
});

test("without an onError listener a fatal error is reported, not swallowed", async () => {
  const { server, log } = await running({ onError: undefined });
  (await server.next()).respond(403, failed("CSRF_FAILED"));
  await settle();
  assert.equal(log.reported.length, 1);
  assert.equal(log.reported[0].code, "CSRF_FAILED");
});
