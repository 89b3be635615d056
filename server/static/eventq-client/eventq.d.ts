/*! eventq-client. eventq.d.ts is generated from eventq.js's JSDoc by `npm run
 * types` (tsc), and a test fails when they differ: edit eventq.js, not it. */
/** Backoff of transient failures: full jitter (delay = random() x min(cap,
 * base x factor^n), n = failures before this one), so that clients cut off
 * together by a restart do not come back together. 1 s doubles to 60 s: a
 * minute is as long as a page should stay behind a server that is back.
 * What a Retry-After asks is waited on top of the jitter, and at most
 * retryAfterCapMs of it: 60 s for the same reason (a proxy that says a day,
 * or an HTTP date from a clock that is wrong, would leave the page behind
 * for as long).
 * @type {Readonly<BackoffPolicy>} */
export const DEFAULT_BACKOFF: Readonly<BackoffPolicy>;
/** Used when register's answer has no `event_queue_longpoll_timeout_seconds`:
 * Zulip's value, comfortably above the server's 45-55 s heartbeat.
 * @type {number} */
export const DEFAULT_POLL_TIMEOUT_MS: number;
/** Register reads the whole initial state; 30 s is generous for that and
 * short enough for a silently dropped connection to be retried.
 * @type {number} */
export const DEFAULT_REQUEST_TIMEOUT_MS: number;
/** How long a replacement queue waits for the events listeners still
 * applying the last answer (their end decides the position it resumes
 * from) before it registers without them. 30 s, as long as register itself
 * may take: a listener busy for longer has most likely forgotten to settle
 * its promise, and the page would otherwise never be updated again.
 * @type {number} */
export const DEFAULT_APPLY_WAIT_MS: number;
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
    constructor(message: string, { kind, status, code, body, retryAfterMs, cause, }?: {
        kind: ErrorKind;
        status?: number | null;
        code?: string | null;
        body?: Record<string, unknown> | null;
        retryAfterMs?: number | null;
        cause?: unknown;
    });
    /** @readonly */
    readonly kind: ErrorKind;
    /** The HTTP status, for "http" and "protocol"; else null.
     * @readonly */
    readonly status: number | null;
    /** The server's error `code` ("BAD_EVENT_QUEUE_ID", "RATE_LIMIT_HIT", ...); else null.
     * @readonly */
    readonly code: string | null;
    /** The parsed JSON body of the answer, when it had one.
     * @readonly */
    readonly body: Record<string, unknown> | null;
    /** How long the server asked to wait (Retry-After, or the body's retry-after), in ms.
     * @readonly */
    readonly retryAfterMs: number | null;
    /** Whether the client retries it: network failures, timeouts, 408, 429,
     * 5xx and unreadable success answers (a proxy's page). Every other 4xx
     * means the request itself is wrong and retrying would repeat it. */
    get retryable(): boolean;
}
/** Keeps one event queue of one user: registers it, long-polls it with
 * exactly one request in flight, acknowledges what it received, backs off on
 * transient failures and replaces the queue when the server lost it. */
export class EventqClient {
    /** @param {EventqClientOptions} [options] */
    constructor(options?: EventqClientOptions);
    /** The queue being polled; null before register, while a lost queue is
     * replaced, and after close() or a pagehide. */
    get queueId(): string | null;
    /** The highest event id received on the queue (heartbeats included): what
     * the next poll acknowledges; -1 before any. */
    get lastEventId(): number;
    /** The newest stream position the page's state has reached (once its
     * listeners returned); what a re-register resumes from. After a resume it
     * stays the position resumed from until the new queue's first answer has
     * been applied. null when the server sends none (Zulip). */
    get streamPosition(): number | null;
    /** Where the client is (see Status). */
    get status(): Status;
    /** Each on* method adds a listener and returns a function that removes it.
     * @param {EventsListener} listener
     * @returns {() => void} */
    onEvents(listener: EventsListener): () => void;
    /** @param {ResetListener} listener
     * @returns {() => void} */
    onReset(listener: ResetListener): () => void;
    /** A fatal error: the client has stopped (status "failed").
     * @param {ErrorListener} listener
     * @returns {() => void} */
    onError(listener: ErrorListener): () => void;
    /** @param {RetryListener} listener
     * @returns {() => void} */
    onRetry(listener: RetryListener): () => void;
    /** @param {StatusListener} listener
     * @returns {() => void} */
    onStatus(listener: StatusListener): () => void;
    /** Registers the queue (retrying transient failures) and starts polling.
     * Resolves with register's answer, the initial state, before any event
     * reaches a listener. Rejects with an EventqError on a fatal answer (also
     * told to onError) or when stop()/close() comes first (kind "stopped").
     * Call it once.
     * @returns {Promise<RegisterResponse>} */
    start(): Promise<RegisterResponse>;
    /** Stops polling at once: the poll in flight is aborted and its answer,
     * should it still come, is ignored. The queue stays on the server (it
     * expires after its lifespan); close() deletes it. A register in flight
     * is left to finish (the server may have made its queue already) and the
     * queue it answers with is deleted (DELETE events, keepalive); so is one
     * in flight at a pagehide. A stopped client does not start again: make a
     * new one. */
    stop(): void;
    /** stop(), then deletes the queue (DELETE events, keepalive) and removes
     * the page listeners. Resolves when the delete is answered or failed (and
     * that of the queue a register in flight made), each within the request
     * timeout; never rejects. Safe to call more than once, or before
     * start().
     * @returns {Promise<void>} */
    close(): Promise<void>;
    #private;
}
/**
 * How requests authenticate.
 * - `"session"`: the page's login session. Paths under `/json/`, the session
 *  cookie sent by the browser (`credentials: "same-origin"`), and every
 *  non-GET request carries `X-CSRFToken` with the `csrftoken` cookie.
 * - `{ email, apiKey }`: paths under `/api/v1/`, HTTP Basic credentials.
 */
export type Auth = "session" | {
    email: string;
    apiKey: string;
};
/**
 * An event as the server sends it: an `id` (per queue, increasing) and a `type`.
 */
export type EventqEvent = {
    id: number;
    type: string;
    [field: string]: unknown;
};
/**
 * Register's answer: the queue and, unless resumed, the initial state.
 * eventq adds `stream_position` (every logged event at or below it is in
 * this state) and, when the queue was resumed (then there is no state),
 * `resumed_from`.
 */
export type RegisterResponse = {
    result: "success";
    msg?: string;
    queue_id: string;
    last_event_id: number;
    stream_position?: number;
    resumed_from?: number;
    event_queue_longpoll_timeout_seconds?: number;
    zulip_version?: string;
    zulip_feature_level?: number;
    [key: string]: unknown;
};
/**
 * Where the client is.
 * - `idle`: constructed, not started.
 * - `connecting`: registering a queue.
 * - `connected`: the last request succeeded (a poll may be parked).
 * - `retrying`: waiting out a backoff after a transient failure.
 * - `suspended`: the page was hidden (pagehide); its queue was deleted and is
 *  replaced if the page is shown again from the back/forward cache.
 * - `stopped`: stop() or close() was called.
 * - `failed`: a fatal error ended it (see onError).
 */
export type Status = "idle" | "connecting" | "connected" | "retrying" | "suspended" | "stopped" | "failed";
/**
 * What kind of failure an EventqError is.
 * - `network`: fetch rejected.
 * - `timeout`: no answer within the poll or request timeout.
 * - `http`: an error answer: see status, code, body.
 * - `protocol`: a 2xx answer without a JSON success body (a proxy's page).
 * - `no_queue`: register succeeded without a queue_id (a logged-out spectator).
 * - `stopped`: stop() or close() before start() finished.
 * - `internal`: a bug of eventq-client.
 */
export type ErrorKind = "network" | "timeout" | "http" | "protocol" | "no_queue" | "stopped" | "internal";
/**
 * The second argument of an events listener.
 */
export type EventsInfo = {
    /**
     * The queue the events came from.
     */
    queueId: string;
    /**
     *   The position the page's state has reached once it applied these events (null
     *   from a server that sends none).
     */
    streamPosition: number | null;
};
/**
 * Told after the client replaced its queue (not after the first register).
 */
export type ResetInfo = {
    /**
     *   false: the new queue was resumed from the last stream position and holds
     *   every event the page missed; keep the state and go on applying events. true:
     *   the page's state is stale; replace it with `state` (or reload).
     */
    reloadState: boolean;
    /**
     *   "queue_lost": the server answered BAD_EVENT_QUEUE_ID (the queue expired, was
     *   evicted or overflowed, or the server lost it). "page_restored": the page
     *   came back from the back/forward cache.
     */
    reason: "queue_lost" | "page_restored";
    /**
     *   The new initial state when reloadState is true; else null.
     */
    state: RegisterResponse | null;
    /**
     * The new queue.
     */
    queueId: string;
    /**
     *   The position the page's state is at: the new state's when reloadState is
     *   true; else still the one resumed from (the events after it are in the new
     *   queue, and the position moves on once the first answer of the new queue has
     *   been applied).
     */
    streamPosition: number | null;
    /**
     *   The position resumed from when reloadState is false; else null.
     */
    resumedFrom: number | null;
};
/**
 * Told before each backoff wait.
 */
export type RetryInfo = {
    error: EventqError;
    /**
     * 1 for the first failure since the last successful poll.
     */
    attempt: number;
    /**
     *   How long the client waits before trying again (see BackoffPolicy).
     */
    delayMs: number;
};
/**
 * Full-jitter exponential backoff: the n-th consecutive failure (n from 0)
 * waits `random() * min(capMs, baseMs * factor ** n)`, plus what the
 * server's Retry-After asked, up to `retryAfterCapMs`. The jitter is added
 * to the Retry-After, not replaced by it, so that clients told the same
 * Retry-After (every 502 of a proxy, a server shutting down) do not all
 * come back at the same moment.
 */
export type BackoffPolicy = {
    baseMs: number;
    factor: number;
    capMs: number;
    /**
     *   The most of a Retry-After that is waited (a longer one counts as this): a
     *   proxy asking for a day, or an HTTP date from a wrong clock, would otherwise
     *   leave the page behind for as long.
     */
    retryAfterCapMs: number;
};
/**
 * A listener may return a promise: the client waits for it before the next
 * poll (events) or before polling the new queue (reset). A listener that
 * throws or rejects is reported (see `reportError`) and the client goes on.
 * When a queue must be replaced while events listeners are still applying an
 * answer, the new queue waits for them at most `applyWaitMs`; past that the
 * wait is reported, the answer counts as not applied and its events come
 * again on the new queue.
 */
export type EventsListener = (events: EventqEvent[], info: EventsInfo) => void | Promise<void>;
export type ResetListener = (reset: ResetInfo) => void | Promise<void>;
export type ErrorListener = (error: EventqError) => void;
export type RetryListener = (retry: RetryInfo) => void;
export type StatusListener = (status: Status) => void;
/**
 * Minimal shape of what the client's fetch answers (a Response), so that
 * tests can inject fakes. `body` is read only for an event stream.
 */
export type ResponseLike = {
    status: number;
    headers: {
        get(name: string): string | null;
    };
    text(): Promise<string>;
    body?: {
        getReader?(): StreamReaderLike;
    } | null;
};
/**
 * What reads an event stream's body as it comes (a ReadableStream's reader).
 */
export type StreamReaderLike = {
    read(): Promise<{
        done: boolean;
        value?: Uint8Array;
    }>;
};
/**
 * How the client reads its queue.
 * - `"auto"`: an event stream (`Accept: text/event-stream`) while the server
 *  answers with one, else long polls (a Zulip server answers the stream
 *  request with a long poll's JSON, and the client long-polls from then on).
 * - `"stream"`: an event stream, whatever a server answered before.
 * - `"poll"`: long polls only.
 */
export type Transport = "auto" | "stream" | "poll";
/**
 * What the client calls as fetch (default: the global fetch).
 */
export type FetchLike = (url: string, init: RequestInit) => Promise<ResponseLike>;
/**
 * Where pagehide and pageshow come from (default: `window`).
 */
export type PageEventTarget = {
    addEventListener(type: string, listener: (event: any) => void): void;
    removeEventListener(type: string, listener: (event: any) => void): void;
};
/**
 * The options of `new EventqClient(options)`.
 *
 * Register's parameters (Zulip's, sent form-encoded, non-strings as JSON):
 * eventTypes, fetchEventTypes, narrow, allPublicStreams, clientCapabilities,
 * applyMarkdown, clientGravatar, slimPresence, includeSubscribers,
 * queueLifespanSecs, presenceHistoryLimitDays, and registerParams.
 * Listeners: onEvents, onReset, onError, onRetry and onStatus (the same as
 * calling the on* methods). Injectable platform (defaults: the globals), for
 * tests and unusual hosts: fetch, setTimeout, clearTimeout, random, now,
 * cookies, window and reportError.
 */
export type EventqClientOptions = {
    /**
     * Origin (and path prefix) of the server; default "" (the page's origin).
     */
    baseUrl?: string | undefined;
    /**
     * Default "session".
     */
    auth?: Auth | undefined;
    /**
     * Event types the queue delivers (event_types); default all.
     */
    eventTypes?: string[] | undefined;
    /**
     * State sections to fetch (fetch_event_types); default eventTypes. Not sent on
     * a resume.
     */
    fetchEventTypes?: string[] | undefined;
    /**
     * narrow: [operator, operand] pairs, e.g. [["stream", "design"]].
     */
    narrow?: [string, string][] | undefined;
    allPublicStreams?: boolean | undefined;
    clientCapabilities?: Record<string, boolean> | undefined;
    applyMarkdown?: boolean | undefined;
    clientGravatar?: boolean | undefined;
    slimPresence?: boolean | undefined;
    includeSubscribers?: boolean | "partial" | undefined;
    queueLifespanSecs?: number | undefined;
    presenceHistoryLimitDays?: number | undefined;
    /**
     * Any other register parameter, by its wire name (e.g. { client: "my-page" }).
     */
    registerParams?: Record<string, unknown> | undefined;
    onEvents?: EventsListener | undefined;
    onReset?: ResetListener | undefined;
    onError?: ErrorListener | undefined;
    onRetry?: RetryListener | undefined;
    onStatus?: StatusListener | undefined;
    /**
     * Default DEFAULT_BACKOFF (1 s, x2, 60 s; Retry-After up to 60 s); missing
     * fields keep it.
     */
    backoff?: Partial<BackoffPolicy> | undefined;
    /**
     * A poll unanswered this long (a stream silent this long: no event, no
     * heartbeat) is abandoned and retried; default register's
     * event_queue_longpoll_timeout_seconds, else 90 s.
     */
    pollTimeoutMs?: number | undefined;
    /**
     * Timeout of a register request; default 30 s.
     */
    requestTimeoutMs?: number | undefined;
    /**
     * How long a replacement queue waits for events listeners still applying the
     * previous answer (see EventsListener); default 30 s.
     */
    applyWaitMs?: number | undefined;
    /**
     * Session mode: the user (id) whose session to use when the browser holds
     * several (one per tab, as eventq's demo does). Sent as `X-Eventq-User`; the
     * CSRF cookie is then `csrftoken_<user>`. Default: the latest login.
     */
    user?: number | undefined;
    /**
     * Name of the CSRF cookie in session mode; default "csrftoken"
     * (`csrftoken_<user>` with `user`).
     */
    csrfCookieName?: string | undefined;
    /**
     * Default "auto": an event stream where the server gives one, else long polls.
     */
    transport?: Transport | undefined;
    fetch?: FetchLike | undefined;
    setTimeout?: ((callback: () => void, ms: number) => unknown) | undefined;
    clearTimeout?: ((handle: any) => void) | undefined;
    /**
     * A number in [0, 1); default Math.random.
     */
    random?: (() => number) | undefined;
    /**
     * Milliseconds since the epoch (to read an HTTP-date Retry-After); default
     * Date.now.
     */
    now?: (() => number) | undefined;
    /**
     * The cookie string (session mode); default document.cookie.
     */
    cookies?: (() => string) | undefined;
    /**
     * Where pagehide/pageshow come from; default `window` when there is one. null:
     * none.
     */
    window?: PageEventTarget | null | undefined;
    /**
     * Where listener errors (and fatal errors nobody listens to) go; default the
     * global reportError, else console.error.
     */
    reportError?: ((error: unknown) => void) | undefined;
};
