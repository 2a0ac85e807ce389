-- The database behind /db (servers/PROTOCOL.md): loaded by perfctl into every `postgresql`
-- service it starts, with `psql -v participants=N`. Seed 003's participants table, N rows,
-- ids 1..N; /db?query=insert writes to registrations, so point and range reads see a fixed N.
CREATE TABLE participants (
    id            integer PRIMARY KEY,
    name          text        NOT NULL,
    email         text        NOT NULL,
    city          text        NOT NULL,
    score         integer     NOT NULL,
    registered_at timestamptz NOT NULL
);
INSERT INTO participants
SELECT i, 'participant ' || i, 'p' || i || '@example.org',
       (ARRAY['Lyon', 'Oslo', 'Quito', 'Lagos', 'Pune', 'Perth', 'Cusco'])[1 + i % 7],
       (i * 7919) % 1000, timestamptz '2024-01-01 00:00:00+00' + i * interval '1 minute'
FROM generate_series(1, :participants) AS i;

CREATE TABLE registrations (
    id             bigserial   PRIMARY KEY,
    participant_id integer     NOT NULL,
    note           text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);

-- How many participants there are, read once per connection by the servers.
CREATE TABLE perfctl_meta (participants integer NOT NULL);
INSERT INTO perfctl_meta VALUES (:participants);
ANALYZE;
