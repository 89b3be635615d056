"""The nginx site in front of the shards, generated from the sharding config
(`eventq sharding nginx`), after the tornado upstreams and
`zulip-include-frontend/app` of Zulip's puppet nginx configuration.

- An upstream per shard, with keepalive; a realm that names hosts gets an
  upstream over its shards; everything else goes to any shard, one user's
  requests sticking to one (by their Authorization header).
- The long poll (`/api/v1/events`, `/json/events`) is never buffered and may
  wait far longer than the heartbeat; those requests are marked so that the
  shard may answer a GET for a user it does not own with X-Accel-Redirect to
  `/internal/eventq/<shard>/...`, an `internal` location only nginx itself
  can reach.
- `/api/internal/` and `/metrics` answer loopback callers only.
"""

from __future__ import annotations

from generation.sharding import ShardMap
from server.http.forward import ACCEL_HEADER, ACCEL_PREFIX, FORWARDED_HEADER

# Zulip's: idle connections kept to each upstream.
KEEPALIVE = 10000
# Zulip's proxy_read_timeout for the long poll: far above the 45-55 s
# heartbeat, so nginx never cuts a live poll.
LONGPOLL_READ_TIMEOUT_SECS = 1200

_LOOPBACK_ONLY = ("allow 127.0.0.1;", "allow ::1;", "deny all;")
UNAVAILABLE_BODY = (
    '{"result":"error","msg":"The server is restarting; try again shortly",'
    '"code":"SHARD_UNAVAILABLE"}'
)
# nginx's own refusals of a request it will not pass on, as the API's JSON
# errors with the codes a shard gives for the same request
# (server/http/httpserver.py, handlers/base.py): nginx status -> (status, code, msg).
# 494 is nginx's internal "request header too large" (a header line past a
# buffer of large_client_header_buffers), which it would send as 400.
REFUSED_PREFIX = "/eventq-refused/"
# 404: an internal location (X-Accel-Redirect's, these) asked for from outside.
REFUSALS = {
    400: (400, "BAD_REQUEST", "Malformed HTTP request"),
    # deny: /api/internal/ and /metrics from outside (a shard's own 403s
    # pass through as they are: error_page covers nginx's answers only).
    403: (403, "BAD_REQUEST", "Access denied"),
    404: (404, "NOT_FOUND", "Invalid API path"),
    413: (413, "REQUEST_TOO_LARGE", "Request body too large"),
    414: (414, "URI_TOO_LONG", "Request URI too long"),
    494: (431, "HEADERS_TOO_LARGE", "Request headers too large"),
    # 501: a Transfer-Encoding nginx does not know.
    501: (501, "BAD_REQUEST", "Transfer-Encoding not supported"),
    505: (505, "BAD_REQUEST", "HTTP version not supported"),
}


def shard_upstream(name: str) -> str:
    return f"eventq_shard_{name}"


def _upstream(name: str, servers: list[str], *, sticky: bool) -> list[str]:
    lines = [f"upstream {name} {{"]
    if sticky:
        # One client's requests to one shard: an API client by its
        # credentials, a browser by its session (the other is empty).
        lines.append("    hash $http_authorization$cookie_eventq_session consistent;")
    lines += [f"    server {server};" for server in servers]
    lines += [f"    keepalive {KEEPALIVE};", "}", ""]
    return lines


def _headers(*, accel: bool) -> list[str]:
    lines = [
        "proxy_http_version 1.1;",
        'proxy_set_header Connection "";',
        "proxy_set_header Host $http_host;",
        "proxy_set_header X-Real-IP $remote_addr;",
        # Whether the browser's connection is TLS: sessions' cookies are then Secure.
        "proxy_set_header X-Forwarded-Proto $scheme;",
        "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
        # Only shards forward to shards; a client's copy is dropped.
        f'proxy_set_header {FORWARDED_HEADER} "";',
    ]
    # Empty: nginx sends no such header (and drops a client's).
    value = "on" if accel else '""'
    lines.append(f"proxy_set_header {ACCEL_HEADER} {value};")
    return lines


def _location(match: str, body: list[str]) -> list[str]:
    return [f"    location {match} {{", *(f"        {line}" for line in body), "    }", ""]


def _refusal_pages() -> list[str]:
    """error_page locations giving nginx's own refusals as JSON errors (only
    for responses nginx makes: a shard's answers pass through as they are)."""
    lines = [
        "    # Requests nginx refuses itself (a head past its buffers, a body past",
        "    # client_max_body_size, a request that is not HTTP): the API's JSON error.",
    ]
    # URIs, not named locations: nginx cannot redirect a request whose
    # request line it could not read to a named location ("empty URI").
    for status, (answer, code, msg) in REFUSALS.items():
        body = f'{{"result":"error","msg":"{msg}","code":"{code}"}}'
        lines += [
            # "=status": else nginx answers a 494 as 400, whatever we return.
            f"    error_page {status} ={answer} {REFUSED_PREFIX}{status};",
            f"    location = {REFUSED_PREFIX}{status} {{",
            "        internal;",
            "        default_type application/json;",
            f"        return {answer} '{body}';",
            "    }",
        ]
    return [*lines, ""]


def render(
    shard_map: ShardMap,
    *,
    listen: str = "",
    server_name: str = "",
    max_body_bytes: int = 1024 * 1024,
) -> str:
    """The site: upstreams, the host map and one server block, for nginx's
    `http` context (e.g. /etc/nginx/sites-enabled/eventq)."""
    listen = listen or shard_map.nginx_listen or "80"
    server_name = server_name or shard_map.nginx_server_name or "_"
    shards = shard_map.shards
    lines = [
        f"# eventq: generated by `eventq sharding nginx` from {shard_map.source}.",
        "# Regenerate it after every change to the sharding config; do not edit.",
        "",
    ]
    for shard in shards.values():
        lines += _upstream(shard_upstream(shard.name), [shard.address], sticky=False)
    lines += _upstream(
        "eventq_any", [shard.address for shard in shards.values()], sticky=len(shards) > 1
    )
    targets: dict[int, str] = {}
    for realm_id in sorted(set(shard_map.hosts.values())):
        names = shard_map.realms[realm_id]
        if len(names) == 1:
            targets[realm_id] = shard_upstream(names[0])
            continue
        targets[realm_id] = f"eventq_realm_{realm_id}"
        lines += _upstream(targets[realm_id], [shards[name].address for name in names], sticky=True)
    lines += ["map $host $eventq_upstream {", "    hostnames;", "    default eventq_any;"]
    lines += [f"    {host} {targets[realm]};" for host, realm in sorted(shard_map.hosts.items())]
    lines += ["}", ""]
    default = shard_upstream(shard_map.default_shard)
    longpoll = [
        "proxy_buffering off;",
        f"proxy_read_timeout {LONGPOLL_READ_TIMEOUT_SECS}s;",
        "proxy_send_timeout 60s;",
    ]
    # The realms' own host names are this site's too.
    server_names = [
        server_name,
        *(h for h in sorted(shard_map.hosts) if h not in server_name.split()),
    ]
    lines += [
        "server {",
        f"    listen {listen};",
        f"    server_name {' '.join(server_names)};",
        f"    client_max_body_size {max_body_bytes};",
        "",
        "    # A shard that is down or restarting: the API's JSON error, which",
        "    # clients retry with the same queue (nginx's own page would not parse).",
        "    error_page 502 504 = @eventq_unavailable;",
        "    location @eventq_unavailable {",
        "        default_type application/json;",
        "        add_header Retry-After 1 always;",
        f"        return 502 '{UNAVAILABLE_BODY}';",
        "    }",
        "",
    ]
    lines += _refusal_pages()
    lines += [
        "    # The long poll and the event stream, unbuffered (each write passes at",
        "    # once); a shard may hand a GET to its owner (X-Accel-Redirect).",
    ]
    lines += _location(
        r"~ ^/(api/v1|json)/events$",
        ["proxy_pass http://$eventq_upstream;", *longpoll, *_headers(accel=True)],
    )
    lines.append("    # Register: the receiving shard forwards it to the owner itself.")
    lines += _location(
        r"~ ^/(api/v1|json)/register$",
        ["proxy_pass http://$eventq_upstream;", *_headers(accel=False)],
    )
    lines.append("    # Where X-Accel-Redirect leads: only nginx itself can enter.")
    lines += _location(
        rf"~ ^{ACCEL_PREFIX}([A-Za-z0-9_-]+)(/.*)$",
        [
            "internal;",
            "proxy_pass http://eventq_shard_$1$2$is_args$args;",
            *longpoll,
            *_headers(accel=False),
        ],
    )
    lines.append("    # Operators' endpoints, from this machine only (each shard has its own).")
    lines += _location(
        "/api/internal/", [*_LOOPBACK_ONLY, f"proxy_pass http://{default};", *_headers(accel=False)]
    )
    lines += _location(
        "= /metrics", [*_LOOPBACK_ONLY, f"proxy_pass http://{default};", *_headers(accel=False)]
    )
    lines.append("    # Everything else (server_settings, messages, ...): any shard serves it.")
    lines += _location("/", ["proxy_pass http://$eventq_upstream;", *_headers(accel=False)])
    lines[-1] = "}"  # closes the server block, in place of the last blank line
    return "\n".join(lines) + "\n"
