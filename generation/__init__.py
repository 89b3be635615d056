"""Event generation: the notice contract between producers and the server.

Producers describe an event and the users who must receive it; the notice
`{"event": {...}, "users": [...], "realm_id": int}` carries it to the server.
"""
