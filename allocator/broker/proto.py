"""The tenant API's generated protobuf and gRPC modules, (re)generated from tenant.proto.

The generated code is not committed: it is produced by the installed grpcio-tools, so it
always matches the installed protobuf runtime. `make install` generates it; importing this
module regenerates it when it is missing or older than the .proto.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

PROTO = Path(__file__).with_name("tenant.proto")
ROOT = PROTO.parents[2]  # the directory that holds the `allocator` package
GENERATED = (PROTO.with_name("tenant_pb2.py"), PROTO.with_name("tenant_pb2_grpc.py"))


def _stale() -> bool:
    source = PROTO.stat().st_mtime
    return any(not p.exists() or p.stat().st_mtime < source for p in GENERATED)


def generate() -> None:
    from grpc_tools import protoc  # build-time tool; only needed when regenerating

    include = Path(protoc.__file__).with_name("_proto")
    relative = PROTO.relative_to(ROOT)
    code = protoc.main(
        [
            "protoc",
            f"-I{ROOT}",
            f"-I{include}",
            f"--python_out={ROOT}",
            f"--grpc_python_out={ROOT}",
            str(relative),
        ]
    )
    if code != 0:
        raise RuntimeError(f"protoc failed on {PROTO} (exit {code})")


def _load() -> tuple[ModuleType, ModuleType]:
    if _stale():
        generate()
    return (
        importlib.import_module("allocator.broker.tenant_pb2"),
        importlib.import_module("allocator.broker.tenant_pb2_grpc"),
    )


pb, pb_grpc = _load()

if __name__ == "__main__":
    generate()
