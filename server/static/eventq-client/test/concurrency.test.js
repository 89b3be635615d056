import assert from "node:assert/strict";
import { test } from "node:test";

import { failed, polled, registered, running, settle } from "./fakes.js";

const LOST = failed("BAD_EVENT_QUEUE_ID", "Bad event queue ID");

function pageWindow() {
  return new EventTarget();
}

function pageshow(persisted) {
  return Object.assign(new Event("pageshow"), { persisted });
}

// A deterministic pseudo-random sequence (mulberry32), so that a failure
// names the seed that reproduces it.
function seeded(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

test("exactly one request is in flight through every kind of answer", async () => {
  for (const seed of [1, 2, 3, 4, 5]) {
    const pick = seeded(seed);
    const win = pageWindow();
    const { client, server, timers, log } = await running({ window: win });
    const newest = new Map(); // queue -> the highest event id it delivered
    client.onEvents((events, info) => {
      for (const event of events) {
        assert.ok(event.id > (newest.get(info.queueId) ?? -1), `seed ${seed}: ${event.id} again`);
        newest.set(info.queueId, event.id);
      }
    });
    let nextId = 0;
    let position = 100;
    const orphans = new Set(); // queues of registers answered after a pagehide
    for (let step = 0; step < 300; step += 1) {
      assert.ok(server.inFlight <= 1, `seed ${seed} step ${step}: ${server.inFlight} in flight`);
      const roll = pick();
      if (roll < 0.05) {
        win.dispatchEvent(new Event("pagehide"));
        await settle();
        // A register in flight was left to finish: it answers now, and the
        // queue it made must be deleted, never polled.
        for (const request of server.requests) {
          if (!request.settled && request.path.endsWith("/register")) {
            orphans.add(`orphan${step}`);
            request.respond(200, registered({ queue_id: `orphan${step}` }));
          }
        }
        await settle();
        win.dispatchEvent(pageshow(true));
        continue;
      }
      if (roll < 0.1) {
        // whatever the client waits on (a backoff, a poll's timeout) ends
        await timers.advance(120_000);
        continue;
      }
      let request;
      try {
        request = await server.next();
      } catch {
        await timers.advance(120_000); // waiting out a backoff
        continue;
      }
      if (request.settled) continue; // aborted by a pagehide
      if (request.method === "DELETE") continue; // keepalive, not counted
      if (request.path.endsWith("/register")) {
        const resumed = request.form.resume_from !== undefined;
        if (pick() < 0.2) request.respond(pick() < 0.5 ? 503 : 429, failed("RATE_LIMIT_HIT"));
        else {
          nextId = 0;
          request.respond(
            200,
            registered({
              queue_id: `q${step}`,
              stream_position: position,
              ...(resumed ? { resumed_from: 1 } : {}),
            }),
          );
        }
        continue;
      }
      const answer = pick();
      if (answer < 0.6) {
        position += 1;
        request.respond(200, polled([{ id: nextId++, type: "test" }], position));
      } else if (answer < 0.7)
        request.respond(200, polled([{ id: nextId - 1, type: "heartbeat" }], position));
      else if (answer < 0.8) request.fail();
      else if (answer < 0.9) request.respond(502, "Bad Gateway");
      else request.respond(400, LOST);
    }
    assert.equal(server.maxInFlight, 1, `seed ${seed}`);
    const deleted = new Set(
      server.requests.filter((r) => r.method === "DELETE").map((r) => r.form.queue_id),
    );
    for (const orphan of orphans) assert.ok(deleted.has(orphan), `seed ${seed}: ${orphan} kept`);
    assert.ok(
      server.requests.every((r) => !orphans.has(r.query.queue_id) || r.method === "DELETE"),
      `seed ${seed}: an orphan queue was polled`,
    );
    assert.equal(log.errors.length, 0, `seed ${seed}: ${log.errors[0]}`);
    assert.equal(log.reported.length, 0, `seed ${seed}: ${log.reported[0]}`);
    assert.ok(log.events.length > 20, `seed ${seed}: only ${log.events.length} events`);
    client.close();
  }
});

test("a poll answered just as stop() is called delivers nothing and moves nothing", async () => {
  const { client, server, log } = await running();
  const poll = await server.next();
  poll.respond(200, polled([{ id: 0, type: "late" }], 150));
  client.stop(); // before the answer is read
  await settle();
  assert.deepEqual(log.events, []);
  assert.equal(client.lastEventId, -1);
  assert.equal(client.streamPosition, 100);
  assert.equal(poll.init.signal.aborted, true);
  await server.none();
});

test("after stop() the old poll's late answer is ignored, even if fetch ignores the abort", async () => {
  const { client, server, log } = await running({ ignoreAbort: true });
  const poll = await server.next();
  client.stop();
  assert.equal(poll.init.signal.aborted, true);
  poll.respond(200, polled([{ id: 0, type: "late" }], 150));
  await settle();
  assert.deepEqual(log.events, []);
  assert.equal(client.lastEventId, -1);
  assert.equal(client.streamPosition, 100);
  assert.equal(client.status, "stopped");
  await server.none();
});

test("a timed-out poll's late answer is ignored by the poll that replaced it", async () => {
  const { client, server, timers, log } = await running({ ignoreAbort: true, pollTimeoutMs: 1000 });
  const old = await server.next();
  await timers.advance(1000);
  await timers.advance(log.retries[0].delayMs);
  const current = await server.next();
  old.respond(200, polled([{ id: 0, type: "late" }], 150));
  await settle();
  assert.deepEqual(log.events, []);
  assert.equal(client.lastEventId, -1);
  current.respond(200, polled([{ id: 0, type: "current" }], 151));
  await server.next();
  assert.deepEqual(log.events, [{ id: 0, type: "current" }]);
});

test("a replaced queue's poll answered late delivers nothing to the new queue's client", async () => {
  const win = pageWindow();
  const { client, server, log } = await running({ window: win, ignoreAbort: true });
  (await server.next()).respond(200, polled([{ id: 0, type: "first" }], 110));
  const old = await server.next();
  win.dispatchEvent(new Event("pagehide"));
  assert.equal(old.init.signal.aborted, true);
  const deletion = await server.next();
  assert.equal(deletion.method, "DELETE");
  win.dispatchEvent(pageshow(true));
  const register = await server.next();
  assert.equal(register.form.resume_from, "110");
  register.respond(200, registered({ queue_id: "q2", stream_position: 115, resumed_from: 110 }));
  const poll = await server.next();
  assert.equal(poll.query.queue_id, "q2");

  // q1's answer finally arrives: q1 is gone, its ids mean nothing for q2.
  old.respond(
    200,
    polled(
      [
        { id: 1, type: "stale" },
        { id: 2, type: "stale" },
      ],
      120,
    ),
  );
  await settle();
  assert.equal(client.lastEventId, -1);
  assert.equal(client.streamPosition, 110, "q2's events up to 115 are not applied yet");
  assert.deepEqual(
    log.events.map((e) => e.type),
    ["first"],
  );
  poll.respond(200, polled([{ id: 0, type: "resumed" }], 116));
  const next = await server.next();
  assert.deepEqual(next.query, { queue_id: "q2", last_event_id: "0" });
  assert.deepEqual(
    log.events.map((e) => e.type),
    ["first", "resumed"],
  );
});

test("a queue's answer arriving as the page hides is dropped", async () => {
  const win = pageWindow();
  const { client, server, log } = await running({ window: win });
  const poll = await server.next();
  poll.respond(200, polled([{ id: 0, type: "late" }], 150));
  win.dispatchEvent(new Event("pagehide"));
  await settle();
  assert.deepEqual(log.events, []);
  assert.equal(client.streamPosition, 100, "a resume starts before the dropped events");
  assert.equal(client.status, "suspended");
});
