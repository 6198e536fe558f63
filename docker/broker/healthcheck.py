"""Container health: the broker's /healthz on its own port (exit 0 healthy, 1 not).

With FAIRBROKER_HA a standby answers 503 `{"standby": true}` by design: the container is
healthy (it serves, and takes over when elected); load balancers use /healthz itself, 200 on
the leader alone."""

import json
import os
import sys
import urllib.error
import urllib.request

port = os.environ.get("FAIRBROKER_PORT", "7080")
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=4) as answer:
        sys.exit(0 if answer.status == 200 else 1)
except urllib.error.HTTPError as error:
    try:
        standby = json.loads(error.read() or b"{}").get("standby") is True
    except ValueError:
        standby = False
    if standby and os.environ.get("FAIRBROKER_HA"):
        sys.exit(0)
    print(f"unhealthy: HTTP {error.code}", file=sys.stderr)
    sys.exit(1)
except (OSError, urllib.error.URLError) as error:
    print(f"unhealthy: {error}", file=sys.stderr)
    sys.exit(1)
