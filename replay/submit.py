"""Entry point for ``spark-submit replay/submit.py --out DIR [--subscription S] [--since T] [--until T]``.

Settings come from the environment (FERRY_KAFKA_BOOTSTRAP, FERRY_OFFSETS_TOPIC, FERRY_KAFKA_CONFIG);
the master comes from spark-submit (``--master``). The ferry package must be importable by the
executors (``pip install ferry`` in the image, or ``--py-files``).
"""

from __future__ import annotations

import argparse
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("SPARK_SUBMIT", "1")
    from ferry import config
    from ferry.replay import job

    ap = argparse.ArgumentParser(prog="spark-submit replay/submit.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--subscription")
    ap.add_argument("--since")
    ap.add_argument("--until")
    a = ap.parse_args()
    sys.exit(job.main(config.load(), a.out, a.subscription, a.since, a.until))
