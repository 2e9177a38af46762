"""Alembic migrations of the metadata database."""
