"""Adaptive concurrency: a subscription's optional ``concurrency`` object (docs/delivery.md).

Null means a fixed ``max_in_flight`` (every existing subscription stays as it was).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("subscriptions") as t:
        t.add_column(sa.Column("concurrency", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("subscriptions") as t:
        t.drop_column("concurrency")
