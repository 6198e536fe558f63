"""The JVM side of the shim: a Spark ExternalClusterManager for sparkbroker:// master URLs."""
