import assert from "node:assert/strict";
import { test } from "node:test";

import { DEFAULT_BACKOFF, EventqError } from "../eventq.js";
import { failed, polled, registered, running, setup } from "./fakes.js";

// Fails the next `count` polls with `answer(request)`, waiting out each
// backoff; returns the delays the client chose.
async function failPolls(fixture, count, answer) {
  const { server, timers, log } = fixture;
  for (let i = 0; i < count; i += 1) {
    answer(await server.next());
    await server.none();
    const retry = log.retries.at(-1);
    assert.deepEqual(timers.pending(), [retry.delayMs], "only the backoff timer is pending");
    await timers.advance(retry.delayMs);
  }
  return log.retries.map((r) => r.delayMs);
}

test("network errors back off exponentially with full jitter, capped at 60 s", async () => {
  const draws = [0.5, 0.5, 0.5, 0.5, 0.25, 0.99, 0.5, 0.5, 0.999, 0];
  const fixture = await running({ random: () => draws.shift() });
  const delays = await failPolls(fixture, 10, (request) => request.fail());
  // random() x min(60 s, 1 s x 2^n)
  assert.deepEqual(delays, [500, 1000, 2000, 4000, 4000, 31_680, 30_000, 30_000, 59_940, 0]);
  assert.deepEqual(
    fixture.log.retries.map((r) => r.attempt),
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
  );
  assert.equal(fixture.log.retries[0].error.kind, "network");
  assert.equal(fixture.log.retries[0].error.retryable, true);
  assert.deepEqual(DEFAULT_BACKOFF, {
    baseMs: 1000,
    factor: 2,
    capMs: 60_000,
    retryAfterCapMs: 60_000,
  });
});

test("the backoff policy is an option", async () => {
  const fixture = await running({
    random: () => 1 - 2 ** -53,
    backoff: { baseMs: 100, capMs: 250 },
  });
  const delays = await failPolls(fixture, 3, (request) => request.fail());
  assert.deepEqual(delays, [99, 199, 249]);
});

test("5xx, 429 and 408 answers and unreadable pages are retried", async () => {
  const fixture = await running();
  let status = 0;
  const answers = [
    (r) => r.respond(502, failed("SHARD_UNAVAILABLE")),
    (r) => r.respond(503, "<html>Service Unavailable</html>"),
    (r) => r.respond(500, failed("INTERNAL")),
    (r) => r.respond(429, failed("RATE_LIMIT_HIT")),
    (r) => r.respond(408, ""),
    (r) => r.respond(200, "<html>captive portal</html>"),
  ];
  await failPolls(fixture, answers.length, (r) => answers[status++](r));
  assert.deepEqual(
    fixture.log.retries.map((r) => [r.error.kind, r.error.status, r.error.code]),
    [
      ["http", 502, "SHARD_UNAVAILABLE"],
      ["http", 503, null],
      ["http", 500, "INTERNAL"],
      ["http", 429, "RATE_LIMIT_HIT"],
      ["http", 408, null],
      ["protocol", 200, null],
    ],
  );
  assert.equal(fixture.client.status, "retrying");
  assert.equal(fixture.log.errors.length, 0);
});

test("Retry-After is waited and the jitter on top: seconds, an HTTP date, or the body's retry-after", async () => {
  const fixture = await running();
  const { timers } = fixture;
  const answers = [
    // the server asks for 7 s (the header wins over the body), jitter 500 ms
    (r) =>
      r.respond(
        429,
        failed("RATE_LIMIT_HIT", "API usage exceeded rate limit", { "retry-after": 6.2 }),
        { "Retry-After": "7" },
      ),
    // 0 s asked: the jitter alone (1000 ms)
    (r) => r.respond(503, failed("SERVER_SHUTTING_DOWN"), { "Retry-After": "0" }),
    // an HTTP date 12 s from the fake clock's now, jitter 2000 ms; the date
    // has whole seconds and the clock is 8.5 s on: 11.5 s asked
    (r) => r.respond(503, "", { "Retry-After": new Date(timers.now + 12_000).toUTCString() }),
    // no header (a cross-origin page may not read it): the body's fractional
    // seconds, jitter 4000 ms
    (r) => r.respond(429, failed("RATE_LIMIT_HIT", "limit", { "retry-after": 9.5 })),
  ];
  let i = 0;
  const delays = await failPolls(fixture, answers.length, (r) => answers[i++](r));
  assert.deepEqual(delays, [7500, 1000, 13_500, 13_500]);
  assert.equal(fixture.log.retries[0].error.retryAfterMs, 7000);
});

test("clients all told Retry-After: 1 come back spread over the jitter, not together", async () => {
  const delays = [];
  for (const draw of [0, 0.25, 0.5, 0.999]) {
    const { server, log } = await running({ random: () => draw });
    // What our nginx answers for every request while the server restarts.
    (await server.next()).respond(502, "<html>Bad Gateway</html>", { "Retry-After": "1" });
    await server.none();
    delays.push(log.retries[0].delayMs);
  }
  assert.deepEqual(delays, [1000, 1250, 1500, 1999]);
});

test("a Retry-After beyond retryAfterCapMs counts as the cap", async () => {
  const fixture = await running();
  const { timers } = fixture;
  const answers = [
    (r) => r.respond(503, "", { "Retry-After": "86400" }), // a day
    (r) => r.respond(503, "", { "Retry-After": new Date(timers.now + 3_600_000).toUTCString() }),
    (r) => r.respond(429, failed("RATE_LIMIT_HIT", "limit", { "retry-after": 1e9 })),
  ];
  let i = 0;
  const delays = await failPolls(fixture, answers.length, (r) => answers[i++](r));
  assert.deepEqual(delays, [60_500, 61_000, 62_000]);
  assert.equal(fixture.log.retries[0].error.retryAfterMs, 86_400_000, "what was asked");

  const capped = await running({ backoff: { retryAfterCapMs: 5000 } });
  const [delay] = await failPolls(capped, 1, (r) => r.respond(503, "", { "Retry-After": "30" }));
  assert.equal(delay, 5500);
});

test("a successful poll resets the backoff, and the poll after a failure does not block", async () => {
  const fixture = await running();
  const { server, timers, log } = fixture;
  await failPolls(fixture, 3, (r) => r.fail());
  const recovered = await server.next();
  assert.equal(recovered.query.dont_block, "true", "asks for an answer at once after a failure");
  recovered.respond(200, polled([]));
  const normal = await server.next();
  assert.equal(normal.query.dont_block, undefined);
  normal.fail();
  await server.none();
  assert.deepEqual(
    log.retries.map((r) => [r.attempt, r.delayMs]),
    [
      [1, 500],
      [2, 1000],
      [3, 2000],
      [1, 500],
    ],
  );
  assert.deepEqual(log.statuses, ["connecting", "connected", "retrying", "connected", "retrying"]);
  await timers.advance(500);
  assert.equal((await server.next()).query.dont_block, "true");
});

test("the first register is retried with backoff until it answers", async () => {
  const { client, server, timers, log } = setup();
  const started = client.start();
  (await server.next()).fail();
  await timers.advance(500);
  (await server.next()).respond(502, "Bad Gateway");
  await timers.advance(1000);
  (await server.next()).respond(200, registered());
  const state = await started;
  assert.equal(state.queue_id, "q1");
  assert.deepEqual(log.statuses, [
    "connecting",
    "retrying",
    "connecting",
    "retrying",
    "connecting",
    "connected",
  ]);
  // A register that answered does not reset the backoff: only a poll does.
  const poll = await server.next();
  assert.equal(poll.query.dont_block, "true");
});

test("the first register times out after requestTimeoutMs", async () => {
  const { client, server, timers, log } = setup({ requestTimeoutMs: 10_000 });
  client.start();
  const register = await server.next();
  await timers.advance(10_000);
  assert.equal(register.init.signal.aborted, true);
  assert.equal(log.retries[0].error.kind, "timeout");
});

test("a fatal register error rejects start() and reaches onError", async () => {
  const { client, server, log } = setup();
  const started = client.start();
  (await server.next()).respond(401, failed("INVALID_API_KEY", "Invalid API key"));
  await assert.rejects(started, (error) => {
    assert.ok(error instanceof EventqError);
    assert.equal(error.code, "INVALID_API_KEY");
    assert.equal(error.status, 401);
    return true;
  });
  assert.equal(log.errors.length, 1);
  assert.equal(client.status, "failed");
  await server.none();
});

test("stop() during a backoff wait cancels it", async () => {
  const fixture = await running();
  const { client, server, timers } = fixture;
  (await server.next()).fail();
  await server.none();
  client.stop();
  assert.deepEqual(timers.pending(), []);
  await timers.advance(120_000);
  await server.none();
  assert.equal(client.status, "stopped");
});
