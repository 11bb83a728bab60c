"""The alembic environment of the schema: env.py, the template, versions/.

``cyborg.db.migration`` drives it from code; there is no alembic.ini.
"""
