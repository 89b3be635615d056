"""server/static/eventq-client, the page client: its own unit tests (Node's
test runner, with a fake fetch and fake timers), its JSDoc types checked by
TypeScript's tsc and eventq.d.ts generated from them, and the client under Node
against the real server, losing its queue and resuming."""

from __future__ import annotations

import difflib
import json
import queue
import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from generation.send import close_for_thread, send_event
from tests.support import Api, ServerProcess

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "server" / "static" / "eventq-client"
# The unit tests take about a second; a hang (a test awaiting a request the
# client never makes) is cut well before pytest's own 180 s.
TIMEOUT_SECS = 120


def node_binary() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: `bash deploy/test.sh` installs it (Node 18 or later)")
    return node


def unit_test_files() -> list[str]:
    """The client's test files, named one by one as package.json's `npm test`
    does through its shell (`test/*.test.js`). Not the directory: Node 18 and 20
    would load every .js in it as a test file (test/fakes.js too), and from
    Node 21 on it is a pattern that matches the directory itself, which then
    fails to load (MODULE_NOT_FOUND)."""
    files = sorted(str(path.relative_to(CLIENT)) for path in (CLIENT / "test").glob("*.test.js"))
    assert files, f"no test files in {CLIENT / 'test'}"
    return files


def test_eventq_client_unit_tests_pass() -> None:
    try:
        run = subprocess.run(
            [node_binary(), "--test", *unit_test_files()],
            cwd=CLIENT,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECS,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        # The partial output comes as bytes, whatever `text` said.
        partial = exc.stdout or b""
        output = partial.decode(errors="replace") if isinstance(partial, bytes) else partial
        pytest.fail(f"node --test did not finish in {TIMEOUT_SECS} s:\n{output}")
    output = run.stdout + run.stderr
    assert run.returncode == 0, f"node --test failed (exit {run.returncode}):\n{output}"
    # Node reports "# pass N" / "# fail N": a run that found no test passes too.
    assert "\n# fail 0" in output, output
    assert "\n# pass 0\n" not in output, f"node --test ran no test:\n{output}"


def tsc(*args: str) -> subprocess.CompletedProcess[str]:
    """tsc of the TypeScript that package-lock.json pins, run in the client's
    directory (where its tsconfig.json is). `bash deploy/test.sh` installs it
    (`npm ci --prefix server/static/eventq-client`)."""
    lock = json.loads((CLIENT / "package-lock.json").read_text())
    want = lock["packages"]["node_modules/typescript"]["version"]
    installed = CLIENT / "node_modules" / "typescript"
    have = None
    if (installed / "package.json").exists():
        have = json.loads((installed / "package.json").read_text())["version"]
    if have != want:
        pytest.fail(
            f"TypeScript {want} is not installed in {CLIENT / 'node_modules'} (found {have}):"
            " `bash deploy/test.sh` installs it, or `npm ci --prefix server/static/eventq-client`"
        )
    return subprocess.run(
        [node_binary(), str(installed / "bin" / "tsc"), *args],
        cwd=CLIENT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECS,
        check=False,
    )


def test_eventq_client_types_check() -> None:
    """eventq.js's JSDoc types hold (tsconfig.json: checkJs, strict)."""
    run = tsc("-p", "tsconfig.json", "--noEmit")
    output = run.stdout + run.stderr
    assert run.returncode == 0, f"tsc --checkJs found errors in eventq.js:\n{output}"


def test_eventq_d_ts_is_generated_from_the_jsdoc(tmp_path: Path) -> None:
    """The committed eventq.d.ts is what tsc generates from eventq.js's JSDoc,
    so the declarations users see cannot drift from the code."""
    run = tsc("-p", "tsconfig.json", "--outDir", str(tmp_path))
    output = run.stdout + run.stderr
    assert run.returncode == 0, f"tsc failed:\n{output}"
    generated = (tmp_path / "eventq.d.ts").read_text()
    # A JSDoc type tsc cannot parse becomes `any` without an error (a union
    # with a leading "|" on its own line does): only these few are meant.
    code = re.sub(r"/\*.*?\*/", "", generated, flags=re.DOTALL)
    unmeant = [line.strip() for line in code.splitlines() if re.search(r"\bany\b", line)]
    unmeant = [line for line in unmeant if not re.search(r"\((event|handle): any\)", line)]
    assert not unmeant, f"`any` in the generated eventq.d.ts: {unmeant}"
    committed = (CLIENT / "eventq.d.ts").read_text()
    if generated != committed:
        diff = "".join(
            difflib.unified_diff(
                committed.splitlines(keepends=True),
                generated.splitlines(keepends=True),
                "eventq.d.ts (committed)",
                "eventq.d.ts (generated)",
            )
        )
        pytest.fail(
            "eventq.d.ts is not what tsc generates from eventq.js's JSDoc; edit eventq.js"
            " and run `npm run types` in server/static/eventq-client:\n" + diff
        )


# Runs the client with an API key; prints one JSON line per thing it is told
# and closes (deleting its queue) once `want` events of type "note" came.
SCRIPT = """
import { EventqClient } from %(module)s;
const [baseUrl, email, apiKey, want, transport] = process.argv.slice(2);
const print = (line) => process.stdout.write(JSON.stringify(line) + "\\n");
let notes = 0;
const client = new EventqClient({
  baseUrl,
  auth: { email, apiKey },
  transport,
  eventTypes: ["note"],
  onEvents: async (events, info) => {
    print({ kind: "events", events, info });
    notes += events.filter((e) => e.type === "note").length;
    if (notes >= Number(want)) {
      await client.close();
      print({ kind: "closed", queueId: client.queueId });
    }
  },
  onReset: (reset) => print({ kind: "reset", reset }),
  onError: (error) => {
    print({ kind: "error", message: error.message });
    process.exitCode = 1;
  },
  onRetry: ({ error, delayMs }) => print({ kind: "retry", error: error.message, delayMs }),
});
const state = await client.start();
print({ kind: "state", queueId: state.queue_id, position: state.stream_position });
"""


class NodeClient:
    """The script above in a node process, its lines read as they come."""

    def __init__(self, script: Path, api: Api, transport: str):
        self.proc = subprocess.Popen(
            [
                node_binary(),
                str(script),
                api.server.url,
                api.user.email,
                api.user.api_key,
                "4",
                transport,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.seen: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def next(self, kind: str, timeout: float = 30.0) -> dict[str, Any]:
        """The next line of `kind` (skipping retries), failing on anything else."""
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"no {kind!r} from the client in {timeout} s; it said:\n{self.said}")
            if line is None:
                pytest.fail(f"the client exited before a {kind!r}; it said:\n{self.said}")
            self.seen.append(line)
            item: dict[str, Any] = json.loads(line)
            if item["kind"] == "retry":
                continue
            assert item["kind"] == kind, f"expected {kind!r}; the client said:\n{self.said}"
            return item

    @property
    def said(self) -> str:
        return "".join(self.seen)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def node_client(tmp_path: Path) -> Iterator[Callable[[Api], NodeClient]]:
    script = tmp_path / "listen.mjs"
    script.write_text(SCRIPT % {"module": json.dumps((CLIENT / "eventq.js").as_uri())})
    started: list[NodeClient] = []

    def start(api: Api, transport: str) -> NodeClient:
        client = NodeClient(script, api, transport)
        started.append(client)
        return client

    yield start
    for client in started:
        client.kill()
    close_for_thread()


@pytest.mark.parametrize("transport", ["auto", "poll"])
def test_client_resumes_a_lost_queue_on_the_real_server(
    api, server: ServerProcess, node_client, transport: str
):
    """With an event stream (the default: Node's fetch reads a body as it
    comes) and with long polls."""
    alice: Api = api()
    user = alice.user
    streams_before = server.stats()["poll_paths"]["stream"]

    producer = server.producer()

    def note(n: int) -> None:
        send_event(user.realm_id, {"type": "note", "n": n}, [user.user_id], config=producer)

    client = node_client(alice, transport)
    queue_id = client.next("state")["queueId"]
    note(0)
    note(1)
    got = [e["n"] for e in client.next("events")["events"]]
    while len(got) < 2:
        got += [e["n"] for e in client.next("events")["events"]]
    assert got == [0, 1]

    # The queue is lost; events go on meanwhile.
    server.wait_parked(user.user_id, queue_id)
    assert alice.request("DELETE", "events", queue_id=queue_id).status_code == 200
    note(2)
    note(3)
    reset = client.next("reset")["reset"]
    assert reset["reloadState"] is False, client.said
    assert reset["reason"] == "queue_lost"
    assert reset["queueId"] != queue_id
    while len(got) < 4:
        got += [e["n"] for e in client.next("events")["events"]]
    assert got == [0, 1, 2, 3], client.said

    # close() deleted the new queue before the process ended.
    assert client.next("closed")["queueId"] is None
    assert client.proc.wait(timeout=30) == 0, client.said
    assert server.user_queues(user.user_id) == [], client.said
    # Its queues were read as streams (one for each queue at least), or never.
    streams = server.stats()["poll_paths"]["stream"] - streams_before
    assert streams >= 2 if transport == "auto" else streams == 0
