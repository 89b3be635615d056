"""Event generation: the notice contract between producers and the server.

Producers describe an event and the users who must receive it; the notice
`{"event": {...}, "users": [...], "realm_id": int}` carries it to the server.
"""

# Before `generation.notice`, which a build compiles, is imported: a stale
# compiled module runs from its source (queues/compiled.py). The only import
# of `queues` here.
from queues import compiled as _compiled

_compiled.install()
