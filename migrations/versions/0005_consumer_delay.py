"""Delayed consumption: a subscription's ``delay_ms`` (push no earlier than record time + N).

Zero for every existing subscription (pushed as soon as fetched, as before).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("subscriptions") as t:
        t.add_column(sa.Column("delay_ms", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("subscriptions") as t:
        t.drop_column("delay_ms")
