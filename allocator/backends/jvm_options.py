"""A tenant's JVM options (`SPARK_EXECUTOR_OPTS`), split exactly as Spark's launcher splits
them and then checked against an allow-list.

Spark's launcher (`CommandBuilderUtils.parseOptionString`, called by `spark-class` through
`org.apache.spark.launcher.Main`) turns the variable into the executor JVM's arguments. Any
other splitter (Python's `shlex`, a regular expression) disagrees with it on some input, and
every disagreement is a way to smuggle a flag past a filter, so `spark_split` reproduces its
rules:

- whitespace is Java's `Character.isWhitespace`: tab, LF, VT, FF, CR, the file/group/record/
  unit separators 0x1c-0x1f, and the Unicode space, line and paragraph separators except the
  non-breaking ones (U+00A0, U+2007, U+202F);
- single quotes take everything literally up to the next single quote, backslash included;
- outside single quotes a backslash takes the next character literally (inside double quotes
  too: `"\\-x"` is `-x`, where a POSIX shell would keep the backslash);
- a quoted empty string is an (empty) argument; an unclosed quote or a trailing backslash
  is an error;
- the loop steps one UTF-16 unit at a time but reads whole code points: a character outside
  the BMP is appended, then its low surrogate again on its own.

The check is an allow-list on the tokens (heap, GC, JIT, logging to the console, the module
flags Spark itself adds, and `-D` properties outside the JDK's and the logging frameworks'
namespaces); everything else is refused with the option named. This keeps the JVM's own
start from being hijacked (agents, debug ports, argument files, hooks that run commands,
other class loaders or code paths). It is not a sandbox: a tenant's Spark code is arbitrary
code by design (docs/security.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from allocator.errors import FairbrokerError

# Character.isWhitespace: Zs/Zl/Zp less the non-breaking spaces, plus these C0 controls.
JAVA_WHITESPACE = frozenset(
    [*range(0x09, 0x0E), *range(0x1C, 0x20), 0x20, 0x1680, *range(0x2000, 0x2007),
     *range(0x2008, 0x200B), 0x2028, 0x2029, 0x205F, 0x3000]
)  # fmt: skip


class OptionStringError(ValueError):
    """An option string Spark's launcher refuses (an unclosed quote, a trailing backslash)."""


class JvmOptionRefused(FairbrokerError):
    """A JVM option outside the allow-list; `option` is the token as the JVM would see it."""

    def __init__(self, option: str, reason: str) -> None:
        super().__init__(f"JVM option {option!r} is not allowed: {reason}")
        self.option = option
        self.reason = reason


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-le", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "little") for i in range(0, len(data), 2)]


def _from_units(units: list[int]) -> str:
    data = b"".join(unit.to_bytes(2, "little") for unit in units)
    return data.decode("utf-16-le", "surrogatepass")


def _code_point_at(units: list[int], i: int) -> tuple[int, list[int]]:
    """Java's String.codePointAt(i): the code point and the units it appends."""
    high = units[i]
    if 0xD800 <= high <= 0xDBFF and i + 1 < len(units) and 0xDC00 <= units[i + 1] <= 0xDFFF:
        low = units[i + 1]
        return 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00), [high, low]
    return high, [high]


def spark_split(value: str) -> list[str]:
    """The arguments Spark's launcher makes of `value` (see the module's docstring)."""
    units = _utf16_units(value)
    tokens: list[str] = []
    token: list[int] = []
    in_token = single = double = escape = has_data = False
    for i in range(len(units)):
        c, appended = _code_point_at(units, i)
        if escape:
            token += appended
            escape = False
        elif in_token:
            if c == 0x5C and not single:  # backslash
                escape = True
            elif c == 0x27 and not double:  # single quote
                single = not single
            elif c == 0x22 and not single:  # double quote
                double = not double
            elif c in JAVA_WHITESPACE and not (single or double):
                tokens.append(_from_units(token))
                token = []
                in_token = has_data = False
            else:
                token += appended
        elif c == 0x27:
            single = in_token = has_data = True
        elif c == 0x22:
            double = in_token = has_data = True
        elif c == 0x5C:
            escape = in_token = has_data = True
        elif c not in JAVA_WHITESPACE:
            token += appended
            in_token = has_data = True
    if single or double or escape:
        raise OptionStringError("an unclosed quote or a trailing backslash")
    if has_data:
        tokens.append(_from_units(token))
    return tokens


# ---- the allow-list ------------------------------------------------------------------
SIZE = r"[0-9]{1,13}[kKmMgGtT]?"
COUNT = r"[0-9]{1,10}"
DECIMAL = r"[0-9]{1,6}(\.[0-9]{1,6})?"
BOOLEAN = r"true|false"
NAME = r"[A-Za-z0-9_$][A-Za-z0-9_$.-]*"
NAMES = rf"{NAME}(,{NAME})*"

# -XX:+NAME / -XX:-NAME: collectors, heap layout, JIT and GC logging switches (product flags
# of JDK 17, and ZGenerational of 21; experimental ones would need -XX:+UnlockExperimental...).
XX_SWITCHES = frozenset({
    "UseG1GC", "UseParallelGC", "UseSerialGC", "UseZGC", "ZGenerational", "UseShenandoahGC",
    "UseStringDeduplication", "UseCompressedOops", "UseCompressedClassPointers", "UseNUMA",
    "UseLargePages", "UseTransparentHugePages", "AlwaysPreTouch", "ParallelRefProcEnabled",
    "DisableExplicitGC", "ExplicitGCInvokesConcurrent", "UseAdaptiveSizePolicy",
    "UseGCOverheadLimit", "UseTLAB", "ResizeTLAB", "UseCondCardMark", "ClassUnloading",
    "UseDynamicNumberOfGCThreads", "G1UseAdaptiveIHOP", "ZUncommit", "UseContainerSupport",
    "ScavengeBeforeFullGC", "ExitOnOutOfMemoryError", "CrashOnOutOfMemoryError",
    "HeapDumpOnOutOfMemoryError", "UsePerfData", "PerfDisableSharedMem", "TieredCompilation",
    "UseCodeCacheFlushing", "OmitStackTraceInFastThrow", "ShowCodeDetailsInExceptionMessages",
    "UseCountedLoopSafepoints", "IgnoreUnrecognizedVMOptions", "PrintCommandLineFlags",
    "PrintFlagsFinal", "PrintGCDetails", "PrintVMOptions",
})  # fmt: skip
# -XX:NAME=VALUE: counts, sizes and decimals.
XX_COUNTS = (
    "MaxGCPauseMillis", "GCTimeRatio", "ParallelGCThreads", "ConcGCThreads",
    "InitiatingHeapOccupancyPercent", "G1ReservePercent", "G1MixedGCCountTarget",
    "G1HeapWastePercent", "NewRatio", "SurvivorRatio", "MaxTenuringThreshold",
    "InitialTenuringThreshold", "TieredStopAtLevel", "CICompilerCount", "MinHeapFreeRatio",
    "MaxHeapFreeRatio", "SoftRefLRUPolicyMSPerMB", "StringTableSize", "ActiveProcessorCount",
    "MaxInlineLevel", "FreqInlineSize", "InlineSmallCode", "AutoBoxCacheMax",
    "ObjectAlignmentInBytes", "GCHeapFreeLimit", "GCTimeLimit",
)  # fmt: skip
XX_SIZES = (
    "G1HeapRegionSize", "InitialHeapSize", "NewSize", "MaxNewSize", "MetaspaceSize",
    "MaxMetaspaceSize", "CompressedClassSpaceSize", "MaxDirectMemorySize",
    "ReservedCodeCacheSize", "InitialCodeCacheSize", "ThreadStackSize", "LargePageSizeInBytes",
    "TLABSize", "MinTLABSize", "SoftMaxHeapSize",
)  # fmt: skip
XX_DECIMALS = (
    "MaxRAMPercentage", "InitialRAMPercentage", "MinRAMPercentage", "ZAllocationSpikeTolerance",
    "ZCollectionInterval",
)  # fmt: skip
XX_VALUES = {
    **dict.fromkeys(XX_COUNTS, COUNT),
    **dict.fromkeys(XX_SIZES, SIZE),
    **dict.fromkeys(XX_DECIMALS, DECIMAL),
    "ShenandoahGCHeuristics": r"adaptive|static|compact|aggressive",
    "NativeMemoryTracking": r"off|summary|detail",
}
# Options that take a value, as --NAME=VALUE or as --NAME VALUE (two arguments): the module
# access flags Spark adds for Java 17+. They widen what the code already in the JVM may
# reflect on or call; they load nothing and start nothing.
MODULE_FLAGS = {
    "--add-opens": rf"{NAME}/{NAME}={NAMES}",
    "--add-exports": rf"{NAME}/{NAME}={NAMES}",
    "--add-reads": rf"{NAME}={NAMES}",
    "--add-modules": NAMES,
    "--enable-native-access": NAMES,
    "--sun-misc-unsafe-memory-access": r"allow|warn|debug|deny",
    "--illegal-access": r"permit|warn|debug|deny",
}
# Whole tokens, as regular expressions (fullmatch).
PLAIN = [
    rf"-X(ms|ss|mn){SIZE}",
    r"-Xlog(:[A-Za-z0-9_*+=,-]*(:(stdout|stderr)?(:[A-Za-z,]*(:[A-Za-z0-9=,]*)?)?)?)?",
    r"-verbose(:(gc|class|module|jni))?",
    r"-X(int|mixed|batch|rs)",
    r"-server",
    r"-(ea|da|enableassertions|disableassertions)(:[A-Za-z0-9_$.]*)?",
    r"-(esa|dsa|enablesystemassertions|disablesystemassertions)",
]
# -D properties: any name except these namespaces (lower case, compared case-insensitively),
# which hold the JDK's own switches (class loaders, security manager and policy, JMX remote,
# JNDI and RMI code bases, native library paths, JVMCI) and the logging frameworks'
# configuration (a log4j configuration file writes files and can load classes).
PROPERTY_NAMESPACES = (
    "java.", "javax.", "jdk.", "sun.", "com.sun.", "jvmci.", "graal.", "libgraal.",
    "truffle.", "polyglot.", "org.graalvm.", "com.oracle.", "com.ibm.", "openj9.", "os.",
    "user.", "file.", "line.separator", "path.separator", "log4j", "org.apache.logging.",
    "asynclogger", "logback.", "slf4j.", "org.slf4j.",
)  # fmt: skip
# Names in those namespaces that are plain switches, with the shape of their values.
PROPERTY_EXCEPTIONS = {
    "java.net.preferIPv4Stack": BOOLEAN,
    "java.net.preferIPv6Addresses": rf"{BOOLEAN}|system",
    "java.awt.headless": BOOLEAN,
    "jdk.reflect.useDirectMethodHandle": BOOLEAN,  # Spark 3.5's module options
    "file.encoding": r"[A-Za-z0-9._-]{1,40}",
    "user.timezone": r"[A-Za-z0-9/_+:.-]{1,64}",
    "user.language": r"[A-Za-z]{0,8}",
    "user.country": r"[A-Za-z]{0,8}",
    "user.region": r"[A-Za-z_]{0,8}",
    "log4j2.level": r"[A-Za-z]{1,8}",
    "org.apache.logging.log4j.level": r"[A-Za-z]{1,8}",
    "log4j2.statusLoggerLevel": r"[A-Za-z]{1,8}",
    "log4j2.StatusLogger.level": r"[A-Za-z]{1,8}",
    "log4j2.debug": rf"{BOOLEAN}|",
}
PROPERTY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.$-]*")
# Known families, checked first so the refusal says why.
REASONS = [
    (r"@", "an argument file: the java launcher reads more options from it"),
    (r"-(javaagent|agentlib|agentpath)", "loads an agent's code into the JVM before Spark"),
    (r"-(Xrun|Xdebug|Xnoagent)", "a debugger agent: anyone reaching its port runs code"),
    (r"-XX:[+-]?On(OutOfMemory)?Error", "runs a shell command"),
    (r"-XX:(Flags|VMOptionsFile)", "reads more options from a file"),
    (r"-XX:[+-]?(EnableJVMCI|UseJVMCI|JVMCI)|-Djvmci\.", "JVMCI loads a compiler's code"),
    (r"-Dcom\.sun\.management", "JMX remote: an unauthenticated management port"),
    (r"-D(log4j|org\.apache\.logging|asynclogger)",
     "a logging configuration can write files and load classes (only the level is allowed)"),
    (r"-Djava\.(system\.class\.loader|security)", "a class loader or security manager"),
    (r"-Xbootclasspath|-cp$|-classpath$|--class-path|-jar$|-p$|--module-path"
     r"|--upgrade-module-path|--patch-module|-m$|--module$|--source",
     "changes which classes the JVM loads or runs"),
    (r"-XX:(ErrorFile|HeapDumpPath|LogFile|SharedArchiveFile|StartFlightRecording)|-Xloggc"
     r"|-Xshare|-Xlog:.*file=", "reads or writes a file the tenant names"),
    (r"-XX:MaxHeapSize|(?-i:.*Xmx)", "the heap is set by spark.executor.memory (Spark's launcher "
     "itself refuses Xmx in SPARK_EXECUTOR_OPTS)"),
]  # fmt: skip
_REASONS = [(re.compile(pattern, re.IGNORECASE), reason) for pattern, reason in REASONS]
_PLAIN = re.compile("|".join(f"(?:{p})" for p in PLAIN))
_XX = re.compile(r"-XX:(?:([+-])([A-Za-z0-9_]+)|([A-Za-z0-9_]+)=(.*))", re.DOTALL)
UNKNOWN = (
    "not a recognised heap, GC, JIT, console-logging, module-access or -D option "
    "(see docs/security.md)"
)
# What the executor's JVM decodes the same way in every locale.
OPTION_CHARACTERS = re.compile(r"[\x20-\x7e\t\n\r]*")


@dataclass(frozen=True)
class _Verdict:
    ok: bool
    reason: str = UNKNOWN


def _property(token: str) -> _Verdict:
    name, _, value = token[2:].partition("=")
    if not PROPERTY_NAME.fullmatch(name):
        return _Verdict(False, "not a system property name")
    if name in PROPERTY_EXCEPTIONS:
        ok = re.fullmatch(PROPERTY_EXCEPTIONS[name], value) is not None
        return _Verdict(ok, f"{name} takes {PROPERTY_EXCEPTIONS[name]!r}")
    if name.lower().startswith(PROPERTY_NAMESPACES):
        return _Verdict(False, "a property of the JDK or of a logging framework")
    return _Verdict(True)


def _xx(token: str) -> _Verdict:
    match = _XX.fullmatch(token)
    if match is None:
        return _Verdict(False)
    _sign, switch, name, value = match.groups()
    if switch is not None:
        return _Verdict(switch in XX_SWITCHES)
    if name not in XX_VALUES:
        return _Verdict(False)
    ok = re.fullmatch(XX_VALUES[name], value) is not None
    return _Verdict(ok, f"-XX:{name} takes {XX_VALUES[name]!r}")


def _single(token: str) -> _Verdict:
    if token.startswith("-D") and token[2:].partition("=")[0] in PROPERTY_EXCEPTIONS:
        return _property(token)
    for pattern, reason in _REASONS:
        if pattern.match(token):
            return _Verdict(False, reason)
    if token.startswith("-D"):
        return _property(token)
    if token.startswith("-XX:"):
        return _xx(token)
    flag, equals, value = token.partition("=")
    if equals and flag in MODULE_FLAGS:
        ok = re.fullmatch(MODULE_FLAGS[flag], value) is not None
        return _Verdict(ok, f"{flag} takes {MODULE_FLAGS[flag]!r}")
    return _Verdict(_PLAIN.fullmatch(token) is not None)


def check_jvm_tokens(tokens: list[str]) -> None:
    """Raise JvmOptionRefused naming the first of the JVM's arguments `tokens` that the
    allow-list refuses."""
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in MODULE_FLAGS:  # the two-argument form: check the pair
            if i + 1 == len(tokens):
                raise JvmOptionRefused(token, "needs a value")
            pattern = MODULE_FLAGS[token]
            if re.fullmatch(pattern, tokens[i + 1]) is None:
                raise JvmOptionRefused(f"{token} {tokens[i + 1]}", f"{token} takes {pattern!r}")
            i += 2
            continue
        verdict = _single(token)
        if not verdict.ok:
            raise JvmOptionRefused(token, verdict.reason)
        i += 1


def check_jvm_options(value: str) -> list[str]:
    """The tokens of `value` (as Spark splits them) if every one is allowed; else raise
    JvmOptionRefused naming the first refused option, or OptionStringError."""
    tokens = spark_split(value)
    check_jvm_tokens(tokens)
    if not OPTION_CHARACTERS.fullmatch(value):
        bad = next(ch for ch in value if not OPTION_CHARACTERS.fullmatch(ch))
        raise OptionStringError(
            f"character U+{ord(bad):04X} at {value.index(bad)}: only printable ASCII, tab and "
            "line breaks (the executor's JVM decodes anything else by its agent's locale)"
        )
    return tokens
