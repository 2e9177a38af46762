"""Batch push mode: the subscription's optional ``batch`` object, one column per field.

All three null means one record per POST (every existing subscription stays as it was).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("subscriptions") as t:
        t.add_column(sa.Column("batch_max_records", sa.Integer(), nullable=True))
        t.add_column(sa.Column("batch_max_bytes", sa.Integer(), nullable=True))
        t.add_column(sa.Column("batch_linger_ms", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("subscriptions") as t:
        t.drop_column("batch_linger_ms")
        t.drop_column("batch_max_bytes")
        t.drop_column("batch_max_records")
