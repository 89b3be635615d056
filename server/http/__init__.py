"""The HTTP layer: eventq's own HTTP/1.1 connections and Tornado's server, request
parameters, authentication and sessions, rate limits, responses, and forwarding to
the shard that holds a user's queues."""
