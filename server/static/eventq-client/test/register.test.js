import assert from "node:assert/strict";
import { test } from "node:test";

import { EventqClient, EventqError } from "../eventq.js";
import { registered, running, setup } from "./fakes.js";

test("session register posts Zulip's form to /json/register with the CSRF token", async () => {
  const { client, server } = setup({
    eventTypes: ["message", "typing"],
    fetchEventTypes: ["message", "realm_user"],
    narrow: [["stream", "design"]],
    allPublicStreams: false,
    clientCapabilities: { notification_settings_null: true },
    includeSubscribers: "partial",
    registerParams: { client: "eventq-page", skipped: undefined },
  });
  const started = client.start();
  const request = await server.next();
  assert.equal(request.method, "POST");
  assert.equal(request.url, "/json/register");
  assert.equal(request.init.credentials, "same-origin");
  assert.equal(request.headers["X-CSRFToken"], "tok+en");
  assert.equal(request.headers["Content-Type"], "application/x-www-form-urlencoded");
  assert.equal(request.headers.Authorization, undefined);
  assert.deepEqual(request.form, {
    event_types: '["message","typing"]',
    fetch_event_types: '["message","realm_user"]',
    narrow: '[["stream","design"]]',
    all_public_streams: "false",
    client_capabilities: '{"notification_settings_null":true}',
    include_subscribers: "partial",
    client: "eventq-page",
  });
  request.respond(200, registered({ realm_name: "Demo" }));
  const state = await started;
  assert.equal(state.realm_name, "Demo");
  assert.equal(client.queueId, "q1");
  assert.equal(client.lastEventId, -1);
  assert.equal(client.streamPosition, 100);
  assert.equal(client.status, "connected");
});

test("api auth uses /api/v1/ with Basic credentials and no cookies", async () => {
  const { client, server } = setup({
    baseUrl: "https://chat.example/",
    auth: { email: "zoë@demo.example", apiKey: "k3y" },
  });
  client.start();
  const request = await server.next();
  assert.equal(request.url, "https://chat.example/api/v1/register");
  assert.equal(request.init.credentials, "omit");
  assert.equal(request.headers["X-CSRFToken"], undefined);
  const encoded = request.headers.Authorization.replace(/^Basic /, "");
  assert.equal(Buffer.from(encoded, "base64").toString("utf8"), "zoë@demo.example:k3y");
  request.respond(200, registered());
  const poll = await server.next();
  assert.equal(poll.path, "/api/v1/events");
  assert.equal(poll.headers.Authorization, request.headers.Authorization);
});

test("a session without a csrftoken cookie sends no CSRF header", async () => {
  const { client, server } = setup({ cookies: () => "theme=dark" });
  client.start();
  const request = await server.next();
  assert.equal("X-CSRFToken" in request.headers, false);
});

test("a session of one of several users names it and uses its CSRF cookie", async () => {
  const { client, server } = setup({
    user: 7,
    cookies: () => "csrftoken=latest; csrftoken_7=seven; csrftoken_8=eight",
  });
  client.start();
  const request = await server.next();
  assert.equal(request.headers["X-Eventq-User"], "7");
  assert.equal(request.headers["X-CSRFToken"], "seven");
  request.respond(200, registered());
  const poll = await server.next();
  assert.equal(poll.headers["X-Eventq-User"], "7");
  assert.throws(() => new EventqClient({ user: "7" }), TypeError);
  assert.throws(() => new EventqClient({ user: 0 }), TypeError);
});

test("bad auth and register options are refused at construction", () => {
  assert.throws(() => new EventqClient({ auth: { email: "a@b" } }), TypeError);
  assert.throws(() => new EventqClient({ registerParams: { resume_from: 3 } }), TypeError);
});

test("start() resolves with the state before any event is delivered", async () => {
  const { client, server, log } = setup();
  const order = [];
  client.onEvents(() => order.push("events"));
  const started = client.start().then(() => order.push("state"));
  (await server.next()).respond(200, registered());
  (await server.next()).respond(200, {
    result: "success",
    events: [{ id: 0, type: "test" }],
    stream_position: 101,
  });
  await started;
  await server.next();
  assert.deepEqual(order, ["state", "events"]);
  assert.equal(log.events.length, 1);
});

test("start() may be called once, and not after stop()", async () => {
  const { client } = await running();
  await assert.rejects(client.start(), /once/);
  const other = setup().client;
  other.stop();
  await assert.rejects(other.start(), /once/);
});

test("a register that succeeds without a queue is fatal", async () => {
  const { client, server, log } = setup();
  const started = client.start();
  (await server.next()).respond(200, registered({ queue_id: null }));
  await assert.rejects(
    started,
    (error) => error instanceof EventqError && error.kind === "no_queue",
  );
  assert.equal(client.status, "failed");
  assert.equal(log.errors.length, 1);
  await server.none();
});

test("stop() during the first register rejects start() and deletes the queue it makes", async () => {
  const { client, server, log } = setup();
  const started = client.start();
  const request = await server.next();
  client.stop();
  await assert.rejects(started, (error) => error.kind === "stopped");
  assert.equal(request.init.signal.aborted, false);
  await server.none();
  request.respond(200, registered({ queue_id: "q7" }));
  const deletion = await server.next();
  assert.equal(deletion.method, "DELETE");
  assert.deepEqual(deletion.form, { queue_id: "q7" });
  assert.equal(deletion.init.keepalive, true);
  assert.equal(client.queueId, null);
  assert.equal(client.status, "stopped");
  assert.deepEqual(log.events, []);
  await server.none();
});
