"""Several Kafka clusters: a subscription's optional ``clusters`` list (docs/zones.md).

Null means ``["default"]`` (every existing subscription stays as it was).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("subscriptions") as t:
        t.add_column(sa.Column("clusters", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("subscriptions") as t:
        t.drop_column("clusters")
