-- The realm's configuration that Zulip's clients read at start (the
-- realm_config area): custom emoji, linkifiers, code playgrounds and the
-- domains new users' e-mail addresses may have. Each is changed by its
-- endpoints (server/handlers/realm_config.py), in one transaction with its
-- event, and read back whole by register. The row limits per realm are the
-- actions' (generation/actions/realm_config/), which say why.

-- A custom emoji. The image is stored here, not in a file: several shards on
-- several hosts serve it, and the row, its image and the `realm_emoji` event
-- commit together or not at all. A deleted emoji is deactivated, not
-- removed, as in Zulip: messages and reactions keep showing it, and its
-- name may be taken again.
CREATE TABLE realm_emoji (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    realm_id     bigint NOT NULL REFERENCES realms (id),
    -- Zulip's rule: lower-case letters, digits, '.', '-' and '_', ending
    -- with a letter or digit.
    name         text NOT NULL CHECK (name ~ '^[0-9a-z.\-_]*[0-9a-z]$' AND length(name) <= 100),
    author_id    bigint NOT NULL REFERENCES users (id),
    date_created timestamptz NOT NULL DEFAULT now(),
    -- The name it is served under (`source_url`): random, so that images
    -- cannot be enumerated, with the extension of its type.
    file_name    text NOT NULL UNIQUE,
    content_type text NOT NULL
                 CHECK (content_type IN ('image/png', 'image/gif', 'image/jpeg', 'image/webp')),
    image        bytea NOT NULL CHECK (octet_length(image) BETWEEN 1 AND 524288),
    deactivated  boolean NOT NULL DEFAULT false
);

CREATE UNIQUE INDEX realm_emoji_realm_name ON realm_emoji (realm_id, name) WHERE NOT deactivated;
CREATE INDEX realm_emoji_realm ON realm_emoji (realm_id, id);

-- A linkifier: a regular expression whose matches in messages and topics
-- clients turn into links made from an RFC 6570 URL template. Applied in
-- `position` order (Zulip's `order`), new ones last.
CREATE TABLE realm_linkifiers (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    realm_id     bigint NOT NULL REFERENCES realms (id),
    pattern      text NOT NULL CHECK (length(pattern) BETWEEN 1 AND 1000),
    url_template text NOT NULL CHECK (length(url_template) BETWEEN 1 AND 1000),
    position     integer NOT NULL DEFAULT 0,
    UNIQUE (realm_id, pattern)
);

-- A code playground: where a code block of a language can be opened.
CREATE TABLE realm_playgrounds (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    realm_id          bigint NOT NULL REFERENCES realms (id),
    name              text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    pygments_language text NOT NULL
                      CHECK (pygments_language ~ '^[a-z0-9_+\-./#]+$' AND length(pygments_language) <= 40),
    url_template      text NOT NULL CHECK (length(url_template) BETWEEN 1 AND 1000),
    UNIQUE (realm_id, pygments_language, name)
);

-- A domain of the realm (Zulip's `RealmDomain`): lower case, at most 255
-- characters (DNS).
CREATE TABLE realm_domains (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    realm_id         bigint NOT NULL REFERENCES realms (id),
    domain           text NOT NULL CHECK (length(domain) BETWEEN 1 AND 255 AND domain = lower(domain)),
    allow_subdomains boolean NOT NULL DEFAULT false,
    UNIQUE (realm_id, domain)
);
