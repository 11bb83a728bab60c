"""Schema migrations (placeholder until the alembic migrations land)."""

import sqlalchemy as sa

from cyborg.db import models


def upgrade(url, revision='head'):
    engine = sa.create_engine(url)
    models.Base.metadata.create_all(engine)
    engine.dispose()
