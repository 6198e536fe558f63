"""Every input format, read by one loader (files.py: YAML or JSON, one-line errors).

static.py        agents and frameworks (`fill`, `solve`), into a `Cluster`
batch.py         job batches: agents, groups of Spark jobs, admission (`sim`, `whatif`, `batch`)
trace.py         trace scenarios (`kind: trace`) into a `TraceWorkload`; trace_csv.py reads
                 their machine and task CSV files, google.py draws their Google-like cluster
                 and jobs
kind.py          which of the three a file is
cluster_file.py  the embedded cluster's agents (`serve`)
spark_demand.py  a Spark conf's per-executor demand and executor counts (also the shim's)
"""
