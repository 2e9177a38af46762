"""Produce tokens: the topic patterns a ``produce`` token may write to through the gateway.

Null for admin and read tokens (every existing token stays as it was).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as t:
        t.add_column(sa.Column("topics", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as t:
        t.drop_column("topics")
