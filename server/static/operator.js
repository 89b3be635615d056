// The operator page (/operator): fetches /operator/stats every 2 s (or every
// `?every=<seconds>`), shows what the shard holds and the rates of its
// counters, and draws the last 5 minutes of them.
//
// Each figure's element (#queues, #parked, #loop-lag-p99, ...) holds exactly
// the number of the latest answer; units and human forms are in elements of
// their own. Rates are deltas of the cumulative counters over the delta of
// `at` between two answers of one server generation (a restart starts the
// counters again, so its first answer has no rate).
//
// window.eventqOperator holds the latest answer and the samples drawn.

const DEFAULT_EVERY_SECS = 2;
const MIN_EVERY_SECS = 0.1;
// A stats answer takes milliseconds; one not there in 5 s means the shard's
// loop is stuck or the connection is dead, which the operator must see (the
// figures shown are then stale) rather than a page that silently stops.
const FETCH_TIMEOUT_SECS = 5;
const WINDOW_SECS = 300;
const SVG = "http://www.w3.org/2000/svg";

const $ = (id) => document.getElementById(id);

function everyMs() {
  const asked = Number(new URLSearchParams(location.search).get("every"));
  const secs = Number.isFinite(asked) && asked > 0 ? Math.max(asked, MIN_EVERY_SECS) : DEFAULT_EVERY_SECS;
  return secs * 1000;
}

const page = {
  every: everyMs(),
  // The latest successful answer of /operator/stats, as it came.
  latest: null,
  // One per answer within the last WINDOW_SECS of `at`, oldest first:
  // { at, generation, queues, parked, lagP99, deliveriesPerSec, noticesPerSec }
  // (a rate is null when the answer had no predecessor to compare with).
  samples: [],
  fetches: 0,
  failures: 0,
};
window.eventqOperator = page;

function rate(current, previous, key) {
  if (previous === null || previous.server_generation !== current.server_generation) return null;
  const seconds = current.at - previous.at;
  const delta = current[key] - previous[key];
  if (!(seconds > 0) || delta < 0) return null;
  return delta / seconds;
}

// A rate as shown: at most two decimals, no trailing zeros.
function rateText(value) {
  return value === null ? "–" : String(Number(value.toFixed(2)));
}

function humanBytes(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}

function duration(secs) {
  if (secs === null || secs === undefined) return "–";
  const s = Math.round(secs);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  const hours = Math.floor(s / 3600);
  return hours < 48 ? `${hours} h ${Math.floor((s % 3600) / 60)} min` : `${Math.floor(hours / 24)} days`;
}

function setText(id, value) {
  $(id).textContent = String(value);
}

function showFigures(stats, sample) {
  setText("shard", stats.shard);
  setText("server-generation", stats.server_generation);
  setText("uptime", duration(stats.uptime_secs));
  setText("queues", stats.queues);
  setText("users", stats.users);
  setText("parked", stats.parked);
  setText("in-flight", stats.in_flight);
  setText("events-held", stats.events_held);
  setText("bytes-held", stats.bytes_held);
  setText("bytes-held-human", `(${humanBytes(stats.bytes_held)})`);
  setText("deliveries-per-sec", rateText(sample.deliveriesPerSec));
  setText("events-sent", stats.events_sent);
  setText("polls-answered", stats.polls_answered);
  setText("loop-lag-p99", stats.loop_lag_ms.p99_ms);
  setText("loop-lag-p50", stats.loop_lag_ms.p50_ms);
  setText("loop-lag-max", stats.loop_lag_ms.max_ms);
  setText("notices-consumed", stats.notices_consumed);
  setText("notices-per-sec", rateText(sample.noticesPerSec));
  setText("dead-lettered", stats.dead_lettered);
  setText("stream-position", stats.stream_position);
  const consuming = $("consuming");
  consuming.textContent = stats.consuming ? "yes" : "no";
  consuming.dataset.value = String(stats.consuming);
  $("dead-lettered").classList.toggle("alert", stats.dead_lettered > 0);
  $("report").hidden = !stats.report;
}

function showUpdates(updates) {
  const body = $("background-updates").querySelector("tbody");
  body.replaceChildren(
    ...updates.map((update) => {
      const row = document.createElement("tr");
      row.dataset.updateName = update.name;
      row.dataset.state = update.state;
      const cells = [
        update.name,
        update.state + (update.last_error ? ` (${update.last_error})` : ""),
        update.items_done ?? "–",
        update.items_left ?? "–",
        update.items_per_sec === null || update.items_per_sec === undefined ? "–" : update.items_per_sec.toFixed(1),
        duration(update.seconds_left),
      ];
      cells.forEach((text, index) => {
        const cell = document.createElement(index === 0 ? "th" : "td");
        if (index === 0) cell.scope = "row";
        cell.textContent = String(text);
        row.append(cell);
      });
      return row;
    }),
  );
  $("background-updates").hidden = updates.length === 0;
  $("background-none").hidden = updates.length !== 0;
}

// -- notifications ----------------------------------------------------------------

// The workers' counters (`notifications.worker.counters`) by element id.
const WORKER_COUNTERS = {
  "notifications-recorded": "recorded",
  "notifications-email-sent": "email_sent",
  "notifications-push-sent": "push_sent",
  "notifications-skipped-read": "skipped_read",
  "notifications-skipped-deleted": "skipped_deleted",
  "notifications-failed": "failed",
  "notifications-dead-lettered": "dead_lettered",
};

function clock(at) {
  return new Date(at * 1000).toLocaleTimeString();
}

// `notifications` is null on a shard that enqueues none. The workers'
// figures (`worker`, from PostgreSQL) and the queue's (`queue`, from
// RabbitMQ) are the shard's last reads, null until one succeeded: "–".
function showNotifications(notifications) {
  $("notifications-off").hidden = Boolean(notifications);
  $("notifications-figures").hidden = !notifications;
  $("notifications-read-at").hidden = !notifications;
  if (!notifications) return;
  const { enqueued, worker, queue } = notifications;
  setText("notifications-enqueued-delivery", enqueued.delivery ?? 0);
  setText("notifications-enqueued-gc", enqueued.gc ?? 0);
  setText("notifications-unpublished", notifications.unpublished);
  setText("notifications-publish-failures", notifications.publish_failures);
  setText("notifications-dropped", notifications.dropped);
  for (const [id, key] of Object.entries(WORKER_COUNTERS)) {
    setText(id, worker ? (worker.counters[key] ?? 0) : "–");
  }
  setText("notifications-pending-email", worker ? worker.pending.email : "–");
  setText("notifications-pending-push", worker ? worker.pending.push : "–");
  setText("notifications-queue-depth", queue ? queue.messages : "–");
  setText("notifications-queue-consumers", queue ? queue.consumers : "–");
  setText("notifications-dead-letters", queue ? queue.dead_letters : "–");
  // What an operator acts on: losses, give-ups, dead letters, nobody consuming.
  $("notifications-dropped").classList.toggle("alert", notifications.dropped > 0);
  $("notifications-failed").classList.toggle("alert", (worker?.counters.failed ?? 0) > 0);
  $("notifications-dead-lettered").classList.toggle("alert", (worker?.counters.dead_lettered ?? 0) > 0);
  $("notifications-dead-letters").classList.toggle("alert", (queue?.dead_letters ?? 0) > 0);
  $("notifications-queue-consumers").classList.toggle("alert", queue !== null && queue.consumers === 0);
  const read = [
    worker ? `the workers' figures at ${clock(worker.read_at)}` : "the workers' figures not yet",
    queue ? `the queue at ${clock(queue.read_at)}` : "the queue not yet",
  ];
  const node = $("notifications-read-at");
  node.textContent = `Read by this shard every 15 s: ${read.join(", ")}.`;
  node.dataset.workerReadAt = worker ? String(worker.read_at) : "";
  node.dataset.queueReadAt = queue ? String(queue.read_at) : "";
}

// -- charts -------------------------------------------------------------------

function svgElement(tag, attributes = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  return node;
}

const CHARTS = [
  { id: "chart-queues", key: "queues", label: "live queues" },
  { id: "chart-parked", key: "parked", label: "parked requests" },
  { id: "chart-deliveries", key: "deliveriesPerSec", label: "deliveries per second" },
  { id: "chart-loop-lag", key: "lagP99", label: "loop lag p99 (ms)" },
  { id: "chart-notices", key: "noticesPerSec", label: "notices per second" },
];

// Draws one series of the samples into a 300 x 90 viewBox: time across (up
// to 5 minutes ending at the newest sample), 0 to the series' top up; a null value
// (no rate yet, a restart) breaks the line.
function drawChart({ id, key, label }, samples) {
  const svg = $(id);
  const width = 300;
  const height = 90;
  const top = 12;
  const end = samples.length > 0 ? samples[samples.length - 1].at : 0;
  // Until the page has watched for 5 minutes, what it has fills the width.
  const span = samples.length > 1 ? Math.min(WINDOW_SECS, Math.max(10, end - samples[0].at)) : WINDOW_SECS;
  const values = samples.map((s) => s[key]).filter((v) => v !== null);
  const highest = Math.max(1, ...values);
  const x = (at) => ((at - (end - span)) / span) * width;
  const y = (value) => height - (value / highest) * (height - top);
  const nodes = [svgElement("line", { class: "axis", x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5 })];
  let run = [];
  const flush = () => {
    if (run.length === 1) {
      const [px, py] = run[0];
      nodes.push(svgElement("circle", { class: "point", cx: px, cy: py, r: 1.5 }));
    } else if (run.length > 1) {
      nodes.push(svgElement("polyline", { class: "line", points: run.map((p) => p.join(",")).join(" ") }));
    }
    run = [];
  };
  for (const sample of samples) {
    const value = sample[key];
    if (value === null) flush();
    else run.push([x(sample.at).toFixed(1), y(value).toFixed(1)]);
  }
  flush();
  const latest = values.length > 0 ? values[values.length - 1] : null;
  const shown = latest === null ? "–" : String(Number(latest.toFixed(2)));
  const scale = svgElement("text", { class: "scale", x: 2, y: 10 });
  scale.textContent = `max ${Number(highest.toFixed(2))}`;
  const now = svgElement("text", { class: "latest", x: width - 2, y: 10, "text-anchor": "end" });
  now.textContent = shown;
  const title = svgElement("title");
  title.textContent = `${label}: ${shown} now, up to ${Number(highest.toFixed(2))} in the last 5 minutes`;
  nodes.push(scale, now, title);
  svg.replaceChildren(...nodes);
  svg.dataset.points = String(samples.filter((s) => s[key] !== null).length);
}

// -- fetching -------------------------------------------------------------------

function showStatus(status, text) {
  const node = $("fetch-status");
  node.dataset.status = status;
  node.textContent = text;
}

function take(stats) {
  const previous = page.latest;
  const sample = {
    at: stats.at,
    generation: stats.server_generation,
    queues: stats.queues,
    parked: stats.parked,
    lagP99: stats.loop_lag_ms.p99_ms,
    deliveriesPerSec: rate(stats, previous, "events_sent"),
    noticesPerSec: rate(stats, previous, "notices_consumed"),
  };
  page.latest = stats;
  page.samples.push(sample);
  const since = stats.at - WINDOW_SECS;
  while (page.samples.length > 0 && page.samples[0].at < since) page.samples.shift();
  return sample;
}

async function refresh() {
  let stats;
  try {
    // The timeout covers the body too: reading it is aborted with the fetch.
    const signal = AbortSignal.timeout(FETCH_TIMEOUT_SECS * 1000);
    const response = await fetch("/operator/stats", { cache: "no-store", credentials: "same-origin", signal });
    const body = await response.json().catch((error) => {
      if (error.name === "TimeoutError") throw error;
      return null;
    });
    if (!response.ok || body?.result !== "success") {
      throw new Error(body?.msg ?? `status ${response.status}`);
    }
    stats = body;
  } catch (error) {
    page.failures += 1;
    const why = error.name === "TimeoutError" ? `no answer in ${FETCH_TIMEOUT_SECS} s` : error.message;
    const shown = page.latest === null ? "" : " The figures below are from the last answer.";
    showStatus("error", `Could not fetch the figures (${why}); trying again.${shown}`);
    return;
  }
  page.fetches += 1;
  const sample = take(stats);
  showFigures(stats, sample);
  showUpdates(stats.background_updates ?? []);
  showNotifications(stats.notifications ?? null);
  for (const chart of CHARTS) drawChart(chart, page.samples);
  const node = $("fetch-status");
  node.dataset.at = String(stats.at);
  showStatus("ok", `Updated ${new Date(stats.at * 1000).toLocaleTimeString()}, every ${page.every / 1000} s.`);
}

async function loop() {
  const started = performance.now();
  await refresh();
  const wait = Math.max(0, page.every - (performance.now() - started));
  setTimeout(loop, wait);
}

loop();
