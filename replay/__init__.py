"""Spark offset replay: rebuilds commit timelines from the offsets topic."""
