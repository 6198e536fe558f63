"""What the tests share, so that no test module imports another (`from support.x import y`;
pytest puts tests/ on the path):

- broker.py: a recording backend, register requests, an HTTP call, `engine_from`
- mesos.py: a recording scheduler driver, offers, and a broker on a Mesos master
- instances.py: clusters from lists, random small clusters, a two-group batch
- commands.py: `fairbroker` as a subprocess and its one-line errors
- fake_submit.py: a stand-in for spark-submit
- promtool.py: Prometheus's tools and promtool input series
- polling.py: a free loopback port, and waiting until a check holds
- sandbox.py: the executor sandbox's stand-in Spark home and a broker in this process
- spark.py: real Spark drivers and their executors
- real_mesos.py: a real Apache Mesos master and agents

tests/conftest.py keeps only pytest's hooks and fixtures.
"""
