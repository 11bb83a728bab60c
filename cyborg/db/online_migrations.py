"""Online data migrations: data fixed in small batches while services run.

An alembic migration changes the schema and runs before the new code
starts. Some rows also need their data filled in or normalised, which the
new code can live without for a while: that is done here, in short
transactions, with the services up, by ``cyborg-dbsync
online_data_migrations``. ``cyborg-status upgrade check`` warns while any
of them has rows left.

Each migration is a function ``(context, max_count) -> (found, done)``: it
looks at no more than ``max_count`` rows that need it, migrates them with a
compare-and-set (a row that changed meanwhile is left alone), and says how
many it found and how many it migrated. Each has a companion that counts
the rows still to do on a plain connection, for the upgrade check. A
migration stays in ``MIGRATIONS`` for at least one release after the
schema migration that made it necessary, so that every deployment has run
it before it is dropped.
"""

import logging
import typing

import sqlalchemy as sa

from cyborg import states
from cyborg.db import models
from cyborg.db.api import profile_renames

LOG = logging.getLogger(__name__)

ARQ = models.ExtendedAcceleratorRequest

# Rows per transaction when no --max-count limits a run: short enough not
# to hold locks that a bind waits for.
BATCH_SIZE = 50


# -- the migrations ----------------------------------------------------------

def _bind_start_unknown():
    return sa.and_(ARQ.state == states.BIND_STARTED,
                   ARQ.bind_started_at.is_(None))


def fill_bind_started_at(context, max_count):
    """Give ``bind_started_at`` to BindStarted ARQs that have none.

    Revision e8f1a2b3c4d5 added the column, NULL in existing rows. A
    conductor's recovery pass fails binds whose ``bind_started_at`` is older
    than ``[conductor] bind_timeout``; a BindStarted ARQ without one is
    never timed out and stays BindStarted for ever. Its last change of
    state was the move to BindStarted, so ``updated_at`` (or
    ``created_at`` if it was never updated) is when its bind started;
    ``updated_at`` is kept as it was.

    An honest note: only ARQs that were being bound while the schema was
    upgraded need this, so on most deployments it finds nothing.
    """
    with context.db.writer(context) as session:
        ids = session.execute(
            sa.select(ARQ.id).where(_bind_start_unknown())
            .order_by(ARQ.id).limit(max_count)).scalars().all()
        if not ids:
            return 0, 0
        done = session.execute(
            sa.update(ARQ).where(ARQ.id.in_(ids), _bind_start_unknown())
            .values(bind_started_at=sa.func.coalesce(ARQ.updated_at,
                                                     ARQ.created_at),
                    updated_at=ARQ.updated_at)
            .execution_options(synchronize_session=False)).rowcount
        return len(ids), done


def bind_started_at_unknown(connection):
    """How many ARQs ``fill_bind_started_at`` has left."""
    return connection.scalar(sa.select(sa.func.count()).select_from(ARQ)
                             .where(_bind_start_unknown()))


# -- the list and how it runs ----------------------------------------------

class OnlineMigration(typing.NamedTuple):
    name: str
    # (context, max_count) -> (found, done)
    migrate: typing.Callable
    # (connection) -> rows left to migrate
    pending: typing.Callable


MIGRATIONS = (
    OnlineMigration('fill_bind_started_at', fill_bind_started_at,
                    bind_started_at_unknown),
    # Profiles whose custom names became standard ones, once the
    # providers publish the standard names (profile_renames).
    OnlineMigration('standard_profile_names', profile_renames.rename,
                    profile_renames.pending),
)


class Outcome:
    """What a run did to one migration."""

    def __init__(self, name):
        self.name = name
        self.found = 0
        self.done = 0
        self.failed = False
        self.left = None

    def __repr__(self):
        return 'Outcome(%s: found %d, done %d%s)' % (
            self.name, self.found, self.done,
            ', failed' if self.failed else '')


def run(context, max_count=None, migrations=None, batch_size=BATCH_SIZE):
    """Run ``migrations`` in batches; a list of ``Outcome`` in their order.

    Without ``max_count`` every migration runs batch after batch until a
    round in which none of them migrates a row. With it, no more than
    ``max_count`` rows are migrated in all. A migration that raises is
    logged and not called again in this run; the others go on, since their
    work may be what the failed one needs.
    """
    migrations = MIGRATIONS if migrations is None else migrations
    outcomes = {m.name: Outcome(m.name) for m in migrations}
    budget = max_count
    while budget is None or budget > 0:
        migrated = 0
        for migration in migrations:
            outcome = outcomes[migration.name]
            if outcome.failed or (budget is not None and budget <= 0):
                continue
            count = batch_size if budget is None else min(batch_size,
                                                          budget)
            try:
                found, done = migration.migrate(context, count)
            except Exception:
                LOG.exception('Online data migration %s failed',
                              migration.name)
                outcome.failed = True
                continue
            outcome.found += found
            outcome.done += done
            migrated += done
            if budget is not None:
                budget -= done
        if not migrated:
            break
    return list(outcomes.values())


def count_left(connection, outcomes, migrations=None):
    """Fill in ``left`` of each outcome (None where counting failed)."""
    migrations = MIGRATIONS if migrations is None else migrations
    by_name = {m.name: m for m in migrations}
    for outcome in outcomes:
        try:
            outcome.left = by_name[outcome.name].pending(connection)
        except Exception:
            LOG.exception('Could not count the rows online data migration '
                          '%s has left', outcome.name)
            outcome.failed = True
    return outcomes


def pending(connection, migrations=None):
    """``{name: rows left}`` of every migration with rows left."""
    migrations = MIGRATIONS if migrations is None else migrations
    counts = ((m.name, m.pending(connection)) for m in migrations)
    return {name: left for name, left in counts if left}


def table(outcomes):
    """The outcomes as a text table, one row per migration."""
    header = ('Migration', 'Found', 'Migrated', 'Left')
    rows = [(o.name, str(o.found), str(o.done),
             'error' if o.failed else
             '?' if o.left is None else str(o.left)) for o in outcomes]
    widths = [max(len(r[i]) for r in [header, *rows])
              for i in range(len(header))]
    rule = '+' + '+'.join('-' * (w + 2) for w in widths) + '+'

    def line(cells):
        return '|' + '|'.join(
            ' %s ' % (c.ljust(w) if i == 0 else c.rjust(w))
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))) + '|'

    return '\n'.join([rule, line(header), rule, *map(line, rows), rule])
