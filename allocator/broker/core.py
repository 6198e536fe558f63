"""The broker: tenants, their executors, and the allocation loop around the online engine.

Every decision is the engine's (`allocator.engine`, the same code the simulator runs); the
broker turns API calls into engine events, the engine's grants into backend launches, and
backend task statuses back into releases. One lock guards all of it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from allocator.backends.base import (
    AgentInfo,
    Backend,
    ExecutorState,
    LaunchSpec,
    NoRoom,
    TaskStatus,
)
from allocator.broker import faults, tenants
from allocator.broker.errors import ApiError, invalid, unavailable
from allocator.broker.explanation import explanation_message
from allocator.broker.limits import Limits
from allocator.broker.loop import AllocationLoop
from allocator.broker.proto import pb
from allocator.broker.reclaimer import Reclaimer
from allocator.broker.snapshot import broker_info, engine_allocation, executor_messages
from allocator.broker.store import Store, StoreError
from allocator.broker.tenants import ExecutorRecord, Refusals, Tenant
from allocator.broker.validation import (
    check_kill,
    check_register,
    check_room,
    check_target,
    configured,
    printable,
    same_registration,
)
from allocator.engine import Engine, EngineError
from allocator.engine_config import EngineConfig
from allocator.engine_warmup import warm
from allocator.errors import FairbrokerError
from allocator.explain import explain
from allocator.state import Mode

log = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 30.0
#: A run that holds the broker this long keeps the tenants' calls waiting behind it (and a
#: kernel compiled in it holds every thread): its time does not count against any lease.
STALL_SECONDS = 1.0
HISTORY = 10_000  # latency samples kept for reports and benchmarks
# /healthz: the loop is stalled once it has completed no run for two intervals and this long
# (a run may wait for the lock behind API calls, and a slow machine delays it further).


class Broker:
    def __init__(
        self,
        backend: Backend,
        config: EngineConfig | None = None,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        store: Store | None = None,
        limits: Limits | None = None,
    ) -> None:
        """`config` (default: rPS-DSF with Mesos's defaults) is the engine's; its interval
        is the allocation loop's."""
        self.backend = backend
        self.limits = limits or Limits()
        self.store = store or Store(None)
        self.lease_seconds = lease_seconds
        agents = backend.agents()
        resources = ["cpus", "mem"]
        for agent in agents:
            resources.extend(r for r in agent.resources if r not in resources)
        self.engine = Engine(tuple(resources), config or EngineConfig.mesos())
        # several Mesos roles: each is offered its own copy of an agent, which the roles contest
        self.engine.pooled_attribute = getattr(backend, "pooled_attribute", None)
        # A backend that declares its agents up front (the embedded cluster) has a fixed
        # capacity, so a demand no agent holds is refused at registration.
        self._static_cluster = bool(agents)
        self.agent_hosts = {a.name: a.hostname for a in agents}
        self.agent_attributes = {a.name: dict(a.attributes) for a in agents}
        for agent in agents:
            self.engine.add_agent(agent.name, agent.resources, agent.attributes)
        self.tenants: dict[str, Tenant] = {}
        # (start, end) of the runs that stalled the broker, since the oldest lease's last call
        self._stalls: deque[tuple[float, float]] = deque(maxlen=HISTORY)
        self._held = False  # no grants while a live batch's start barrier holds (hold_grants)
        self._id_floor: dict[str, int] = {}  # executor ids never reused within a tenant id
        self._lock = threading.RLock()
        self.reclaimer = Reclaimer(self.store, backend)
        # the instance attribute at each run, so that tests may replace allocate_once
        self._loop = AllocationLoop(lambda: self.allocate_once(), lambda: self.engine.interval)
        self.started = time.time()
        self.kills_total = 0
        self.registration_seconds: deque[float] = deque(maxlen=HISTORY)
        self.run_seconds: deque[tuple[float, int]] = deque(maxlen=HISTORY)  # (duration, grants)
        # Observers (metrics): called under the broker's lock, must be quick and not raise.
        self.on_run: list[Callable[[float, int], None]] = []  # (run seconds, executors launched)
        self.on_registered: list[Callable[[float], None]] = []  # grant -> registered seconds
        # Why this broker must launch nothing and accept no offer now (--ha: the ZooKeeper
        # session is suspended or lost), or None; read at every run and before every launch.
        self.fence: Callable[[], str | None] = lambda: None
        # --ha: why this broker serves no tenant call (a standby names the leader), or None
        self.standby: Callable[[], str | None] = lambda: None
        self._fenced_by: str | None = None

    # ---- lifecycle ---------------------------------------------------------------------
    def start(self, loop: bool = True) -> None:
        """Recover persisted state and start the allocation loop (tests may drive
        `allocate_once` themselves with loop=False). The engine's kernels are compiled
        first (`engine_warmup`), so that no tenant waits on a compile."""
        seconds = warm(self.engine.config, self.engine.resources)
        log.info("engine kernels ready in %.2f s", seconds)
        self.backend.start(self)
        self._recover()
        if loop:
            self._loop.start()

    def stop(self, kill_executors: bool = True) -> None:
        self._loop.stop()
        self.reclaimer.stop()
        self.backend.stop(kill_executors=kill_executors)
        if kill_executors:
            with self._lock:
                for tenant in list(self.tenants.values()):
                    self._best_effort(self.store.delete_tenant, tenant.tenant_id)
        self.store.close()

    def _recover(self) -> None:
        """Restore tenants and re-adopt their executors that are still running."""
        now = time.monotonic()
        with self._lock:
            for stored_tenant in self.store.tenants():
                tenant_id = stored_tenant.tenant_id
                try:
                    tenant = self._add_tenant(stored_tenant.request, now)
                except (ApiError, EngineError) as error:
                    log.warning("dropping stored tenant %s: %s", tenant_id, error)
                    # its executors are stopped below
                    self._best_effort(self.store.delete_tenant, tenant_id, executors=False)
                    continue
                tenant.next_executor = stored_tenant.next_executor
                self._set_target(tenant, stored_tenant.target)
            stored = self.store.executors()
            if not self._static_cluster:
                # Agents come back with offers; until then an agent holds what its adopted
                # executors use.
                held: dict[str, dict[str, float]] = {}
                for spec, _ in stored:
                    agent = held.setdefault(spec.agent, {})
                    for r, v in spec.resources.items():
                        agent[r] = agent.get(r, 0.0) + v
                for name, capacity in held.items():
                    if name not in self.engine.agents:
                        self.agent_added(AgentInfo(name, "", capacity))
            adopted: set[tuple[str, str]] = set()
            abandoned: list[LaunchSpec] = []
            for spec, handle in stored:
                tenant = self.tenants.get(spec.tenant_id)
                if tenant is None or spec.agent not in self.agent_hosts:
                    why = "its tenant is gone" if tenant is None else "its agent is gone"
                    log.warning("stopping executor %s/%s: %s", *_key(spec), why)
                    abandoned.append(spec)
                    self._best_effort(self.store.delete_executor, *_key(spec))
                    continue
                if not self.backend.adopt(spec, handle):
                    log.info("executor %s/%s is gone", spec.tenant_id, spec.executor_id)
                    self._best_effort(self.store.delete_executor, *_key(spec))
                    continue
                adopted.add(_key(spec))
                self.engine.adopt(spec.tenant_id, spec.agent)
                tenant.executors[spec.executor_id] = ExecutorRecord(
                    spec, ExecutorState.RUNNING, now, time.time()
                )
                log.info("re-adopted executor %s/%s on %s", *_key(spec), spec.agent)
            self.reclaimer.recover(self.tenants, self.store.reclaims())
            # Whatever else the backend finds running for this broker is an orphan.
            self.backend.reconcile(adopted, abandoned)

    # ---- tenant API --------------------------------------------------------------------
    def register(self, request: pb.RegisterRequest) -> pb.RegisterReply:
        now = time.monotonic()
        with self._lock:
            tenant = self.tenants.get(request.tenant_id)
            blob = request.SerializeToString()
            if tenant is None:
                tenant = self._add_tenant(request, now)
                try:
                    self.store.save_tenant(
                        tenant.tenant_id, blob, request.target, tenant.next_executor
                    )
                except StoreError as error:  # roll the registration back
                    self.engine.unregister(tenant.tenant_id)
                    del self.tenants[tenant.tenant_id]
                    raise unavailable(error) from None
            elif tenant.stopping_since is not None:
                raise ApiError(
                    "FAILED_PRECONDITION",
                    f"tenant {tenant.tenant_id!r} is still stopping its executors; retry shortly",
                )
            else:
                self._check_same(tenant, request)
                self._commit(
                    self.store.save_tenant, tenant.tenant_id, blob, request.target,
                    tenant.next_executor,
                )  # fmt: skip
                tenant.last_seen = now
            self._set_target(tenant, int(request.target))
            self._poke()
            return pb.RegisterReply(
                tenant_id=tenant.tenant_id,
                demand=tenant.demand,
                declared=self._declared(tenant),
                lease_seconds=self.lease_seconds,
                broker=self._info(),
            )

    def heartbeat(self, tenant_id: str) -> list[str]:
        """Keeps the tenant's lease; returns its executors being reclaimed (LEAVING) until
        they are gone, for its driver to decommission."""
        with self._lock:
            self._tenant(tenant_id).last_seen = time.monotonic()
            return self.reclaimer.leaving_of(tenant_id)

    def set_target(self, tenant_id: str, total: int) -> None:
        with self._lock:
            check_target(total, "total")
            tenant = self._tenant(tenant_id)
            self._commit(self.store.set_target, tenant_id, total)
            tenant.last_seen = time.monotonic()
            self._set_target(tenant, total)
            self._poke()

    def kill(self, tenant_id: str, executor_ids: list[str]) -> list[str]:
        check_kill(pb.KillRequest(tenant_id=tenant_id, executor_ids=executor_ids), self.limits)
        with self._lock:
            tenant = self._tenant(tenant_id)
            tenant.last_seen = time.monotonic()
            killed = tenant.start_killing(executor_ids)
            for executor_id in killed:
                self.backend.kill(tenant_id, executor_id)
            self.kills_total += len(killed)
            tenant.kills += len(killed)
            return killed

    def unregister(self, tenant_id: str) -> None:
        with self._lock:
            tenant = self._tenant(tenant_id)
            try:
                self._drop_tenant(tenant, "unregistered")
            except StoreError as error:
                raise unavailable(error) from None

    def configure(self, request: pb.ConfigureRequest | None = None, **fields: object) -> None:
        """Run-time changes to the engine's configuration (a ConfigureRequest, or its fields
        as keywords); an empty field keeps its value. They last until the broker stops (a
        restart starts from the serve configuration)."""
        request = request or pb.ConfigureRequest(**fields)
        with self._lock:
            config = configured(self.engine.config, request, self.limits)
            try:
                self.engine.apply(config)
            except (KeyError, ValueError, FairbrokerError) as error:
                raise invalid(str(error).strip("'\"")) from None
            log.info("now scheduling with %s", printable(str(self.engine.config.to_json())))
            self._poke()

    def health(self) -> dict[str, object]:
        """/healthz: the backend's report (Mesos: subscribed or why not), and unhealthy also
        while the allocation loop is dead or stalled. Takes no lock: a run stuck holding it
        is one of the things to report."""
        backend_health = getattr(self.backend, "health", None)
        report = {"ok": True} if backend_health is None else dict(backend_health())
        fenced = self.fence()
        if fenced is not None:
            report.update(ok=False, reason=fenced)
        problem = self._loop.problem()
        if problem is not None:
            report["allocation_loop"] = problem
            if report["ok"]:
                report.update(ok=False, reason=problem)
        return report

    def info(self) -> pb.BrokerInfo:
        with self._lock:
            return self._info()

    def allocation(self) -> pb.Allocation:
        with self._lock:
            allocation = engine_allocation(self.engine, self._info(), self.agent_hosts)
            offered = getattr(self.backend, "last_offered", None)
            if offered is not None:  # Mesos: what each agent has, beside what is held now
                totals = offered()
                for agent in allocation.agents:
                    agent.last_offered.update(totals.get(agent.name, {}))
            shares = self.reclaimer.fair_shares()
            for entry in allocation.tenants:
                tenant = self.tenants[entry.tenant_id]
                entry.declared = self._declared(tenant)
                entry.fair_share = shares.get(entry.tenant_id, 0)
                entry.executors.extend(executor_messages(tenant.executors.values()))
            return allocation

    def explain(self, tenant_id: str) -> pb.Explanation:
        """Why the tenant waits, from the engine's state now (allocator/explain.py)."""
        with self._lock:
            tenant = self._tenant(tenant_id)
            config = self.engine.config
            shares = self.reclaimer.fair_shares() or None
            answer = explain(
                self.engine, tenant_id, time.monotonic(), shares, tenant.standing.rests
            )
            return explanation_message(answer, tenant, self.reclaimer.history, config)

    # ---- internals ---------------------------------------------------------------------
    def _info(self) -> pb.BrokerInfo:
        return broker_info(self.engine, self.backend, time.time() - self.started)

    def _declared(self, tenant: Tenant) -> bool:
        """Does the policy see this tenant's demand vector (workload-characterized)?"""
        return not tenant.request.oblivious and self.engine.mode is Mode.CHARACTERIZED

    def _tenant(self, tenant_id: str) -> Tenant:
        tenant = self.tenants.get(tenant_id)
        if tenant is None or tenant.stopping_since is not None:
            raise ApiError("NOT_FOUND", f"unknown tenant {printable(repr(tenant_id[:140]))}")
        return tenant

    def _check_same(self, tenant: Tenant, request: pb.RegisterRequest) -> None:
        """A re-register (the plugin's, after a broker restart) must repeat the registration
        exactly; only the target may change. Anything else would leave the stored row and
        the live tenant apart."""
        check_register(request, self.engine.resources, self.limits)
        if not same_registration(tenant.request, request):
            raise ApiError(
                "FAILED_PRECONDITION",
                f"tenant {tenant.tenant_id!r} is registered with another demand, group, "
                "weight, constraints or launch spec; unregister it first",
            )

    def _add_tenant(self, request: pb.RegisterRequest, now: float) -> Tenant:
        registration = check_register(request, self.engine.resources, self.limits)
        check_room(registration, len(self.tenants), self._groups(), self.limits)
        demand = registration.demand
        try:
            self.engine.register(
                request.tenant_id,
                demand,
                role=registration.group,
                weight=registration.weight,
                constraints={
                    **request.constraints,
                    **self.backend.tenant_constraints(registration.group),
                },
                declared=False if request.oblivious else None,
                require_fit=self._static_cluster,
            )
        except EngineError as error:
            raise invalid(str(error)) from None
        tenant = Tenant(
            request=request,
            demand=demand,
            last_seen=now,
            # ids continue after every one ever stored for this tenant id, across restarts
            next_executor=max(
                self._id_floor.get(request.tenant_id, 1),
                self.store.next_executor(request.tenant_id),
            ),
        )
        self.tenants[request.tenant_id] = tenant
        log.info(
            "tenant %s registered: group %s, demand %s, %s",
            request.tenant_id, registration.group, demand,
            "declared" if self._declared(tenant) else "not declared (oblivious)",
        )  # fmt: skip
        return tenant

    def _groups(self) -> set[str]:
        return {t.request.group or "*" for t in self.tenants.values()}

    def _set_target(self, tenant: Tenant, total: int) -> None:
        """The tenant's wish is kept as sent; the policy sees it held at the executor cap."""
        cap = self.limits.max_executors_per_tenant
        self.engine.set_target(tenant.tenant_id, min(int(total), cap))
        # after the engine's revive, which lifted the tenant's refuse filters
        self._apply(tenant, tenants.set_target(tenant.standing, total, time.monotonic()))

    def _apply(self, tenant: Tenant, change: tuple[tenants.Standing, Refusals]) -> None:
        """A tenant's new standing (allocator/broker/tenants.py), and its rests to the engine."""
        tenant.standing, refusals = change
        for agent, until in refusals.items():
            if agent in self.engine.agents:
                self.engine.refuse(tenant.tenant_id, agent, until)

    def _drop_tenant(self, tenant: Tenant, why: str) -> None:
        """Stop the tenant's executors; it leaves the engine (and its capacity returns)
        only once the last of them has exited. Raises StoreError (nothing changed) when the
        state file cannot record it."""
        self.store.delete_tenant(tenant.tenant_id, executors=False)
        self._apply(tenant, tenants.dropped(tenant.standing, time.monotonic()))
        self.engine.set_target(tenant.tenant_id, 0)
        log.info(
            "tenant %s %s; stopping its %d executors", tenant.tenant_id, why,
            len(tenant.executors),
        )  # fmt: skip
        for executor_id in tenant.start_killing(list(tenant.executors)):
            self.backend.kill(tenant.tenant_id, executor_id)
        self._forget_if_stopped(tenant)

    def _forget_if_stopped(self, tenant: Tenant) -> None:
        if tenant.stopping_since is None or tenant.executors:
            return
        if self.tenants.get(tenant.tenant_id) is not tenant:
            return  # forgotten already (its last exit was reported from inside kill())
        self.engine.unregister(tenant.tenant_id)
        self._id_floor[tenant.tenant_id] = tenant.next_executor
        del self.tenants[tenant.tenant_id]
        self._poke()

    def _poke(self) -> None:
        if self.engine.run_now:
            self._loop.poke()

    # ---- backend events (BackendEvents) ---------------------------------------------------
    @property
    def kill_ledger(self) -> Store:
        """Where the backend records kills of tasks the broker does not want (the store's
        own lock, never the broker's: the backend records under its lock)."""
        return self.store

    def status(self, status: TaskStatus) -> None:
        with self._lock:
            tenant = self.tenants.get(status.tenant_id)
            record = tenant.executors.get(status.executor_id) if tenant else None
            if tenant is None or record is None:
                return
            if status.state is ExecutorState.RUNNING:
                if record.state is ExecutorState.LAUNCHING:
                    record.state = ExecutorState.RUNNING
                    latency = time.monotonic() - record.granted_at
                    self.registration_seconds.append(latency)
                    for observe in self.on_registered:
                        observe(latency)
                return
            if not status.state.terminal:
                return
            agent = record.spec.agent
            reclaimed = self.reclaimer.gone(status.tenant_id, status.executor_id)
            log.info(
                "executor %s/%s on %s: %s (%s)%s",
                status.tenant_id, status.executor_id, agent, status.state, status.message,
                ", reclaimed" if reclaimed else "",
            )  # fmt: skip
            del tenant.executors[status.executor_id]
            # The process is gone: its capacity returns even if the row cannot be deleted
            # now (a stale row is reconciled, as a dead executor, at the next start).
            self._best_effort(self.store.delete_executor, status.tenant_id, status.executor_id)
            if agent in self.engine.agents:
                self.engine.release(status.tenant_id, agent)
            if status.launched:  # one never handed to the cluster is not the tenant's failure
                self._exited(tenant, record, reclaimed)
            self._forget_if_stopped(tenant)
            self._poke()

    def _exited(self, tenant: Tenant, record: ExecutorRecord, reclaimed: bool) -> None:
        """Crash-loop protection: executors ending soon after their launch, whatever their
        exit code or signal, rest the tenant on that agent unless the broker asked them to
        stop or reclaimed them (`tenants.executor_exited`; called once the executor is
        forgotten)."""
        if self._loop.stopping.is_set():
            return  # the broker's own teardown
        now, agent = time.monotonic(), record.spec.agent
        leaving = (ExecutorState.KILLING, ExecutorState.LEAVING)
        others = sum(r.state not in leaving for r in tenant.executors.values())
        change = tenants.executor_exited(
            tenant.standing,
            agent,
            killing=record.state is ExecutorState.KILLING,
            others=others,
            registered=record.state is not ExecutorState.LAUNCHING,
            seconds_since_launch=now - record.granted_at,
            now=now,
            reclaimed=reclaimed or record.state is ExecutorState.LEAVING,
        )
        self._apply(tenant, change)
        if change[1]:
            log.warning(
                "tenant %s: %d executors in a row ended soon after their launch on %s; "
                "resting it there for %.0f s", tenant.tenant_id, tenant.standing.failures[agent],
                agent, tenant.standing.rests[agent] - now,
            )  # fmt: skip

    def agent_added(self, agent: AgentInfo) -> None:
        with self._lock:
            # read under the lock: a Mesos agent's resources are read from its offer book
            # now, and may be nothing any more (its offers declined before this report)
            capacity = {r: v for r, v in agent.resources.items() if r in self.engine.resources}
            self.agent_hosts[agent.name] = agent.hostname
            self.agent_attributes[agent.name] = dict(agent.attributes)
            if agent.name in self.engine.agents:
                self.engine.set_capacity(agent.name, capacity)
            else:
                self.engine.add_agent(agent.name, capacity, agent.attributes, empty=True)
                log.info("agent %s (%s) added: %s", agent.name, agent.hostname, capacity)
            self._poke()

    def agent_removed(self, name: str) -> None:
        with self._lock:
            if name not in self.engine.agents:
                return
            self.engine.remove_agent(name)  # its tasks leave the accounting with it
            for tenant in list(self.tenants.values()):
                self._apply(tenant, tenants.agent_lost(tenant.standing, name))
                for executor_id in tenant.executors_on(name):
                    log.warning(
                        "executor %s/%s lost with agent %s", tenant.tenant_id, executor_id, name
                    )
                    del tenant.executors[executor_id]
                    self._best_effort(self.store.delete_executor, tenant.tenant_id, executor_id)
                self._forget_if_stopped(tenant)
            self.agent_hosts.pop(name, None)
            self.agent_attributes.pop(name, None)
            self._poke()

    def capacity_changed(self, name: str, capacity: dict[str, float]) -> None:
        with self._lock:
            if name in self.engine.agents:
                self.engine.set_capacity(
                    name, {r: v for r, v in capacity.items() if r in self.engine.resources}
                )
                self._poke()

    def _expire_leases(self, now: float) -> None:
        oldest = min((t.last_seen for t in self.tenants.values()), default=now)
        while self._stalls and self._stalls[0][1] < oldest:
            self._stalls.popleft()
        for tenant in list(self.tenants.values()):
            if tenant.stopping_since is not None:
                if tenants.never_reported(tenant.standing, now):
                    log.warning(
                        "tenant %s: %d executors never reported their exit; forgetting them",
                        tenant.tenant_id, len(tenant.executors),
                    )  # fmt: skip
                    for executor_id in list(tenant.executors):
                        self._best_effort(self.store.delete_executor, tenant.tenant_id, executor_id)
                    tenant.executors.clear()
                    self._forget_if_stopped(tenant)
                continue
            heard = tenant.last_seen + tenants.deaf_seconds(self._stalls, tenant.last_seen, now)
            if tenants.lease_expired(heard, now, self.lease_seconds):
                log.warning(
                    "tenant %s sent nothing for %.0f s (lease %.0f s)",
                    tenant.tenant_id, now - heard, self.lease_seconds,
                )  # fmt: skip
                try:
                    self._drop_tenant(tenant, "lease expired")
                except StoreError as error:
                    log.error("tenant %s: not dropped yet: %s", tenant.tenant_id, error)

    def hold_grants(self, held: bool) -> None:
        """While held, allocation runs grant nothing (registration goes on): a live batch's
        start barrier (allocator/batch/gate.py). Releasing asks for a run at once."""
        with self._lock:
            self._held = held
            if not held:
                self.engine.run_now = True
                self._poke()

    def allocate_once(self) -> int:
        """One allocation run and its launches; returns the executors launched."""
        with self._lock:
            if self._fenced():
                return 0  # nothing expires, launches, reclaims or is accepted meanwhile
            now = time.monotonic()
            self._expire_leases(now)
            if self._held:
                return 0
            began = time.perf_counter()
            runs_before = self.engine.runs
            cap = self.limits.max_launches_per_run
            grants = self.engine.allocate(now, max_grants=cap)
            launched = 0
            for grant in grants:
                tenant = self.tenants[grant.framework]
                tasks = min(grant.tasks, cap - launched)
                if tasks < grant.tasks:  # an oblivious offer's surplus waits for a later run
                    self.engine.release(grant.framework, grant.agent, grant.tasks - tasks)
                for _ in range(tasks):
                    launched += self._launch(tenant, grant.agent, grant.resources, now)
            self.backend.flush(any(self.engine.pending().values()))
            self.reclaimer.run(self.engine, self.tenants, now)
            if grants:
                self.run_seconds.append((time.perf_counter() - began, launched))
            if self.engine.runs != runs_before:
                for observe in self.on_run:
                    observe(time.perf_counter() - began, launched)
            ended = time.monotonic()
            if ended - now > STALL_SECONDS:
                log.warning("an allocation run held the broker for %.1f s; no lease counts "
                            "that time", ended - now)  # fmt: skip
                self._stalls.append((now, ended))
            self._poke()  # a run stopped at the launch cap continues at once
            return launched

    def _fenced(self) -> bool:
        """Is the broker fenced now? Logs each change once."""
        reason = self.fence()
        if reason != self._fenced_by:
            if reason is None:
                log.warning("fence lifted: allocating again")
            else:
                log.warning("fenced: %s", reason)
            self._fenced_by = reason
        return reason is not None

    def _launch(self, tenant: Tenant, agent: str, resources: dict[str, float], now: float) -> bool:
        """Record, then start, one executor; False (and the grant given back) if either
        failed."""
        launch = tenant.request.launch
        executor_id = str(tenant.next_executor)
        spec = LaunchSpec(
            tenant_id=tenant.tenant_id,
            executor_id=executor_id,
            agent=agent,
            resources=dict(resources),
            driver_url=launch.driver_url,
            app_id=launch.app_id,
            cores=int(launch.cores),
            heap_mib=int(launch.heap_mib),
            resource_profile_id=int(launch.resource_profile_id),
            environment=dict(launch.environment),
        )
        # Write-ahead: the executor is on disk before its process exists, so a crash at any
        # point leaves a row the next start reconciles (adopts or stops), never an orphan.
        try:
            self.store.record_launch(spec, tenant.next_executor + 1)
        except StoreError as error:  # not recorded: not launched, and the grant goes back
            log.error("launch of %s/%s on %s not recorded: %s", *_key(spec), agent, error)
            self.engine.release(tenant.tenant_id, agent)
            return False
        tenant.next_executor += 1
        record = ExecutorRecord(spec, ExecutorState.LAUNCHING, now, time.time())
        tenant.executors[executor_id] = record
        tenant.grants += 1
        faults.point("before-launch")
        try:
            if self._fenced():  # fenced during this run: the intent row is reconciled later
                raise NoRoom(f"fenced: {self._fenced_by}")
            handle = self.backend.launch(spec)
        except Exception as error:  # a launch failure must not stop the loop
            del tenant.executors[executor_id]
            self._best_effort(self.store.delete_executor, tenant.tenant_id, executor_id)
            self.engine.release(tenant.tenant_id, agent)
            if isinstance(error, NoRoom):  # the broker's stale capacity, not the tenant's launch
                log.warning("launch of %s/%s on %s not made: %s", *_key(spec), agent, error)
                return False
            log.error("launch of %s/%s on %s failed: %s", *_key(spec), agent, error)
            self._apply(tenant, tenants.launch_failed(tenant.standing, agent, time.monotonic()))
            return False
        faults.point("after-launch")
        # Not fatal: the LAUNCHING row finds the process by its marker at the next start.
        self._best_effort(self.store.set_handle, tenant.tenant_id, executor_id, handle)
        return True

    @staticmethod
    def _commit(write: Callable[..., None], *args: object, **kw: object) -> None:
        """A state change the API must not acknowledge unless it is on disk."""
        try:
            write(*args, **kw)
        except StoreError as error:
            raise unavailable(error) from None

    @staticmethod
    def _best_effort(write: Callable[..., None], *args: object, **kw: object) -> None:
        """A write whose failure the next start reconciles (logged, not raised)."""
        try:
            write(*args, **kw)
        except StoreError as error:
            log.error("%s", error)


def _key(spec: LaunchSpec) -> tuple[str, str]:
    return spec.tenant_id, spec.executor_id
