"""Container health: the broker's /healthz on its own port (exit 0 healthy, 1 not)."""

import os
import sys
import urllib.error
import urllib.request

port = os.environ.get("FAIRBROKER_PORT", "7080")
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=4) as answer:
        sys.exit(0 if answer.status == 200 else 1)
except (OSError, urllib.error.URLError) as error:
    print(f"unhealthy: {error}", file=sys.stderr)
    sys.exit(1)
