-- Custom profile fields (Zulip's CustomProfileField and
-- CustomProfileFieldValue): the fields a realm's administrators define, and
-- each user's value of them. The rules (who may change what, each type's
-- values, the options of a list) are the actions'
-- (generation/actions/profile_fields/); the checks here are Zulip's
-- lengths and what keeps a row meaningful.

-- A realm's fields. `field_type` is Zulip's number: 1 short text, 2 long
-- text, 3 list of options (SELECT), 4 date, 5 link, 6 users, 7 external
-- account, 8 pronouns. `field_data` is what Zulip stores: the JSON text of
-- the options (SELECT) or of the account's subtype and URL pattern
-- (EXTERNAL_ACCOUNT), and '' for every other type. A new field's `order`
-- is its id (Zulip's), a reorder sets 0..n-1; ties are shown by id.
CREATE TABLE custom_profile_fields (
    id                         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    realm_id                   bigint NOT NULL REFERENCES realms (id),
    name                       text NOT NULL CHECK (length(name) BETWEEN 1 AND 40),
    hint                       text NOT NULL DEFAULT '' CHECK (length(hint) <= 80),
    field_type                 smallint NOT NULL CHECK (field_type BETWEEN 1 AND 8),
    field_data                 text NOT NULL DEFAULT '' CHECK (length(field_data) <= 100000),
    "order"                    bigint NOT NULL,
    display_in_profile_summary boolean NOT NULL DEFAULT false,
    required                   boolean NOT NULL DEFAULT false,
    editable_by_user           boolean NOT NULL DEFAULT true
);

-- Zulip's unique (realm, name): the same label twice is refused, letter
-- case counts.
CREATE UNIQUE INDEX custom_profile_fields_name ON custom_profile_fields (realm_id, name);

-- A user's value of a field, as Zulip stores it: text whatever the type
-- (the users of a USER field as a JSON list, "[3,7]"), and for the text
-- types (short and long) the HTML it renders to, written with the value
-- so that register and the event carry the same. Deleting a field deletes
-- its values (Zulip's cascade). 25,000 characters: a USER value of 1,000
-- users (the actions' bound) with ids of up to 19 digits, and commas.
CREATE TABLE custom_profile_field_values (
    user_id        bigint NOT NULL REFERENCES users (id),
    field_id       bigint NOT NULL REFERENCES custom_profile_fields (id) ON DELETE CASCADE,
    value          text NOT NULL CHECK (length(value) <= 25000),
    rendered_value text,
    PRIMARY KEY (user_id, field_id)
);

-- Deleting a field, and removing a list's options, read the values by field.
CREATE INDEX custom_profile_field_values_field ON custom_profile_field_values (field_id);
