/*! eventq-client. eventq.d.ts is generated from eventq.js's JSDoc by `npm run
 * types` (tsc), and a test fails when they differ: edit eventq.js, not it. */

// eventq-client: a dependency-free ES module that keeps a page (or a Node 18
// or later script) subscribed to an eventq or Zulip server's event queue.
//
// It registers a queue, reads it as a stream of Server-Sent Events where the
// server and the platform can (eventq; a streaming fetch), else long-polls
// it, with exactly one request in flight,
// acknowledges what it received, retries transient failures with jittered
// exponential backoff, and when the queue is lost registers again, resuming
// from the last stream position when the server can (eventq's `resume_from`),
// so that the page only reloads its state when it really must. The contract of
// every public name is in its JSDoc, checked by `tsc --checkJs` (the types are
// at the end of this file); eventq.d.ts is generated from it (`npm run
// types`) and must not be edited by hand. README.md shows the usage.

/** Backoff of transient failures: full jitter (delay = random() x min(cap,
 * base x factor^n), n = failures before this one), so that clients cut off
 * together by a restart do not come back together. 1 s doubles to 60 s: a
 * minute is as long as a page should stay behind a server that is back.
 * What a Retry-After asks is waited on top of the jitter, and at most
 * retryAfterCapMs of it: 60 s for the same reason (a proxy that says a day,
 * or an HTTP date from a clock that is wrong, would leave the page behind
 * for as long).
 * @type {Readonly<BackoffPolicy>} */
export const DEFAULT_BACKOFF = Object.freeze({
  baseMs: 1000,
  factor: 2,
  capMs: 60_000,
  retryAfterCapMs: 60_000,
});

/** Used when register's answer has no `event_queue_longpoll_timeout_seconds`:
 * Zulip's value, comfortably above the server's 45-55 s heartbeat.
 * @type {number} */
export const DEFAULT_POLL_TIMEOUT_MS = 90_000;
// What a register with resume_from answers when the client must fetch its
// state afresh instead.
/** @type {Set<string | null>} */
const RESUME_REFUSED = new Set(["RESUME_EXPIRED", "RESUME_POSITION_UNKNOWN"]);

/** Register reads the whole initial state; 30 s is generous for that and
 * short enough for a silently dropped connection to be retried.
 * @type {number} */
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;

/** How long a replacement queue waits for the events listeners still
 * applying the last answer (their end decides the position it resumes
 * from) before it registers without them. 30 s, as long as register itself
 * may take: a listener busy for longer has most likely forgotten to settle
 * its promise, and the page would otherwise never be updated again.
 * @type {number} */
export const DEFAULT_APPLY_WAIT_MS = 30_000;

const CSRF_HEADER = "X-CSRFToken";
// Session mode with `user`: which of the browser's sessions to use.
const USER_HEADER = "X-Eventq-User";
const DEFAULT_CSRF_COOKIE = "csrftoken";
const STREAM_TYPE = "text/event-stream";

// One message of an event stream (the lines before a blank line), as an
// EventSource reads it: its event name ("message" by default) and its data
// lines joined (null when it has none: a comment, or `retry:` alone).
/** @param {string} block */
function sseMessage(block) {
  let event = "message";
  /** @type {string[]} */
  const data = [];
  for (const line of block.split("\n")) {
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  return { event, data: data.length > 0 ? data.join("\n") : null };
}

// camelCase option -> Zulip's register parameter.
const REGISTER_OPTIONS = Object.freeze({
  eventTypes: "event_types",
  fetchEventTypes: "fetch_event_types",
  narrow: "narrow",
  allPublicStreams: "all_public_streams",
  clientCapabilities: "client_capabilities",
  applyMarkdown: "apply_markdown",
  clientGravatar: "client_gravatar",
  slimPresence: "slim_presence",
  includeSubscribers: "include_subscribers",
  queueLifespanSecs: "queue_lifespan_secs",
  presenceHistoryLimitDays: "presence_history_limit_days",
});

/** A failed request, or the client's end. `kind` says which:
 * "network" (fetch rejected), "timeout" (no answer in time), "http" (an error
 * answer; `status`, `code`, `body`), "protocol" (a success status without a
 * success body), "no_queue" (register succeeded without a queue_id, as
 * Zulip answers a logged-out spectator), "stopped" (stop() or close() before
 * start() finished), "internal" (a bug of this module). Its `name` is
 * "EventqError". */
export class EventqError extends Error {
  /**
   * @param {string} message
   * @param {{
   *   kind: ErrorKind,
   *   status?: number | null,
   *   code?: string | null,
   *   body?: Record<string, unknown> | null,
   *   retryAfterMs?: number | null,
   *   cause?: unknown,
   * }} [details]
   */
  constructor(
    message,
    {
      kind,
      status = null,
      code = null,
      body = null,
      retryAfterMs = null,
      cause,
    } = /** @type {any} */ ({}),
  ) {
    super(message, cause === undefined ? undefined : { cause });
    // "EventqError" (declared by Error, as string).
    this.name = "EventqError";
    /** @readonly */
    this.kind = kind;
    /** The HTTP status, for "http" and "protocol"; else null.
     * @readonly */
    this.status = status;
    /** The server's error `code` ("BAD_EVENT_QUEUE_ID", "RATE_LIMIT_HIT", ...); else null.
     * @readonly */
    this.code = code;
    /** The parsed JSON body of the answer, when it had one.
     * @readonly */
    this.body = body;
    /** How long the server asked to wait (Retry-After, or the body's retry-after), in ms.
     * @readonly */
    this.retryAfterMs = retryAfterMs;
  }

  /** Whether the client retries it: network failures, timeouts, 408, 429,
   * 5xx and unreadable success answers (a proxy's page). Every other 4xx
   * means the request itself is wrong and retrying would repeat it. */
  get retryable() {
    switch (this.kind) {
      case "network":
      case "timeout":
      case "protocol":
        return true;
      case "http":
        return (
          this.status === 408 || this.status === 429 || /** @type {number} */ (this.status) >= 500
        );
      default:
        return false;
    }
  }
}

// Thrown inside the client when work belongs to a run that stop(), a
// pagehide or a newer queue has replaced; caught where that run began.
const SUPERSEDED = Symbol("superseded");

/** @param {unknown} value */
function encodeValue(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

/** Zulip's wire form: strings as they are, everything else JSON-encoded,
 * null and undefined left out.
 * @param {Record<string, unknown>} params */
function formOf(params) {
  const form = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null) form.append(name, encodeValue(value));
  }
  return form;
}

/**
 * @param {string} cookies
 * @param {string} name
 * @returns {string | null}
 */
function readCookie(cookies, name) {
  for (const part of cookies.split(";")) {
    const at = part.indexOf("=");
    if (at !== -1 && part.slice(0, at).trim() === name) {
      const raw = part.slice(at + 1).trim();
      try {
        return decodeURIComponent(raw);
      } catch {
        return raw;
      }
    }
  }
  return null;
}

/** @param {string} text */
function base64Utf8(text) {
  let binary = "";
  for (const byte of new TextEncoder().encode(text)) binary += String.fromCharCode(byte);
  return btoa(binary);
}

/** Milliseconds the server asked the client to wait: the `Retry-After`
 * header (seconds or an HTTP date), else Zulip's `retry-after` body field
 * (seconds; the one a cross-origin page can read when the header is not
 * exposed), else null.
 * @param {ResponseLike["headers"] | undefined} headers
 * @param {Record<string, unknown> | null} body
 * @param {() => number} now
 * @returns {number | null} */
function retryAfterOf(headers, body, now) {
  const header = headers?.get?.("Retry-After");
  if (header != null && header.trim() !== "") {
    const seconds = Number(header);
    if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
    const when = Date.parse(header);
    if (!Number.isNaN(when)) return Math.max(0, when - now());
  }
  const fromBody = body?.["retry-after"];
  return typeof fromBody === "number" && Number.isFinite(fromBody) && fromBody >= 0
    ? fromBody * 1000
    : null;
}

/** @param {unknown} error */
function reportToConsole(error) {
  console.error("eventq-client:", error);
}

/** Keeps one event queue of one user: registers it, long-polls it with
 * exactly one request in flight, acknowledges what it received, backs off on
 * transient failures and replaces the queue when the server lost it. */
export class EventqClient {
  // Options, resolved once; the injectable ones default to the platform's.
  /** @type {string} */
  #baseUrl;
  /** @type {Auth} */
  #auth; // "session" or { email, apiKey }
  /** @type {Record<string, unknown>} */
  #registerParams; // register's parameters, already in Zulip's names
  /** @type {BackoffPolicy} */
  #backoff;
  /** @type {number | null} */
  #pollTimeoutOption; // null: take register's event_queue_longpoll_timeout_seconds
  /** @type {number} */
  #requestTimeoutMs;
  /** @type {number} */
  #applyWaitMs;
  /** @type {FetchLike} */
  #fetch;
  /** @type {Transport} */
  #transport;
  // Whether the next read of the queue asks for an event stream: "stream",
  // or "auto" until a server answers one with a long poll's JSON (Zulip).
  #streaming = false;
  /** @type {NonNullable<EventqClientOptions["setTimeout"]>} */
  #setTimeout;
  /** @type {NonNullable<EventqClientOptions["clearTimeout"]>} */
  #clearTimeout;
  /** @type {() => number} */
  #random;
  /** @type {() => number} */
  #now;
  /** @type {() => string} */
  #cookies;
  /** @type {string} */
  #csrfCookieName;
  /** @type {number | null} */
  #user;
  /** @type {PageEventTarget | null} */
  #window; // where pagehide/pageshow come from; null outside a page
  /** @type {(error: unknown) => void} */
  #reportError;

  /** @type {Record<
   *   "events" | "reset" | "error" | "retry" | "status",
   *   Set<(...args: any[]) => any>
   * >} */
  #listeners = {
    events: new Set(),
    reset: new Set(),
    error: new Set(),
    retry: new Set(),
    status: new Set(),
  };

  // The queue this client polls; null before register, after close() or a
  // pagehide (which delete it) and while a lost queue is replaced.
  /** @type {string | null} */
  #queueId = null;
  // The highest event id received on #queueId (heartbeats included): what
  // the next poll acknowledges. -1 means none; it never goes down for a queue.
  #lastEventId = -1;
  // The newest stream_position whose events the page has been given (and
  // whose listeners have returned), from any queue: what resume_from takes.
  // null while the server has sent none (a Zulip server never does). It
  // moves only when the page's state gets there: never to the
  // stream_position of a resumed register, whose events are still in the
  // new queue (see #resumedTo).
  /** @type {number | null} */
  #streamPosition = null;
  // After a resumed register, until the new queue's first answer is given
  // to the page: that register's stream_position (null when it had none or
  // the queue was not resumed). The first answer holds every event the
  // register put in the queue (an answer holds all that the queue has not
  // had acknowledged, and nothing is acknowledged before it), so once it is
  // applied the page is at its stream_position, which is at least this
  // one; this one is used when the answer has none.
  /** @type {number | null} */
  #resumedTo = null;
  // Settles when the page's listeners have applied the answer being
  // delivered (null when none is, or when a replacement stopped waiting for
  // it): a replacement queue resumes from the position that answer brings,
  // so it is registered only after, or after #applyWaitMs.
  /** @type {Promise<void> | null} */
  #applying = null;
  #pollTimeoutMs = DEFAULT_POLL_TIMEOUT_MS;
  // Whether #queueId has answered a poll: a queue lost before answering once
  // is replaced after a backoff, so a server that loses every queue is not
  // hammered with registers.
  #queueAnswered = false;

  // Bumped by stop(), pagehide and every (re)launch. Each run remembers the
  // value it started with and, after every await, gives up when it changed:
  // so a late answer to a replaced poll never touches the state, and at most
  // one run, hence one request, is ever live.
  #generation = 0;
  // The one request in flight (null when none): { cancel }, which #halt
  // calls.
  /** @type {{ cancel: () => void } | null} */
  #inFlight = null;
  // Registers left to finish without a run (#discard), each until the
  // queue it made, if any, is deleted: close() waits for them.
  /** @type {Set<Promise<void>>} */
  #discarding = new Set();
  // Ends the wait in progress (#within) early; null when not waiting.
  /** @type {(() => void) | null} */
  #wakeUp = null;
  // Transient failures since the last successful poll; the next delay's n.
  #failures = 0;
  /** @type {Status} */
  #status = "idle";
  #started = false;
  #stopped = false; // stop() or close() was called, or a fatal error came
  #closed = false;
  // start()'s promise until its initial register answers (or fails).
  /** @type {{
   *   resolve: (state: RegisterResponse) => void,
   *   reject: (error: EventqError) => void,
   * } | null} */
  #pendingStart = null;
  /** @type {(() => void) | null} */
  #onPageHide = null;
  /** @type {((event: any) => void) | null} */
  #onPageShow = null;

  /** @param {EventqClientOptions} [options] */
  constructor(options = {}) {
    this.#baseUrl = String(options.baseUrl ?? "").replace(/\/+$/, "");
    const auth = options.auth ?? "session";
    if (auth !== "session") {
      if (
        typeof auth !== "object" ||
        typeof auth.email !== "string" ||
        typeof auth.apiKey !== "string"
      ) {
        throw new TypeError('auth must be "session" or { email, apiKey }');
      }
    }
    this.#auth = auth;

    const params = /** @type {Record<string, unknown>} */ ({});
    for (const [option, name] of Object.entries(REGISTER_OPTIONS)) {
      if (/** @type {Record<string, unknown>} */ (options)[option] !== undefined) {
        params[name] = /** @type {Record<string, unknown>} */ (options)[option];
      }
    }
    Object.assign(params, options.registerParams ?? {});
    if ("resume_from" in params || "queue_id" in params) {
      throw new TypeError("resume_from and queue_id are the client's to send");
    }
    this.#registerParams = params;

    this.#backoff = { ...DEFAULT_BACKOFF, ...options.backoff };
    this.#pollTimeoutOption = options.pollTimeoutMs ?? null;
    this.#requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    this.#applyWaitMs = options.applyWaitMs ?? DEFAULT_APPLY_WAIT_MS;
    // Looked up per call, and called as globals: browsers refuse a detached
    // fetch or setTimeout ("Illegal invocation").
    this.#fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    const transport = options.transport ?? "auto";
    if (!["auto", "stream", "poll"].includes(transport)) {
      throw new TypeError('transport must be "auto", "stream" or "poll"');
    }
    this.#transport = transport;
    this.#streaming = transport !== "poll" && typeof globalThis.TextDecoder === "function";
    this.#setTimeout =
      options.setTimeout ?? ((callback, ms) => globalThis.setTimeout(callback, ms));
    this.#clearTimeout = options.clearTimeout ?? ((handle) => globalThis.clearTimeout(handle));
    this.#random = options.random ?? Math.random;
    this.#now = options.now ?? Date.now;
    this.#cookies = options.cookies ?? (() => globalThis.document?.cookie ?? "");
    if (options.user !== undefined && !(Number.isSafeInteger(options.user) && options.user > 0)) {
      throw new TypeError("user must be a positive integer (a user id)");
    }
    this.#user = options.user ?? null;
    this.#csrfCookieName =
      options.csrfCookieName ??
      (this.#user === null ? DEFAULT_CSRF_COOKIE : `${DEFAULT_CSRF_COOKIE}_${this.#user}`);
    this.#window = options.window !== undefined ? options.window : (globalThis.window ?? null);
    this.#reportError =
      options.reportError ??
      (typeof globalThis.reportError === "function"
        ? (error) => globalThis.reportError(error)
        : reportToConsole);

    if (options.onEvents) this.onEvents(options.onEvents);
    if (options.onReset) this.onReset(options.onReset);
    if (options.onError) this.onError(options.onError);
    if (options.onRetry) this.onRetry(options.onRetry);
    if (options.onStatus) this.onStatus(options.onStatus);
  }

  // -- state ------------------------------------------------------------------

  /** The queue being polled; null before register, while a lost queue is
   * replaced, and after close() or a pagehide. */
  get queueId() {
    return this.#queueId;
  }

  /** The highest event id received on the queue (heartbeats included): what
   * the next poll acknowledges; -1 before any. */
  get lastEventId() {
    return this.#lastEventId;
  }

  /** The newest stream position the page's state has reached (once its
   * listeners returned); what a re-register resumes from. After a resume it
   * stays the position resumed from until the new queue's first answer has
   * been applied. null when the server sends none (Zulip). */
  get streamPosition() {
    return this.#streamPosition;
  }

  /** Where the client is (see Status). */
  get status() {
    return this.#status;
  }

  // -- listeners --------------------------------------------------------------

  /** Each on* method adds a listener and returns a function that removes it.
   * @param {EventsListener} listener
   * @returns {() => void} */
  onEvents(listener) {
    return this.#listen("events", listener);
  }

  /** @param {ResetListener} listener
   * @returns {() => void} */
  onReset(listener) {
    return this.#listen("reset", listener);
  }

  /** A fatal error: the client has stopped (status "failed").
   * @param {ErrorListener} listener
   * @returns {() => void} */
  onError(listener) {
    return this.#listen("error", listener);
  }

  /** @param {RetryListener} listener
   * @returns {() => void} */
  onRetry(listener) {
    return this.#listen("retry", listener);
  }

  /** @param {StatusListener} listener
   * @returns {() => void} */
  onStatus(listener) {
    return this.#listen("status", listener);
  }

  /**
   * @param {"events" | "reset" | "error" | "retry" | "status"} kind
   * @param {(...args: any[]) => any} listener
   */
  #listen(kind, listener) {
    if (typeof listener !== "function") throw new TypeError(`${kind} listener must be a function`);
    const set = this.#listeners[kind];
    set.add(listener);
    return () => set.delete(listener);
  }

  // Calls every listener of `kind`; a listener that throws or rejects is
  // reported and does not stop the others nor the client. Resolves once the
  // listeners' returned promises (if any) have settled.
  /**
   * @param {"events" | "reset" | "error" | "retry" | "status"} kind
   * @param {...unknown} args
   * @returns {Promise<unknown> | null}
   */
  #emit(kind, ...args) {
    const pending = [];
    for (const listener of [...this.#listeners[kind]]) {
      try {
        const result = listener(...args);
        if (result && typeof result.then === "function") {
          pending.push(Promise.resolve(result).catch((error) => this.#reportError(error)));
        }
      } catch (error) {
        this.#reportError(error);
      }
    }
    return pending.length === 0 ? null : Promise.all(pending);
  }

  /**
   * @param {number} gen
   * @param {"events" | "reset" | "error" | "retry" | "status"} kind
   * @param {...unknown} args
   */
  async #emitAndWait(gen, kind, ...args) {
    const pending = this.#emit(kind, ...args);
    if (pending !== null) await pending;
    this.#check(gen);
  }

  /** @param {Status} status */
  #setStatus(status) {
    if (this.#status !== status) {
      this.#status = status;
      this.#emit("status", status);
    }
  }

  // -- lifecycle --------------------------------------------------------------

  /** Registers the queue (retrying transient failures) and starts polling.
   * Resolves with register's answer, the initial state, before any event
   * reaches a listener. Rejects with an EventqError on a fatal answer (also
   * told to onError) or when stop()/close() comes first (kind "stopped").
   * Call it once.
   * @returns {Promise<RegisterResponse>} */
  start() {
    if (this.#started || this.#stopped) {
      return Promise.reject(new Error("EventqClient.start() may be called once, before stop()"));
    }
    this.#started = true;
    const win = this.#window;
    if (win && typeof win.addEventListener === "function") {
      this.#onPageHide = () => this.#suspend();
      this.#onPageShow = (event) => {
        if (event?.persisted && this.#status === "suspended") this.#launch();
      };
      win.addEventListener("pagehide", this.#onPageHide);
      win.addEventListener("pageshow", this.#onPageShow);
    }
    /** @type {Promise<RegisterResponse>} */
    const promise = new Promise((resolve, reject) => {
      this.#pendingStart = { resolve, reject };
    });
    this.#launch();
    return promise;
  }

  /** Stops polling at once: the poll in flight is aborted and its answer,
   * should it still come, is ignored. The queue stays on the server (it
   * expires after its lifespan); close() deletes it. A register in flight
   * is left to finish (the server may have made its queue already) and the
   * queue it answers with is deleted (DELETE events, keepalive); so is one
   * in flight at a pagehide. A stopped client does not start again: make a
   * new one. */
  stop() {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#halt();
    this.#setStatus("stopped");
    this.#settleStart(
      new EventqError("The client was stopped before it registered", { kind: "stopped" }),
    );
  }

  /** stop(), then deletes the queue (DELETE events, keepalive) and removes
   * the page listeners. Resolves when the delete is answered or failed (and
   * that of the queue a register in flight made), each within the request
   * timeout; never rejects. Safe to call more than once, or before
   * start().
   * @returns {Promise<void>} */
  close() {
    this.stop();
    if (!this.#closed) {
      this.#closed = true;
      const win = this.#window;
      if (this.#onPageHide && win && typeof win.removeEventListener === "function") {
        win.removeEventListener("pagehide", this.#onPageHide);
        win.removeEventListener("pageshow", /** @type {(event: any) => void} */ (this.#onPageShow));
      }
    }
    return Promise.all([this.#deleteQueue(), ...this.#discarding]).then(() => undefined);
  }

  // Ends the current run: its awaits see a new generation, its request is
  // cancelled (see #send) and its wait ends now.
  #halt() {
    this.#generation += 1;
    const inFlight = this.#inFlight;
    this.#inFlight = null;
    inFlight?.cancel();
    const wakeUp = this.#wakeUp;
    this.#wakeUp = null;
    wakeUp?.();
  }

  // pagehide: the page may be going into the back/forward cache or away for
  // good; either way the queue is deleted now (a queue nobody polls would be
  // kept for its whole lifespan) and, should the page come back (pageshow with
  // persisted), replaced from the stream position it had reached.
  #suspend() {
    if (!this.#stopped && this.#status !== "suspended") {
      this.#halt();
      this.#setStatus("suspended");
    }
    this.#deleteQueue();
  }

  #launch() {
    this.#halt();
    this.#run(this.#generation);
  }

  /** @param {number} gen */
  async #run(gen) {
    try {
      if (this.#queueId === null) {
        if (this.#pendingStart !== null) {
          const state = await this.#register(gen, null);
          this.#adopt(state, false);
          this.#settleStart(null, state);
        } else {
          await this.#replaceQueue(gen, "page_restored");
        }
      }
      await this.#pollLoop(gen);
    } catch (error) {
      if (error === SUPERSEDED) return;
      this.#fail(
        error instanceof EventqError
          ? error
          : new EventqError(`eventq-client failed: ${error}`, { kind: "internal", cause: error }),
      );
    }
  }

  /**
   * @param {EventqError | null} error
   * @param {RegisterResponse} [state]
   */
  #settleStart(error, state) {
    const pending = this.#pendingStart;
    if (pending === null) return;
    this.#pendingStart = null;
    if (error === null) pending.resolve(/** @type {RegisterResponse} */ (state));
    else pending.reject(error);
  }

  /** @param {EventqError} error */
  #fail(error) {
    this.#stopped = true;
    this.#halt();
    this.#setStatus("failed");
    const hadStart = this.#pendingStart !== null;
    this.#settleStart(error);
    if (this.#listeners.error.size > 0) this.#emit("error", error);
    else if (!hadStart) this.#reportError(error);
  }

  /** @param {number} gen */
  #check(gen) {
    if (gen !== this.#generation) throw SUPERSEDED;
  }

  // -- the protocol -----------------------------------------------------------

  /** @param {number} gen */
  async #pollLoop(gen) {
    for (;;) {
      /** @type {Record<string, unknown>} */
      const params = { queue_id: this.#queueId, last_event_id: this.#lastEventId };
      // After a failure, ask for an immediate answer: it tells the page at
      // once that the server is back, and resets the backoff (as Zulip's web
      // app does).
      if (this.#failures > 0) params.dont_block = true;
      // A stream is asked for only when the server is known to be up.
      const stream = this.#streaming && this.#failures === 0;
      const outcome = await this.#send(
        gen,
        "GET",
        "events",
        params,
        this.#pollTimeoutMs,
        stream ? (reader, touch) => this.#readStream(gen, reader, touch) : null,
      );
      if (outcome.ok && outcome.streamed) {
        // The server ended the stream (the client's reconnection acknowledges
        // what it wrote), or told it the queue is gone.
        if (outcome.lost !== null) await this.#replaceQueue(gen, "queue_lost");
        continue;
      }
      if (outcome.ok) {
        // A long poll's answer to a stream request: a server without streams.
        if (stream && this.#transport === "auto") this.#streaming = false;
        this.#failures = 0;
        this.#queueAnswered = true;
        this.#setStatus("connected");
        await this.#deliver(gen, outcome.body);
        continue;
      }
      const { error } = outcome;
      if (error.kind === "http" && error.code === "BAD_EVENT_QUEUE_ID") {
        if (!this.#queueAnswered) await this.#wait(gen, error);
        await this.#replaceQueue(gen, "queue_lost");
      } else if (error.retryable) {
        await this.#wait(gen, error);
      } else {
        throw error;
      }
    }
  }

  // An event stream's body (server/handlers/stream.py): each `id:`/`data:`
  // message an event; `event: position` ends a write's events, which are
  // given to the page as one answer with that stream position; `deleted` and
  // `error` say the queue is gone; comments (heartbeats) only show the
  // connection is alive. Resolves when the server ends the stream, with
  // null, or with what said the queue is gone.
  /**
   * @param {number} gen
   * @param {StreamReaderLike} reader
   * @param {() => void} touch
   * @returns {Promise<string | null>}
   */
  async #readStream(gen, reader, touch) {
    this.#failures = 0;
    this.#queueAnswered = true;
    this.#setStatus("connected");
    const decoder = new TextDecoder();
    let buffer = "";
    /** @type {EventqEvent[]} */
    let events = [];
    for (;;) {
      const { value, done } = await reader.read();
      this.#check(gen);
      if (done) break;
      touch();
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let end = buffer.indexOf("\n\n");
      while (end >= 0) {
        const message = sseMessage(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        end = buffer.indexOf("\n\n");
        if (message.data === null) continue; // a comment, or retry:
        if (message.event === "message") {
          events.push(JSON.parse(message.data));
        } else if (message.event === "position") {
          const position = JSON.parse(message.data).stream_position;
          await this.#deliver(gen, { events, stream_position: position });
          events = [];
        } else if (message.event === "deleted" || message.event === "error") {
          if (events.length > 0) await this.#deliver(gen, { events });
          return message.event;
        }
        // "displaced": a newer reader has the queue; the stream ends.
      }
    }
    if (events.length > 0) await this.#deliver(gen, { events });
    return null;
  }

  /**
   * @param {number} gen
   * @param {any} body
   */
  async #deliver(gen, body) {
    const known = this.#lastEventId;
    let newest = known;
    const events = [];
    for (const event of Array.isArray(body.events) ? body.events : []) {
      if (typeof event?.id === "number") {
        if (event.id <= known) continue; // already given to the page
        newest = Math.max(newest, event.id);
      }
      // A heartbeat is acknowledged like any event (it carries an id the
      // server expects back) but is the client's business only.
      if (event?.type !== "heartbeat") events.push(event);
    }
    this.#lastEventId = newest;
    // The eventq server gives a position per answer, not per event: every
    // event of the answer is at or below it.
    let position = typeof body.stream_position === "number" ? body.stream_position : null;
    position ??= this.#resumedTo;
    this.#resumedTo = null;
    // The page's state has every event up to `position` once its listeners
    // have applied this answer: only then does the position move, even if
    // the run was replaced meanwhile (the replacement waits for it).
    const pending =
      events.length > 0
        ? this.#emit(
            "events",
            events,
            /** @satisfies {EventsInfo} */ ({
              queueId: /** @type {string} */ (this.#queueId),
              streamPosition: position,
            }),
          )
        : null;
    if (pending === null) {
      if (position !== null) this.#streamPosition = position;
    } else {
      const applied = pending.then(() => {
        // Not once a replacement stopped waiting for it: the new queue was
        // resumed from before these events and brings them again.
        if (this.#applying !== applied) return;
        this.#applying = null;
        if (position !== null) this.#streamPosition = position;
      });
      this.#applying = applied;
      await applied;
    }
    this.#check(gen);
  }

  // The queue is gone (or was deleted on pagehide): register a new one,
  // resuming from the stream position when one is known, and tell the page
  // whether its state still holds.
  /**
   * @param {number} gen
   * @param {ResetInfo["reason"]} reason
   */
  async #replaceQueue(gen, reason) {
    const applying = this.#applying;
    if (applying !== null) {
      const applied = await this.#within(this.#applyWaitMs, applying);
      this.#check(gen);
      if (!applied) {
        this.#applying = null;
        this.#reportError(
          new Error(
            `eventq-client: an events listener has not settled in ${this.#applyWaitMs} ms;` +
              " the new queue resumes from before the events it was given",
          ),
        );
      }
    }
    const resumeFrom = this.#streamPosition;
    this.#queueId = null;
    this.#lastEventId = -1;
    const state = await this.#register(gen, resumeFrom);
    const resumed = resumeFrom !== null && state.resumed_from !== undefined;
    this.#adopt(state, resumed);
    await this.#emitAndWait(
      gen,
      "reset",
      /** @satisfies {ResetInfo} */ ({
        reloadState: !resumed,
        reason,
        state: resumed ? null : state,
        // #adopt set it (tsc still sees the null above).
        queueId: /** @type {string} */ (/** @type {unknown} */ (this.#queueId)),
        streamPosition: this.#streamPosition,
        resumedFrom: resumed ? resumeFrom : null,
      }),
    );
  }

  // Takes register's answer. A state is complete to its stream_position, so
  // the page is there once it has the state; a resumed queue instead holds
  // the events up to it, still to be delivered (#resumedTo).
  /**
   * @param {RegisterResponse} state
   * @param {boolean} resumed
   */
  #adopt(state, resumed) {
    this.#queueId = state.queue_id;
    this.#lastEventId = typeof state.last_event_id === "number" ? state.last_event_id : -1;
    this.#queueAnswered = false;
    const position = typeof state.stream_position === "number" ? state.stream_position : null;
    this.#resumedTo = resumed ? position : null;
    if (!resumed && position !== null) this.#streamPosition = position;
    const seconds = state.event_queue_longpoll_timeout_seconds;
    this.#pollTimeoutMs =
      this.#pollTimeoutOption ??
      (typeof seconds === "number" && seconds > 0 ? seconds * 1000 : DEFAULT_POLL_TIMEOUT_MS);
  }

  // POST register until it answers: transient failures are retried after a
  // backoff; a resume the server cannot or will not do (RESUME_EXPIRED: the
  // log no longer has the events; RESUME_POSITION_UNKNOWN: not a position it
  // gave this user) falls back at once to a register with state.
  /**
   * @param {number} gen
   * @param {number | null} resumeFrom
   * @returns {Promise<RegisterResponse>}
   */
  async #register(gen, resumeFrom) {
    this.#setStatus("connecting");
    for (;;) {
      let params = this.#registerParams;
      if (resumeFrom !== null) {
        // The server refuses resume_from with fetch_event_types: a resumed
        // queue comes with no state to select.
        const { fetch_event_types: _unused, ...rest } = params;
        params = { ...rest, resume_from: resumeFrom };
      }
      const outcome = await this.#send(gen, "POST", "register", params, this.#requestTimeoutMs);
      if (outcome.ok) {
        if (typeof outcome.body.queue_id !== "string") {
          throw new EventqError("register gave no queue (a session without a user?)", {
            kind: "no_queue",
            body: outcome.body,
          });
        }
        this.#setStatus("connected");
        return outcome.body;
      }
      const { error } = outcome;
      if (resumeFrom !== null && error.kind === "http" && RESUME_REFUSED.has(error.code)) {
        resumeFrom = null;
      } else if (error.retryable) {
        await this.#wait(gen, error);
        this.#setStatus("connecting");
      } else {
        throw error;
      }
    }
  }

  // Waits out the backoff after a transient failure: what the server's
  // Retry-After asked (up to retryAfterCapMs), plus the jitter. Added, not
  // the larger of the two: behind our nginx every 502 and 504 carries
  // Retry-After: 1, and so does SERVER_SHUTTING_DOWN, so clients that all
  // waited just that would all come back in the same millisecond.
  /**
   * @param {number} gen
   * @param {EventqError} error
   */
  async #wait(gen, error) {
    const { baseMs, factor, capMs, retryAfterCapMs } = this.#backoff;
    const attempt = this.#failures;
    this.#failures += 1;
    const askedMs =
      error.retryAfterMs === null ? 0 : Math.ceil(Math.min(error.retryAfterMs, retryAfterCapMs));
    const delayMs =
      askedMs + Math.floor(this.#random() * Math.min(capMs, baseMs * factor ** attempt));
    this.#setStatus("retrying");
    this.#emit("retry", /** @satisfies {RetryInfo} */ ({ error, attempt: attempt + 1, delayMs }));
    await this.#within(delayMs);
    this.#check(gen);
  }

  // Resolves true when `promise` settles within `ms`, false when the time
  // runs out first or #halt ends the wait (the caller's #check then throws).
  /**
   * @param {number} ms
   * @param {Promise<unknown> | null} [promise]
   * @returns {Promise<boolean>}
   */
  #within(ms, promise = null) {
    return new Promise((resolve) => {
      /** @param {boolean} settled */
      const finish = (settled) => {
        this.#clearTimeout(timer);
        if (this.#wakeUp === wakeUp) this.#wakeUp = null;
        resolve(settled);
      };
      const wakeUp = () => finish(false);
      const timer = this.#setTimeout(wakeUp, ms);
      this.#wakeUp = wakeUp;
      promise?.then(() => finish(true));
    });
  }

  // -- HTTP -------------------------------------------------------------------

  /** @param {string} path */
  #url(path) {
    return `${this.#baseUrl}${this.#auth === "session" ? "/json/" : "/api/v1/"}${path}`;
  }

  /**
   * @param {string} method
   * @param {Record<string, unknown>} params
   */
  #init(method, params) {
    /** @type {Record<string, string>} */
    const headers = {};
    /** @type {RequestInit} */
    const init = { method, headers, cache: "no-store" };
    if (this.#auth === "session") {
      init.credentials = "same-origin";
      if (this.#user !== null) headers[USER_HEADER] = String(this.#user);
      if (method !== "GET") {
        const token = readCookie(this.#cookies() ?? "", this.#csrfCookieName);
        if (token !== null) headers[CSRF_HEADER] = token;
      }
    } else {
      init.credentials = "omit";
      headers.Authorization = `Basic ${base64Utf8(`${this.#auth.email}:${this.#auth.apiKey}`)}`;
    }
    if (method !== "GET") {
      headers["Content-Type"] = "application/x-www-form-urlencoded";
      init.body = formOf(params).toString();
    }
    return init;
  }

  // One request of the current run, the only one in flight. Resolves with
  // { ok: true, body } or { ok: false, error } (an EventqError); throws
  // SUPERSEDED when the run was replaced meanwhile, whatever the answer.
  // #halt aborts it, except a register: the server may have made its queue
  // already, so that one is left to finish and its queue deleted (#discard).
  /**
   * @param {number} gen
   * @param {string} method
   * @param {string} path
   * @param {Record<string, unknown>} params
   * @param {number} timeoutMs
   * @param {((reader: StreamReaderLike, touch: () => void) => Promise<string | null>) | null} [consume]
   *   For a GET of the events: ask for an event stream, and read it with this
   *   when the answer is one (timeoutMs then bounds the silence between its
   *   writes, not the whole answer).
   * @returns {Promise<
   *   | { ok: true, body: any, streamed: false, lost?: undefined, error?: undefined }
   *   | { ok: true, streamed: true, lost: string | null, body?: undefined, error?: undefined }
   *   | { ok: false, error: EventqError, body?: undefined, streamed?: undefined }
   * >}
   */
  async #send(gen, method, path, params, timeoutMs, consume = null) {
    this.#check(gen);
    assertIdle(this.#inFlight);
    let url = this.#url(path);
    if (method === "GET") url += `?${formOf(params)}`;
    const init = this.#init(method, params);
    if (consume !== null) /** @type {Record<string, string>} */ (init.headers).Accept = STREAM_TYPE;
    const controller = new AbortController();
    init.signal = controller.signal;
    let timedOut = false;
    const expire = () => {
      timedOut = true;
      controller.abort();
    };
    let timer = this.#setTimeout(expire, timeoutMs);
    const touch = () => {
      this.#clearTimeout(timer);
      timer = this.#setTimeout(expire, timeoutMs);
    };
    /** @returns {Promise<{ response: ResponseLike, text: string | null, lost?: string | null }>} */
    const read = async () => {
      const response = await this.#fetch(url, init);
      const type = response.headers.get("Content-Type") ?? "";
      if (consume !== null && response.status === 200 && type.startsWith(STREAM_TYPE)) {
        const reader = response.body?.getReader?.();
        if (reader === undefined) {
          // A fetch that cannot read a body as it comes: long polls from now on.
          this.#streaming = false;
          controller.abort();
          throw new Error("this fetch cannot read a stream");
        }
        return { response, text: null, lost: await consume(reader, touch) };
      }
      return { response, text: await response.text() };
    };
    const answer = read();
    answer.catch(() => undefined);
    // Ends the wait for the answer: at an abort, even where fetch ignores
    // the signal (a polyfill; the answer, if it ever comes, then has no one
    // to deliver it to), or when #halt leaves a register to finish alone.
    /** @type {(reason: unknown) => void} */
    let leave;
    /** @type {Promise<never>} */
    const left = new Promise((_resolve, reject) => {
      leave = reject;
    });
    left.catch(() => undefined);
    controller.signal.addEventListener("abort", () => leave(new Error("aborted")), {
      once: true,
    });
    let detached = false;
    const request = {
      cancel: () => {
        if (path !== "register") {
          controller.abort();
          return;
        }
        detached = true;
        leave(SUPERSEDED);
        // Still bounded by its timeout, even where fetch ignores the abort
        // (close() waits for this): the queue of a register that never
        // answers expires on the server.
        /** @type {Promise<never>} */
        const abandoned = new Promise((_resolve, reject) => {
          controller.signal.addEventListener("abort", () => reject(new Error("aborted")), {
            once: true,
          });
        });
        this.#discard(Promise.race([answer, abandoned]).finally(() => this.#clearTimeout(timer)));
      },
    };
    this.#inFlight = request;
    /** @type {ResponseLike} */
    let response;
    /** @type {string | null} */
    let text;
    /** @type {string | null | undefined} */
    let lost;
    try {
      ({ response, text, lost } = await Promise.race([answer, left]));
    } catch (cause) {
      this.#check(gen);
      const kind = timedOut ? "timeout" : "network";
      const what = timedOut ? `no answer in ${timeoutMs} ms` : `${cause}`;
      return { ok: false, error: new EventqError(`${method} ${path}: ${what}`, { kind, cause }) };
    } finally {
      if (!detached) this.#clearTimeout(timer);
      if (this.#inFlight === request) this.#inFlight = null;
    }
    this.#check(gen);
    if (text === null) return { ok: true, streamed: true, lost: lost ?? null };
    const outcome = this.#outcome(method, path, response, text);
    return outcome.ok ? { ...outcome, streamed: false } : outcome;
  }

  // A register this client no longer waits for (stop(), close() or a
  // pagehide came while it was in flight): the queue it answers with, if
  // any, is deleted. close() waits for this.
  /** @param {Promise<{ response: ResponseLike, text: string | null }>} answer */
  #discard(answer) {
    const done = answer
      .then(({ response, text }) => {
        if (text === null) return undefined; // only an events GET streams
        const { ok, body } = this.#outcome("POST", "register", response, text);
        if (ok && typeof body.queue_id === "string") return this.#sendDelete(body.queue_id);
        return undefined;
      })
      .catch(() => undefined);
    this.#discarding.add(done);
    done.then(() => this.#discarding.delete(done));
  }

  /**
   * @param {string} method
   * @param {string} path
   * @param {ResponseLike} response
   * @param {string} text
   * @returns {(
   *   | { ok: true, body: any, error?: undefined }
   *   | { ok: false, error: EventqError, body?: undefined }
   * )}
   */
  #outcome(method, path, response, text) {
    let body = null;
    try {
      body = JSON.parse(text);
    } catch {
      // not JSON: a proxy's error page, judged by its status below
    }
    const isObject = body !== null && typeof body === "object" && !Array.isArray(body);
    if (response.status >= 200 && response.status < 300) {
      if (isObject && body.result === "success") return { ok: true, body };
      return {
        ok: false,
        error: new EventqError(
          `${method} ${path}: status ${response.status} without a success body`,
          {
            kind: "protocol",
            status: response.status,
            body: isObject ? body : null,
          },
        ),
      };
    }
    const msg = isObject && typeof body.msg === "string" ? body.msg : `status ${response.status}`;
    return {
      ok: false,
      error: new EventqError(`${method} ${path}: ${msg}`, {
        kind: "http",
        status: response.status,
        code: isObject && typeof body.code === "string" ? body.code : null,
        body: isObject ? body : null,
        retryAfterMs: retryAfterOf(response.headers, isObject ? body : null, this.#now),
      }),
    };
  }

  // DELETE the queue with keepalive, so the request outlives the page; the
  // fetch is issued synchronously (a pagehide listener must not await). The
  // promise resolves when it is answered or failed, and never rejects: the
  // queue expires on its own if this does not reach the server.
  /** @returns {Promise<void>} */
  #deleteQueue() {
    const queueId = this.#queueId;
    if (queueId === null) return Promise.resolve();
    this.#queueId = null;
    return this.#sendDelete(queueId);
  }

  // Resolves once the DELETE is answered or has failed, or after the request
  // timeout (then aborted), whichever comes first: close() waits for it, so
  // it is bounded even where fetch ignores the abort. Never rejects.
  /**
   * @param {string} queueId
   * @returns {Promise<void>}
   */
  #sendDelete(queueId) {
    const init = this.#init("DELETE", { queue_id: queueId });
    init.keepalive = true;
    const controller = new AbortController();
    init.signal = controller.signal;
    /** @type {unknown} */
    let timer;
    /** @type {Promise<void>} */
    const timedOut = new Promise((resolve) => {
      timer = this.#setTimeout(() => {
        controller.abort();
        resolve();
      }, this.#requestTimeoutMs);
    });
    let request;
    try {
      request = Promise.resolve(this.#fetch(this.#url("events"), init));
    } catch (error) {
      request = Promise.reject(error);
    }
    const answered = request.then(
      () => undefined,
      () => undefined,
    );
    return Promise.race([answered, timedOut]).finally(() => this.#clearTimeout(timer));
  }
}

/** @param {unknown} inFlight */
function assertIdle(inFlight) {
  if (inFlight !== null) throw new Error("eventq-client: a second request while one is in flight");
}

// -- types --------------------------------------------------------------------
// The public types, from which (with the JSDoc above) eventq.d.ts is
// generated. They stand here, after the code, because tsc would otherwise
// also copy them, as they are, before the first declaration that follows.

/** How requests authenticate.
 * - `"session"`: the page's login session. Paths under `/json/`, the session
 *   cookie sent by the browser (`credentials: "same-origin"`), and every
 *   non-GET request carries `X-CSRFToken` with the `csrftoken` cookie.
 * - `{ email, apiKey }`: paths under `/api/v1/`, HTTP Basic credentials.
 * @typedef {"session" | { email: string, apiKey: string }} Auth */

/** An event as the server sends it: an `id` (per queue, increasing) and a `type`.
 * @typedef {{ id: number, type: string, [field: string]: unknown }} EventqEvent */

/** Register's answer: the queue and, unless resumed, the initial state.
 * eventq adds `stream_position` (every logged event at or below it is in
 * this state) and, when the queue was resumed (then there is no state),
 * `resumed_from`.
 * @typedef {{
 *   result: "success",
 *   msg?: string,
 *   queue_id: string,
 *   last_event_id: number,
 *   stream_position?: number,
 *   resumed_from?: number,
 *   event_queue_longpoll_timeout_seconds?: number,
 *   zulip_version?: string,
 *   zulip_feature_level?: number,
 *   [key: string]: unknown,
 * }} RegisterResponse */

/** Where the client is.
 * - `idle`: constructed, not started.
 * - `connecting`: registering a queue.
 * - `connected`: the last request succeeded (a poll may be parked).
 * - `retrying`: waiting out a backoff after a transient failure.
 * - `suspended`: the page was hidden (pagehide); its queue was deleted and is
 *   replaced if the page is shown again from the back/forward cache.
 * - `stopped`: stop() or close() was called.
 * - `failed`: a fatal error ended it (see onError).
 * @typedef {"idle" | "connecting" | "connected" | "retrying" | "suspended" | "stopped" | "failed"} Status */

/** What kind of failure an EventqError is.
 * - `network`: fetch rejected.
 * - `timeout`: no answer within the poll or request timeout.
 * - `http`: an error answer: see status, code, body.
 * - `protocol`: a 2xx answer without a JSON success body (a proxy's page).
 * - `no_queue`: register succeeded without a queue_id (a logged-out spectator).
 * - `stopped`: stop() or close() before start() finished.
 * - `internal`: a bug of eventq-client.
 * @typedef {"network" | "timeout" | "http" | "protocol" | "no_queue" | "stopped" | "internal"} ErrorKind */

/** The second argument of an events listener.
 * @typedef {object} EventsInfo
 * @property {string} queueId The queue the events came from.
 * @property {number | null} streamPosition
 *   The position the page's state has reached once it applied these events (null
 *   from a server that sends none).
 */

/** Told after the client replaced its queue (not after the first register).
 * @typedef {object} ResetInfo
 * @property {boolean} reloadState
 *   false: the new queue was resumed from the last stream position and holds
 *   every event the page missed; keep the state and go on applying events. true:
 *   the page's state is stale; replace it with `state` (or reload).
 * @property {"queue_lost" | "page_restored"} reason
 *   "queue_lost": the server answered BAD_EVENT_QUEUE_ID (the queue expired, was
 *   evicted or overflowed, or the server lost it). "page_restored": the page
 *   came back from the back/forward cache.
 * @property {RegisterResponse | null} state
 *   The new initial state when reloadState is true; else null.
 * @property {string} queueId The new queue.
 * @property {number | null} streamPosition
 *   The position the page's state is at: the new state's when reloadState is
 *   true; else still the one resumed from (the events after it are in the new
 *   queue, and the position moves on once the first answer of the new queue has
 *   been applied).
 * @property {number | null} resumedFrom
 *   The position resumed from when reloadState is false; else null.
 */

/** Told before each backoff wait.
 * @typedef {object} RetryInfo
 * @property {EventqError} error
 * @property {number} attempt 1 for the first failure since the last successful poll.
 * @property {number} delayMs
 *   How long the client waits before trying again (see BackoffPolicy).
 */

/** Full-jitter exponential backoff: the n-th consecutive failure (n from 0)
 * waits `random() * min(capMs, baseMs * factor ** n)`, plus what the
 * server's Retry-After asked, up to `retryAfterCapMs`. The jitter is added
 * to the Retry-After, not replaced by it, so that clients told the same
 * Retry-After (every 502 of a proxy, a server shutting down) do not all
 * come back at the same moment.
 * @typedef {object} BackoffPolicy
 * @property {number} baseMs
 * @property {number} factor
 * @property {number} capMs
 * @property {number} retryAfterCapMs
 *   The most of a Retry-After that is waited (a longer one counts as this): a
 *   proxy asking for a day, or an HTTP date from a wrong clock, would otherwise
 *   leave the page behind for as long.
 */

/** A listener may return a promise: the client waits for it before the next
 * poll (events) or before polling the new queue (reset). A listener that
 * throws or rejects is reported (see `reportError`) and the client goes on.
 * When a queue must be replaced while events listeners are still applying an
 * answer, the new queue waits for them at most `applyWaitMs`; past that the
 * wait is reported, the answer counts as not applied and its events come
 * again on the new queue.
 * @typedef {(events: EventqEvent[], info: EventsInfo) => void | Promise<void>} EventsListener */
/** @typedef {(reset: ResetInfo) => void | Promise<void>} ResetListener */
/** @typedef {(error: EventqError) => void} ErrorListener */
/** @typedef {(retry: RetryInfo) => void} RetryListener */
/** @typedef {(status: Status) => void} StatusListener */

/** Minimal shape of what the client's fetch answers (a Response), so that
 * tests can inject fakes. `body` is read only for an event stream.
 * @typedef {{
 *   status: number,
 *   headers: { get(name: string): string | null },
 *   text(): Promise<string>,
 *   body?: { getReader?(): StreamReaderLike } | null,
 * }} ResponseLike */
/** What reads an event stream's body as it comes (a ReadableStream's reader).
 * @typedef {{
 *   read(): Promise<{ done: boolean, value?: Uint8Array }>,
 * }} StreamReaderLike */
/** How the client reads its queue.
 * - `"auto"`: an event stream (`Accept: text/event-stream`) while the server
 *   answers with one, else long polls (a Zulip server answers the stream
 *   request with a long poll's JSON, and the client long-polls from then on).
 * - `"stream"`: an event stream, whatever a server answered before.
 * - `"poll"`: long polls only.
 * @typedef {"auto" | "stream" | "poll"} Transport */
/** What the client calls as fetch (default: the global fetch).
 * @typedef {(url: string, init: RequestInit) => Promise<ResponseLike>} FetchLike */
/** Where pagehide and pageshow come from (default: `window`).
 * @typedef {{
 *   addEventListener(type: string, listener: (event: any) => void): void,
 *   removeEventListener(type: string, listener: (event: any) => void): void,
 * }} PageEventTarget */

/** The options of `new EventqClient(options)`.
 *
 * Register's parameters (Zulip's, sent form-encoded, non-strings as JSON):
 * eventTypes, fetchEventTypes, narrow, allPublicStreams, clientCapabilities,
 * applyMarkdown, clientGravatar, slimPresence, includeSubscribers,
 * queueLifespanSecs, presenceHistoryLimitDays, and registerParams.
 * Listeners: onEvents, onReset, onError, onRetry and onStatus (the same as
 * calling the on* methods). Injectable platform (defaults: the globals), for
 * tests and unusual hosts: fetch, setTimeout, clearTimeout, random, now,
 * cookies, window and reportError.
 * @typedef {object} EventqClientOptions
 * @property {string} [baseUrl]
 *   Origin (and path prefix) of the server; default "" (the page's origin).
 * @property {Auth} [auth] Default "session".
 * @property {string[]} [eventTypes]
 *   Event types the queue delivers (event_types); default all.
 * @property {string[]} [fetchEventTypes]
 *   State sections to fetch (fetch_event_types); default eventTypes. Not sent on
 *   a resume.
 * @property {[string, string][]} [narrow]
 *   narrow: [operator, operand] pairs, e.g. [["stream", "design"]].
 * @property {boolean} [allPublicStreams]
 * @property {Record<string, boolean>} [clientCapabilities]
 * @property {boolean} [applyMarkdown]
 * @property {boolean} [clientGravatar]
 * @property {boolean} [slimPresence]
 * @property {boolean | "partial"} [includeSubscribers]
 * @property {number} [queueLifespanSecs]
 * @property {number} [presenceHistoryLimitDays]
 * @property {Record<string, unknown>} [registerParams]
 *   Any other register parameter, by its wire name (e.g. { client: "my-page" }).
 * @property {EventsListener} [onEvents]
 * @property {ResetListener} [onReset]
 * @property {ErrorListener} [onError]
 * @property {RetryListener} [onRetry]
 * @property {StatusListener} [onStatus]
 * @property {Partial<BackoffPolicy>} [backoff]
 *   Default DEFAULT_BACKOFF (1 s, x2, 60 s; Retry-After up to 60 s); missing
 *   fields keep it.
 * @property {number} [pollTimeoutMs]
 *   A poll unanswered this long (a stream silent this long: no event, no
 *   heartbeat) is abandoned and retried; default register's
 *   event_queue_longpoll_timeout_seconds, else 90 s.
 * @property {number} [requestTimeoutMs]
 *   Timeout of a register request; default 30 s.
 * @property {number} [applyWaitMs]
 *   How long a replacement queue waits for events listeners still applying the
 *   previous answer (see EventsListener); default 30 s.
 * @property {number} [user]
 *   Session mode: the user (id) whose session to use when the browser holds
 *   several (one per tab, as eventq's demo does). Sent as `X-Eventq-User`; the
 *   CSRF cookie is then `csrftoken_<user>`. Default: the latest login.
 * @property {string} [csrfCookieName]
 *   Name of the CSRF cookie in session mode; default "csrftoken"
 *   (`csrftoken_<user>` with `user`).
 * @property {Transport} [transport]
 *   Default "auto": an event stream where the server gives one, else long polls.
 * @property {FetchLike} [fetch]
 * @property {(callback: () => void, ms: number) => unknown} [setTimeout]
 * @property {(handle: any) => void} [clearTimeout]
 * @property {() => number} [random] A number in [0, 1); default Math.random.
 * @property {() => number} [now]
 *   Milliseconds since the epoch (to read an HTTP-date Retry-After); default
 *   Date.now.
 * @property {() => string} [cookies]
 *   The cookie string (session mode); default document.cookie.
 * @property {PageEventTarget | null} [window]
 *   Where pagehide/pageshow come from; default `window` when there is one. null:
 *   none.
 * @property {(error: unknown) => void} [reportError]
 *   Where listener errors (and fatal errors nobody listens to) go; default the
 *   global reportError, else console.error.
 */
