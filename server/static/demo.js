// The demo page (/demo): log in as one of the demo realm's users, watch that
// user's events arrive through eventq.js, send channel and direct messages.
//
// Each tab is one user: the tab keeps its user id in sessionStorage (so a
// reload stays that user) and names it in X-Eventq-User on every request,
// which makes the server use that user's cookie pair (eventq_session_<id>,
// csrftoken_<id>) rather than the latest login's. Two tabs of one browser
// can so be two users at once.
//
// window.eventqDemo is the page's record of what happened (requests, events,
// retries, resets), read by tests/browser/ and handy in the console; its
// `debug` switches simulate network trouble and are off unless set there.

import { EventqClient } from "/static/eventq.js";

const USER_KEY = "eventq-demo-user";
const USER_HEADER = "X-Eventq-User";
// What a tab keeps: enough to read a session's history, bounded so that a
// tab left open for days does not grow without end.
const MAX_RECORDS = 2000;
const MAX_SHOWN = 500;

const demo = {
  // Set once per page load: a reload (or a navigation) changes it.
  loadedAt: Date.now(),
  userId: null,
  client: null,
  // Every event given to the page: { queueId, id, type, receivedAt, event }.
  received: [],
  // Every request the client made: see trackedFetch.
  requests: [],
  retries: [],
  resets: [],
  statuses: [],
  errors: [],
  // Messages this tab sent: { kind, content, clickedAt, answeredAt, messageId, error }.
  sends: [],
  debug: {
    // Requests ignore the client's abort (as a proxy that keeps a request
    // open would): a replaced poll then answers late, to a client that must
    // ignore it.
    detachRequests: false,
    // The client's DELETE of a queue is lost on its way (as when the page
    // goes away before it is sent): the queue stays on the server.
    dropDeletes: false,
  },
};
window.eventqDemo = demo;

// The tab's view of the user's world, from register's state and events.
const world = {
  me: null, // { user_id, email, full_name }
  users: new Map(), // user_id -> { user_id, email, full_name }
  subscriptions: new Map(), // stream_id -> { stream_id, name }
};

const $ = (id) => document.getElementById(id);

function record(list, item) {
  list.push(item);
  if (list.length > MAX_RECORDS) list.splice(0, list.length - MAX_RECORDS);
}

function readCookie(name) {
  for (const part of document.cookie.split(";")) {
    const at = part.indexOf("=");
    if (at !== -1 && part.slice(0, at).trim() === name) return decodeURIComponent(part.slice(at + 1).trim());
  }
  return null;
}

function csrfCookie(userId) {
  return `csrftoken_${userId}`;
}

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== null && value !== undefined) node.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

// -- HTTP -------------------------------------------------------------------

// The fetch the client uses: records each request and applies the debug
// switches. (The client itself names the tab's user: its `user` option.)
function trackedFetch(input, init = {}) {
  const url = new URL(String(input), location.href);
  const method = (init.method ?? "GET").toUpperCase();
  const entry = {
    method,
    path: url.pathname,
    queueId: url.searchParams.get("queue_id"),
    lastEventId: url.searchParams.has("last_event_id") ? Number(url.searchParams.get("last_event_id")) : null,
    dontBlock: url.searchParams.get("dont_block") === "true",
    startedAt: Date.now(),
    endedAt: null,
    status: null,
    error: null,
    // The client had given up on the request (aborted it) by the time it ended.
    abandoned: false,
    eventIds: null,
    // Whether the answer is an event stream (its events are not counted here).
    stream: false,
  };
  record(demo.requests, entry);
  if (method === "DELETE" && demo.debug.dropDeletes) {
    entry.endedAt = Date.now();
    entry.error = "dropped (debug.dropDeletes)";
    return Promise.reject(new TypeError("dropped by the demo's debug.dropDeletes"));
  }
  const signal = init.signal;
  const sent = { ...init };
  if (demo.debug.detachRequests) delete sent.signal;
  return fetch(input, sent).then(
    (response) => {
      entry.endedAt = Date.now();
      entry.status = response.status;
      entry.abandoned = Boolean(signal?.aborted);
      const streamed = (response.headers.get("Content-Type") ?? "").startsWith("text/event-stream");
      entry.stream = streamed;
      if (method === "GET" && url.pathname.endsWith("/events") && response.ok && !streamed) {
        response
          .clone()
          .json()
          .then((body) => {
            entry.eventIds = (body.events ?? []).map((event) => event.id);
          })
          .catch(() => {});
      }
      return response;
    },
    (error) => {
      entry.endedAt = Date.now();
      entry.error = String(error);
      entry.abandoned = Boolean(signal?.aborted);
      throw error;
    },
  );
}

class RequestFailed extends Error {
  constructor(status, body) {
    super(body?.msg || `status ${status}`);
    this.status = status;
    this.code = body?.code ?? null;
  }
}

// A /json/ request of the page itself (login, sending, joining), as the
// tab's user when one is logged in.
async function api(method, path, params = {}) {
  const headers = { "Content-Type": "application/x-www-form-urlencoded" };
  const init = { method, headers, credentials: "same-origin", cache: "no-store" };
  if (demo.userId !== null) {
    headers[USER_HEADER] = String(demo.userId);
    const token = readCookie(csrfCookie(demo.userId));
    if (token !== null) headers["X-CSRFToken"] = token;
  }
  const form = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    form.append(name, typeof value === "string" ? value : JSON.stringify(value));
  }
  let url = `/json/${path}`;
  if (method === "GET") {
    delete headers["Content-Type"];
    if ([...form].length > 0) url += `?${form}`;
  } else {
    init.body = form.toString();
  }
  const response = await fetch(url, init);
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: judged by the status
  }
  if (!response.ok || body?.result !== "success") throw new RequestFailed(response.status, body);
  return body;
}

// -- status -----------------------------------------------------------------

const STATUS_TEXT = {
  starting: "Starting…",
  "logged-out": "Not logged in",
  idle: "Not connected",
  connecting: "Connecting…",
  connected: "Connected",
  retrying: "Reconnecting…",
  suspended: "Paused (page hidden)",
  stopped: "Stopped",
  failed: "Disconnected",
};

function showStatus(status, text = STATUS_TEXT[status] ?? status) {
  const node = $("status");
  node.dataset.status = status;
  node.textContent = text;
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString();
}

// -- login ------------------------------------------------------------------

async function showLogin(message = "") {
  demo.userId = null;
  $("app").hidden = true;
  $("identity").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message;
  showStatus("logged-out");
  const list = $("login-users");
  list.replaceChildren();
  let users;
  try {
    ({ users } = await api("GET", "dev_users"));
  } catch (error) {
    $("login-error").textContent =
      error.status === 404
        ? "The demo is off: start the server with EVENTQ_DEMO=1."
        : `Could not list the demo users: ${error.message}`;
    return;
  }
  for (const user of users) {
    const button = element(
      "button",
      { type: "button", class: "user", "data-user-email": user.email, "data-user-id": user.user_id },
      element("span", { class: "name" }, user.full_name),
      element("span", { class: "email" }, user.email),
    );
    button.addEventListener("click", () => logIn(user.email));
    list.append(element("li", {}, button));
  }
}

async function logIn(email) {
  $("login-error").textContent = "";
  for (const button of $("login-users").querySelectorAll("button")) button.disabled = true;
  try {
    const me = await api("POST", "dev_login", { email });
    sessionStorage.setItem(USER_KEY, String(me.user_id));
    enter(me.user_id);
  } catch (error) {
    $("login-error").textContent = `Login failed: ${error.message}`;
    for (const button of $("login-users").querySelectorAll("button")) button.disabled = false;
  }
}

async function logOut() {
  const client = demo.client;
  demo.client = null;
  if (client !== null) await client.close(); // deletes the queue while the session still works
  try {
    await api("POST", "logout");
  } catch {
    // already logged out (expired, or the key was rotated): nothing to end
  }
  sessionStorage.removeItem(USER_KEY);
  $("events").replaceChildren();
  showLogin();
}

// -- the session --------------------------------------------------------------

function enter(userId) {
  demo.userId = userId;
  $("login").hidden = true;
  $("app").hidden = false;
  showStatus("connecting");
  const client = new EventqClient({
    baseUrl: "",
    auth: "session",
    // X-Eventq-User on every request, and the CSRF token of csrftoken_<id>.
    user: userId,
    fetch: trackedFetch,
    // An event stream where the browser and server allow, else long polls;
    // `?transport=poll` (or `stream`) in the page's URL chooses.
    transport: new URLSearchParams(location.search).get("transport") ?? "auto",
    // Every event type; the state the page shows.
    fetchEventTypes: ["realm_user", "subscription", "message"],
    // Content as the sender wrote it: shown as text, never as HTML.
    applyMarkdown: false,
    onEvents: (events, info) => receive(events, info),
    onReset: (reset) => resetState(reset),
    onRetry: (retry) => retrying(retry),
    onStatus: (status) => statusChanged(status),
    onError: (error) => failed(error),
  });
  demo.client = client;
  client.start().then(
    (state) => {
      loadState(state);
      $("status-detail").textContent = `Registered queue ${state.queue_id} at ${clock(Date.now())}.`;
    },
    () => {
      // reported through onError
    },
  );
}

function statusChanged(status) {
  record(demo.statuses, { status, at: Date.now() });
  if (status !== "retrying") showStatus(status);
}

function retrying({ error, attempt, delayMs }) {
  record(demo.retries, {
    attempt,
    delayMs,
    at: Date.now(),
    error: error.message,
    kind: error.kind,
    retryAfterMs: error.retryAfterMs,
  });
  const seconds = (delayMs / 1000).toFixed(1);
  showStatus("retrying", `Reconnecting in ${seconds} s (attempt ${attempt})…`);
}

function failed(error) {
  record(demo.errors, { at: Date.now(), message: error.message, kind: error.kind, code: error.code });
  if (error.kind === "http" && (error.status === 401 || error.code === "UNAUTHORIZED")) {
    // The tab's session ended (logout elsewhere, expiry, a rotated key).
    demo.client = null;
    sessionStorage.removeItem(USER_KEY);
    showLogin("Your session has ended: log in again.");
    return;
  }
  showStatus("failed", `Disconnected: ${error.message}`);
}

function resetState(reset) {
  record(demo.resets, {
    at: Date.now(),
    reloadState: reset.reloadState,
    reason: reset.reason,
    queueId: reset.queueId,
    resumedFrom: reset.resumedFrom,
  });
  if (reset.reloadState) {
    loadState(reset.state);
    $("status-detail").textContent =
      `State reloaded at ${clock(Date.now())} (${reset.reason}): events before it may be missing here.`;
    showStatus("connected", "Connected (state reloaded)");
  } else {
    $("status-detail").textContent =
      `Queue replaced at ${clock(Date.now())} (${reset.reason}), resumed from position ${reset.resumedFrom}: nothing missed.`;
  }
}

function loadState(state) {
  world.me = { user_id: state.user_id, email: state.email, full_name: state.full_name };
  world.users = new Map((state.realm_users ?? []).map((user) => [user.user_id, user]));
  world.subscriptions = new Map((state.subscriptions ?? []).map((sub) => [sub.stream_id, sub]));
  $("whoami").textContent = `${state.full_name} (${state.email})`;
  $("whoami").dataset.userId = String(state.user_id);
  $("whoami").dataset.userEmail = state.email;
  $("identity").hidden = false;
  document.title = `${state.full_name} · eventq demo`;
  renderStreams();
  renderRecipients();
}

// -- events -------------------------------------------------------------------

function receive(events, { queueId }) {
  const receivedAt = Date.now();
  const list = $("events");
  for (const event of events) {
    record(demo.received, { queueId, id: event.id, type: event.type, receivedAt, event });
    apply(event);
    list.append(render(event, queueId, receivedAt));
  }
  while (list.childElementCount > MAX_SHOWN) list.firstElementChild.remove();
  list.scrollTop = list.scrollHeight; // the list scrolls, not the page
}

// Keeps the compose forms' choices up to date.
function apply(event) {
  if (event.type === "subscription") {
    if (event.op === "add") {
      for (const sub of event.subscriptions) world.subscriptions.set(sub.stream_id, sub);
    } else if (event.op === "remove") {
      for (const sub of event.subscriptions) world.subscriptions.delete(sub.stream_id);
    } else if (event.op === "update" && event.property === "name") {
      const sub = world.subscriptions.get(event.stream_id);
      if (sub) sub.name = event.value;
    } else {
      return;
    }
    renderStreams();
  } else if (event.type === "stream" && event.op === "update" && event.property === "name") {
    const sub = world.subscriptions.get(event.stream_id);
    if (sub) sub.name = event.value;
    renderStreams();
  } else if (event.type === "realm_user") {
    const person = event.person ?? {};
    if (event.op === "add") world.users.set(person.user_id, person);
    else if (event.op === "remove") world.users.delete(person.user_id);
    else if (event.op === "update" && world.users.has(person.user_id)) {
      Object.assign(world.users.get(person.user_id), person);
    }
    renderRecipients();
  }
}

function nameOf(userId) {
  return world.users.get(userId)?.full_name ?? `user ${userId}`;
}

function render(event, queueId, receivedAt) {
  const item = element("li", {
    class: `event event-${event.type}`,
    "data-queue-id": queueId,
    "data-event-id": event.id,
    "data-event-type": event.type,
    "data-received-at": receivedAt,
  });
  const time = element("time", { class: "time", datetime: new Date(receivedAt).toISOString() }, clock(receivedAt));
  if (event.type === "message") {
    const message = event.message;
    item.dataset.messageId = String(message.id);
    let where;
    if (message.type === "stream") {
      where = `#${message.display_recipient} › ${message.subject}`;
    } else {
      const others = message.display_recipient.filter((user) => user.id !== world.me?.user_id);
      where = others.length === 0 ? "Direct message to yourself" : `Direct message with ${others.map((u) => u.full_name).join(", ")}`;
    }
    item.append(
      element(
        "p",
        { class: "meta" },
        time,
        " ",
        element("span", { class: "sender" }, message.sender_full_name),
        " ",
        element("span", { class: "where" }, where),
      ),
      element("p", { class: "content" }, message.content),
    );
  } else {
    item.append(
      element(
        "p",
        { class: "meta" },
        time,
        " ",
        element("span", { class: "type" }, event.type),
        " ",
        element("span", { class: "summary" }, summarize(event)),
      ),
    );
  }
  return item;
}

function summarize(event) {
  switch (event.type) {
    case "restart":
      return "the server restarted; this page carried on";
    case "subscription": {
      const names = (event.subscriptions ?? []).map((sub) => `#${sub.name ?? sub.stream_id}`);
      if (names.length > 0) return `${event.op}: ${names.join(", ")}`;
      if (event.op === "peer_add" || event.op === "peer_remove") {
        return `${event.op}: ${(event.user_ids ?? []).map(nameOf).join(", ")}`;
      }
      return `${event.op}`;
    }
    case "realm_user":
      return `${event.op}: ${event.person?.full_name ?? nameOf(event.person?.user_id)}`;
    case "typing":
      return `${event.sender?.email ?? "someone"} ${event.op === "start" ? "is typing" : "stopped typing"}`;
    case "presence":
      return `${event.email ?? nameOf(event.user_id)} is ${Object.values(event.presence ?? {})[0]?.status ?? "around"}`;
    default: {
      const { id: _id, type: _type, ...rest } = event;
      const text = JSON.stringify(rest);
      return text.length > 160 ? `${text.slice(0, 157)}…` : text;
    }
  }
}

// -- compose --------------------------------------------------------------------

function renderStreams() {
  const select = $("stream-select");
  const chosen = select.value;
  const subs = [...world.subscriptions.values()].sort((a, b) => a.name.localeCompare(b.name));
  select.replaceChildren(
    ...subs.map((sub) => element("option", { value: sub.name, "data-stream-id": sub.stream_id }, `#${sub.name}`)),
  );
  if (subs.some((sub) => sub.name === chosen)) select.value = chosen;
  $("send-stream-button").disabled = subs.length === 0;
}

function renderRecipients() {
  const select = $("dm-to");
  const chosen = select.value;
  const others = [...world.users.values()]
    .filter((user) => user.user_id !== world.me?.user_id)
    .sort((a, b) => a.full_name.localeCompare(b.full_name));
  select.replaceChildren(
    ...others.map((user) =>
      element("option", { value: user.user_id, "data-user-email": user.email }, user.full_name),
    ),
  );
  if (others.some((user) => String(user.user_id) === chosen)) select.value = chosen;
}

async function send(kind, params, textarea) {
  const entry = { kind, content: params.content, clickedAt: Date.now(), answeredAt: null, messageId: null, error: null };
  record(demo.sends, entry);
  const status = $("send-status");
  try {
    const { id } = await api("POST", "messages", params);
    entry.messageId = id;
    textarea.value = "";
    status.textContent = `Sent message ${id}.`;
  } catch (error) {
    entry.error = error.message;
    status.textContent = `Not sent: ${error.message}`;
  } finally {
    entry.answeredAt = Date.now();
  }
}

function wireForms() {
  $("send-stream").addEventListener("submit", (event) => {
    event.preventDefault();
    const content = $("stream-content");
    send("stream", { type: "stream", to: $("stream-select").value, topic: $("topic").value, content: content.value }, content);
  });
  $("send-direct").addEventListener("submit", (event) => {
    event.preventDefault();
    const content = $("dm-content");
    send("direct", { type: "direct", to: [Number($("dm-to").value)], content: content.value }, content);
  });
  $("join-stream").addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = $("join-name").value.trim();
    const status = $("send-status");
    try {
      await api("POST", "users/me/subscriptions", { subscriptions: [{ name }] });
      $("join-name").value = "";
      status.textContent = `Joined #${name}.`;
    } catch (error) {
      status.textContent = `Could not join #${name}: ${error.message}`;
    }
  });
  $("logout").addEventListener("click", () => logOut());
}

// -- start ------------------------------------------------------------------------

wireForms();
const saved = Number(sessionStorage.getItem(USER_KEY));
if (Number.isInteger(saved) && saved > 0 && readCookie(csrfCookie(saved)) !== null) {
  enter(saved);
} else {
  sessionStorage.removeItem(USER_KEY);
  showLogin();
}
