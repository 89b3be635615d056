import assert from "node:assert/strict";
import { test } from "node:test";

import { polled, running, settle } from "./fakes.js";

const WRITE =
  'id: 5\ndata: {"id":5,"type":"message"}\n\n' +
  'id: 7\ndata: {"id":7,"type":"typing"}\n\n' +
  'event: position\ndata: {"stream_position":120}\n\n';

test("auto reads an event stream: each write's events with its position", async () => {
  const { client, server, log } = await running({ transport: "auto" }, { last_event_id: 4 });
  const first = await server.next();
  assert.equal(first.path, "/json/events");
  assert.deepEqual(first.query, { queue_id: "q1", last_event_id: "4" });
  assert.equal(first.headers.Accept, "text/event-stream");
  const body = first.stream();
  body.push("retry: 500\n\n");
  body.push(WRITE);
  await settle();
  assert.deepEqual(log.events, [
    { id: 5, type: "message" },
    { id: 7, type: "typing" },
  ]);
  assert.deepEqual(log.infos, [{ queueId: "q1", streamPosition: 120 }]);
  assert.equal(client.lastEventId, 7);
  assert.equal(client.streamPosition, 120);
  assert.equal(client.status, "connected");
  // A heartbeat is a comment: nothing for the page, no new request.
  body.push(": heartbeat\n\n");
  await server.none();
  assert.equal(log.events.length, 2);
  // The server ends the stream: the next one acknowledges what was read.
  body.end();
  const second = await server.next();
  assert.deepEqual(second.query, { queue_id: "q1", last_event_id: "7" });
  assert.equal(second.headers.Accept, "text/event-stream");
});

test("a message split across reads, and CRLF line ends, are put together", async () => {
  const { server, log } = await running({ transport: "stream" });
  const body = (await server.next()).stream();
  const crlf = WRITE.replaceAll("\n", "\r\n");
  for (let at = 0; at < crlf.length; at += 7) body.push(crlf.slice(at, at + 7));
  await settle();
  assert.deepEqual(
    log.events.map((e) => e.id),
    [5, 7],
  );
  assert.deepEqual(log.infos, [{ queueId: "q1", streamPosition: 120 }]);
});

test("auto long-polls from then on when the server answers a stream request with JSON", async () => {
  const { server, log } = await running({ transport: "auto" });
  const first = await server.next();
  assert.equal(first.headers.Accept, "text/event-stream");
  // A Zulip server ignores Accept and answers as a long poll.
  first.respond(200, polled([{ id: 0, type: "message" }], 101));
  const second = await server.next();
  assert.equal(second.headers.Accept, undefined);
  assert.deepEqual(second.query, { queue_id: "q1", last_event_id: "0" });
  assert.deepEqual(log.events, [{ id: 0, type: "message" }]);
});

test("a stream that says the queue is gone makes the client register again", async () => {
  const { client, server, log } = await running({ transport: "stream" });
  const body = (await server.next()).stream();
  body.push(WRITE);
  body.push('id: 8\ndata: {"id":8,"type":"message"}\n\nevent: deleted\ndata: {}\n\n');
  const register = await server.next();
  assert.equal(register.path, "/json/register");
  assert.equal(register.form.resume_from, "120");
  assert.deepEqual(
    log.events.map((e) => e.id),
    [5, 7, 8],
  );
  assert.equal(client.queueId, null);
});

test("a stream cut off is retried after a backoff, by a quick poll first", async () => {
  const { server, timers, log } = await running({ transport: "stream" });
  const body = (await server.next()).stream();
  body.push(WRITE);
  await settle();
  body.cut();
  await server.none();
  assert.equal(log.retries.length, 1);
  assert.equal(log.retries[0].error.kind, "network");
  await timers.advance(log.retries[0].delayMs);
  const check = await server.next();
  assert.deepEqual(check.query, { queue_id: "q1", last_event_id: "7", dont_block: "true" });
  assert.equal(check.headers.Accept, undefined);
  check.respond(200, polled([], 120));
  const again = await server.next();
  assert.equal(again.headers.Accept, "text/event-stream");
  assert.deepEqual(again.query, { queue_id: "q1", last_event_id: "7" });
});

test("a stream silent for the poll timeout is abandoned; any write resets the clock", async () => {
  const { server, timers, log } = await running({ transport: "stream", pollTimeoutMs: 1000 });
  const body = (await server.next()).stream();
  await timers.advance(900);
  body.push(": heartbeat\n\n");
  await timers.advance(900);
  assert.equal(log.retries.length, 0, "the heartbeat kept it alive");
  await timers.advance(200);
  assert.equal(log.retries.length, 1);
  assert.equal(log.retries[0].error.kind, "timeout");
});

test("stop() ends a stream; no request follows", async () => {
  const { client, server } = await running({ transport: "stream" });
  const request = await server.next();
  request.stream().push(WRITE);
  await settle();
  client.stop();
  await server.none();
  assert.equal(client.status, "stopped");
});
