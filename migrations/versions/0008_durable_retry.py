"""Durable retries: a subscription's ``retry.mode`` (docs/delivery.md#durable-retries).

Null means ``memory`` (every existing subscription stays as it was).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("subscriptions") as t:
        t.add_column(sa.Column("retry_mode", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("subscriptions") as t:
        t.drop_column("retry_mode")
