"""Container health: the broker's /healthz on its own port (exit 0 healthy, 1 not).

With FAIRBROKER_HA a standby answers 503 `{"standby": true}` by design: the container is
healthy (it serves, and takes over when elected); load balancers use /healthz itself, 200 on
the leader alone. A broker serving TLS (FAIRBROKER_TLS_CERT) is asked over HTTPS, trusting its
FAIRBROKER_TLS_CA (its certificate names 127.0.0.1)."""

import json
import os
import ssl
import sys
import urllib.error
import urllib.request

port = os.environ.get("FAIRBROKER_PORT", "7080")
context = None
scheme = "http"
if os.environ.get("FAIRBROKER_TLS_CERT"):
    scheme = "https"
    ca = os.environ.get("FAIRBROKER_TLS_CA") or os.environ["FAIRBROKER_TLS_CERT"]
    context = ssl.create_default_context(cafile=ca)
try:
    url = f"{scheme}://127.0.0.1:{port}/healthz"
    with urllib.request.urlopen(url, timeout=4, context=context) as answer:
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
