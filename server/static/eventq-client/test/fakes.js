// Fakes for the client's tests: a scripted fetch, timers and a clock that move
// only when a test says so, and a client wired to them with every callback
// recorded. Not a test file: the runner is given test/*.test.js.

import { EventqClient } from "../eventq.js";

/** Lets every pending promise reaction run (the client uses no real timers). */
export function flush() {
  return new Promise((resolve) => setImmediate(resolve));
}

export async function settle(rounds = 5) {
  for (let i = 0; i < rounds; i += 1) await flush();
}

/** The body of a fake event stream: `push(text)` makes it readable, `end()`
 * ends it, `cut()` makes the next read reject (a dropped connection). */
class FakeStreamBody {
  #chunks = [];
  #waiting = null;

  push(text) {
    this.#offer({ done: false, value: new TextEncoder().encode(text) });
  }

  end() {
    this.#offer({ done: true });
  }

  cut(error = new TypeError("network error")) {
    this.#offer(error);
  }

  abort() {
    this.cut(new DOMException("aborted", "AbortError"));
  }

  #offer(item) {
    const waiting = this.#waiting;
    if (waiting !== null) {
      this.#waiting = null;
      waiting(item);
    } else {
      this.#chunks.push(item);
    }
  }

  getReader() {
    return {
      read: async () => {
        const item =
          this.#chunks.length > 0
            ? this.#chunks.shift()
            : await new Promise((resolve) => {
                this.#waiting = resolve;
              });
        if (item instanceof Error) throw item;
        return item;
      },
    };
  }
}

function fakeResponse(status, body, headers) {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  return {
    status,
    ok: status >= 200 && status < 300,
    headers: new Headers(headers),
    text: async () => text,
  };
}

/** A fetch whose every request waits for the test to answer it. Requests not
 * sent with keepalive are counted while unsettled: `maxInFlight` is the most
 * that were ever outstanding at once. An abort rejects the request at once
 * (as browsers do), unless `ignoreAbort`, which models an answer that was
 * already on its way. */
export class FakeFetch {
  requests = [];
  inFlight = 0;
  maxInFlight = 0;
  #unread = [];

  constructor({ ignoreAbort = false } = {}) {
    this.ignoreAbort = ignoreAbort;
  }

  fetch = (url, init = {}) => {
    const parsed = new URL(url, "http://page.example");
    const request = {
      url,
      init,
      method: init.method ?? "GET",
      path: parsed.pathname,
      query: Object.fromEntries(parsed.searchParams),
      form:
        typeof init.body === "string" ? Object.fromEntries(new URLSearchParams(init.body)) : null,
      headers: init.headers ?? {},
      settled: false,
    };
    const counted = !init.keepalive;
    if (counted) {
      this.inFlight += 1;
      this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    }
    const promise = new Promise((resolve, reject) => {
      const finish = () => {
        if (request.settled) return false;
        request.settled = true;
        if (counted) this.inFlight -= 1;
        return true;
      };
      request.respond = (status, body = {}, headers = {}) => {
        if (finish()) resolve(fakeResponse(status, body, headers));
      };
      request.fail = (error = new TypeError("fetch failed")) => {
        if (finish()) reject(error);
      };
      // Answers with an event stream, whose body the test then writes.
      request.stream = () => {
        const body = new FakeStreamBody();
        request.body = body;
        if (finish()) {
          resolve({
            status: 200,
            ok: true,
            headers: new Headers({ "Content-Type": "text/event-stream; charset=utf-8" }),
            text: async () => {
              throw new Error("a stream's text() was read");
            },
            body,
          });
        }
        return body;
      };
      init.signal?.addEventListener("abort", () => {
        if (request.body !== undefined) request.body.abort();
        if (!this.ignoreAbort && finish()) reject(new DOMException("aborted", "AbortError"));
      });
    });
    this.requests.push(request);
    this.#unread.push(request);
    return promise;
  };

  /** The next request the client made that the test has not read yet. */
  async next() {
    for (let i = 0; i < 20 && this.#unread.length === 0; i += 1) await flush();
    if (this.#unread.length === 0) throw new Error("the client made no request");
    return this.#unread.shift();
  }

  /** Asserts that the client made no request the test has not read. */
  async none() {
    await settle();
    if (this.#unread.length > 0) {
      const got = this.#unread.map((r) => `${r.method} ${r.path}`).join(", ");
      throw new Error(`unexpected requests: ${got}`);
    }
  }
}

/** setTimeout/clearTimeout and a clock that advance only in advance(). */
export class FakeTimers {
  now = 1_700_000_000_000;
  #timers = new Map();
  #seq = 0;

  setTimeout = (callback, ms) => {
    this.#seq += 1;
    this.#timers.set(this.#seq, { at: this.now + ms, ms, callback, seq: this.#seq });
    return this.#seq;
  };

  clearTimeout = (id) => {
    this.#timers.delete(id);
  };

  /** The delays (ms) of the timers still pending, oldest first. */
  pending() {
    return [...this.#timers.values()].map((t) => t.ms);
  }

  /** Moves the clock `ms` on, firing due timers in order. */
  async advance(ms) {
    const end = this.now + ms;
    for (;;) {
      await settle();
      const due = [...this.#timers.values()]
        .filter((t) => t.at <= end)
        .sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (due === undefined) break;
      this.#timers.delete(due.seq);
      this.now = due.at;
      due.callback();
    }
    this.now = end;
    await settle();
  }
}

export const COOKIES = "theme=dark; csrftoken=tok%2Ben; other=1";

/** A client on fakes, with every callback recorded in `log`. It long-polls
 * unless `transport` says otherwise (test/stream.test.js). */
export function setup({
  ignoreAbort = false,
  random = () => 0.5,
  transport = "poll",
  ...options
} = {}) {
  const server = new FakeFetch({ ignoreAbort });
  const timers = new FakeTimers();
  const log = {
    events: [],
    infos: [],
    resets: [],
    retries: [],
    statuses: [],
    errors: [],
    reported: [],
  };
  const client = new EventqClient({
    fetch: server.fetch,
    setTimeout: timers.setTimeout,
    clearTimeout: timers.clearTimeout,
    now: () => timers.now,
    random,
    cookies: () => COOKIES,
    window: null,
    reportError: (error) => log.reported.push(error),
    onEvents: (events, info) => {
      log.events.push(...events);
      log.infos.push(info);
    },
    onReset: (reset) => log.resets.push(reset),
    onRetry: (retry) => log.retries.push(retry),
    onStatus: (status) => log.statuses.push(status),
    onError: (error) => log.errors.push(error),
    transport,
    ...options,
  });
  return { client, server, timers, log };
}

export function registered(fields = {}) {
  return {
    result: "success",
    msg: "",
    queue_id: "q1",
    last_event_id: -1,
    stream_position: 100,
    event_queue_longpoll_timeout_seconds: 90,
    zulip_feature_level: 300,
    ...fields,
  };
}

export function polled(events, streamPosition = 100, fields = {}) {
  return { result: "success", msg: "", events, stream_position: streamPosition, ...fields };
}

export function failed(code, msg = code, fields = {}) {
  return { result: "error", msg, code, ...fields };
}

/** A client that has registered (answered with `registered(fields)`); its
 * first poll is waiting, unread, in `server`. */
export async function running(options = {}, fields = {}) {
  const fixture = setup(options);
  const started = fixture.client.start();
  (await fixture.server.next()).respond(200, registered(fields));
  fixture.state = await started;
  return fixture;
}
