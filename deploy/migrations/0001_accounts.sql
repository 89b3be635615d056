-- Realms (organizations) and their users, with hashed API keys.
-- Applied once by `eventq db migrate`, which records it in schema_migrations.

CREATE TABLE realms (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The name a realm is addressed by on the command line (and, with
    -- sharding, the key that maps it to its shards).
    subdomain   text NOT NULL UNIQUE
                CHECK (subdomain ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    description text NOT NULL DEFAULT '',
    deactivated boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    realm_id    bigint NOT NULL REFERENCES realms (id),
    email       text NOT NULL CHECK (length(email) BETWEEN 3 AND 254 AND email LIKE '%_@_%'),
    full_name   text NOT NULL CHECK (length(full_name) BETWEEN 1 AND 100),
    -- Zulip's role numbers: 100 owner, 200 administrator, 300 moderator,
    -- 400 member, 600 guest.
    role        smallint NOT NULL DEFAULT 400 CHECK (role IN (100, 200, 300, 400, 600)),
    is_active   boolean NOT NULL DEFAULT true,
    -- An API key is 32 characters; its first 8 are a public lookup id and the
    -- whole key is stored only as a SHA-256 digest, so a dump reveals no key.
    api_key_id   text NOT NULL UNIQUE CHECK (length(api_key_id) = 8),
    api_key_hash bytea NOT NULL CHECK (length(api_key_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE UNIQUE INDEX users_realm_email ON users (realm_id, lower(email));
