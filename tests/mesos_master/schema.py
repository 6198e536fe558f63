"""JSON -> v1 scheduler Call, as stout's protobuf parser and the master's validation do it.

Conversion (stout `protobuf::parse`): unknown fields are ignored, numbers and bools may come
as strings, an unknown enum value drops the field, bytes are base64, and a missing required
field fails with "Missing required fields: <paths>". Validation then follows
`validation::scheduler::call::validate` (src/master/validation.cpp) message for message.
Only the messages the test master reads are described; any other message passes through.
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import Any

CALL_TYPES = frozenset({
    "UNKNOWN", "SUBSCRIBE", "TEARDOWN", "ACCEPT", "DECLINE", "ACCEPT_INVERSE_OFFERS",
    "DECLINE_INVERSE_OFFERS", "REVIVE", "KILL", "SHUTDOWN", "ACKNOWLEDGE",
    "ACKNOWLEDGE_OPERATION_STATUS", "RECONCILE", "RECONCILE_OPERATIONS", "MESSAGE", "REQUEST",
    "SUPPRESS", "UPDATE_FRAMEWORK",
})  # fmt: skip
OPERATION_TYPES = frozenset({
    "UNKNOWN", "LAUNCH", "LAUNCH_GROUP", "RESERVE", "UNRESERVE", "CREATE", "DESTROY",
    "GROW_VOLUME", "SHRINK_VOLUME", "CREATE_DISK", "DESTROY_DISK",
})  # fmt: skip
FRAMEWORK_CAPABILITIES = frozenset({
    "UNKNOWN", "REVOCABLE_RESOURCES", "TASK_KILLING_STATE", "GPU_RESOURCES",
    "SHARED_RESOURCES", "PARTITION_AWARE", "MULTI_ROLE", "RESERVATION_REFINEMENT",
    "REGION_AWARE",
})  # fmt: skip

# field -> (kind, message-or-enum, repeated, required); kind: msg, str, double, int, bool,
# bytes, enum, any.
Field = tuple[str, Any, bool, bool]
_ID: dict[str, Field] = {"value": ("str", None, False, True)}


def _f(kind: str, target: Any = None, repeated: bool = False, required: bool = False) -> Field:
    return (kind, target, repeated, required)


SCHEMA: dict[str, dict[str, Field]] = {
    "Call": {
        "framework_id": _f("msg", "ID"), "type": _f("enum", CALL_TYPES),
        "subscribe": _f("msg", "Subscribe"), "accept": _f("msg", "Accept"),
        "decline": _f("msg", "Decline"), "accept_inverse_offers": _f("any"),
        "decline_inverse_offers": _f("any"), "revive": _f("msg", "Roles"),
        "suppress": _f("msg", "Roles"), "kill": _f("msg", "Kill"),
        "shutdown": _f("msg", "Shutdown"), "acknowledge": _f("msg", "Acknowledge"),
        "acknowledge_operation_status": _f("any"), "reconcile": _f("msg", "Reconcile"),
        "reconcile_operations": _f("any"), "message": _f("msg", "Message"),
        "request": _f("any"), "update_framework": _f("msg", "Subscribe"),
    },
    "ID": _ID,
    "Subscribe": {
        "framework_info": _f("msg", "FrameworkInfo", required=True),
        "suppressed_roles": _f("str", repeated=True), "offer_constraints": _f("any"),
    },
    "FrameworkInfo": {
        "user": _f("str", required=True), "name": _f("str", required=True),
        "id": _f("msg", "ID"), "failover_timeout": _f("double"), "checkpoint": _f("bool"),
        "role": _f("str"), "roles": _f("str", repeated=True), "hostname": _f("str"),
        "principal": _f("str"), "webui_url": _f("str"),
        "capabilities": _f("msg", "Capability", repeated=True), "labels": _f("any"),
    },
    "Capability": {"type": _f("enum", FRAMEWORK_CAPABILITIES)},
    "Accept": {
        "offer_ids": _f("msg", "ID", repeated=True),
        "operations": _f("msg", "Operation", repeated=True), "filters": _f("msg", "Filters"),
    },
    "Decline": {"offer_ids": _f("msg", "ID", repeated=True), "filters": _f("msg", "Filters")},
    "Filters": {"refuse_seconds": _f("double")},
    "Roles": {"roles": _f("str", repeated=True)},
    "Kill": {
        "task_id": _f("msg", "ID", required=True), "agent_id": _f("msg", "ID"),
        "kill_policy": _f("msg", "KillPolicy"),
    },
    "KillPolicy": {"grace_period": _f("msg", "Duration")},
    "Duration": {"nanoseconds": _f("int", required=True)},
    "Shutdown": {
        "executor_id": _f("msg", "ID", required=True), "agent_id": _f("msg", "ID", required=True),
    },
    "Acknowledge": {
        "agent_id": _f("msg", "ID", required=True), "task_id": _f("msg", "ID", required=True),
        "uuid": _f("bytes", required=True),
    },
    "Reconcile": {"tasks": _f("msg", "ReconcileTask", repeated=True)},
    "ReconcileTask": {"task_id": _f("msg", "ID", required=True), "agent_id": _f("msg", "ID")},
    "Message": {
        "agent_id": _f("msg", "ID", required=True), "executor_id": _f("msg", "ID", required=True),
        "data": _f("bytes", required=True),
    },
    "Operation": {
        "type": _f("enum", OPERATION_TYPES), "id": _f("any"), "launch": _f("msg", "Launch"),
        "launch_group": _f("any"),
    },
    "Launch": {"task_infos": _f("msg", "TaskInfo", repeated=True)},
    "TaskInfo": {
        "name": _f("str", required=True), "task_id": _f("msg", "ID", required=True),
        "agent_id": _f("msg", "ID", required=True),
        "resources": _f("msg", "Resource", repeated=True), "executor": _f("any"),
        "command": _f("msg", "CommandInfo"), "kill_policy": _f("msg", "KillPolicy"),
        "data": _f("bytes"), "labels": _f("any"), "container": _f("any"),
    },
    "CommandInfo": {
        "uris": _f("msg", "URI", repeated=True), "environment": _f("msg", "Environment"),
        "shell": _f("bool"), "value": _f("str"), "arguments": _f("str", repeated=True),
        "user": _f("str"),
    },
    "URI": {
        "value": _f("str", required=True), "executable": _f("bool"), "extract": _f("bool"),
        "cache": _f("bool"), "output_file": _f("str"),
    },
    "Environment": {"variables": _f("msg", "Variable", repeated=True)},
    "Variable": {"name": _f("str", required=True), "type": _f("any"), "value": _f("str")},
    "Resource": {
        "name": _f("str", required=True),
        "type": _f("enum", frozenset({"SCALAR", "RANGES", "SET", "TEXT"}), required=True),
        "scalar": _f("msg", "Scalar"), "role": _f("str"),
        "allocation_info": _f("msg", "AllocationInfo"),
    },
    "Scalar": {"value": _f("double", required=True)},
    "AllocationInfo": {"role": _f("str")},
}

_JSON_KIND = {dict: "object", list: "array", str: "string", bool: "bool"}


class ConversionError(ValueError):
    pass


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return _JSON_KIND.get(type(value), "value")


def _wrong(value: Any, name: str) -> ConversionError:
    return ConversionError(f"Not expecting a JSON {_json_kind(value)} for field '{name}'")


def _scalar(kind: str, target: Any, value: Any, name: str) -> Any:
    """A converted value, or `_DROP` for an unknown enum value."""
    if kind == "str":
        if not isinstance(value, str):
            raise _wrong(value, name)
        return value
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if value in ("true", "false"):
            return value == "true"
        raise _wrong(value, name)
    if kind in ("double", "int"):
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise _wrong(value, name)
        try:
            number = float(value) if kind == "double" else int(value)
        except ValueError:
            raise ConversionError(f"Failed to convert '{value}' to number for '{name}'") from None
        if kind == "double" and isinstance(value, int | float) and not math.isfinite(number):
            raise _wrong(value, name)
        return number
    if kind == "bytes":
        if not isinstance(value, str):
            raise _wrong(value, name)
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ConversionError(f"Failed to base64 decode '{name}'") from None
    if kind == "enum":
        if not isinstance(value, str):
            raise _wrong(value, name)
        return value if value in target else _DROP
    return value  # "any"


_DROP = object()


def _message(schema: str, obj: Any, path: str, missing: list[str]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _wrong(obj, path.rsplit(".", 1)[-1] or schema)
    out: dict[str, Any] = {}
    for name, (kind, target, repeated, required) in SCHEMA[schema].items():
        where = f"{path}{name}"
        if name not in obj or obj[name] is None:
            if required:
                missing.append(where)
            continue
        raw = obj[name]
        if repeated:
            if not isinstance(raw, list):
                raise _wrong(raw, name)
            items = []
            for i, item in enumerate(raw):
                converted = _one(kind, target, item, name, f"{where}[{i}].", missing)
                if converted is not _DROP:
                    items.append(converted)
            out[name] = items
            continue
        converted = _one(kind, target, raw, name, f"{where}.", missing)
        if converted is _DROP:
            if required:
                missing.append(where)
            continue
        out[name] = converted
    return out


def _one(kind: str, target: Any, value: Any, name: str, path: str, missing: list[str]) -> Any:
    if kind == "msg":
        if not isinstance(value, dict):
            raise _wrong(value, name)
        return _message(target, value, path, missing)
    return _scalar(kind, target, value, name)


def convert_call(obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ConversionError(f"Expecting a JSON object, got a JSON {_json_kind(obj)}")
    missing: list[str] = []
    call = _message("Call", obj, "", missing)
    if missing:
        raise ConversionError("Missing required fields: " + ", ".join(missing))
    return call


_NEEDS_BODY = {
    "ACCEPT": "accept", "DECLINE": "decline", "ACCEPT_INVERSE_OFFERS": "accept_inverse_offers",
    "DECLINE_INVERSE_OFFERS": "decline_inverse_offers", "KILL": "kill", "SHUTDOWN": "shutdown",
    "ACKNOWLEDGE": "acknowledge", "RECONCILE": "reconcile", "MESSAGE": "message",
    "REQUEST": "request", "UPDATE_FRAMEWORK": "update_framework",
    "ACKNOWLEDGE_OPERATION_STATUS": "acknowledge_operation_status",
    "RECONCILE_OPERATIONS": "reconcile_operations",
}  # fmt: skip


def validate_call(call: dict[str, Any]) -> str | None:
    kind = call.get("type")
    if kind is None:
        return "Expecting 'type' to be present"
    if kind == "SUBSCRIBE":
        if "subscribe" not in call:
            return "Expecting 'subscribe' to be present"
        if call["subscribe"]["framework_info"].get("id") != call.get("framework_id"):
            return "'framework_id' differs from 'subscribe.framework_info.id'"
        return None
    if "framework_id" not in call:
        return "Expecting 'framework_id' to be present"
    needed = _NEEDS_BODY.get(kind)
    if needed is not None and needed not in call:
        return f"Expecting '{needed}' to be present"
    if kind == "ACKNOWLEDGE" and len(call["acknowledge"]["uuid"]) != 16:
        return "Not a valid UUID"
    return None


def framework_problem(info: dict[str, Any], suppressed: list[str]) -> str | None:
    """`validation::framework::validate` and the suppressed-roles check of SUBSCRIBE."""
    capabilities = {c.get("type") for c in info.get("capabilities", [])}
    multi_role = "MULTI_ROLE" in capabilities
    if multi_role and "role" in info:
        return "'FrameworkInfo.role' must not be set when the framework is MULTI_ROLE capable"
    if not multi_role and info.get("roles"):
        return "'FrameworkInfo.roles' must not be set when the framework is not MULTI_ROLE capable"
    roles = list(info.get("roles", [])) if multi_role else [info.get("role", "*")]
    duplicates = sorted({r for r in roles if roles.count(r) > 1})
    if duplicates:
        return "'FrameworkInfo.roles' contains duplicate items: { " + ", ".join(duplicates) + " }"
    for role in roles:
        problem = _role_problem(role)
        if problem is not None:
            field = "'FrameworkInfo.roles' contains invalid role" if multi_role else (
                "'FrameworkInfo.role' is not a valid role"
            )
            return f"{field}: {problem}"
    outside = sorted(set(suppressed) - set(roles))
    if outside:
        return f"Suppressed roles {{ {', '.join(outside)} }} are not contained in the set of roles"
    return None


def _role_problem(role: str) -> str | None:
    """`roles::validate`: '*' alone, or '/'-separated names without '.', '..', a leading '-'
    or whitespace."""
    if role == "*":
        return None
    if not role:
        return "Empty role name is invalid"
    if role.startswith("/") or role.endswith("/"):
        return f"Role '{role}' cannot start or end with a slash"
    for part in role.split("/"):
        if part in ("", ".", "..", "*") or part.startswith("-"):
            return f"Role '{role}' has an invalid component '{part}'"
        if any(c.isspace() or not c.isprintable() or c == "\\" for c in part):
            return f"Role '{role}' contains invalid characters"
    return None
