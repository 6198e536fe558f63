"""The broker's default ports (README "Ports"): kept apart so the command line can name them
without importing the server."""

DEFAULT_HTTP_PORT = 7080  # HTTP/JSON tenant API, /healthz; the sparkbroker://HOST:PORT URL
DEFAULT_GRPC_PORT = 7081  # gRPC tenant API (status, configure, Python clients)
DEFAULT_METRICS_PORT = 7082  # Prometheus /metrics (docs/metrics.md)
