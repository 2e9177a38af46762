"""The portal's history in the database: every replica answers from the same samples, and a
restarted portal keeps them (docs/api.md, "Health and history").

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

BIGINT_ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table(
        "history_samples",
        sa.Column("bucket", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("t_ms", sa.BigInteger, nullable=False),
        sa.Column("taken_by", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("bucket", name="pk_history_samples"),
    )
    op.create_index("ix_history_samples_t_ms", "history_samples", ["t_ms"])
    op.create_table(
        "history_points",
        sa.Column("id", BIGINT_ID, primary_key=True, autoincrement=True),
        sa.Column("bucket", sa.BigInteger, nullable=False),
        sa.Column("t_ms", sa.BigInteger, nullable=False),
        sa.Column("subscription", sa.String(63), nullable=False),
        sa.Column("cluster", sa.String(64), nullable=False),
        sa.Column("topic", sa.String(249), nullable=False),
        sa.Column("kafka_partition", sa.Integer, nullable=False),
        sa.Column("lag_records", sa.BigInteger, nullable=False),
        sa.Column("delivered", sa.BigInteger, nullable=False),
        sa.Column("retried", sa.BigInteger, nullable=False),
        sa.Column("dead_lettered", sa.BigInteger, nullable=False),
        sa.Column("stalled_s", sa.Double, nullable=False),
        sa.Column("interval_s", sa.Double, nullable=False),
        sa.Column("worker", sa.String(255), nullable=True),
        sa.Column("epoch", sa.BigInteger, nullable=True),
        sa.Column("owner_delivered", sa.BigInteger, nullable=True),
        sa.Column("owner_retried", sa.BigInteger, nullable=True),
        sa.Column("owner_dead_lettered", sa.BigInteger, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_history_points"),
    )
    op.create_index("ix_history_points_bucket", "history_points", ["bucket"])
    op.create_index("ix_history_points_t_ms", "history_points", ["t_ms"])
    op.create_index("ix_history_points_subscription_t_ms", "history_points", ["subscription", "t_ms"])


def downgrade() -> None:
    op.drop_table("history_points")
    op.drop_table("history_samples")
