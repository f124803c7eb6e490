"""The store's schema, as numbered migrations in both dialects, applied in order at start-up.

A store records the number of the last migration applied (`schema_version`); a process applies
the ones after it, each in its own transaction, and refuses a store whose number is newer than
the last it knows (an older release started against a newer schema).
"""

from __future__ import annotations

from dataclasses import dataclass

from mirrorgate.store.records import MigrationError

__all__ = ["LATEST", "MIGRATIONS", "Migration", "newer_than_known"]


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sqlite: str
    postgres: str

    def failed(self, error: BaseException) -> MigrationError:
        return MigrationError(f"the state store's migration {self.version} ({self.name}) could "
                              f"not run: {type(error).__name__}: {error}")


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1, "facts, verdicts and the pull log",
        sqlite="""
            CREATE TABLE change_counter (value INTEGER NOT NULL);
            INSERT INTO change_counter VALUES (0);
            CREATE TABLE facts (
                kind TEXT NOT NULL, key TEXT NOT NULL, value TEXT, seq INTEGER NOT NULL,
                PRIMARY KEY (kind, key));
            CREATE INDEX facts_by_seq ON facts (seq);
            CREATE TABLE verdicts (
                name TEXT NOT NULL, version TEXT NOT NULL, integrity TEXT NOT NULL,
                verdict TEXT NOT NULL, evidence TEXT NOT NULL, compared_with TEXT,
                generation TEXT NOT NULL, seq INTEGER NOT NULL,
                PRIMARY KEY (name, version, integrity));
            CREATE INDEX verdicts_by_seq ON verdicts (seq);
            CREATE TABLE pulls (
                id INTEGER PRIMARY KEY, client TEXT NOT NULL, name TEXT NOT NULL,
                version TEXT NOT NULL, integrity TEXT NOT NULL, source TEXT NOT NULL,
                at REAL NOT NULL, request_id TEXT NOT NULL);
            CREATE INDEX pulls_by_version ON pulls (name, version, at);
            CREATE INDEX pulls_by_client ON pulls (client, at);
            CREATE INDEX pulls_by_time ON pulls (at);
        """,
        postgres="""
            CREATE SEQUENCE change_counter;
            CREATE TABLE facts (
                kind TEXT NOT NULL, key TEXT NOT NULL, value TEXT, seq BIGINT NOT NULL,
                PRIMARY KEY (kind, key));
            CREATE INDEX facts_by_seq ON facts (seq);
            CREATE TABLE verdicts (
                name TEXT NOT NULL, version TEXT NOT NULL, integrity TEXT NOT NULL,
                verdict TEXT NOT NULL, evidence TEXT NOT NULL, compared_with TEXT,
                generation TEXT NOT NULL, seq BIGINT NOT NULL,
                PRIMARY KEY (name, version, integrity));
            CREATE INDEX verdicts_by_seq ON verdicts (seq);
            CREATE TABLE pulls (
                id BIGSERIAL PRIMARY KEY, client TEXT NOT NULL, name TEXT NOT NULL,
                version TEXT NOT NULL, integrity TEXT NOT NULL, source TEXT NOT NULL,
                at TIMESTAMPTZ NOT NULL, request_id TEXT NOT NULL);
            CREATE INDEX pulls_by_version ON pulls (name, version, at);
            CREATE INDEX pulls_by_client ON pulls (client, at);
            CREATE INDEX pulls_by_time ON pulls (at);
        """),
    # refused pulls folded per (client, name, version, rule, hour): one client repeating a
    # refused pull wrote a row a pull (1,100 to 2,400 a second), and the exposure warning,
    # reading a version's oldest rows, found refusals where the build's served pull was
    # (docs/exposure.md); the refusals already logged are folded on the way
    Migration(
        2, "refused pulls counted per hour, apart from the served ones",
        sqlite="""
            CREATE TABLE refusals (
                client TEXT NOT NULL, name TEXT NOT NULL, version TEXT NOT NULL,
                rule TEXT NOT NULL, hour REAL NOT NULL, integrity TEXT NOT NULL,
                first_at REAL NOT NULL, last_at REAL NOT NULL, pulls INTEGER NOT NULL,
                request_id TEXT NOT NULL, until_at REAL,
                PRIMARY KEY (client, name, version, rule, hour));
            CREATE INDEX refusals_by_version ON refusals (name, version, hour);
            CREATE INDEX refusals_by_time ON refusals (hour);
            INSERT INTO refusals
                SELECT client, name, version, substr(source, 9),
                       CAST(at / 3600 AS INTEGER) * 3600.0, min(integrity), min(at), max(at),
                       count(*), min(request_id), NULL
                FROM pulls WHERE source LIKE 'refused:%'
                GROUP BY client, name, version, substr(source, 9),
                         CAST(at / 3600 AS INTEGER);
            DELETE FROM pulls WHERE source LIKE 'refused:%';
        """,
        postgres="""
            CREATE TABLE refusals (
                client TEXT NOT NULL, name TEXT NOT NULL, version TEXT NOT NULL,
                rule TEXT NOT NULL, hour TIMESTAMPTZ NOT NULL, integrity TEXT NOT NULL,
                first_at TIMESTAMPTZ NOT NULL, last_at TIMESTAMPTZ NOT NULL,
                pulls BIGINT NOT NULL, request_id TEXT NOT NULL, until_at TIMESTAMPTZ,
                PRIMARY KEY (client, name, version, rule, hour));
            CREATE INDEX refusals_by_version ON refusals (name, version, hour);
            CREATE INDEX refusals_by_time ON refusals (hour);
            INSERT INTO refusals
                SELECT client, name, version, substr(source, 9),
                       to_timestamp(floor(extract(epoch FROM at) / 3600) * 3600),
                       min(integrity), min(at), max(at), count(*), min(request_id), NULL
                FROM pulls WHERE source LIKE 'refused:%'
                GROUP BY client, name, version, substr(source, 9),
                         floor(extract(epoch FROM at) / 3600);
            DELETE FROM pulls WHERE source LIKE 'refused:%';
        """),
    # what a bill of materials needs of a pull (`mirrorgate sbom`, docs/licenses.md): the
    # client's name apart from its CI identity, that identity's fields, the sha1 beside the
    # integrity, the declared license and the verdict it was served under; older rows have
    # none of them (NULL), and are listed without. Served pulls only: a refused pull installed
    # nothing, and is a count in `refusals` (migration 2)
    Migration(
        3, "the pull log's components and CI identities",
        sqlite="""
            ALTER TABLE pulls ADD COLUMN client_name TEXT;
            ALTER TABLE pulls ADD COLUMN repository TEXT;
            ALTER TABLE pulls ADD COLUMN ref TEXT;
            ALTER TABLE pulls ADD COLUMN workflow TEXT;
            ALTER TABLE pulls ADD COLUMN sha1 TEXT;
            ALTER TABLE pulls ADD COLUMN license TEXT;
            ALTER TABLE pulls ADD COLUMN verdict TEXT;
        """,
        postgres="""
            ALTER TABLE pulls ADD COLUMN client_name TEXT, ADD COLUMN repository TEXT,
                ADD COLUMN ref TEXT, ADD COLUMN workflow TEXT, ADD COLUMN sha1 TEXT,
                ADD COLUMN license TEXT, ADD COLUMN verdict TEXT;
        """),
)
LATEST = MIGRATIONS[-1].version


def newer_than_known(found: int, where: str) -> MigrationError:
    return MigrationError(f"the state store at {where} is at schema version {found}, newer than "
                          f"this mirrorgate knows ({LATEST}): a newer release migrated it; run "
                          "that release, or restore the store from before the upgrade")
